"""NT-Xent against ConSERT's L_{i,j} (ConSERT (Yan et al.)) averaged over the 2N views, written as loops."""
import math

import pytest
import torch

from minbert.losses.consert import nt_xent_loss
from tests.conftest import cos


def nt_xent_by_loops(view_a, view_b, tau):
    views = list(view_a) + list(view_b)
    n = len(view_a)
    total = 0.0
    for i, r in enumerate(views):
        j = (i + n) % (2 * n)
        denominator = sum(math.exp(cos(r, views[k]) / tau) for k in range(2 * n) if k != i)
        total += -math.log(math.exp(cos(r, views[j]) / tau) / denominator)
    return total / (2 * n)


# Nearby directions keep every term of order 1 at tau = 0.1.
A = [[1.0, 0.5, -0.2], [0.8, 0.6, 0.1]]
B = [[0.9, 0.6, -0.1], [0.7, 0.8, 0.0]]


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_default_temperature_0_1_matches_loop_formula():
    assert nt_xent_loss(t(A), t(B)).item() == pytest.approx(nt_xent_by_loops(A, B, 0.1), rel=1e-5)


def test_three_sentences_other_temperature():
    a = A + [[0.9, 0.4, 0.3]]
    b = B + [[1.0, 0.3, 0.2]]
    got = nt_xent_loss(t(a), t(b), temperature=0.5)
    assert got.item() == pytest.approx(nt_xent_by_loops(a, b, 0.5), rel=1e-5)
