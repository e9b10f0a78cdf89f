"""The task registry: everything that is particular to one fine-tuning task, in one place.

A Task says where its files are and how to read them, whether an example is one sentence or a pair, which
head it gets, its loss, how the head's raw outputs become soft outputs (what ensembles average) and hard
predictions (what the leaderboard gets), its metric, its leaderboard file, and how its predictions read in
words and its dev errors in a report. Heads, trainer, evaluation, predictions, ensembles and the analysis ask
the registry; none of them knows a task by name or kind.

    sst     SST-5 sentiment, 5 classes, accuracy                  (the course's first task)
    para    Quora paraphrase detection, 0/1, accuracy              (second)
    sts     STS similarity, a score in [0, 5], Pearson r           (third)
    cfimdb  CFIMDB movie-review polarity, 2 classes, accuracy      (the course's optional extra set)

Adding a task is one entry in REGISTRY, plus a reader or head if it needs one that does not exist yet.
"""
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from common.errors import DataError
from common.metrics import accuracy, confusion_matrix, mean_score, overall_score, pearson, row_normalised
from common.tables import cell, markdown_table
from data.contrastive import ContrastiveData, Encode, PairSet, SentenceSet, Source, usable
from data.readers import QUORA, STS, ReadReport, collect, pair_records, sample_records, sentiment_records
from data.splits import TaskSplit, encode_views
from heads import MLP
from heads.paraphrase import CrossEncodedPairHead, ParaphraseHead
from heads.sentiment import SentimentHead
from heads.similarity import (
    LOWEST_BUCKET_WIDTH,
    MAX_SCORE,
    CrossEncodedSimilarityHead,
    SimilarityHead,
    lowest_bucket_mean_cosine,
)
from models.tokenizer import Tokenizer

log = logging.getLogger(__name__)

STS_TARGETS = ("auto", "score", "cosine-range")


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
class Task:
    name: str
    title: str  # what pictures and tables call it
    description: str
    files: tuple[str, str, str]  # train, dev, test-student in --data-dir, the course's names
    column: str  # the leaderboard file's prediction column
    pair: bool = False  # two sentences an example

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

    # ---- dev errors (analyze.py errors) ----
    def errors(self, records: list, soft: torch.Tensor, tolerance: float) -> dict:
        """The numbers of its errors on dev records; "wrong": one bool an example (for the tasks' comparison).
        tolerance: how far a regression's prediction may be from gold before it counts as wrong."""
        raise NotImplementedError

    def error_report(self, result: dict, top: int) -> list[str]:
        """Markdown sections of errors(...)'s result; lists cut to `top` rows."""
        raise NotImplementedError

    def error_panel(self, result: dict, records: list, soft: torch.Tensor) -> tuple[str, dict]:
        """Its panel of the errors picture: a kind of drawing (analysis/errors.py) and its arguments."""
        raise NotImplementedError

    # ---- metric ----
    loss_description = ""  # the training loss, for axis labels
    metric_name = "accuracy"
    # The task as one transformers AutoModelForSequenceClassification sees it (1 = regression); the baseline's.
    sequence_classifier_outputs = 2

    def metric(self, soft: torch.Tensor, labels: torch.Tensor) -> float:
        return accuracy(self.hard(soft), labels.long())

    def score(self, metric: float) -> float:
        """The metric on [0, 1], as the course's overall score counts it."""
        return metric

    # ---- contrastive pretraining on its training file (pretrain_contrastive.py --data) ----
    columns = frozenset()  # the header columns of its files, which tell a --data FILE of its kind

    def contrastive_set(self, name: str, path: Path, encode: Encode, max_examples: int):
        raise NotImplementedError

    def contrastive_source(self) -> Source:
        return Source(self.files[0], self.columns, self.contrastive_set)


@dataclass(frozen=True)
class Classification(Task):
    """One sentence, one of len(class_names) classes; cross-entropy; accuracy."""
    class_names: tuple[str, ...] = ("negative", "positive")
    loss_description = "cross-entropy (nats)"

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

    def errors(self, records, soft, tolerance):
        """Accuracy, the confusion matrix (counts and row-normalised), and the misclassified sentences, the
        most confident first (confidence: the predicted class's probability)."""
        predicted, gold = self.hard(soft).tolist(), [r.label for r in records]
        counts = confusion_matrix(gold, predicted, self.num_classes)
        misclassified = [{"id": r.id, "sentence": r.sentence, "gold": g, "predicted": p,
                          "confidence": soft[i, p].item()}
                         for i, (r, g, p) in enumerate(zip(records, gold, predicted)) if g != p]
        return {"accuracy": accuracy(predicted, gold), "confusion": counts.tolist(),
                "confusion_normalised": row_normalised(counts).tolist(),
                "misclassified": sorted(misclassified, key=lambda e: -e["confidence"]),
                "wrong": [g != p for g, p in zip(gold, predicted)]}

    def error_report(self, result, top):
        names = [f"{number} {name}" for number, name in enumerate(self.class_names)]
        counts = {names[g]: dict(zip(names, row)) for g, row in enumerate(result["confusion"])}
        fractions = {names[g]: dict(zip(names, row)) for g, row in enumerate(result["confusion_normalised"])}
        wrong = {e["id"]: {**e, "sentence": cell(e["sentence"]), "gold": names[e["gold"]],
                           "predicted": names[e["predicted"]]} for e in result["misclassified"][:top]}
        return [f"## {self.title}: accuracy {result['accuracy']:.4f}\n",
                "Counts (rows: gold class, columns: predicted):\n",
                markdown_table(counts, names, label="gold \\ predicted"),
                "\nEach gold class's row as fractions (recall on the diagonal):\n",
                markdown_table(fractions, names, label="gold \\ predicted", digits=3),
                (f"\n{len(result['misclassified'])} misclassified; the {min(top, len(wrong))} most confident "
                 f"(confidence: the predicted class's probability):\n"),
                markdown_table(wrong, ["sentence", "gold", "predicted", "confidence"], label="id", digits=3)]

    def error_panel(self, result, records, soft):
        return "confusion", {"counts": np.array(result["confusion"]), "title": self.title,
                             "fractions": np.array(result["confusion_normalised"]),
                             "classes": list(self.class_names), "accuracy": result["accuracy"]}


@dataclass(frozen=True)
class Paraphrase(Task):
    """A pair, paraphrase or not; one logit, binary cross-entropy; accuracy at P = 0.5."""
    pair: bool = True
    label_dtype = torch.float
    loss_description = "binary cross-entropy (nats)"

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
        return F.binary_cross_entropy_with_logits(raw.float(), labels)

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

    def errors(self, records, soft, tolerance):
        """Accuracy, the false positives and false negatives, the most confident first (confidence: the
        probability given to the wrong answer)."""
        predicted, gold = self.hard(soft).tolist(), [int(r.label) for r in records]
        errors = {"false_positives": [], "false_negatives": []}
        for r, g, p, probability in zip(records, gold, predicted, soft.tolist()):
            if g != p:
                errors["false_positives" if p else "false_negatives"].append(
                    {"id": r.id, "sentence1": r.sentence1, "sentence2": r.sentence2, "gold": g,
                     "p_paraphrase": probability, "confidence": probability if p else 1 - probability})
        return {"accuracy": accuracy(predicted, gold),
                **{kind: sorted(rows, key=lambda e: -e["confidence"]) for kind, rows in errors.items()},
                "wrong": [g != p for g, p in zip(gold, predicted)]}

    def error_report(self, result, top):
        sections = [f"## {self.title}: accuracy {result['accuracy']:.4f}\n"]
        for kind, words in (("false_positives", "false positives (gold: not paraphrase)"),
                            ("false_negatives", "false negatives (gold: paraphrase)")):
            rows = {e["id"]: {**e, "sentence1": cell(e["sentence1"]), "sentence2": cell(e["sentence2"])}
                    for e in result[kind][:top]}
            sections += [f"\n{len(result[kind])} {words}; the {len(rows)} most confident:\n",
                         markdown_table(rows, ["sentence1", "sentence2", "p_paraphrase"], label="id", digits=3,
                                        headers=["question 1", "question 2", "P(paraphrase)"])]
        return sections

    def error_panel(self, result, records, soft):
        return "probabilities", {"p_paraphrase": soft.numpy(), "gold": np.array([r.label for r in records]),
                                 "title": self.title, "accuracy": result["accuracy"]}


@dataclass(frozen=True)
class Similarity(Task):
    """A pair, a similarity score in [0, 5]; squared error on the unclamped score; Pearson r."""
    pair: bool = True
    label_dtype = torch.float
    metric_name = "pearson"
    loss_description = "squared error of the 0-5 score"
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
        head.set_cosine_floor(lowest_bucket_mean_cosine(cosines, gold[low], bucket_width=width))

    def loss(self, raw, labels):
        return F.mse_loss(raw.float(), labels)

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

    def errors(self, records, soft, tolerance):
        """Pearson r, and every pair with its absolute error, the largest first; a pair counts as wrong when its
        error exceeds `tolerance`."""
        gold = [r.label for r in records]
        pairs = [{"id": r.id, "sentence1": r.sentence1, "sentence2": r.sentence2, "gold": g, "predicted": s,
                  "error": abs(s - g)} for r, g, s in zip(records, gold, soft.tolist())]
        return {"pearson": pearson(soft, gold), "largest_errors": sorted(pairs, key=lambda e: -e["error"]),
                "wrong": [e["error"] > tolerance for e in pairs]}

    def error_report(self, result, top):
        rows = {e["id"]: {**e, "sentence1": cell(e["sentence1"]), "sentence2": cell(e["sentence2"])}
                for e in result["largest_errors"][:top]}
        return [f"## {self.title}: Pearson r {result['pearson']:.4f}\n",
                f"The {len(rows)} pairs with the largest absolute error:\n",
                markdown_table(rows, ["sentence1", "sentence2", "gold", "predicted", "error"], label="id")]

    def error_panel(self, result, records, soft):
        return "scatter", {"predicted": soft.numpy(), "gold": np.array([r.label for r in records]),
                           "title": self.title, "r": result["pearson"]}

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


REGISTRY: dict[str, Task] = {task.name: task for task in (
    Classification("sst", "SST-5", "SST-5 sentiment (5 classes)",
                   ("ids-sst-train.csv", "ids-sst-dev.csv", "ids-sst-test-student.csv"), column="Predicted_Sentiment",
                   class_names=("negative", "somewhat negative", "neutral", "somewhat positive", "positive")),
    Paraphrase("para", "Quora", "Quora paraphrase detection",
               ("quora-train.csv", "quora-dev.csv", "quora-test-student.csv"), column="Predicted_Is_Paraphrase"),
    # The later starter's column name; the 2023 starter misspelled it "Predicted_Similiary".
    Similarity("sts", "STS", "STS semantic similarity (0-5)",
               ("sts-train.csv", "sts-dev.csv", "sts-test-student.csv"), column="Predicted_Similarity"),
    Classification("cfimdb", "CFIMDB", "CFIMDB movie-review polarity (2 classes)",
                   ("ids-cfimdb-train.csv", "ids-cfimdb-dev.csv", "ids-cfimdb-test-student.csv"),
                   column="Predicted_Sentiment", class_names=("negative", "positive")),
)}
TASK_NAMES = tuple(REGISTRY)
# The three the course's overall score combines, and each by what it predicts.
SENTIMENT, PARAPHRASE, SIMILARITY = COURSE_TASKS = ("sst", "para", "sts")
# The documented recipe's task flags (docs/training.md), the trainer's defaults: Quora cross-encoded, STS
# bi-encoded (its target then the cosine range), and Quora, ten times the others' size, sampled at 0.8 by mtdnn.
RECIPE_PAIR_ENCODING = f"{PARAPHRASE}=cross,{SIMILARITY}=bi"
RECIPE_TASK_WEIGHTS = {PARAPHRASE: 0.8}
# The course's training files that pretrain_contrastive.py --data names, in the order --data all3 visits them.
CONTRASTIVE_DATA = ContrastiveData({"quora": REGISTRY[PARAPHRASE].contrastive_source(),
                                    "sst": REGISTRY[SENTIMENT].contrastive_source(),
                                    "sts": REGISTRY[SIMILARITY].contrastive_source()})


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


# What --metric-for-best may name: the selection score (overall), the plain mean, or one task's metric.
BEST_METRICS = ("overall", "mean") + TASK_NAMES
TASK_METRICS_HELP = ", ".join(f"{name} ({task.metric_name})" for name, task in REGISTRY.items())


def best_metric(metrics: dict[str, float], name: str) -> float:
    """The value of --metric-for-best NAME in an evaluation's metrics (higher is better)."""
    return selection_score(metrics) if name == "overall" else metrics[name]


def describe_best_metric(name: str, tasks: Sequence[str]) -> str:
    """What --metric-for-best NAME is, for the summary: "overall" is the course's only with its three tasks."""
    if name == "overall":
        return ("overall (the course's overall score)" if set(tasks) == set(COURSE_TASKS)
                else f"overall (the mean of {', '.join(tasks)} scores on [0, 1])")
    return "mean (of sst, para and sts)" if name == "mean" else f"{name} ({REGISTRY[name].metric_name})"


def check_best_metric(name: str, tasks: Sequence[str]) -> None:
    """ValueError unless the trained tasks give --metric-for-best NAME."""
    needed = COURSE_TASKS if name == "mean" else () if name == "overall" else (name,)
    missing = [task for task in needed if task not in tasks]
    if missing:
        raise ValueError(f"--metric-for-best {name}: needs {', '.join(missing)} in --tasks ({','.join(tasks)})")


def selection_score(metrics: dict[str, float]) -> float:
    """What picks the best checkpoint: the mean of the trained tasks' scores on [0, 1] (with the three course
    tasks, the course's overall score)."""
    scores = [REGISTRY[name].score(value) for name, value in metrics.items() if name in REGISTRY]
    return sum(scores) / len(scores)


# ---- task lists of the command line ----

def _split_option(text: str, option: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise ValueError(f"{option} {text!r}: expected a comma-separated list without empty entries")
    return items


def parse_task_order(text: str, tasks: Sequence[str], option: str = "--task-order") -> tuple[str, ...]:
    """'sst,para,sts' -> ('sst', 'para', 'sts'), for the flag `option`; repeats are allowed (a --task-order may
    name a task twice: training/schedules.py)."""
    order = tuple(_split_option(text, option))
    unknown = [task for task in order if task not in tasks]
    if unknown:
        raise ValueError(f"{option} {text!r}: unknown task {unknown[0]!r}; known tasks: {', '.join(tasks)}")
    return order


def parse_task_weights(text: str, tasks: Sequence[str], option: str = "--task-weights",
                       trained: Sequence[str] | None = None) -> dict[str, float]:
    """'para=2,sst=0.5' -> {'para': 2.0, 'sst': 0.5}, for the flag `option`. Tasks left out weigh 1. trained: the
    tasks a run trains (default: all of `tasks`), of which at least one must weigh more than 0."""
    weights: dict[str, float] = {}
    for item in _split_option(text, option):
        task, equals, value = (part.strip() for part in item.partition("="))
        if not equals or not task or not value:
            raise ValueError(f"{option} {text!r}: {item!r} is not of the form task=weight")
        if task not in tasks:
            raise ValueError(f"{option} {text!r}: unknown task {task!r}; known tasks: {', '.join(tasks)}")
        if task in weights:
            raise ValueError(f"{option} {text!r}: task {task!r} is given twice")
        try:
            weight = float(value)
        except ValueError:
            raise ValueError(f"{option} {text!r}: weight {value!r} of {task!r} is not a number") from None
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"{option} {text!r}: weight of {task!r} must be a finite number >= 0, got {value}")
        weights[task] = weight
    if not any(weights.get(task, 1.0) for task in (tasks if trained is None else trained)):
        raise ValueError(f"{option} {text!r}: every trained task weighs 0, so nothing would be trained; at least one "
                         f"task needs a positive weight")
    return weights


def task_weights_text(weights: dict[str, float]) -> str:
    """{'para': 0.8} -> 'para=0.8': weights as --task-weights takes them (parse_task_weights reads them back)."""
    return ",".join(f"{task}={weight:g}" for task, weight in weights.items())


def trained_task_weights(text: str, trained: Sequence[str], option: str) -> dict[str, float]:
    """--task-weights or --loss-weights of a run that trains `trained`: {} for no text; a task it names must be one
    of those trained, and one of those must weigh more than 0."""
    values = parse_task_weights(text, TASK_NAMES, option=option, trained=trained) if text else {}
    untrained = [task for task in values if task not in trained]
    if untrained:
        raise ValueError(f"{option} {text!r}: {', '.join(untrained)} is not trained (--tasks {','.join(trained)})")
    return values
