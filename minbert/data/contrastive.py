"""Data for contrastive pretraining: the `--data` names, three kinds of batch, and each epoch's plan of batches.

    nli        SimCSE's NLI triplets (sent0, sent1 = entailment, hard_neg = contradiction) -> TripletBatch
    unlabeled  one sentence a line                                                            -> SentenceBatch
    the course's training files, named and read by the task registry (tasks.CONTRASTIVE_DATA):
    quora      question pairs, is_duplicate 1 = positive pair, 0 = negative pair (Chen's CS224N report)   -> PairBatch
    sst        SST sentences, with their sentiment labels (used by --fusion)                 -> SentenceBatch
    sts        the distinct sentences of STS train's two columns (Chen's CS224N report: unsupervised)    -> SentenceBatch
    all3       Chen's CS224N report's "3 given datasets": in every epoch, each course file in turn
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

from minbert.common import choices
from minbert.common.errors import DataError
from minbert.common.seeding import derived_seed
from minbert.data.batching import Share, length_grouped_batches, to_device
from minbert.data.readers import read_lines, read_nli, sample_records
from minbert.models.tokenizer import Encoded, Tokenizer, collate

Inputs = dict[str, torch.Tensor]  # input_ids, attention_mask, token_type_ids: [rows, tokens]


# ---- batches ----

class _Batch:
    def __len__(self) -> int:
        """Rows of the batch (of each of its inputs)."""
        return len(next(value for value in vars(self).values() if isinstance(value, dict))["input_ids"])

    def to(self, device: torch.device):
        def move(value):
            if isinstance(value, dict):
                return {name: to_device(tensor, device) for name, tensor in value.items()}
            return to_device(value, device) if isinstance(value, torch.Tensor) else value

        return replace(self, **{f.name: move(getattr(self, f.name)) for f in fields(self)})

    def head(self, rows: int):
        """The first `rows` rows, of every input and the labels."""
        def cut(value):
            if isinstance(value, dict):
                return {name: tensor[:rows] for name, tensor in value.items()}
            return value[:rows] if isinstance(value, torch.Tensor) else value

        return replace(self, **{f.name: cut(getattr(self, f.name)) for f in fields(self)})


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

Encode = Callable[..., list[Encoded]]  # texts (and their pair partners) -> tokenised, truncated to --max-length


@dataclass(frozen=True)
class Source:
    """A kind of file --data names: its file in --data-dir, the header columns that tell a --data FILE of its kind,
    and load(name, path, encode, max_examples) -> the tokenised set."""
    file: str
    columns: frozenset[str]
    load: Callable[[str, Path, Encode, int], "Dataset"]


def usable(path: Path, records: list, max_examples: int) -> list:
    """At most max_examples of a file's records (0 = all); none at all is an error here, before tokenising."""
    if not records:
        raise DataError(f"{path}: no usable rows")
    return sample_records(records, max_examples)


def _load_nli(name: str, path: Path, encode: Encode, max_examples: int) -> TripletSet:
    records = usable(path, read_nli(path)[0], max_examples)
    columns = [[getattr(r, column) for r in records] for column in ("anchor", "positive", "hard_negative")]
    return TripletSet(name, *(encode(c) for c in columns), texts=list(zip(*columns)))


def _load_lines(name: str, path: Path, encode: Encode, max_examples: int) -> SentenceSet:
    texts = usable(path, read_lines(path)[0], max_examples)
    return SentenceSet(name, texts, encode(texts))


NLI = Source("nli_for_simcse.csv", frozenset({"sent0", "sent1", "hard_neg"}), _load_nli)
UNLABELED = Source("unlabeled-sentences.txt", frozenset(), _load_lines)  # and any .txt file


class ContrastiveData:
    """What --data can name: nli, the course's training files (`course`, in the order all3 visits them: Chen's
    CS224N report section 4.1 takes supervised Quora first, then SST and STS), unlabeled, all3, or a file."""

    def __init__(self, course: dict[str, Source]):
        self.course = list(course)
        self.sources = {choices.NLI: NLI, **course, choices.UNLABELED: UNLABELED}
        self.names = choices.contrastive_data_names(course)

    def detect_format(self, path: Path) -> str:
        """Which of the formats a file holds, from its header (a .txt file: one sentence a line)."""
        if not path.is_file():
            raise DataError(f"{path}: file not found" if not path.exists() else f"{path}: not a file")
        if path.suffix == ".txt":
            return choices.UNLABELED
        with open(path, encoding="utf-8-sig", errors="replace") as f:  # -sig: without a byte-order mark
            header = f.readline().strip()
        columns = {c.strip() for c in header.replace(",", "\t").split("\t")}
        for name, source in self.sources.items():
            if source.columns and source.columns <= columns:
                return name
        known = "; ".join(f"{name} ({', '.join(sorted(s.columns))})" for name, s in self.sources.items() if s.columns)
        raise DataError(f"{path}: line 1: cannot tell the format from the header {header[:100]!r}; expected the "
                        f"columns of {known}, or a .txt file of one sentence a line")

    def files(self, data: str, data_dir: str | Path) -> list[tuple[str, Path]]:
        """(format, file) of each set --data names, in the order an epoch visits them."""
        if data in self.names:
            names = self.course if data == choices.ALL_COURSE_FILES else (data,)
            return [(name, Path(data_dir) / self.sources[name].file) for name in names]
        path = Path(data).expanduser()
        return [(self.detect_format(path), path)]

    def load(self, data: str, data_dir: str | Path, tokenizer: Tokenizer, max_length: int,
             max_examples: int = 0) -> list["Dataset"]:
        """The sets named by --data, tokenised; at most max_examples records of each file (0 = all)."""
        return [self.sources[name].load(name, path, functools.partial(tokenizer.encode, max_length=max_length,
                                                                      source=path.name), max_examples)
                for name, path in self.files(data, data_dir)]


# ---- plans: which batches an epoch trains on, in which order ----

@dataclass
class PlannedBatch:
    source: str  # the set it comes from: nli, quora, sst, ...
    rows: int  # the step's rows, all processes' together
    # (pad_id, share) -> the share's batch and its loss's weight; built when trained on, so a plan costs little memory
    make: Callable[[int, Share], tuple[Batch, float]]

    def build(self, pad_id: int, share: Share = Share()) -> tuple[Batch, float]:
        """The batch that `share` computes and the weight of its mean loss (Share.of): its part of the rows, or
        where it has none (the last batch of an epoch, under torchrun) the stand-in row, weighed 0."""
        return self.make(pad_id, share)


def _share_of_rows(dataset: Dataset, rows: list[int], pad_id: int, share: Share) -> tuple[Batch, float]:
    computed, weight = share.of(rows)
    return dataset.batch(computed, pad_id), weight


def _own_tension_batch(dataset: SentenceSet, batch_size: int, negatives_per_positive: int, seed_words: tuple,
                       pad_id: int, share: Share) -> tuple[PairBatch, float]:
    # Drawn when built, from a seed of its own; under torchrun each process draws a whole batch of its own, whose
    # mean loss weighs as one process's (the processes' gradients are averaged).
    seed = derived_seed(*seed_words) if share.parts == 1 else derived_seed(*seed_words, share.index)
    return dataset.tension_batch(batch_size, negatives_per_positive, seed, pad_id), 1.0


def plan_epoch(datasets: list[Dataset], batch_size: int, seed: int, epoch: int) -> list[PlannedBatch]:
    """Each set in turn, as random batches of batch_size (all processes' together): every example once an epoch.

    Random, not length-grouped, batches: in-batch negatives should be a random sample of the data, as in the
    papers (group_batches=1 makes length_grouped_batches a plain shuffle into batches).
    """
    plan = []
    for index, dataset in enumerate(datasets):
        generator = torch.Generator().manual_seed(derived_seed(seed, epoch, index))
        for rows in length_grouped_batches(dataset.lengths(), batch_size, generator, group_batches=1):
            plan.append(PlannedBatch(dataset.name, len(rows), functools.partial(_share_of_rows, dataset, rows)))
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
            plan.append(PlannedBatch(dataset.name, batch_size * processes, make))
    return plan
