"""Multiple negatives ranking loss against Henderson et al.'s J(x, y) (Mohammed and Sabane's CS224N report section 3.2), as loops."""
import math

import pytest
import torch

from minbert.losses.mnrl import multiple_negatives_ranking_loss
from tests.conftest import cos


def per_anchor_terms(xs, ys, extra_candidates=(), scale=20.0):
    """-[S(x_i, y_i) - log sum_j e^{S(x_i, y_j)}] with S = scale * cos; hard negatives are extra y_j."""
    candidates = list(ys) + list(extra_candidates)
    return [-(scale * cos(x, ys[i]) - math.log(sum(math.exp(scale * cos(x, y)) for y in candidates)))
            for i, x in enumerate(xs)]


# Nearby directions keep every term of order 1 at scale 20.
XS = [[1.0, 0.2, 0.1], [0.9, 0.3, 0.2]]
YS = [[1.0, 0.25, 0.05], [0.95, 0.2, 0.25]]
HARD = [[0.9, 0.35, 0.1], [1.0, 0.1, 0.3]]


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_default_scale_20_matches_loop_formula():
    expected = sum(per_anchor_terms(XS, YS)) / 2
    assert multiple_negatives_ranking_loss(t(XS), t(YS)).item() == pytest.approx(expected, rel=1e-5)


def test_hard_negatives_are_candidates_for_every_anchor():
    expected = sum(per_anchor_terms(XS, YS, HARD, scale=5.0)) / 2
    got = multiple_negatives_ranking_loss(t(XS), t(YS), t(HARD), scale=5.0)
    assert got.item() == pytest.approx(expected, rel=1e-5)


def test_reduction_none_gives_each_anchor_its_term():
    expected = per_anchor_terms(XS, YS, scale=3.0)
    got = multiple_negatives_ranking_loss(t(XS), t(YS), scale=3.0, reduction="none")
    assert got.tolist() == pytest.approx(expected, rel=1e-5)
