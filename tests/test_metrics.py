import numpy as np
import pandas as pd
import pytest
import torch
import sklearn.metrics
from sklearn.metrics import accuracy_score

from minbert.common.metrics import (
    accuracy, confusion_matrix, mean_score, overall_score, pearson, row_normalised, spearman)

rng = np.random.default_rng(0)
PREDICTED = rng.normal(size=50)
GOLD = PREDICTED + rng.normal(scale=0.8, size=50)


def test_accuracy_matches_sklearn_and_accepts_tensors():
    labels = rng.integers(0, 5, size=40)
    predictions = np.where(rng.random(40) < 0.6, labels, (labels + 1) % 5)
    assert accuracy(predictions, labels) == pytest.approx(accuracy_score(labels, predictions))
    assert accuracy(torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 0, 0])) == 0.5


def test_pearson_matches_numpy_corrcoef():
    assert pearson(PREDICTED, GOLD) == pytest.approx(np.corrcoef(PREDICTED, GOLD)[0, 1])
    assert pearson([1.0, 2.0, 3.0], [2.0, 4.0, 6.5]) == pytest.approx(np.corrcoef([1, 2, 3], [2, 4, 6.5])[0, 1])
    assert pearson(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([3.0, 2.0, 1.0])) == pytest.approx(-1.0)


def test_spearman_is_pearson_of_the_ranks():
    ranks = pd.Series(PREDICTED).rank(), pd.Series(GOLD).rank()
    assert spearman(PREDICTED, GOLD) == pytest.approx(np.corrcoef(*ranks)[0, 1])
    assert spearman([1, 2, 3, 4], [1, 8, 27, 64]) == pytest.approx(1.0)  # monotone, not linear


def test_overall_score_puts_pearson_on_a_zero_to_one_scale():
    # (0.5 + 0.8 + (0.6 + 1) / 2) / 3 = (0.5 + 0.8 + 0.8) / 3 = 0.7
    assert overall_score(0.5, 0.8, 0.6) == pytest.approx(0.7)
    assert overall_score(1.0, 1.0, -1.0) == pytest.approx(2 / 3)
    assert mean_score(0.5, 0.8, 0.6) == pytest.approx(1.9 / 3)


def test_mismatched_or_empty_inputs_are_refused():
    with pytest.raises(ValueError, match="3 predictions but 2 labels"):
        accuracy([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="no predictions"):
        pearson([], [])


def test_confusion_matrix_matches_sklearn():
    rng = np.random.default_rng(0)
    gold, predicted = rng.integers(0, 5, 60), rng.integers(0, 5, 60)
    gold[gold == 4] = 3  # a class with no gold example: its row stays zero
    expected = sklearn.metrics.confusion_matrix(gold, predicted, labels=range(5))
    assert (confusion_matrix(gold, predicted, 5) == expected).all()
    with np.errstate(invalid="ignore"):
        expected = np.nan_to_num(sklearn.metrics.confusion_matrix(gold, predicted, labels=range(5), normalize="true"))
    assert np.allclose(row_normalised(confusion_matrix(gold, predicted, 5)), expected)
