"""The numbers behind `python -m evaluation.analyze`: these functions compute, evaluation/plots.py draws.

    layers      STS Spearman of every layer's embeddings: Contrastive Tension (Carlsson et al., 2021),
                Figures 1, 2 and 5; the layer x pooling survey of SG-BERT (Self-Guided Contrastive
                Learning for BERT Sentence Representations, Kim, Yoo and Lee, 2021).
    spread      the cosine similarity of STS training pairs per gold-score bucket: Contrastive Tension,
                Figure 3; its lowest bucket is the M of multitask_classifier.py --sts-target cosine-range.
    errors      a fine-tuned run's dev errors per task, and whether they fall on the same sentences.
    curves      a run's metrics.jsonl as series over optimizer steps.
Alignment and uniformity (Wang and Isola, 2020; plotted as in SimCSE, Gao, Yao and Chen, 2021) are
evaluation/sts_benchmark.py's.
"""
import json
import logging
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from scipy.stats import ConstantInputWarning

from common.errors import DataError
from common.metrics import accuracy, pearson, spearman
from data.readers import PairExample, SentenceExample
from evaluation.sts_benchmark import distinct_sentences
from heads.similarity import LOWEST_BUCKET_WIDTH, MAX_SCORE
from models import BertModel, Tokenizer, embed_sentences_every_layer
from tasks import Task

log = logging.getLogger(__name__)


def short_names(specs: Sequence[str]) -> list[str]:
    """Labels for encoders and runs: a packaged name or hub id as given; for a folder, as many of its last path
    parts as make the labels distinct, and never a bare best/ or last/, which says nothing on its own."""
    parts = [Path(spec).expanduser().resolve().parts if Path(spec).expanduser().exists() else (spec,)
             for spec in specs]
    for depth in range(1, max(len(p) for p in parts) + 1):
        labels = ["/".join(p[-(depth + (p[-1] in ("best", "last") and len(p) > 1)):]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return list(specs)


# ---- layers ----

def layer_cosines(encoder: BertModel, tokenizer: Tokenizer, pairs: list[PairExample], poolings: Sequence[str],
                  max_length: int = 128, batch_size: int = 64) -> dict[str, torch.Tensor]:
    """pooling -> [layers + 1, pairs]: the cosine similarity of each pair's two sentences at every layer."""
    sentences, first, second = distinct_sentences(pairs)
    embeddings = embed_sentences_every_layer(encoder, tokenizer, sentences, tuple(poolings), batch_size, max_length)
    return {pooling: F.cosine_similarity(e[:, first], e[:, second], dim=-1) for pooling, e in embeddings.items()}


def spearman_x100(cosines: torch.Tensor, gold: Sequence[float]) -> float:
    """Spearman x 100; nan, quietly, where the cosines are all equal (layer 0's [CLS] vector is the same
    for every sentence: the [CLS] token at position 0)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConstantInputWarning)
        return 100 * spearman(cosines, gold)


def layer_spearman(encoder: BertModel, tokenizer: Tokenizer, sets: dict[str, list[PairExample]],
                   poolings: Sequence[str], max_length: int = 128,
                   batch_size: int = 64) -> dict[str, list[dict[str, float]]]:
    """pooling -> one row per layer (0 = embeddings): Spearman x 100 of cosine against gold per set, and "mean"
    (over the sets)."""
    rows = {pooling: [{} for _ in range(encoder.config.num_hidden_layers + 1)] for pooling in poolings}
    for name, pairs in sets.items():
        gold = [p.label for p in pairs]
        for pooling, cosines in layer_cosines(encoder, tokenizer, pairs, poolings, max_length, batch_size).items():
            for layer, layer_cosine in enumerate(cosines):
                rows[pooling][layer][name] = spearman_x100(layer_cosine, gold)
    for layer_rows in rows.values():
        for row in layer_rows:
            row["mean"] = sum(row[name] for name in sets) / len(sets)
    return rows


# ---- spread ----

BUCKET_WIDTH = LOWEST_BUCKET_WIDTH  # 0.25: 20 buckets over [0, 5]
NUM_BUCKETS = round(MAX_SCORE / BUCKET_WIDTH)


def bucket_index(gold: torch.Tensor, width: float = BUCKET_WIDTH) -> torch.Tensor:
    """Bucket 0 holds gold scores in [0, w], bucket k > 0 holds (k w, (k + 1) w]: bucket 0 is the
    gold <= w of lowest_bucket_mean_cosine, so its mean is M."""
    return (torch.ceil(gold.double() / width) - 1).clamp(0, round(MAX_SCORE / width) - 1).long()


def bucket_statistics(cosines: torch.Tensor, gold: torch.Tensor, width: float = BUCKET_WIDTH) -> list[dict]:
    """Per bucket: its gold range, the number of pairs, the mean and the (population) standard deviation of
    their cosines; mean and std are None for an empty bucket."""
    index, cosines = bucket_index(gold, width), cosines.double()
    statistics = []
    for bucket in range(round(MAX_SCORE / width)):
        inside = cosines[index == bucket]
        statistics.append({"low": bucket * width, "high": (bucket + 1) * width, "count": len(inside),
                           "mean": inside.mean().item() if len(inside) else None,
                           "std": inside.std(correction=0).item() if len(inside) else None})
    return statistics


# ---- errors ----

def confusion_matrix(gold: Sequence[int], predicted: Sequence[int], classes: int) -> np.ndarray:
    """counts[g, p]: the examples of gold class g predicted as p."""
    counts = np.zeros((classes, classes), dtype=int)
    np.add.at(counts, (np.asarray(gold, dtype=int), np.asarray(predicted, dtype=int)), 1)
    return counts


def row_normalised(counts: np.ndarray) -> np.ndarray:
    """Each gold class's row as fractions of that class (its recall on the diagonal); empty rows stay 0."""
    totals = counts.sum(1, keepdims=True)
    return np.divide(counts, totals, out=np.zeros(counts.shape), where=totals > 0)


def classification_errors(task: Task, records: list[SentenceExample], probabilities: torch.Tensor) -> dict:
    """Accuracy, the confusion matrix (counts and row-normalised), and the misclassified sentences, the
    most confident first (confidence: the predicted class's probability)."""
    predicted = task.hard(probabilities).tolist()
    gold = [r.label for r in records]
    counts = confusion_matrix(gold, predicted, probabilities.shape[1])
    misclassified = [{"id": r.id, "sentence": r.sentence, "gold": g, "predicted": p,
                      "confidence": probabilities[i, p].item()}
                     for i, (r, g, p) in enumerate(zip(records, gold, predicted)) if g != p]
    return {"accuracy": accuracy(predicted, gold), "confusion": counts.tolist(),
            "confusion_normalised": row_normalised(counts).tolist(),
            "misclassified": sorted(misclassified, key=lambda e: -e["confidence"]),
            "wrong": [g != p for g, p in zip(gold, predicted)]}


def paraphrase_errors(task: Task, records: list[PairExample], p_paraphrase: torch.Tensor) -> dict:
    """Accuracy, the false positives and false negatives, the most confident first (confidence: the
    probability given to the wrong answer)."""
    predicted = task.hard(p_paraphrase).tolist()
    gold = [int(r.label) for r in records]
    errors = {"false_positives": [], "false_negatives": []}
    for r, g, p, probability in zip(records, gold, predicted, p_paraphrase.tolist()):
        if g != p:
            errors["false_positives" if p else "false_negatives"].append(
                {"id": r.id, "sentence1": r.sentence1, "sentence2": r.sentence2, "gold": g,
                 "p_paraphrase": probability, "confidence": probability if p else 1 - probability})
    return {"accuracy": accuracy(predicted, gold),
            **{kind: sorted(rows, key=lambda e: -e["confidence"]) for kind, rows in errors.items()},
            "wrong": [g != p for g, p in zip(gold, predicted)]}


def similarity_errors(records: list[PairExample], scores: torch.Tensor, threshold: float) -> dict:
    """Pearson r, and every pair with its absolute error, the largest first; a pair counts as wrong (for
    the cross-task comparison) when its error exceeds `threshold`."""
    gold = [r.label for r in records]
    pairs = [{"id": r.id, "sentence1": r.sentence1, "sentence2": r.sentence2, "gold": g, "predicted": s,
              "error": abs(s - g)} for r, g, s in zip(records, gold, scores.tolist())]
    return {"pearson": pearson(scores, gold), "largest_errors": sorted(pairs, key=lambda e: -e["error"]),
            "wrong": [e["error"] > threshold for e in pairs]}


def normalise_sentence(text: str) -> str:
    """The same sentence in two files may differ in case and spacing."""
    return " ".join(text.lower().split())


def sentence_errors(records: list, wrong: Sequence[bool]) -> dict[str, bool]:
    """Normalised sentence -> whether any dev example holding it (either side of a pair) is wrong."""
    errors = {}
    for record, is_wrong in zip(records, wrong):
        texts = [record.sentence] if isinstance(record, SentenceExample) else [record.sentence1, record.sentence2]
        for text in texts:
            key = normalise_sentence(text)
            errors[key] = errors.get(key, False) or bool(is_wrong)
    return errors


def cross_task_overlap(errors: dict[str, dict[str, bool]]) -> list[dict]:
    """For every two tasks: the sentences both dev sets hold, and how many of them each task gets wrong,
    beside each task's error rate over all its sentences (what coinciding errors would be compared with)."""
    rows = []
    for a, b in combinations(errors, 2):
        shared = errors[a].keys() & errors[b].keys()
        rows.append({"tasks": f"{a} & {b}", "shared": len(shared),
                     "both_wrong": sum(errors[a][s] and errors[b][s] for s in shared),
                     f"only_{a}_wrong": sum(errors[a][s] and not errors[b][s] for s in shared),
                     f"only_{b}_wrong": sum(errors[b][s] and not errors[a][s] for s in shared),
                     "neither_wrong": sum(not errors[a][s] and not errors[b][s] for s in shared),
                     f"{a}_error_rate": sum(errors[a].values()) / len(errors[a]),
                     f"{b}_error_rate": sum(errors[b].values()) / len(errors[b])})
    return rows


# ---- curves ----

@dataclass
class RunCurves:
    """A run's metrics.jsonl as series of (step, value), each sorted by step."""
    train_loss: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # task -> series
    dev: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # sst, para, sts, overall, mean -> series
    train_loss_from: str = "train lines"  # or "eval lines" (older runs: the mean loss of the epoch so far)
    train_lines: int = 0
    eval_lines: int = 0


def read_metrics(path: Path) -> tuple[list[dict], list[dict]]:
    """(train lines, eval lines) of a metrics.jsonl. "event": "train" lines are written every --log-every
    steps; evaluation lines carry "event": "eval" or, in older runs, no event. A line that is not a JSON
    object with a step (a run killed while writing leaves half a line) is skipped and reported."""
    if not path.is_file():
        raise DataError(f"{path}: file not found" if not path.exists() else f"{path}: not a file")
    train, evals, skipped = [], [], []
    for number, text in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
        except json.JSONDecodeError:
            line = None
        if not isinstance(line, dict) or not isinstance(line.get("step"), int):
            skipped.append(number)
        elif line.get("event") == "train" and isinstance(line.get("loss"), dict):
            train.append(line)
        elif line.get("event", "eval") == "eval" and isinstance(line.get("dev"), dict):
            evals.append(line)
        else:
            skipped.append(number)
    if skipped:
        log.warning("%s: skipped %d line(s) that are neither train nor eval lines: %s", path, len(skipped),
                    ", ".join(map(str, skipped[:5])) + (" ..." if len(skipped) > 5 else ""))
    if not train and not evals:
        raise DataError(f"{path}: no train or eval lines (one JSON object a line, with a step)")
    return train, evals


def _series(lines: list[dict], key: str) -> dict[str, list[tuple[int, float]]]:
    # A resumed run repeats the steps after its last checkpoint: the later line of a step wins.
    by_metric: dict[str, dict[int, float]] = {}
    for line in lines:
        for metric, value in line[key].items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                by_metric.setdefault(metric, {})[line["step"]] = float(value)
    return {metric: sorted(values.items()) for metric, values in by_metric.items()}


def run_curves(train: list[dict], evals: list[dict]) -> RunCurves:
    """Train loss per task from the train lines, or from the eval lines' train_loss when there are none;
    dev metrics from the eval lines."""
    from_train = bool(train)
    return RunCurves(train_loss=_series(train, "loss") if from_train else
                     _series([e for e in evals if isinstance(e.get("train_loss"), dict)], "train_loss"),
                     dev=_series(evals, "dev"), train_loss_from="train lines" if from_train else "eval lines",
                     train_lines=len(train), eval_lines=len(evals))
