"""SMART (Jiang et al., 2020) against direct computations on tiny inputs: the symmetric KL divergences, the
adversarial step and its projection, the Bregman moving average; and multitask training with --smart."""
import math
import random

import pytest
import torch

import multitask_classifier
from minbert.tasks import REGISTRY
from minbert.common.cli import last_wins
from tests.conftest import write_course_files
from minbert.training.smart import MovingAverage, adversarial_perturbation, smoothness_regularizer

pytestmark = pytest.mark.usefixtures("one_thread")


def kl(p, q):
    return sum(a * math.log(a / b) for a, b in zip(p, q))


def test_divergences_are_the_symmetric_kl_of_the_distributions_and_the_squared_error():
    logits, other = torch.tensor([[2.0, 0.5, -1.0]]), torch.tensor([[0.0, 1.0, 0.3]])
    p, q = logits.softmax(-1)[0].tolist(), other.softmax(-1)[0].tolist()
    sst = REGISTRY["cfimdb"].divergence  # any classification task: the same divergence, any number of classes
    assert REGISTRY["sst"].divergence(logits, other).item() == pytest.approx(kl(p, q) + kl(q, p), rel=1e-5)
    assert sst(logits[:, :2], other[:, :2]).item() > 0
    sigmoid = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    a, b = sigmoid(1.5), sigmoid(-0.5)
    para = REGISTRY["para"].divergence(torch.tensor([1.5]), torch.tensor([-0.5])).item()
    assert para == pytest.approx(kl([1 - a, a], [1 - b, b]) + kl([1 - b, b], [1 - a, a]), rel=1e-5)
    assert REGISTRY["sts"].divergence(torch.tensor([1.0, 3.0]), torch.tensor([2.0, 3.5])).item() == pytest.approx(
        (1 + 0.25) / 2)


def test_the_perturbation_climbs_the_normalised_gradient_and_stays_in_the_epsilon_ball():
    """A linear model f(x + nu) = (x + nu) w with the squared error: l_s = mean_i (nu_i . w)^2, whose gradient in
    nu_i is 2 (nu_i . w) w / rows; one step from nu0 is nu0 + eta g / max|g| per row, then clipped to epsilon."""
    torch.manual_seed(0)
    x, w = torch.randn(3, 4), torch.tensor([0.5, -2.0, 1.0, 0.1])
    clean = x @ w
    divergence = REGISTRY["sts"].divergence
    torch.manual_seed(1)
    nu0 = torch.randn(3, 4) * 0.1
    for epsilon, step_size in ((10.0, 0.05), (0.02, 0.05)):
        torch.manual_seed(1)
        nu = adversarial_perturbation(lambda n: (x + n) @ w, clean, (3, 4), divergence, epsilon, 0.1, step_size, 1)
        gradient = 2 * (nu0 @ w)[:, None] * w[None, :] / 3
        expected = (nu0 + step_size * gradient / gradient.abs().amax(-1, keepdim=True)).clamp(-epsilon, epsilon)
        torch.testing.assert_close(nu, expected)
        assert nu.abs().max() <= epsilon
    # The step increased the divergence: it is an ascent.
    torch.manual_seed(1)
    regularizer = smoothness_regularizer(lambda n: (x + n) @ w, clean, (3, 4), divergence, 10.0, 0.1, 0.05, 1)
    assert regularizer.item() > divergence(((x + nu0) @ w), clean).item()


def test_the_perturbation_survives_autocast():
    """SMART's default radius, 1e-5, on inputs of size about 1: under bf16 autocast x + nu would round to x. The
    regularizer must be what full fp32 gives, (nu . w)^2 of the perturbation found, not bf16's rounding error."""
    torch.manual_seed(0)
    x, w = torch.randn(8, 16), torch.randn(1, 16)
    clean = torch.nn.functional.linear(x, w).squeeze(-1)  # f(x), in fp32

    def regularizer():
        torch.manual_seed(1)  # the same starting noise for both
        return smoothness_regularizer(lambda n: torch.nn.functional.linear(x + n, w).squeeze(-1), clean, (8, 16),
                                      REGISTRY["sts"].divergence, epsilon=1e-5, noise=1e-5, step_size=1e-3, steps=1)

    fp32 = regularizer()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = regularizer()
    assert 0 < fp32.item() < 1e-6  # the perturbation's own effect: tiny, and not zero
    torch.testing.assert_close(autocast, fp32, rtol=1e-3, atol=0)
    assert torch.get_float32_matmul_precision() == "highest"  # restored


def test_the_moving_average_follows_the_weights_with_momentum_beta():
    model = torch.nn.Linear(2, 1)
    average = MovingAverage(model, momentum=0.9)
    before = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    average.update(model)
    torch.testing.assert_close(average.model.weight, 0.1 * (before + 1.0) + 0.9 * before)
    assert not any(p.requires_grad for p in average.model.parameters())


def test_the_moving_averages_outputs_are_the_trained_models_in_training_mode_dropout_included():
    """The Bregman term's reference outputs f(x; theta_avg) are computed as the trained model's are, in training
    mode (SMART's code keeps dropout on for both), whatever mode the model was in: with the same random draws, they
    are the training-mode outputs of the model the average started from, not its evaluation-mode outputs."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))
    average, x = MovingAverage(model), torch.randn(4, 8)
    average.model.eval()
    torch.manual_seed(1)
    reference = average.outputs(x)
    torch.manual_seed(1)
    torch.testing.assert_close(reference, model.train()(x))
    assert not torch.allclose(reference, model.eval()(x))


@pytest.mark.parametrize("schedule", [["--schedule", "mtdnn"], ["--schedule", "avg", "--combine", "pcgrad"]])
def test_smart_trains_in_every_schedule_and_changes_the_run(tiny_model, tmp_path, schedule):
    data = write_course_files(tmp_path, random.Random(0), train_rows=16)

    def run(out, *extra):
        return multitask_classifier.main(last_wins(["--model", str(tiny_model), "--data-dir", str(data),
                                                    "--output-dir", str(tmp_path / out), "--predictions-dir",
                                                    str(tmp_path / out / "p"), "--epochs", "1", "--batch-size", "8",
                                                    *schedule, "--device", "cpu", *extra]))

    plain = run("plain")
    # A radius large enough to matter for a random tiny model; the paper's 1e-5 suits pretrained weights.
    smart = run("smart", "--smart", "--smart-epsilon", "0.5", "--smart-step-size", "1")
    assert plain != smart


def test_the_loss_is_the_task_loss_plus_the_weighted_smoothness_term():
    """multitask's task_loss with SMART: the task's loss plus lambda_s R_s (the Bregman term off), with R_s computed
    by hand for a linear model f(x + nu) = (x + nu) w with the squared error, as above: its sign (added, never
    subtracted) and its size (lambda_s times the term, not once, not squared)."""
    from types import SimpleNamespace

    from minbert.training.multitask import task_loss
    from minbert.training.smart import Smart, SmartConfig

    class Linear(torch.nn.Module):
        def __init__(self, w):
            super().__init__()
            self.w, self.encoder = torch.nn.Parameter(w), SimpleNamespace(config=SimpleNamespace(hidden_size=4))

        def forward(self, task, inputs, perturbation=None):
            x = inputs["x"] if perturbation is None else inputs["x"] + perturbation[:, 0]
            return x @ self.w

    torch.manual_seed(0)
    x, w, labels = torch.randn(3, 4), torch.tensor([0.5, -2.0, 1.0, 0.1]), torch.tensor([1.0, 4.0, 2.5])
    batch = {"inputs": {"input_ids": torch.zeros(3, 1, dtype=torch.long), "x": x}, "labels": labels}
    torch.manual_seed(1)
    nu0 = (torch.randn(3, 1, 4) * 0.1)[:, 0]
    gradient = 2 * (nu0 @ w)[:, None] * w[None, :] / 3
    nu = (nu0 + 0.05 * gradient / gradient.abs().amax(-1, keepdim=True)).clamp(-10.0, 10.0)
    smoothness = ((nu @ w) ** 2).mean()
    task = REGISTRY["sts"].loss(x @ w, labels)
    for weight in (1.0, 3.0):
        smart = Smart(SmartConfig(smart_weight=weight, smart_epsilon=10.0, smart_noise=0.1, smart_step_size=0.05,
                                  bregman_weight=0.0), Linear(w))
        torch.manual_seed(1)
        loss = task_loss(Linear(w), "sts", batch, smart)
        torch.testing.assert_close(loss, task + weight * smoothness)
        assert loss > task
