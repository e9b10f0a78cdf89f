import math

import pytest
import torch
from torch import nn

from minbert.heads import MLP, CommonLayer, pair_mlps
from minbert.heads.paraphrase import CrossEncodedPairHead, ParaphraseHead
from minbert.heads.sentiment import SentimentHead
from minbert.heads.similarity import CrossEncodedSimilarityHead, SimilarityHead, lowest_bucket_mean_cosine

H = 8


def embeddings(batch: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, H, generator=torch.Generator().manual_seed(seed))


def parameter_ids(module: nn.Module) -> set[int]:
    return {id(p) for p in module.parameters()}


def parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())  # parameters() lists a shared tensor once


def test_sentiment_head_gives_one_logit_per_class():
    assert SentimentHead(H)(embeddings(3)).shape == (3, 5)
    assert SentimentHead(H, num_classes=2)(embeddings(3)).shape == (3, 2)


def test_mlp_applies_dropout_before_both_linear_layers():
    mlp = MLP(H, 16, 3, dropout=0.3)
    layer_types = [type(m) for m in mlp.modules() if not isinstance(m, (MLP, nn.Sequential))]
    assert layer_types == [nn.Dropout, nn.Linear, nn.ReLU, nn.Dropout, nn.Linear]
    x = embeddings(64)
    mlp.train()
    assert not torch.equal(mlp(x), mlp(x))  # dropout is live in training
    mlp.eval()
    assert torch.equal(mlp(x), mlp(x))


def test_residual_mlp_starts_as_the_identity_and_then_learns():
    mlp = MLP(H, 16, H, dropout=0.3, residual=True)
    x = embeddings(6)
    assert torch.equal(mlp(x), x)  # even in training: the dropout sits inside the branch that starts at zero
    head = SimilarityHead(mlp)
    u, v = embeddings(6, seed=1), embeddings(6, seed=2)
    torch.testing.assert_close(head.cosine(u, v), torch.nn.functional.cosine_similarity(u, v, dim=-1))
    head.cosine(u, v).sum().backward()
    assert mlp.second[1].weight.grad.abs().sum() > 0  # the branch can move away from zero
    with pytest.raises(ValueError, match="residual"):
        MLP(H, 16, 3, residual=True)


def test_pair_mlps_of_both_kinds_share_the_same_way():
    for kind in ("plain", "residual"):
        para_mlp, sts_mlp = pair_mlps("first-layer", H, kind=kind)
        assert para_mlp.first is sts_mlp.first and para_mlp.second is not sts_mlp.second
        assert para_mlp.residual == sts_mlp.residual == (kind == "residual")
    with pytest.raises(ValueError, match="pair MLP"):
        pair_mlps("none", H, kind="deep")


def test_paraphrase_head_is_a_bilinear_form_of_the_transformed_embeddings():
    para_mlp, _ = pair_mlps("none", H)
    head = ParaphraseHead(para_mlp).eval()
    u, v = embeddings(5, seed=1), embeddings(5, seed=2)
    fu, fv = para_mlp(u), para_mlp(v)
    W, b = head.bilinear.weight[0], head.bilinear.bias
    expected = torch.stack([fu[i] @ W @ fv[i] for i in range(5)]) + b
    assert head(u, v).shape == (5,)
    torch.testing.assert_close(head(u, v), expected)


def test_similarity_head_scores_lie_in_zero_to_five():
    _, sts_mlp = pair_mlps("none", H)
    head = SimilarityHead(sts_mlp)
    scores = head(embeddings(256, seed=1), embeddings(256, seed=2))
    assert scores.shape == (256,)
    assert scores.min() >= 0 and scores.max() <= 5
    head.eval()
    u = embeddings(3)
    torch.testing.assert_close(head(u, u), torch.full((3,), 5.0))  # identical sentences: cosine 1 -> 5


@pytest.mark.parametrize("floor", [-1.0, 0.6])
def test_cosine_range_maps_gold_onto_floor_to_one_and_back(floor):
    head = SimilarityHead(MLP(H, H, H))
    head.set_cosine_floor(floor)
    gold = torch.tensor([0.0, 1.25, 2.5, 5.0])
    step = (1 - floor) / 4  # gold 1.25 is a quarter of the way from M to 1
    torch.testing.assert_close(head.gold_to_cosine(gold), torch.tensor([floor, floor + step, floor + 2 * step, 1.0]))
    torch.testing.assert_close(head.cosine_to_gold(head.gold_to_cosine(gold)), gold)
    if floor > -1:
        # cosines below M are below every gold score: linear, not clamped (training needs their gradient)
        torch.testing.assert_close(head.cosine_to_gold(torch.tensor([floor - 0.5])), torch.tensor([-2.5 / (1 - floor)]))


def test_sts_loss_has_a_gradient_below_the_cosine_floor():
    """Cosine 0.3 under M = 0.6 with gold 4 (the issue's example): the clamped score had loss 16 and gradient 0.
    The loss on the unclamped score is (5 / (1 - M))^2 times the squared error of the cosine against
    gold_to_cosine(gold), the Contrastive Tension paper's regression target."""
    from minbert.training.multitask import task_loss

    class OneCosine(torch.nn.Module):  # stands in for MultitaskModel: the STS output is the head's score
        def __init__(self):
            super().__init__()
            self.cosine = torch.nn.Parameter(torch.tensor([0.3]))
            self.similarity = SimilarityHead(MLP(H, H, H), cosine_floor=0.6)

        def forward(self, task, inputs):
            return self.similarity.cosine_to_gold(self.cosine)

    model = OneCosine()
    gold = torch.tensor([4.0])
    loss = task_loss(model, "sts", {"inputs": {}, "labels": gold})
    loss.backward()
    target = model.similarity.gold_to_cosine(gold)  # 0.6 + 0.4 * 4 / 5 = 0.92
    scale = (5 / (1 - 0.6)) ** 2
    torch.testing.assert_close(loss, scale * (0.3 - target[0]) ** 2)
    torch.testing.assert_close(model.cosine.grad, scale * 2 * (0.3 - target))
    assert model.cosine.grad.item() < 0  # the cosine is pushed up, towards its target


def test_cosine_floor_is_saved_with_the_head():
    head = SimilarityHead(MLP(H, H, H), cosine_floor=0.3)
    reloaded = SimilarityHead(MLP(H, H, H))
    reloaded.load_state_dict(head.state_dict())
    assert reloaded.cosine_floor.item() == pytest.approx(0.3)
    with pytest.raises(ValueError):
        head.set_cosine_floor(1.0)


def test_lowest_bucket_mean_uses_pairs_with_gold_at_most_a_quarter():
    cosines = torch.tensor([0.1, 0.3, 0.9, 0.5])
    gold = torch.tensor([0.0, 0.25, 0.26, 4.0])
    assert lowest_bucket_mean_cosine(cosines, gold) == pytest.approx(0.2)
    with pytest.raises(ValueError):
        lowest_bucket_mean_cosine(cosines, gold + 1)


def test_lowest_bucket_mean_of_parallel_vectors_is_at_most_1():
    """Rounding gives parallel fp32 vectors a cosine just above 1 (here 1.0000001); M is clamped into [-1, 1]."""
    u = torch.tensor([[0.1, 0.7, 0.3]]).repeat(4, 1)
    v = u * torch.tensor([[3.0], [7.0], [11.0], [13.0]])
    cosines = torch.nn.functional.cosine_similarity(u, v)
    gold = torch.zeros(4)
    assert lowest_bucket_mean_cosine(cosines, gold) == 1.0
    assert lowest_bucket_mean_cosine(torch.tensor([1.0 + 2e-7, -1.0 - 2e-7]), torch.zeros(2)) == 0.0


def test_share_none_gives_disjoint_parameters():
    para_mlp, sts_mlp = pair_mlps("none", H, mlp_hidden=6)
    assert not parameter_ids(para_mlp) & parameter_ids(sts_mlp)


def test_share_first_layer_shares_exactly_the_first_linear():
    para_mlp, sts_mlp = pair_mlps("first-layer", H, mlp_hidden=6)
    assert para_mlp.first is sts_mlp.first and para_mlp.second is not sts_mlp.second
    heads = nn.ModuleDict({"para": ParaphraseHead(para_mlp), "sts": SimilarityHead(sts_mlp)})
    unshared = nn.ModuleDict({"para": ParaphraseHead(pair_mlps("none", H, mlp_hidden=6)[0]),
                              "sts": SimilarityHead(pair_mlps("none", H, mlp_hidden=6)[1])})
    first_linear_size = H * 6 + 6
    assert parameter_count(unshared) - parameter_count(heads) == first_linear_size


def test_shared_first_layer_receives_both_tasks_gradients():
    para_mlp, sts_mlp = pair_mlps("first-layer", H, mlp_hidden=6, dropout=0.0)
    para, sts = ParaphraseHead(para_mlp), SimilarityHead(sts_mlp)
    u, v = embeddings(4, seed=1), embeddings(4, seed=2)
    shared_weight = para_mlp.first[1].weight

    def grad_of(loss):
        return torch.autograd.grad(loss, shared_weight, allow_unused=True)[0]

    para_grad, sts_grad = grad_of(para(u, v).sum()), grad_of(sts.cosine(u, v).sum())
    assert para_grad is not None and sts_grad is not None
    assert para_grad.abs().sum() > 0 and sts_grad.abs().sum() > 0
    torch.testing.assert_close(grad_of(para(u, v).sum() + sts.cosine(u, v).sum()), para_grad + sts_grad)


def test_share_all_uses_one_mlp_and_rejects_unknown_modes():
    para_mlp, sts_mlp = pair_mlps("all", H)
    assert para_mlp is sts_mlp
    with pytest.raises(ValueError, match="share mode"):
        pair_mlps("second-layer", H)


def test_sharing_a_first_layer_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError):
        MLP(H, 7, H, share_first_with=MLP(H, 6, H))


def test_common_layer_is_linear_then_tanh():
    layer = CommonLayer(H)
    x = embeddings(3) * 10
    out = layer(x)
    assert out.shape == x.shape and out.abs().max() <= 1
    torch.testing.assert_close(out, torch.tanh(x @ layer.linear.weight.T + layer.linear.bias))


def set_by_hand(head: CrossEncodedPairHead) -> None:
    """H=2 weights: view 1 reads coordinate 0, view 2 coordinate 1, the difference view their sum."""
    view_weights = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    with torch.no_grad():
        for layer, weight in zip(head.view_layers, view_weights):
            layer.weight.copy_(torch.tensor([weight]))
            layer.bias.zero_()
        head.combine.weight.fill_(1.0)
        head.combine.bias.zero_()


@pytest.mark.parametrize("variant, expected", [
    # e12 = [1, 2], e21 = [3, -1]: view logits 1 and -1; difference [-2, 3] gives 1.
    ("ph", 1 + -1),
    ("dph", 1 + -1 + 1),
    ("dpha", math.tanh(1) + math.tanh(-1) + math.tanh(1)),
])
def test_cross_encoded_pair_head_matches_hand_computation(variant, expected):
    head = CrossEncodedPairHead(2, variant=variant)
    set_by_hand(head)
    head.eval()
    e12, e21 = torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, -1.0]])
    assert head(e12, e21).item() == pytest.approx(expected)
    assert len(head.view_layers) == (2 if variant == "ph" else 3)


def test_cross_encoded_similarity_is_in_zero_to_five():
    head = CrossEncodedSimilarityHead(H, variant="dph")
    scores = head(embeddings(64, seed=1) * 100, embeddings(64, seed=2) * 100)
    assert scores.shape == (64,) and scores.min() >= 0 and scores.max() <= 5
    by_hand = CrossEncodedSimilarityHead(2, variant="dph")
    set_by_hand(by_hand)
    by_hand.eval()
    score = by_hand(torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, -1.0]])).item()
    assert score == pytest.approx(5 / (1 + math.exp(-1)))  # pair logit 1, as in the dph case above
    with pytest.raises(ValueError):
        CrossEncodedPairHead(H, variant="dpx")


def test_sts_predictions_are_clamped_to_the_gold_scale():
    from minbert.tasks import REGISTRY

    raw = torch.tensor([-0.7, 0.0, 2.5, 5.0, 6.2])  # the unclamped scores a head trains on
    sts = REGISTRY["sts"]
    assert sts.soft(raw).tolist() == [0.0, 0.0, 2.5, 5.0, 5.0]
    assert sts.hard(sts.soft(raw)).tolist() == [0.0, 0.0, 2.5, 5.0, 5.0]
