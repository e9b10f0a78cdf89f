"""Data for contrastive pretraining: the `--data` modes, three kinds of batch, and each epoch's plan of batches.

    nli        SimCSE's NLI triplets (sent0, sent1 = entailment, hard_neg = contradiction) -> TripletBatch
    quora      question pairs, is_duplicate 1 = positive pair, 0 = negative pair (Chen's CS224N report)   -> PairBatch
    sst        SST sentences, with their sentiment labels (used by --fusion)                 -> SentenceBatch
    sts        the distinct sentences of STS train's two columns (Chen's CS224N report: unsupervised)    -> SentenceBatch
    unlabeled  one sentence a line                                                            -> SentenceBatch
    all3       Chen's CS224N report's "3 given datasets": in every epoch, quora, then sst, then sts
    PATH       a file in one of these formats, recognised by its header (or .txt: one sentence a line)

Methods that learn from single sentences only (CT, SG, ConSERT's unsupervised stage) take any data as the
distinct sentences it holds (`as_sentences`). Every set is tokenised once; a batch is padded to its longest input.
"""
import functools
import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Callable, Sequence

import torch

from common.errors import DataError
from common.seeding import derived_seed
from data.batching import length_grouped_batches, split_evenly
from data.readers import read_lines, read_nli, read_quora, read_sentiment, read_sts, sample_records
from models.tokenizer import Encoded, Tokenizer, collate

DATA_MODES = ("nli", "quora", "sst", "sts", "unlabeled", "all3")
FILES = {"nli": "nli_for_simcse.csv", "quora": "quora-train.csv", "sst": "ids-sst-train.csv",
         "sts": "sts-train.csv", "unlabeled": "unlabeled-sentences.txt"}
ALL3_ORDER = ("quora", "sst", "sts")  # Chen's CS224N report section 4.1: supervised Quora first, then SST and STS

Inputs = dict[str, torch.Tensor]  # input_ids, attention_mask, token_type_ids: [rows, tokens]


# ---- batches ----

class _Batch:
    def __len__(self) -> int:
        """Rows of the batch (of each of its inputs)."""
        return len(next(value for value in vars(self).values() if isinstance(value, dict))["input_ids"])

    def to(self, device):
        def move(value):
            if isinstance(value, dict):
                return {name: tensor.to(device) for name, tensor in value.items()}
            return value.to(device) if isinstance(value, torch.Tensor) else value

        return replace(self, **{f.name: move(getattr(self, f.name)) for f in fields(self)})


@dataclass
class SentenceBatch(_Batch):
    source: str
    inputs: Inputs
    labels: torch.Tensor | None = None  # SST sentiment classes, for --fusion


@dataclass
class PairBatch(_Batch):
    source: str
    first: Inputs
    second: Inputs
    labels: torch.Tensor  # [rows] float: 1 = positive pair (paraphrase, or CT's (s, s)), 0 = negative pair


@dataclass
class TripletBatch(_Batch):
    source: str
    anchor: Inputs
    positive: Inputs
    negative: Inputs


Batch = SentenceBatch | PairBatch | TripletBatch


# ---- tokenised sets ----

def contrastive_tension_batch(sentences: Sequence[str], batch_size: int = 16, negatives_per_positive: int = 7,
                              generator: torch.Generator | None = None
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw batch_size / (K + 1) anchor sentences, each with one positive and K negative pairs.

    Returns (first_indices [M], second_indices [M], labels [M] float) with M = batch_size: pair m is
    (sentences[first[m]] for model 1, sentences[second[m]] for model 2), label 1.0 for the positive pair.
    Negatives are drawn uniformly (with replacement) among sentences whose text differs from the anchor's,
    so a duplicated sentence in the corpus is never labelled as a negative of itself.
    """
    group_size = negatives_per_positive + 1
    if batch_size % group_size != 0:
        raise ValueError(f"batch_size {batch_size} is not a multiple of K + 1 = {group_size}")
    first, second, labels = [], [], []
    for _ in range(batch_size // group_size):
        anchor = _random_index(len(sentences), generator)
        first += [anchor] * group_size
        second.append(anchor)
        second += [_random_different_sentence(sentences, anchor, generator)
                   for _ in range(negatives_per_positive)]
        labels += [1.0] + [0.0] * negatives_per_positive
    return torch.tensor(first), torch.tensor(second), torch.tensor(labels)


def _random_index(n: int, generator: torch.Generator | None) -> int:
    return int(torch.randint(n, (1,), generator=generator))


def _random_different_sentence(sentences: Sequence[str], anchor: int, generator: torch.Generator | None,
                               max_tries: int = 1000) -> int:
    # Rejection sampling: cheap on a real corpus, where almost every draw differs from the anchor.
    for _ in range(max_tries):
        candidate = _random_index(len(sentences), generator)
        if sentences[candidate] != sentences[anchor]:
            return candidate
    raise ValueError(f"no sentence different from {sentences[anchor]!r} found in {max_tries} draws")



@dataclass
class SentenceSet:
    name: str
    texts: list[str]
    encoded: list[Encoded]
    labels: list[int] | None = None

    def __len__(self):
        return len(self.encoded)

    def lengths(self) -> list[int]:
        return [len(e.input_ids) for e in self.encoded]

    def batch(self, rows: list[int], pad_id: int) -> SentenceBatch:
        labels = None if self.labels is None else torch.tensor([self.labels[i] for i in rows])
        return SentenceBatch(self.name, collate([self.encoded[i] for i in rows], pad_id), labels)

    def tension_batch(self, batch_size: int, negatives_per_positive: int, seed: int, pad_id: int) -> PairBatch:
        """Contrastive Tension's batch (Carlsson et al.): per anchor s, the pair (s, s) and K pairs (s, random other)."""
        first, second, labels = contrastive_tension_batch(self.texts, batch_size, negatives_per_positive,
                                                          torch.Generator().manual_seed(seed))
        return PairBatch(self.name, collate([self.encoded[i] for i in first.tolist()], pad_id),
                         collate([self.encoded[i] for i in second.tolist()], pad_id), labels)


@dataclass
class PairSet:
    name: str
    first: list[Encoded]
    second: list[Encoded]
    labels: list[float]
    texts: list[tuple[str, str]]

    def __len__(self):
        return len(self.first)

    def lengths(self) -> list[int]:
        return [max(len(a.input_ids), len(b.input_ids)) for a, b in zip(self.first, self.second)]

    def batch(self, rows: list[int], pad_id: int) -> PairBatch:
        return PairBatch(self.name, collate([self.first[i] for i in rows], pad_id),
                         collate([self.second[i] for i in rows], pad_id),
                         torch.tensor([self.labels[i] for i in rows], dtype=torch.float))


@dataclass
class TripletSet:
    name: str
    anchor: list[Encoded]
    positive: list[Encoded]
    negative: list[Encoded]
    texts: list[tuple[str, str, str]]

    def __len__(self):
        return len(self.anchor)

    def lengths(self) -> list[int]:
        return [max(len(a.input_ids), len(p.input_ids), len(n.input_ids))
                for a, p, n in zip(self.anchor, self.positive, self.negative)]

    def batch(self, rows: list[int], pad_id: int) -> TripletBatch:
        return TripletBatch(self.name, *(collate([column[i] for i in rows], pad_id)
                                         for column in (self.anchor, self.positive, self.negative)))


Dataset = SentenceSet | PairSet | TripletSet


def as_sentences(dataset: Dataset, tokenizer: Tokenizer, max_length: int) -> SentenceSet:
    """The distinct sentences of a set, in order of first appearance (SST keeps its labels)."""
    if isinstance(dataset, SentenceSet):
        return dataset
    texts = list(dict.fromkeys(s for row in dataset.texts for s in row))
    return SentenceSet(dataset.name, texts, tokenizer.encode(texts, max_length=max_length, source=dataset.name))


# ---- reading --data ----

def detect_format(path: Path) -> str:
    """Which of the formats a file holds, from its header: nli, quora, sst, sts, or unlabeled (.txt)."""
    if not path.is_file():
        raise DataError(f"{path}: file not found" if not path.exists() else f"{path}: not a file")
    if path.suffix == ".txt":
        return "unlabeled"
    with open(path, encoding="utf-8-sig", errors="replace") as f:  # -sig: without a byte-order mark
        header = f.readline().strip()
    columns = {c.strip() for c in header.replace(",", "\t").split("\t")}
    for mode, needed in (("nli", {"sent0", "sent1", "hard_neg"}), ("quora", {"sentence1", "sentence2", "is_duplicate"}),
                         ("sts", {"sentence1", "sentence2", "similarity"}), ("sst", {"sentence", "sentiment"})):
        if needed <= columns:
            return mode
    raise DataError(f"{path}: line 1: cannot tell the format from the header {header[:100]!r}; expected NLI "
                    f"(sent0,sent1,hard_neg), Quora (is_duplicate), STS (similarity), SST (sentiment) "
                    f"columns, or a .txt file of one sentence a line")


def load_dataset(mode: str, path: Path, tokenizer: Tokenizer, max_length: int, max_examples: int = 0) -> Dataset:
    """Read and tokenise one file of format `mode`; at most max_examples records (0 = all)."""
    source = path.name
    encode = functools.partial(tokenizer.encode, max_length=max_length, source=source)

    def cap(records: list) -> list:
        """At most max_examples of the file's records; none at all is an error here, before tokenising."""
        if not records:
            raise DataError(f"{path}: no usable rows")
        return sample_records(records, max_examples)

    if mode == "nli":
        records = cap(read_nli(path)[0])
        columns = [[getattr(r, name) for r in records] for name in ("anchor", "positive", "hard_negative")]
        dataset = TripletSet(mode, *(encode(c) for c in columns), texts=list(zip(*columns)))
    elif mode == "quora":
        records = cap(read_quora(path)[0])
        first, second = [r.sentence1 for r in records], [r.sentence2 for r in records]
        dataset = PairSet(mode, encode(first), encode(second), [float(r.label) for r in records],
                          texts=list(zip(first, second)))
    elif mode == "sst":
        records = cap(read_sentiment(path, num_classes=5)[0])
        texts = [r.sentence for r in records]
        dataset = SentenceSet(mode, texts, encode(texts), [r.label for r in records])
    elif mode == "sts":
        # Unsupervised on STS (Chen's CS224N report): its pairs' sentences, each once; the similarity scores are not used.
        records = cap(read_sts(path)[0])
        texts = list(dict.fromkeys(s for r in records for s in (r.sentence1, r.sentence2)))
        dataset = SentenceSet(mode, texts, encode(texts))
    elif mode == "unlabeled":
        texts = cap(read_lines(path)[0])
        dataset = SentenceSet(mode, texts, encode(texts))
    else:
        raise ValueError(f"unknown data format {mode!r}")
    return dataset


def data_files(data: str, data_dir: str | Path) -> list[tuple[str, Path]]:
    """(format, file) of each set --data names, in the order an epoch visits them (all3: quora, sst, sts)."""
    if data in DATA_MODES:
        return [(mode, Path(data_dir) / FILES[mode]) for mode in (ALL3_ORDER if data == "all3" else (data,))]
    path = Path(data).expanduser()
    return [(detect_format(path), path)]


def load_data(data: str, data_dir: str | Path, tokenizer: Tokenizer, max_length: int,
              max_examples: int = 0) -> list[Dataset]:
    """The sets named by --data, tokenised."""
    return [load_dataset(mode, path, tokenizer, max_length, max_examples) for mode, path in data_files(data, data_dir)]


# ---- plans: which batches an epoch trains on, in which order ----

@dataclass
class PlannedBatch:
    source: str  # the set it comes from: nli, quora, sst, ...
    # (pad_id, rank, world) -> this process's part of the batch; built when trained on, so a plan costs little memory
    make: Callable[[int, int, int], Batch]

    def build(self, pad_id: int, rank: int = 0, world: int = 1) -> Batch:
        return self.make(pad_id, rank, world)


def _share_of_rows(dataset: Dataset, rows: list[int], pad_id: int, rank: int, world: int) -> Batch:
    """This process's share of a planned batch (all of it in a single process)."""
    return dataset.batch(split_evenly(rows, world)[rank], pad_id)


def _own_tension_batch(dataset: SentenceSet, batch_size: int, negatives_per_positive: int, seed_words: tuple,
                       pad_id: int, rank: int, world: int) -> PairBatch:
    # Drawn when built, from a seed of its own; under torchrun each process draws its own batch.
    seed = derived_seed(*seed_words) if world == 1 else derived_seed(*seed_words, rank)
    return dataset.tension_batch(batch_size, negatives_per_positive, seed, pad_id)


def plan_epoch(datasets: list[Dataset], batch_size: int, seed: int, epoch: int) -> list[PlannedBatch]:
    """Each set in turn, as random batches of batch_size (all processes' together): every example once an epoch.

    Random, not length-grouped, batches: in-batch negatives should be a random sample of the data, as in the
    papers (group_batches=1 makes length_grouped_batches a plain shuffle into batches).
    """
    plan = []
    for index, dataset in enumerate(datasets):
        generator = torch.Generator().manual_seed(derived_seed(seed, epoch, index))
        for rows in length_grouped_batches(dataset.lengths(), batch_size, generator, group_batches=1):
            plan.append(PlannedBatch(dataset.name, functools.partial(_share_of_rows, dataset, rows)))
    return plan


def plan_tension_epoch(datasets: list[SentenceSet], batch_size: int, negatives_per_positive: int, seed: int,
                       epoch: int, processes: int = 1) -> list[PlannedBatch]:
    """Contrastive Tension batches of batch_size per process; an epoch has each sentence as an anchor once in
    expectation."""
    anchors_per_step = batch_size // (negatives_per_positive + 1) * processes
    plan = []
    for index, dataset in enumerate(datasets):
        if len(set(dataset.texts)) < 2:
            raise DataError(f"{dataset.name}: Contrastive Tension needs at least two different sentences")
        for k in range(math.ceil(len(dataset) / anchors_per_step)):
            make = functools.partial(_own_tension_batch, dataset, batch_size, negatives_per_positive,
                                     (seed, epoch, index, k))
            plan.append(PlannedBatch(dataset.name, make))
    return plan
