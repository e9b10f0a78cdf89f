"""Unsupervised STS evaluation of sentence embeddings (SimCSE's protocol, "all" setting).

For each of STS12-16 and SICK-R (../shared/data/sts-eval) every subset is concatenated and scored
as one set: Spearman correlation between the cosine similarity of the two sentences' embeddings and
the gold score. Also the course's STS dev split, the mean over all of them, and on STS dev the
alignment and uniformity of Wang & Isola (2020).

The embeddings are those sentence-transformers computes from the folder (models.SentenceEncoder): its pooling,
Normalize and max_seq_length, unless --pooling or --max-length say otherwise.

    python -m evaluation.sts_benchmark --model all-MiniLM-L6-v2 --pooling cls
    python -m evaluation.sts_benchmark --model runs/simcse-nli --out runs/simcse-nli/benchmark.json
        # --out inside the folder: its model card gets the results too
"""
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from common import cli
from common.cli import AT_LEAST_0, AT_LEAST_1, flag
from common.files import DEFAULT_DATA, check_writable_file, without_local_paths, write_json
from common.metrics import spearman
from common.tables import markdown_table
from data.readers import PairExample, read_sts, read_sts_eval
from models import POOLINGS, BertModel, SentenceEncoder, Tokenizer
from models.shareable import update_card

log = logging.getLogger(__name__)

EVAL_SETS = ("sts12", "sts13", "sts14", "sts15", "sts16", "sickr")


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
                 max_length: int = 128, batch_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """pair_embeddings of an encoder with this pooling and max_length."""
    return pair_embeddings(SentenceEncoder(encoder, tokenizer, pooling, max_length=max_length), pairs, batch_size)


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


@dataclass
class StsBenchmarkConfig:
    model: str = flag("all-MiniLM-L6-v2", "encoder to evaluate: hub id, checkpoint folder, or all-MiniLM-L6-v2")
    pooling: str | None = flag(None, "sentence embedding: cls = the final [CLS] vector; mean = the mean of the "
                                     "final token vectors; pooler = BERT's pooler output, tanh(dense([CLS])) "
                                     "(default: the folder's own, from its sentence-transformers files, as "
                                     "sentence-transformers computes it; mean for a folder without them)",
                               choices=POOLINGS)
    data_dir: str = flag(str(DEFAULT_DATA), "folder with sts-eval/ and sts-dev.csv")
    max_length: int = flag(0, "tokens per sentence (0: the folder's max_seq_length, as sentence-transformers reads "
                              "it; else the encoder's positions)", range=AT_LEAST_0)
    batch_size: int = flag(128, "sentences per batch", range=AT_LEAST_1)
    device: str = flag("auto", "cpu, cuda, ... (auto: cuda when present)")
    out: str = flag("", "also write the results as JSON to this file (left out: printed only); a file in the "
                        "model's own folder also adds them to the folder's model card (README.md)")


def main(argv: list[str] | None = None) -> dict[str, float]:
    config = cli.parse_config(StsBenchmarkConfig, __doc__, argv)
    if config.out:
        check_writable_file(config.out, "--out")
    model = SentenceEncoder.from_pretrained(config.model, config.pooling, config.max_length,
                                            cli.resolve_device(config.device))
    log.info("STS benchmark of %s: %s pooling%s, up to %d tokens a sentence", config.model, model.pooling,
             ", length 1" if model.normalize else "", model.max_length)
    results = sts_benchmark(model, config.data_dir, config.batch_size)
    print(markdown_table({f"{config.model} ({model.pooling})": results}, TABLE_COLUMNS))
    if config.out:
        # Without the folders above the model's: the file may lie in the model's own folder, which is shared.
        write_json(config.out, {"model": without_local_paths(config.model), "pooling": model.pooling,
                                "max_length": model.max_length, "results": results})
        folder = Path(config.model).expanduser()
        if Path(config.out).expanduser().resolve().parent == folder.resolve() and \
                update_card(folder, "sts-benchmark", results):
            log.info("added the results to the model card %s", folder / "README.md")
    return results


if __name__ == "__main__":
    cli.run(main)
