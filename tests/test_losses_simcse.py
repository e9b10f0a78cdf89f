"""SimCSE losses against the formulas of Chen's CS224N report eq. 1 / Mohammed and Sabane's CS224N report section 3.1, written as plain loops."""
import math

import pytest
import torch

from minbert.losses.simcse import quora_simcse_loss, simcse_loss
from tests.conftest import cos


def infonce_terms(anchors, positives, negatives=None, tau=0.05):
    """l_i = -log e^{sim(h_i,h_i+)/tau} / sum_j (e^{sim(h_i,h_j+)/tau} [+ e^{sim(h_i,h_j-)/tau}])."""
    terms = []
    for i, h in enumerate(anchors):
        denominator = sum(math.exp(cos(h, p) / tau) for p in positives)
        if negatives is not None:
            denominator += sum(math.exp(cos(h, n) / tau) for n in negatives)
        terms.append(-math.log(math.exp(cos(h, positives[i]) / tau) / denominator))
    return terms


def vector(degrees, norm):
    return [norm * math.cos(math.radians(degrees)), norm * math.sin(math.radians(degrees))]


# Close angles keep every term of order 1 at tau = 0.05; the norms differ to exercise the normalisation.
ANCHORS = [vector(0, 1.0), vector(20, 2.0), vector(40, 0.5)]
POSITIVES = [vector(5, 1.5), vector(28, 1.0), vector(33, 3.0)]
NEGATIVES = [vector(10, 1.0), vector(15, 2.0), vector(45, 1.0)]


def t(rows, requires_grad=False):
    return torch.tensor(rows, dtype=torch.float64, requires_grad=requires_grad)


def test_unsupervised_matches_loop_formula_with_default_temperature():
    expected = sum(infonce_terms(ANCHORS, POSITIVES, tau=0.05)) / 3
    got = simcse_loss(t(ANCHORS), t(POSITIVES))
    assert got.item() == pytest.approx(expected, rel=1e-5)


def test_hard_negatives_join_every_denominator():
    expected = sum(infonce_terms(ANCHORS, POSITIVES, NEGATIVES, tau=0.1)) / 3
    got = simcse_loss(t(ANCHORS), t(POSITIVES), t(NEGATIVES), temperature=0.1)
    assert got.item() == pytest.approx(expected, rel=1e-5)


def test_quora_non_paraphrase_terms_are_subtracted():
    is_paraphrase = torch.tensor([1, 0, 1])
    terms = infonce_terms(ANCHORS, POSITIVES, tau=0.05)
    expected = (terms[0] - terms[1] + terms[2]) / 3
    got = quora_simcse_loss(t(ANCHORS), t(POSITIVES), is_paraphrase)
    assert got.item() == pytest.approx(expected, rel=1e-5)


def test_quora_without_negative_pairs_drops_them_from_the_batch():
    is_paraphrase = torch.tensor([True, False, True])
    kept = [0, 2]
    terms = infonce_terms([ANCHORS[i] for i in kept], [POSITIVES[i] for i in kept], tau=0.05)
    got = quora_simcse_loss(t(ANCHORS), t(POSITIVES), is_paraphrase,
                            use_negative_pairs=False)
    assert got.item() == pytest.approx(sum(terms) / 2, rel=1e-5)


def test_quora_gradient_step_pushes_the_non_paraphrase_pair_apart():
    first, second = t(ANCHORS), t(POSITIVES, requires_grad=True)
    quora_simcse_loss(first, second, torch.tensor([1, 0, 1])).backward()
    with torch.no_grad():
        stepped = second - 0.01 * second.grad
    assert cos(ANCHORS[1], stepped[1].tolist()) < cos(ANCHORS[1], POSITIVES[1])


def test_quora_ablation_batch_without_paraphrases_gives_differentiable_zero():
    first = t(ANCHORS, requires_grad=True)
    loss = quora_simcse_loss(first, t(POSITIVES), torch.tensor([0, 0, 0]), use_negative_pairs=False)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.equal(first.grad, torch.zeros_like(first))
