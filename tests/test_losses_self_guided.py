"""SG-BERT losses (SG-BERT (Kim et al.), sections 3.1-3.2) against the paper's formulas written as loops."""
import math

import pytest
import torch
import torch.nn.functional as F

from minbert.losses.self_guided import (ProjectionHead, l2_regulariser, sample_layer_views, self_guided_base_loss,
                                        self_guided_opt1_loss, self_guided_opt2_loss, self_guided_opt3_loss)
from tests.conftest import cos


def phi(u, v, tau):
    return math.exp(cos(u, v) / tau)


C = [[1.0, 0.2, -0.5], [0.3, -1.0, 0.4], [-0.6, 0.5, 0.9]]
H = [[0.8, 0.4, -0.1], [0.0, -0.9, 1.0], [-1.0, 0.1, 0.5]]
# LAYERS[i][k] = h_{i,k}: 3 sentences, l + 1 = 2 layer views each
LAYERS = [[[0.9, 0.1, -0.3], [1.0, 0.5, 0.0]],
          [[0.2, -0.8, 0.1], [-0.1, -1.0, 0.6]],
          [[-0.7, 0.6, 0.6], [-0.2, 0.3, 1.0]]]
TAU = 0.5


def test_base_loss_is_nt_xent_over_c_and_h():
    xs = C + H
    b = len(C)
    total = 0.0
    for m, x in enumerate(xs):
        partner = xs[(m + b) % (2 * b)]  # mu(c_i) = h_i, mu(h_i) = c_i
        z = sum(phi(x, xs[n], TAU) for n in range(2 * b) if n != m)
        total += -math.log(phi(x, partner, TAU) / z)
    got = self_guided_base_loss(torch.tensor(C), torch.tensor(H), temperature=TAU)
    assert got.item() == pytest.approx(total / (2 * b), rel=1e-5)


def test_opt1_anchors_only_on_c():
    total = 0.0
    for i, c in enumerate(C):
        z_hat = sum(phi(c, C[j], TAU) for j in range(3) if j != i) + sum(phi(c, h, TAU) for h in H)
        total += -math.log(phi(c, H[i], TAU) / z_hat)
    got = self_guided_opt1_loss(torch.tensor(C), torch.tensor(H), temperature=TAU)
    assert got.item() == pytest.approx(total / 3, rel=1e-5)


def test_opt2_drops_c_to_c_terms():
    total = 0.0
    for i, c in enumerate(C):
        total += -math.log(phi(c, H[i], TAU) / sum(phi(c, h, TAU) for h in H))
    got = self_guided_opt2_loss(torch.tensor(C), torch.tensor(H), temperature=TAU)
    assert got.item() == pytest.approx(total / 3, rel=1e-5)


@pytest.mark.parametrize("tau", [TAU, 0.01])
def test_opt3_uses_every_layer_view(tau):
    b, num_layers = 3, 2
    total = 0.0
    for i, c in enumerate(C):
        others = sum(phi(c, LAYERS[m][n], tau) for m in range(b) if m != i for n in range(num_layers))
        for k in range(num_layers):
            positive = phi(c, LAYERS[i][k], tau)
            total += -math.log(positive / (positive + others))
    expected = total / (b * num_layers)
    if tau == 0.01:  # the paper's temperature is the default
        got = self_guided_opt3_loss(torch.tensor(C), torch.tensor(LAYERS))
    else:
        got = self_guided_opt3_loss(torch.tensor(C), torch.tensor(LAYERS), temperature=tau)
    assert got.item() == pytest.approx(expected, rel=1e-4)


def test_sample_layer_views_picks_one_layer_of_each_sentence_uniformly():
    views = torch.arange(4 * 3).float().view(4, 3, 1)  # views[i, k] = 3i + k, so the value names the layer
    generator = torch.Generator().manual_seed(0)
    seen_layers = set()
    for _ in range(30):
        sampled = sample_layer_views(views, generator).squeeze(1)
        layers = sampled - torch.arange(4) * 3
        assert ((layers >= 0) & (layers < 3)).all()  # row i's view comes from sentence i
        seen_layers.update(layers.long().tolist())
    assert seen_layers == {0, 1, 2}


def test_l2_regulariser_by_hand():
    tuned = [torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor([[3.0]], requires_grad=True)]
    fixed = [torch.tensor([0.0, 0.0], requires_grad=True), torch.tensor([[1.0]], requires_grad=True)]
    value = l2_regulariser(tuned, fixed)  # 0.1 * ((1 + 4) + 4)
    assert value.item() == pytest.approx(0.9)
    value.backward()
    assert tuned[0].grad.tolist() == pytest.approx([0.2, 0.4])  # 2 * lambda * (tuned - fixed)
    assert fixed[0].grad is None  # BERT_F stays fixed


def test_l2_regulariser_rejects_mismatched_parameter_lists():
    with pytest.raises(ValueError):
        l2_regulariser([torch.zeros(1), torch.zeros(1)], [torch.zeros(1)])


def test_projection_head_is_two_linear_layers_each_followed_by_gelu():
    torch.manual_seed(0)
    head = ProjectionHead(hidden_size=3, projection_size=5)
    linears = [m for m in head.modules() if isinstance(m, torch.nn.Linear)]
    assert [(l.in_features, l.out_features) for l in linears] == [(3, 5), (5, 5)]
    x = torch.randn(2, 3)
    first, second = linears
    expected = F.gelu(F.gelu(x @ first.weight.T + first.bias) @ second.weight.T + second.bias)
    assert torch.allclose(head(x), expected, atol=1e-6)
