"""SMART (Jiang et al., 2020, "SMART: Robust and Efficient Fine-Tuning for Pre-trained Natural Language Models through
Principled Regularized Optimization"): two terms added to each task's loss in fine-tuning.

Smoothness-inducing adversarial regularization (its Algorithm 1), on the input embeddings x of a batch:
    R_s = l_s(f(x + nu), f(x)), nu the perturbation in the l_inf ball of radius epsilon that changes the outputs most,
    found from nu ~ N(0, sigma^2) by T_x steps of projected gradient ascent with f(x) held fixed:
        g = grad_nu l_s(f(x + nu), f(x)),  nu <- clip(nu + eta g / ||g||_inf, -epsilon, epsilon)
    (||g||_inf per token, as the authors' MT-DNN code does). l_s is the task's divergence (tasks.Task.divergence):
    the symmetric KL divergence of the predicted distributions, or the squared error of a regression.
Bregman proximal point optimization, momentum form:
    D = l_s(f(x; theta), f(x; theta_avg)), theta_avg <- (1 - beta) theta + beta theta_avg after every step,
    which keeps each update close to where the model has recently been.
A task's loss becomes  loss + lambda_s R_s + mu D.  Defaults are the paper's: epsilon = sigma = 1e-5, eta = 1e-3,
T_x = 1, lambda_s = 1 (it tries 1, 3, 5), mu = 1, beta = 0.99.
The perturbed passes f(x + nu) run in full fp32 (no autocast, no TF32) whatever --precision is: a perturbation of
1e-5 on embeddings of size about 1 is far below bf16's resolution (2^-8) and TF32's (2^-10), where x + nu would
round to x and R_s would see no perturbation at all.
"""
import copy
from collections.abc import Callable
from contextlib import contextmanager

import torch
from torch import nn

from minbert.tasks import REGISTRY
from minbert.training.multitask_config import SmartConfig

Divergence = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@contextmanager
def full_fp32(device_type: str):
    """Within: no autocast on `device_type`, and fp32 matrix products in full precision (not TF32)."""
    matmul = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        with torch.autocast(device_type, enabled=False):
            yield
    finally:
        torch.set_float32_matmul_precision(matmul)


def in_full_fp32(outputs_with: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """outputs_with, computed in full fp32 (full_fp32) on the perturbation's device."""
    def perturbed(nu: torch.Tensor) -> torch.Tensor:
        with full_fp32(nu.device.type):
            return outputs_with(nu)
    return perturbed


def adversarial_perturbation(outputs_with: Callable[[torch.Tensor], torch.Tensor], clean: torch.Tensor, shape,
                             divergence: Divergence, epsilon: float, noise: float, step_size: float,
                             steps: int) -> torch.Tensor:
    """nu (detached): outputs_with(nu) are the outputs for the inputs perturbed by nu (computed in full fp32), clean
    the unperturbed ones."""
    outputs_with, clean = in_full_fp32(outputs_with), clean.detach()
    nu = torch.randn(shape, device=clean.device) * noise
    for _ in range(steps):
        nu.requires_grad_()
        (gradient,) = torch.autograd.grad(divergence(outputs_with(nu), clean), nu)
        # A zero gradient (outputs that do not depend on a token) leaves that token's perturbation where it is.
        scale = gradient.abs().amax(dim=-1, keepdim=True).clamp(min=torch.finfo(gradient.dtype).tiny)
        nu = (nu.detach() + step_size * gradient / scale).clamp(-epsilon, epsilon)
    return nu.detach()


def smoothness_regularizer(outputs_with: Callable[[torch.Tensor], torch.Tensor], clean: torch.Tensor, shape,
                           divergence: Divergence, epsilon: float = 1e-5, noise: float = 1e-5,
                           step_size: float = 1e-3, steps: int = 1) -> torch.Tensor:
    """R_s: the divergence between the outputs at the adversarial perturbation and the clean outputs (both keep
    their graph, so the model learns to bring them together). The perturbed outputs are computed in full fp32."""
    nu = adversarial_perturbation(outputs_with, clean, shape, divergence, epsilon, noise, step_size, steps)
    return divergence(in_full_fp32(outputs_with)(nu), clean)


class MovingAverage:
    """theta_avg of the Bregman proximal point term: a copy of the model whose weights follow the trained ones."""

    def __init__(self, model: nn.Module, momentum: float = 0.99):
        self.model = copy.deepcopy(model).requires_grad_(False)
        self.momentum = momentum

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """theta_avg <- (1 - beta) theta + beta theta_avg (buffers, such as a cosine floor, are copied)."""
        for average, current in zip(self.model.parameters(), model.parameters()):
            average.lerp_(current, 1 - self.momentum)
        for average, current in zip(self.model.buffers(), model.buffers()):
            average.copy_(current)

    @torch.no_grad()
    def outputs(self, *args, **kwargs) -> torch.Tensor:
        self.model.train()  # as the trained model is: the same kind of outputs (dropout included), only older
        return self.model(*args, **kwargs)

    def state_dict(self) -> dict:
        return self.model.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state)


class Smart:
    """SMART's two terms for a task's batch of a multitask model (model.MultitaskModel), with the flags' values."""

    def __init__(self, config: SmartConfig, model: nn.Module):
        self.config = config
        self.average = MovingAverage(model, config.bregman_momentum) if config.bregman_weight else None

    def regularizers(self, model: nn.Module, task: str, inputs: dict, raw: torch.Tensor) -> torch.Tensor:
        config, divergence = self.config, REGISTRY[task].divergence
        shape = (*inputs["input_ids"].shape, model.encoder.config.hidden_size)
        total = config.smart_weight * smoothness_regularizer(
            lambda nu: model(task, inputs, perturbation=nu), raw, shape, divergence, config.smart_epsilon,
            config.smart_noise, config.smart_step_size, config.smart_steps)
        if self.average is not None:
            total = total + config.bregman_weight * divergence(raw, self.average.outputs(task, inputs))
        return total

    def update(self, model: nn.Module) -> None:
        """After each optimizer step: the moving average follows the weights."""
        if self.average is not None:
            self.average.update(model)

    def state_dict(self) -> dict | None:
        return self.average.state_dict() if self.average is not None else None

    def load_state_dict(self, state: dict | None) -> None:
        if self.average is not None:
            self.average.load_state_dict(state)
