"""Gradient caching gives the parameter gradients of the plain (uncached) backward, dropout included."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from minbert.losses.consert import nt_xent_loss
from minbert.losses.contrastive_tension import contrastive_tension_loss
from minbert.training.grad_cache import grad_cache_backward


def tiny_encoder(dropout=0.5):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 8), nn.Dropout(dropout), nn.Tanh(), nn.Linear(8, 4))


INPUTS = torch.randn(6, 3, generator=torch.Generator().manual_seed(1))
CHUNKS = list(INPUTS.split(2))


def plain_backward_gradients(models, chunk_groups, loss_fn, seed):
    """Embed every chunk with a graph, in the order grad cache does, and backward once."""
    torch.manual_seed(seed)
    embeddings = [torch.cat([model(chunk) for chunk in chunks]) for model, chunks in zip(models, chunk_groups)]
    loss = loss_fn(*embeddings)
    loss.backward()
    return loss.detach(), gradients(list(dict.fromkeys(models)))  # each distinct model once


def gradients(models):
    grads = [p.grad.clone() for model in models for p in model.parameters()]
    for model in models:
        model.zero_grad()
    return grads


def assert_same(grads_a, grads_b):
    for a, b in zip(grads_a, grads_b, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_same_gradients_as_plain_backward_with_dropout():
    model = tiny_encoder()
    expected_loss, expected = plain_backward_gradients([model, model], [CHUNKS, CHUNKS], nt_xent_loss, seed=7)
    torch.manual_seed(7)
    loss = grad_cache_backward(model, [CHUNKS, CHUNKS], nt_xent_loss)
    assert loss.item() == pytest.approx(expected_loss.item(), abs=1e-6)
    assert_same(gradients([model]), expected)


def test_dropout_really_changes_the_gradients_so_the_replay_matters():
    model = tiny_encoder()
    _, seed_7 = plain_backward_gradients([model, model], [CHUNKS, CHUNKS], nt_xent_loss, seed=7)
    _, seed_8 = plain_backward_gradients([model, model], [CHUNKS, CHUNKS], nt_xent_loss, seed=8)
    assert not all(torch.allclose(a, b, atol=1e-5) for a, b in zip(seed_7, seed_8))


def test_without_dropout_matches_one_full_batch_forward():
    model = tiny_encoder(dropout=0.0)
    positives = INPUTS.flip(0)
    nt_xent_loss(model(INPUTS), model(positives)).backward()
    expected = gradients([model])
    grad_cache_backward(model, [CHUNKS, list(positives.split(3))], nt_xent_loss)
    assert_same(gradients([model]), expected)


def test_one_embed_fn_per_group_for_two_models():
    model1, model2 = tiny_encoder(), tiny_encoder()
    labels = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    loss_fn = lambda a, b: contrastive_tension_loss(a, b, labels)
    _, expected = plain_backward_gradients([model1, model2], [CHUNKS, CHUNKS], loss_fn, seed=3)
    torch.manual_seed(3)
    grad_cache_backward([model1, model2], [CHUNKS, CHUNKS], loss_fn)
    assert_same(gradients([model1, model2]), expected)


def test_random_loss_and_the_random_stream_afterwards_match_a_plain_step():
    model = tiny_encoder()
    def loss_with_dropout(a, b):  # the loss itself draws random numbers too
        return nt_xent_loss(F.dropout(a, 0.3), b)
    _, expected = plain_backward_gradients([model, model], [CHUNKS, CHUNKS], loss_with_dropout, seed=5)
    after_plain = torch.rand(3)
    torch.manual_seed(5)
    grad_cache_backward(model, [CHUNKS, CHUNKS], loss_with_dropout)
    assert_same(gradients([model]), expected)
    assert torch.equal(torch.rand(3), after_plain)
