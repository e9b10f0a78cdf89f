"""Contrastive Tension (Carlsson et al., eq. 1 and Appendix A.1): loss by hand, batch construction by inspection."""
import math

import pytest
import torch

from minbert.data.contrastive import contrastive_tension_batch
from minbert.losses.contrastive_tension import contrastive_tension_loss


def sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z))


def test_loss_is_mean_logistic_loss_on_dot_products():
    first = [[1.0, 2.0], [0.5, -1.0], [-1.0, 0.0]]
    second = [[0.5, 0.25], [2.0, 1.0], [-3.0, 1.0]]
    labels = [1.0, 0.0, 0.0]
    expected = 0.0
    for u, v, label in zip(first, second, labels):
        z = u[0] * v[0] + u[1] * v[1]
        expected += -math.log(sigmoid(z)) if label == 1.0 else -math.log(1.0 - sigmoid(z))
    got = contrastive_tension_loss(torch.tensor(first), torch.tensor(second), torch.tensor(labels))
    assert got.item() == pytest.approx(expected / 3, rel=1e-5)


SENTENCES = [f"sentence {i}" for i in range(20)]


def test_batch_has_one_positive_and_k_negatives_per_anchor():
    first, second, labels = contrastive_tension_batch(SENTENCES, batch_size=16,
                                                      generator=torch.Generator().manual_seed(0))
    assert first.shape == second.shape == labels.shape == (16,)
    for group in (slice(0, 8), slice(8, 16)):
        anchor = first[group][0].item()
        assert (first[group] == anchor).all()  # model 1 always sees the anchor sentence
        assert labels[group].tolist() == [1.0] + [0.0] * 7
        assert second[group][0].item() == anchor  # the positive pair is (s, s)
        assert all(SENTENCES[j] != SENTENCES[anchor] for j in second[group][1:].tolist())


def test_duplicate_texts_are_never_negatives():
    sentences = ["same", "same", "other"]
    first, second, labels = contrastive_tension_batch(sentences, batch_size=8, negatives_per_positive=3,
                                                      generator=torch.Generator().manual_seed(1))
    for f, s, label in zip(first.tolist(), second.tolist(), labels.tolist()):
        assert (sentences[f] == sentences[s]) == (label == 1.0)


def test_batch_is_random_but_reproducible():
    def batch(seed):
        return contrastive_tension_batch(SENTENCES, generator=torch.Generator().manual_seed(seed))[1].tolist()
    assert batch(3) == batch(3)
    assert batch(3) != batch(4)


def test_batch_size_must_be_a_multiple_of_k_plus_one():
    with pytest.raises(ValueError):
        contrastive_tension_batch(SENTENCES, batch_size=12)


def test_corpus_without_a_different_sentence_raises():
    with pytest.raises(ValueError):
        contrastive_tension_batch(["only", "only"], batch_size=8)
