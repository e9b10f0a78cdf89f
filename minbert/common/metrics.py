"""Task metrics and the scores that combine them.

SST and Quora are scored by accuracy, STS by Pearson r. The course leaderboard's overall score
puts r on the accuracies' [0, 1] scale first: mean(SST acc, Quora acc, (r + 1) / 2). Mohammed and Sabane's
CS224N report gives the plain mean of the three instead, so both are here.
"""
from collections.abc import Sequence

import numpy as np
import torch
from scipy import stats

ArrayLike = Sequence[float] | np.ndarray | torch.Tensor


def _as_pair(predictions: ArrayLike, labels: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    predictions, labels = (
        x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x) for x in (predictions, labels)
    )
    predictions, labels = predictions.reshape(-1), labels.reshape(-1)
    if len(predictions) != len(labels):
        raise ValueError(f"{len(predictions)} predictions but {len(labels)} labels")
    if len(predictions) == 0:
        raise ValueError("no predictions to score")
    return predictions, labels


def accuracy(predictions: ArrayLike, labels: ArrayLike) -> float:
    predictions, labels = _as_pair(predictions, labels)
    return float(np.mean(predictions == labels))


def pearson(predictions: ArrayLike, labels: ArrayLike) -> float:
    """Pearson r; nan (with scipy's warning) when either side is constant."""
    return float(stats.pearsonr(*_as_pair(predictions, labels)).statistic)


def spearman(predictions: ArrayLike, labels: ArrayLike) -> float:
    return float(stats.spearmanr(*_as_pair(predictions, labels)).statistic)


def overall_score(sst_accuracy: float, paraphrase_accuracy: float, sts_pearson: float) -> float:
    """The course leaderboard's score: mean(SST acc, Quora acc, (STS r + 1) / 2)."""
    return (sst_accuracy + paraphrase_accuracy + (sts_pearson + 1) / 2) / 3


def mean_score(sst_accuracy: float, paraphrase_accuracy: float, sts_pearson: float) -> float:
    """The plain mean of the three metrics (Mohammed and Sabane's CS224N report's "Average")."""
    return (sst_accuracy + paraphrase_accuracy + sts_pearson) / 3


def confusion_matrix(gold: Sequence[int], predicted: Sequence[int], classes: int) -> np.ndarray:
    """counts[g, p]: the examples of gold class g predicted as p."""
    counts = np.zeros((classes, classes), dtype=int)
    np.add.at(counts, (np.asarray(gold, dtype=int), np.asarray(predicted, dtype=int)), 1)
    return counts


def row_normalised(counts: np.ndarray) -> np.ndarray:
    """Each gold class's row as fractions of that class (its recall on the diagonal); empty rows stay 0."""
    totals = counts.sum(1, keepdims=True)
    return np.divide(counts, totals, out=np.zeros(counts.shape), where=totals > 0)
