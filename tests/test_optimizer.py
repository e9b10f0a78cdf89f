"""Our AdamW against torch.optim.AdamW: same hyperparameters, same problem, 1,000 steps."""
import pytest
import torch

from minbert.models import AdamW

# 2,000 steps of tiny tensors: with OMP_NUM_THREADS above the cores, each op waits on busy threads (112 s a case
# under load, with 3 threads on 2 cores); one thread does them at once.
pytestmark = pytest.mark.usefixtures("one_thread")


def make_problem():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()
    inputs, targets = torch.randn(32, 6, dtype=torch.double), torch.randn(32, 3, dtype=torch.double)
    return model, inputs, targets


def train(optimizer_class, steps=1000, **hyperparameters):
    model, inputs, targets = make_problem()
    optimizer = optimizer_class(model.parameters(), **hyperparameters)
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(inputs), targets).backward()
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("hyperparameters", [
    dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01),
    dict(lr=1e-3, betas=(0.85, 0.995), eps=1e-6, weight_decay=0.1),
])
def test_follows_torch_adamw(hyperparameters):
    # Modest learning rates: near the optimum large steps turn Adam chaotic, and rounding
    # differences of 1e-16 then grow whatever the implementation.
    ours, reference = train(AdamW, **hyperparameters), train(torch.optim.AdamW, **hyperparameters)
    start, _, _ = make_problem()
    assert (ours - torch.cat([p.detach().flatten() for p in start.parameters()])).abs().max() > 1e-2, "it trains"
    assert (ours - reference).abs().max() <= 1e-6


def test_weight_decay_is_decoupled():
    # With a zero gradient Adam's update is zero, so only the decay acts: w <- w * (1 - lr * wd).
    weight = torch.nn.Parameter(torch.full((3,), 2.0))
    optimizer = AdamW([weight], lr=0.1, weight_decay=0.5)
    weight.grad = torch.zeros(3)
    optimizer.step()
    assert torch.allclose(weight.detach(), torch.full((3,), 2.0 * (1 - 0.1 * 0.5)))


def test_first_step_moves_each_weight_by_lr():
    # Bias correction makes the first step m/sqrt(v) = sign(g), so every weight moves by lr (eps aside).
    weight = torch.nn.Parameter(torch.zeros(3))
    weight.grad = torch.tensor([0.3, -5.0, 1e-3])
    AdamW([weight], lr=0.01, eps=0.0).step()
    assert torch.allclose(weight.detach(), torch.tensor([-0.01, 0.01, -0.01]))


def test_rejects_bad_hyperparameters():
    with pytest.raises(ValueError, match="betas"):
        AdamW([torch.nn.Parameter(torch.zeros(1))], betas=(1.0, 0.999))


def test_parameters_that_miss_steps_keep_their_own_bias_correction():
    """One parameter gets a gradient every step, the other every second step: each follows torch.optim.AdamW."""
    results = []
    for optimizer_class in (AdamW, torch.optim.AdamW):
        torch.manual_seed(0)
        always, sometimes = (torch.nn.Parameter(torch.randn(4, dtype=torch.double)) for _ in range(2))
        optimizer = optimizer_class([always, sometimes], lr=1e-2, weight_decay=0.1)
        for step in range(20):
            optimizer.zero_grad()
            loss = (always ** 2).sum() + ((sometimes - 1) ** 2).sum() * (step % 2 == 0)
            loss.backward()
            if step % 2:
                sometimes.grad = None
            optimizer.step()
        results.append(torch.cat([always.detach(), sometimes.detach()]))
    torch.testing.assert_close(results[0], results[1], atol=1e-12, rtol=0)


def test_groups_of_several_dtypes_each_follow_torch_adamw():
    results = []
    for optimizer_class in (AdamW, torch.optim.AdamW):
        torch.manual_seed(0)
        single, double = torch.nn.Parameter(torch.randn(5)), torch.nn.Parameter(torch.randn(5, dtype=torch.double))
        optimizer = optimizer_class([single, double], lr=1e-2, weight_decay=0.01)
        for _ in range(10):
            optimizer.zero_grad()
            ((single ** 2).sum() + (double ** 3).sum()).backward()
            optimizer.step()
        results.append((single.detach().clone(), double.detach().clone()))
    torch.testing.assert_close(results[0][0], results[1][0], atol=1e-6, rtol=0)
    torch.testing.assert_close(results[0][1], results[1][1], atol=1e-12, rtol=0)


def fused_and_reference_runs(steps: int, weight_decay: float) -> list[torch.Tensor]:
    """Our AdamW as the reference and through torch's fused kernel (fused=True, the trainers' path on CUDA; torch
    runs it on the CPU too), fp32, on the same gradients: a group with weight decay and one without, and a
    parameter that misses every second step (its own bias correction)."""
    results = []
    for fused in (False, True):
        torch.manual_seed(0)
        decayed, missing, plain = (torch.nn.Parameter(torch.randn(shape)) for shape in ((7, 5), (3,), (4, 2)))
        optimizer = AdamW([{"params": [decayed, missing], "weight_decay": weight_decay},
                           {"params": [plain], "weight_decay": 0.0}], lr=1e-2, betas=(0.9, 0.98), fused=fused)
        generator = torch.Generator().manual_seed(1)
        for step in range(steps):
            for p in (decayed, missing, plain):
                p.grad = torch.randn(p.shape, generator=generator)
            if step % 2:
                missing.grad = None
            optimizer.step()
        results.append(torch.cat([p.detach().flatten() for p in (decayed, missing, plain)]))
    return results


def test_the_fused_kernel_equals_our_adamw_to_fp32_rounding():
    steps = 10
    reference, fused = fused_and_reference_runs(steps, weight_decay=0.1)
    # Both compute the same lines in fp32, in another order: each step's result may differ by a few units of fp32's
    # last place (eps) of the weight it updates, and the differences of the moments stay as small. So after `steps`
    # steps the weights differ by at most about steps x 4 eps x the largest weight.
    tolerance = steps * 4 * torch.finfo(torch.float32).eps * reference.abs().max().item()
    assert (fused - reference).abs().max() <= tolerance
    # A kernel that placed the decay differently, or left it out, would be far outside that tolerance.
    undecayed, _ = fused_and_reference_runs(steps, weight_decay=0.0)
    assert (undecayed - reference).abs().max() > 100 * tolerance


def test_the_fused_kernel_keeps_our_checkpointed_state():
    """The same state either way (integer step counts, the two moments): a run resumes on either path."""
    weight = torch.nn.Parameter(torch.ones(3))
    for fused in (False, True):
        optimizer = AdamW([weight], lr=0.1, fused=fused)
        weight.grad = torch.ones(3)
        optimizer.step()
        state = optimizer.state_dict()["state"][0]
        assert state["step"] == 1 and set(state) == {"step", "exp_avg", "exp_avg_sq"}
