"""The task registry: what training and prediction need to know of each fine-tuning task, in one place.

A Task is what task_info.py says of it (its name, files, leaderboard column, kind), and how to read its files,
which head it gets, its loss, how the head's raw outputs become soft outputs (what ensembles average) and hard
predictions (what the leaderboard gets), its metric, its leaderboard file, and how its predictions read in
words: its kind's class here. Heads, trainer, evaluation, predictions and ensembles ask the registry; none of them
knows a task by name or kind. Reporting is the analysis's: each kind's dev errors, their report and their panel
are in analysis/errors.py, the axis of its training loss in analysis/curves.py.

Adding a task is one entry in task_info.TASKS, plus its kind's class here if it is a new kind, and a reader or head
if it needs one that does not exist yet.
"""
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from minbert.common.errors import DataError
from minbert.common.metrics import accuracy, mean_score, overall_score, pearson
from minbert.data.contrastive import ContrastiveData, Encode, PairSet, SentenceSet, Source, usable
from minbert.data.readers import QUORA, STS, ReadReport, collect, pair_records, sample_records, sentiment_records
from minbert.data.silver import SilverSet, read_silver, write_silver
from minbert.data.splits import TaskSplit, encode_views
from minbert.heads import MLP
from minbert.heads.paraphrase import CrossEncodedPairHead, ParaphraseHead
from minbert.heads.sentiment import SentimentHead
from minbert.heads.similarity import (
    LOWEST_BUCKET_WIDTH,
    MAX_COSINE_FLOOR,
    MAX_SCORE,
    CrossEncodedSimilarityHead,
    SimilarityHead,
    lowest_bucket_mean_cosine,
)
from minbert.models.tokenizer import Tokenizer
from minbert.task_info import CONTRASTIVE_COURSE_DATA, COURSE_TASKS, TASKS, TaskInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeadOptions:
    """The flags that decide what the heads compute (saved with them: heads trained under other values
    either fail to load or, worse, load and compute something else)."""
    encodings: dict[str, str] = field(default_factory=dict)  # pair task -> bi | cross (left out: bi)
    share: str = "first-layer"  # how the bi-encoded pair tasks' MLPs share layers (heads.pair_mlps)
    pair_mlp: str = "residual"
    cross_head: str = "dpha"
    dropout: float = 0.3
    sts_target: str = "score"

    def encoding(self, task: "Task") -> str:
        return self.encodings.get(task.name, "bi") if task.pair else "single"


@dataclass(frozen=True)
class Task(TaskInfo):
    """A task (task_info.TaskInfo) with its code: a kind's class below."""

    # ---- data ----
    def records(self, path: Path, labeled: bool, report: ReadReport) -> Iterator:
        """A file's records (rows it cannot use counted in the report), read as they are needed."""
        raise NotImplementedError

    def read(self, path: Path, labeled: bool) -> list:
        """A file's records, its report logged."""
        report = ReadReport(Path(path))
        return collect(self.records(Path(path), labeled, report), report)[0]

    def load_split(self, path: Path, tokenizer: Tokenizer, max_length: int, encoding: str, labeled: bool = True,
                   max_examples: int = 0) -> TaskSplit:
        records = sample_records(self.read(path, labeled), max_examples)
        if not records:
            raise DataError(f"{path}: no usable rows")
        texts = [self.texts(r) for r in records]
        views = encode_views(tokenizer, texts, encoding, max_length, source=path.name)
        labels = torch.tensor([r.label for r in records], dtype=self.label_dtype) if labeled else None
        return TaskSplit(self.name, [r.id for r in records], views, labels)

    def load_splits(self, data_dir: str | Path, tokenizer: Tokenizer, max_length: int, encoding: str,
                    max_train_examples: int = 0, max_eval_examples: int = 0) -> dict[str, TaskSplit]:
        """Its train, dev and test splits of --data-dir (the test split unlabelled)."""
        train, dev, test = (Path(data_dir) / file for file in self.files)
        common = dict(tokenizer=tokenizer, max_length=max_length, encoding=encoding)
        splits = {"train": self.load_split(train, max_examples=max_train_examples, **common),
                  "dev": self.load_split(dev, max_examples=max_eval_examples, **common),
                  "test": self.load_split(test, labeled=False, max_examples=max_eval_examples, **common)}
        self.check_scorable(splits["dev"], dev, max_eval_examples)
        return splits

    def check_scorable(self, dev: TaskSplit, path: Path, sample: int) -> None:
        """DataError, before any training, for a dev split the metric cannot score (sample: --max-eval-examples)."""

    label_dtype = torch.long

    def texts(self, record) -> tuple[str, ...]:
        """An example's sentence, or its pair's two."""
        return (record.sentence1, record.sentence2) if self.pair else (record.sentence,)

    # ---- model ----
    def head(self, hidden_size: int, options: HeadOptions, mlp: MLP | None) -> nn.Module:
        """The task's head on pooled embeddings; mlp: the pair MLP of a bi-encoded pair task."""
        raise NotImplementedError

    def loss(self, raw: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def divergence(self, raw: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        """How far apart two raw outputs for the same examples are, averaged over the batch: SMART's l_s, the
        symmetric KL divergence of the predicted distributions, or the squared error of a regression."""
        raise NotImplementedError

    def check(self, options: HeadOptions) -> None:
        """Raise ValueError (a usage error) for flag values this task's head cannot take."""

    def needs_calibration(self, options: HeadOptions) -> bool:
        """Whether the head measures something on the training data before training (calibrate)."""
        return False

    def calibrate(self, head: nn.Module, split: TaskSplit, embed: Callable[[list[int]], torch.Tensor]) -> None:
        """Measure what the head needs from the training split; embed(rows) -> pooled embeddings of those rows'
        views (view-major), computed in eval mode."""
        raise NotImplementedError

    # ---- outputs ----
    soft_shape = ()  # one example's soft output

    def soft(self, raw: torch.Tensor) -> torch.Tensor:
        """What ensembles average: class probabilities, P(paraphrase), a score in [0, 5]."""
        raise NotImplementedError

    def hard(self, soft: torch.Tensor) -> torch.Tensor:
        """The leaderboard's predictions from soft outputs."""
        raise NotImplementedError

    def format(self, prediction: float) -> str:
        """One prediction as the leaderboard file writes it."""
        raise NotImplementedError

    def describe(self, soft: torch.Tensor) -> list[dict]:
        """Soft outputs in words, one dict an example (what predict.py prints)."""
        raise NotImplementedError

    # ---- metric ----
    # The task as one transformers AutoModelForSequenceClassification sees it (1 = regression); the baseline's.
    sequence_classifier_outputs = 2

    def metric(self, soft: torch.Tensor, labels: torch.Tensor) -> float:
        return accuracy(self.hard(soft), labels.long())

    def score(self, metric: float) -> float:
        """The metric on [0, 1], as the course's overall score counts it."""
        return metric

    # ---- silver data, labelled by a teacher (data/silver.py) ----
    label_column = ""  # the label's column in its files

    def soft_loss(self, raw: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The training loss against a teacher's soft outputs (soft()), averaged over the batch."""
        return self.loss(raw, target)

    def silver_range(self) -> tuple[int, float, float]:
        """A soft label's probabilities (0: one number), and the range of that number."""
        return 0, 0.0, 1.0

    def write_silver(self, path: Path, silver: SilverSet) -> None:
        write_silver(path, silver, self.label_column, self.hard(silver.soft), self.format)

    def read_silver(self, path: Path) -> SilverSet:
        return read_silver(path, self.pair, *self.silver_range())

    def load_silver(self, path: Path, tokenizer: Tokenizer, max_length: int, encoding: str) -> TaskSplit:
        """A silver file as a training split whose labels are the soft labels."""
        silver = self.read_silver(path)
        views = encode_views(tokenizer, silver.texts, encoding, max_length, source=path.name)
        return TaskSplit(self.name, silver.ids, views, silver.soft)

    # ---- contrastive pretraining on its training file (pretrain_contrastive.py --data) ----
    columns = frozenset()  # the header columns of its files, which tell a --data FILE of its kind

    def contrastive_set(self, name: str, path: Path, encode: Encode, max_examples: int):
        raise NotImplementedError

    def contrastive_source(self) -> Source:
        return Source(self.files[0], self.columns, self.contrastive_set)


@dataclass(frozen=True)
class Classification(Task):
    """One sentence, one of len(class_names) classes; cross-entropy; accuracy."""

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def records(self, path, labeled, report):
        return sentiment_records(path, self.num_classes, labeled, report)

    columns = frozenset({"sentence", "sentiment"})

    def contrastive_set(self, name, path, encode, max_examples):
        """The sentences with their labels (which --fusion trains a sentiment head on)."""
        records = usable(path, self.read(path, labeled=True), max_examples)
        texts = [r.sentence for r in records]
        return SentenceSet(name, texts, encode(texts), [r.label for r in records])

    def head(self, hidden_size, options, mlp):
        return SentimentHead(hidden_size, self.num_classes, dropout=options.dropout)

    def loss(self, raw, labels):
        return F.cross_entropy(raw.float(), labels)

    label_column = "sentiment"

    def soft_loss(self, raw, target):
        """KL(teacher || student) of the class distributions."""
        return F.kl_div(raw.float().log_softmax(-1), target, reduction="batchmean")

    def silver_range(self):
        return self.num_classes, 0.0, 1.0

    def divergence(self, raw, other):
        return symmetric_kl(raw.float().log_softmax(-1), other.float().log_softmax(-1))

    @property
    def soft_shape(self):
        return (self.num_classes,)

    @property
    def sequence_classifier_outputs(self):
        return self.num_classes

    def soft(self, raw):
        return raw.float().softmax(-1)

    def hard(self, soft):
        return soft.argmax(-1)

    def format(self, prediction):
        if not float(prediction).is_integer() or not 0 <= prediction < self.num_classes:
            raise ValueError(f"{self.name} prediction {prediction} is not a class index 0-{self.num_classes - 1}")
        return str(int(prediction))

    def describe(self, soft):
        return [{"class": label, "name": self.class_names[label], "probabilities": row}
                for label, row in zip(self.hard(soft).tolist(), soft.tolist())]


@dataclass(frozen=True)
class Paraphrase(Task):
    """A pair, paraphrase or not; one logit, binary cross-entropy; accuracy at P = 0.5."""
    label_dtype = torch.float

    def records(self, path, labeled, report):
        return pair_records(path, labeled, report, *QUORA)

    columns = frozenset({"sentence1", "sentence2", "is_duplicate"})

    def contrastive_set(self, name, path, encode, max_examples):
        """Positive pairs (paraphrases) and negative pairs (Chen's CS224N report)."""
        records = usable(path, self.read(path, labeled=True), max_examples)
        first, second = [r.sentence1 for r in records], [r.sentence2 for r in records]
        return PairSet(name, encode(first), encode(second), [float(r.label) for r in records],
                       texts=list(zip(first, second)))

    def head(self, hidden_size, options, mlp):
        if options.encoding(self) == "cross":
            return CrossEncodedPairHead(hidden_size, options.cross_head, options.dropout)
        return ParaphraseHead(mlp)

    def loss(self, raw, labels):
        return F.binary_cross_entropy_with_logits(raw.float(), labels)  # soft labels too: KL plus a constant

    label_column = QUORA[0]

    def divergence(self, raw, other):
        # The two-outcome distributions (not paraphrase, paraphrase) of each logit.
        as_distribution = lambda logit: torch.stack([F.logsigmoid(-logit), F.logsigmoid(logit)], -1)  # noqa: E731
        return symmetric_kl(as_distribution(raw.float()), as_distribution(other.float()))

    def soft(self, raw):
        return raw.float().sigmoid()

    def hard(self, soft):
        return (soft > 0.5).long()

    def format(self, prediction):
        if prediction not in (0, 1):
            raise ValueError(f"{self.name} prediction {prediction} is not a 0/1 label")
        return str(int(prediction))

    def describe(self, soft):
        return [{"paraphrase": label, "probability": p} for label, p in zip(self.hard(soft).tolist(), soft.tolist())]


@dataclass(frozen=True)
class Similarity(Task):
    """A pair, a similarity score in [0, 5]; squared error on the unclamped score; Pearson r."""
    label_dtype = torch.float
    sequence_classifier_outputs = 1

    def records(self, path, labeled, report):
        return pair_records(path, labeled, report, *STS)

    columns = frozenset({"sentence1", "sentence2", "similarity"})

    def contrastive_set(self, name, path, encode, max_examples):
        """Unsupervised (Chen's CS224N report): its pairs' sentences, each once; the scores are not used."""
        records = usable(path, self.read(path, labeled=True), max_examples)
        texts = list(dict.fromkeys(s for r in records for s in (r.sentence1, r.sentence2)))
        return SentenceSet(name, texts, encode(texts))

    def head(self, hidden_size, options, mlp):
        if options.encoding(self) == "cross":
            return CrossEncodedSimilarityHead(hidden_size, options.cross_head, options.dropout)
        return SimilarityHead(mlp)

    def target(self, sts_target: str, encoding: str) -> str:
        """What --sts-target auto means: the recipe's cosine-range where the pair is bi-encoded (a cosine needs two
        sentence embeddings), the plain score where it is cross-encoded."""
        if sts_target != "auto":
            return sts_target
        return "cosine-range" if encoding == "bi" else "score"

    def check(self, options: HeadOptions) -> None:
        if options.sts_target == "cosine-range" and options.encoding(self) != "bi":
            raise ValueError(f"--sts-target cosine-range is a cosine of two sentence embeddings: it needs "
                             f"{self.name}=bi in --pair-encoding")

    def needs_calibration(self, options: HeadOptions) -> bool:
        return options.sts_target == "cosine-range"

    def calibrate(self, head, split, embed):
        """Contrastive Tension (Carlsson et al.) section 5.2: with --sts-target cosine-range, gold scores map onto
        [M, 1], M = the model's mean cosine over the training pairs in the lowest label bucket (gold <= 0.25). A
        small sample may have no pair there: then the lowest bucket that has pairs, said in a warning."""
        if len(split) == 0:
            raise DataError(f"--sts-target cosine-range needs {self.name.upper()} training pairs; none are used")
        gold = split.labels
        width = LOWEST_BUCKET_WIDTH * max(1, math.ceil(gold.min().item() / LOWEST_BUCKET_WIDTH))
        low = (gold <= width).nonzero().squeeze(1).tolist()
        if width > LOWEST_BUCKET_WIDTH:
            log.warning("--sts-target cosine-range: none of the %d %s training pairs used is scored <= %g; M is the "
                        "mean cosine of the %d scored <= %g (a larger --max-train-examples gives the usual bucket)",
                        len(split), self.name.upper(), LOWEST_BUCKET_WIDTH, len(low), width)
        cosines = head.cosine(*embed(low).chunk(2)).cpu()
        floor = lowest_bucket_mean_cosine(cosines, gold[low], bucket_width=width)
        if floor > MAX_COSINE_FLOOR:
            log.warning("--sts-target cosine-range: the encoder's embeddings of the %d lowest-scored %s training "
                        "pairs are all but parallel (mean cosine %.6f); M is capped at %g", len(low),
                        self.name.upper(), floor, MAX_COSINE_FLOOR)
            floor = MAX_COSINE_FLOOR
        head.set_cosine_floor(floor)

    def loss(self, raw, labels):
        return F.mse_loss(raw.float(), labels)

    label_column = STS[0]

    def silver_range(self):
        return 0, 0.0, MAX_SCORE

    def divergence(self, raw, other):
        return F.mse_loss(raw.float(), other.float())

    def soft(self, raw):
        return raw.float().clamp(0.0, MAX_SCORE)

    def hard(self, soft):
        return soft

    def format(self, prediction):
        if not math.isfinite(prediction):
            raise ValueError(f"{self.name} prediction {prediction} is not a finite number")
        return repr(float(prediction))

    def describe(self, soft):
        return [{"similarity": score} for score in self.hard(soft).tolist()]

    def metric(self, soft, labels):
        return pearson(soft, labels)

    def check_scorable(self, dev, path, sample):
        """Pearson r of gold scores that are all the same is not a number."""
        scores = dev.labels.unique()
        if len(scores) > 1:
            return
        pairs = f"{len(dev)} pair{'s' if len(dev) != 1 else ''}"
        where = (f"--max-eval-examples {sample}: a sample of {pairs} of {path}" if len(dev) == sample
                 else f"{path}: {pairs}")
        raise DataError(f"{where}, all scored {scores[0].item():g}; Pearson r needs dev pairs of at least two "
                        f"different scores")

    def score(self, metric):
        return (metric + 1) / 2


def symmetric_kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) + KL(q || p) of the rows' distributions (log-probabilities [B, outcomes]), averaged over rows."""
    return ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum(-1).mean()


# Each task of task_info.TASKS with its kind's code.
KINDS = {"classification": Classification, "paraphrase": Paraphrase, "similarity": Similarity}
REGISTRY: dict[str, Task] = {name: KINDS[info.kind](**vars(info)) for name, info in TASKS.items()}
# The course's training files that pretrain_contrastive.py --data names, in the order --data all3 visits them.
CONTRASTIVE_DATA = ContrastiveData({data: REGISTRY[task].contrastive_source()
                                    for data, task in CONTRASTIVE_COURSE_DATA.items()})


def metric_names() -> dict[str, str]:
    """What each dev metric of a run is, in words (model cards): every task's, and the course's two means."""
    return {**{name: f"{task.title} {'Pearson r' if task.metric_name == 'pearson' else task.metric_name}"
               for name, task in REGISTRY.items()},
            "overall": "course overall score: mean(SST acc, Quora acc, (STS r + 1) / 2)",
            "mean": "plain mean of SST acc, Quora acc and STS r"}


def summary(metrics: dict[str, float]) -> dict[str, float]:
    """Add the course's overall score mean(SST acc, Quora acc, (STS r + 1) / 2) and the plain mean of the three
    (Mohammed and Sabane's "Average") when all three were scored."""
    if set(COURSE_TASKS) <= set(metrics):
        values = [metrics[name] for name in COURSE_TASKS]
        metrics = {**metrics, "overall": overall_score(*values), "mean": mean_score(*values)}
    return metrics


def selection_score(metrics: dict[str, float]) -> float:
    """What picks the best checkpoint: the mean of the trained tasks' scores on [0, 1] (with the three course
    tasks, the course's overall score)."""
    scores = [REGISTRY[name].score(value) for name, value in metrics.items() if name in REGISTRY]
    return sum(scores) / len(scores)
