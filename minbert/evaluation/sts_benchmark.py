"""Unsupervised STS evaluation of sentence embeddings (SimCSE's protocol, "all" setting).

For each of STS12-16 and SICK-R (../shared/data/sts-eval) every subset is concatenated and scored
as one set: Spearman correlation between the cosine similarity of the two sentences' embeddings and
the gold score. Also the course's STS dev split, the mean over all of them, and on STS dev the
alignment and uniformity of Wang & Isola (2020).

The embeddings are those sentence-transformers computes from the folder (models.SentenceEncoder): its pooling,
Normalize and max_seq_length, unless told otherwise. The command is `minbert benchmark` (commands/benchmark.py).
"""
import logging
from pathlib import Path

import torch
import torch.nn.functional as F

from minbert.common.choices import EVAL_SETS
from minbert.common.files import DEFAULT_DATA
from minbert.common.metrics import spearman
from minbert.data.readers import PairExample, read_sts, read_sts_eval
from minbert.models import BertModel, SentenceEncoder, Tokenizer

log = logging.getLogger(__name__)


def read_sets(data_dir: str | Path, names: tuple[str, ...] = (*EVAL_SETS, "sts-dev")) -> dict[str, list[PairExample]]:
    """The named STS sets: sts12 .. sickr from data_dir/sts-eval/*.tsv, "sts-dev" from data_dir/sts-dev.csv."""
    data_dir = Path(data_dir)
    return {name: (read_sts(data_dir / "sts-dev.csv") if name == "sts-dev" else
                   read_sts_eval(data_dir / "sts-eval" / f"{name}.tsv"))[0] for name in names}


def distinct_sentences(pairs: list[PairExample]) -> tuple[list[str], list[int], list[int]]:
    """Each distinct sentence once, and for every pair the positions of its first and second sentence."""
    sentences = sorted({s for p in pairs for s in (p.sentence1, p.sentence2)})
    index = {s: i for i, s in enumerate(sentences)}
    return sentences, [index[p.sentence1] for p in pairs], [index[p.sentence2] for p in pairs]


def pair_embeddings(model: SentenceEncoder, pairs: list[PairExample], batch_size: int = 128,
                    progress: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    """Unit-length embeddings of each pair's two sentences, [N, H] each; each distinct sentence embedded once."""
    sentences, first, second = distinct_sentences(pairs)
    embeddings = F.normalize(model.encode(sentences, batch_size, progress), dim=-1)
    return embeddings[first], embeddings[second]


def pair_cosines(encoder: BertModel, tokenizer: Tokenizer, pairs: list[PairExample], pooling: str,
                 max_length: int = 128, batch_size: int = 128, progress: str = "",
                 precision: str = "fp32") -> tuple[torch.Tensor, torch.Tensor]:
    """pair_embeddings of an encoder with this pooling, max_length and precision."""
    return pair_embeddings(SentenceEncoder(encoder, tokenizer, pooling, max_length=max_length, precision=precision),
                           pairs, batch_size, progress)


def alignment(x: torch.Tensor, y: torch.Tensor, alpha: float = 2) -> float:
    """E ||f(x) - f(y)||^alpha over positive pairs (unit-length embeddings); lower is better."""
    return (x - y).norm(dim=1).pow(alpha).mean().item()


def uniformity(x: torch.Tensor, t: float = 2) -> float:
    """log E exp(-t ||f(x) - f(y)||^2) over all pairs of distinct embeddings; lower is better."""
    return torch.pdist(x, p=2).pow(2).mul(-t).exp().mean().log().item()


def sts_benchmark(model: SentenceEncoder, data_dir: str | Path = DEFAULT_DATA,
                  batch_size: int = 128) -> dict[str, float]:
    """Spearman x 100 per set ("sts12" .. "sickr", "sts-dev"), their "mean", and "alignment"/"uniformity"."""
    sets = read_sets(data_dir)
    results = {}
    for number, (name, pairs) in enumerate(sets.items(), 1):
        first, second = pair_embeddings(model, pairs, batch_size, f"STS benchmark, {name} ({number}/{len(sets)})")
        results[name] = 100 * spearman((first * second).sum(-1), [p.label for p in pairs])
        if name == "sts-dev":
            dev_embeddings = first, second
    results["mean"] = sum(results.values()) / len(results)
    return {**results, **alignment_and_uniformity(*dev_embeddings, sets["sts-dev"])}


POSITIVE_SCORE = 4  # the pairs scored this or more are alignment's positives (as in SimCSE)


def positive_pairs(pairs: list[PairExample]) -> list[int]:
    """The positions of the pairs that alignment measures."""
    return [i for i, p in enumerate(pairs) if p.label >= POSITIVE_SCORE]


def alignment_and_uniformity(first: torch.Tensor, second: torch.Tensor, pairs: list[PairExample]) -> dict[str, float]:
    """Wang & Isola on an STS set's unit-length pair embeddings: alignment over the positive_pairs, uniformity
    over both sentences of every pair (2 x pairs embeddings: a sentence in two pairs counts twice)."""
    positives = positive_pairs(pairs)
    return {"alignment": alignment(first[positives], second[positives]),
            "uniformity": uniformity(torch.cat([first, second]))}


TABLE_COLUMNS = (*EVAL_SETS, "sts-dev", "mean", "alignment", "uniformity")
