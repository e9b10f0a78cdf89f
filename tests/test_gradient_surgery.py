from importlib.util import find_spec

import pytest
import torch
from torch import nn
from torchjd.aggregation import PCGrad

from minbert.training.gradient_surgery import surgery_backward

# UPGrad solves a quadratic program with torchjd's optional extra: torchjd[quadprog-projector].
needs_quadprog = pytest.mark.skipif(find_spec("quadprog") is None or find_spec("qpsolvers") is None,
                                    reason='UPGrad needs pip install "torchjd[quadprog-projector]"')


def linear_losses(p: torch.Tensor, gradients: list[list[float]]) -> list[torch.Tensor]:
    """Losses g_i . p, whose gradient with respect to p is exactly g_i."""
    return [torch.tensor(g) @ p for g in gradients]


def test_torchjd_pcgrad_returns_the_sum_of_the_projected_gradients():
    # g1 = [1, 0], g2 = [-1, 1] conflict (g1.g2 = -1). By hand (Yu et al. 2020, Algorithm 1):
    #   g1' = g1 - (g1.g2 / |g2|^2) g2 = [1, 0] + 1/2 [-1, 1] = [0.5, 0.5]
    #   g2' = g2 - (g2.g1 / |g1|^2) g1 = [-1, 1] + 1 [1, 0]   = [0, 1]
    # torchjd returns g1' + g2' = [0.5, 1.5]: the sum, not the mean.
    torch.testing.assert_close(PCGrad()(torch.tensor([[1.0, 0.0], [-1.0, 1.0]])), torch.tensor([0.5, 1.5]))


def test_pcgrad_on_conflicting_gradients_gives_the_mean_of_the_projections():
    p = torch.zeros(2, requires_grad=True)
    surgery_backward(linear_losses(p, [[1.0, 0.0], [-1.0, 1.0]]), [p], [[], []], method="pcgrad")
    # mean of g1' = [0.5, 0.5] and g2' = [0, 1] (see the test above)
    torch.testing.assert_close(p.grad, torch.tensor([0.25, 0.75]))


@pytest.mark.parametrize("method", ["pcgrad", pytest.param("upgrad", marks=needs_quadprog)])
def test_without_conflict_the_shared_gradient_is_that_of_the_average_loss(method):
    p = torch.zeros(2, requires_grad=True)
    surgery_backward(linear_losses(p, [[1.0, 2.0], [3.0, 0.5]]), [p], [[], []], method=method)
    torch.testing.assert_close(p.grad, torch.tensor([2.0, 1.25]))  # ([1, 2] + [3, 0.5]) / 2


@needs_quadprog
def test_upgrad_resolves_a_conflict_that_the_mean_keeps():
    g1, g2 = torch.tensor([1.0, 0.0]), torch.tensor([-2.0, 0.2])
    assert (g1 + g2) / 2 @ g1 < 0  # the average loss would increase task 1's loss
    p = torch.zeros(2, requires_grad=True)
    surgery_backward(linear_losses(p, [g1.tolist(), g2.tolist()]), [p], [[], []], method="upgrad")
    assert p.grad @ g1 >= -1e-6 and p.grad @ g2 >= -1e-6  # UPGrad's update conflicts with neither task


class TwoTaskModel(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.encoder = nn.Linear(3, 4)
        self.head1 = nn.Linear(4, 1)
        self.head2 = nn.Linear(4, 1)

    def losses(self, x1: torch.Tensor, x2: torch.Tensor) -> list[torch.Tensor]:
        return [self.head1(self.encoder(x1)).square().mean(), -self.head2(self.encoder(x2)).mean()]


def flat_grad(loss: torch.Tensor, params: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params, retain_graph=True)])


def test_shared_params_get_pcgrad_and_each_head_only_its_own_gradient():
    model = TwoTaskModel()
    x1, x2 = torch.randn(5, 3), torch.randn(5, 3)
    shared = list(model.encoder.parameters())
    heads = [list(model.head1.parameters()), list(model.head2.parameters())]

    # Independent truth: each task's gradient by plain autograd, projected by hand.
    losses = model.losses(x1, x2)
    g1, g2 = flat_grad(losses[0], shared), flat_grad(losses[1], shared)
    if g1 @ g2 >= 0:  # make sure this case really conflicts
        g2 = -g2
        losses[1] = -losses[1]
    expected_shared = ((g1 - (g1 @ g2) / (g2 @ g2) * g2) + (g2 - (g2 @ g1) / (g1 @ g1) * g1)) / 2
    expected_heads = [[g / 2 for g in torch.autograd.grad(loss, params, retain_graph=True)]
                      for loss, params in zip(losses, heads)]

    surgery_backward(losses, shared, heads, method="pcgrad")

    torch.testing.assert_close(torch.cat([p.grad.reshape(-1) for p in shared]), expected_shared)
    for params, expected in zip(heads, expected_heads):
        for param, grad in zip(params, expected):
            torch.testing.assert_close(param.grad, grad)


def test_a_parameter_shared_by_two_heads_gets_the_sum_of_both_and_frozen_params_are_skipped():
    shared, frozen = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=False)
    pair_layer = torch.tensor([2.0], requires_grad=True)  # e.g. the paraphrase/STS shared first layer
    losses = [pair_layer * 3 + shared.sum() + frozen.sum(), pair_layer * 5 + shared.sum()]
    surgery_backward(losses, [shared, frozen], [[pair_layer], [pair_layer]])
    torch.testing.assert_close(pair_layer.grad, torch.tensor([(3.0 + 5.0) / 2]))
    assert frozen.grad is None


def test_gradients_accumulate_like_backward():
    p = torch.zeros(2, requires_grad=True)
    for _ in range(2):
        surgery_backward(linear_losses(p, [[1.0, 0.0], [-1.0, 1.0]]), [p], [[], []])
    torch.testing.assert_close(p.grad, torch.tensor([0.5, 1.5]))


def test_invalid_calls_are_refused():
    p = torch.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="method"):
        surgery_backward(linear_losses(p, [[1.0, 0.0]]), [p], [[]], method="mgda")
    with pytest.raises(ValueError, match="groups of head parameters"):
        surgery_backward(linear_losses(p, [[1.0, 0.0]]), [p], [[], []])
    with pytest.raises(ValueError, match="both as shared and as a head"):
        surgery_backward(linear_losses(p, [[1.0, 0.0]]), [p], [[p]])
