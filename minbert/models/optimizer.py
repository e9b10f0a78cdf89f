"""AdamW (Loshchilov & Hutter, 2019): Adam (Kingma & Ba, 2015) with decoupled weight decay.

For each parameter p with gradient g, at its step t:
    p <- p * (1 - lr * weight_decay)                      decoupled weight decay: not rescaled by Adam's step sizes
    m <- beta1 m + (1 - beta1) g                           first moment
    v <- beta2 v + (1 - beta2) g^2                         second moment
    p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)    bias-corrected step
Each line runs as one multi-tensor (torch._foreach_*) operation over all parameters of a group that share a
device and dtype: a few dozen kernels a step instead of a dozen per parameter (bert-base has about 200). This is the
reference, and the CPU's path. fused=True (the trainers' choice on CUDA) runs the same lines as one kernel,
torch's fused AdamW (torch._fused_adamw_), whose definition is this one: the decay on the weights before the step,
not scaled by the bias corrections, and both corrections per parameter from its own step count
(tests/test_optimizer.py: equal to this module's lines to fp32 rounding). The checkpointed state is the same either
way, so a run may resume on another device.
"""
import math
from collections import defaultdict

import torch


class AdamW(torch.optim.Optimizer):
    """AdamW (Loshchilov & Hutter, 2019): Adam with decoupled weight decay, each line of the update (this module's
    docstring) one multi-tensor operation over a parameter group."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, correct_bias: bool = True, fused: bool = False):
        if lr < 0.0 or eps < 0.0 or weight_decay < 0.0:
            raise ValueError(f"lr, eps and weight_decay must be >= 0, got {lr}, {eps}, {weight_decay}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      correct_bias=correct_bias))
        self.fused = fused  # not a group's hyperparameter: how this process computes, not what

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            by_kind = defaultdict(list)  # the multi-tensor operations take tensors of one device and dtype
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("AdamW does not support sparse gradients")
                by_kind[p.device, p.dtype].append(p)
            for params in by_kind.values():
                self._update(group, params)
        return loss

    def _update(self, group: dict, params: list[torch.Tensor]) -> None:
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        for p in params:
            state = self.state[p]
            if not state:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["step"] += 1
        states = [self.state[p] for p in params]
        m, v, t = [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], [s["step"] for s in states]
        grads = [p.grad.to(moment.dtype) for p, moment in zip(params, m)]
        if self.fused and group["correct_bias"]:  # torch's kernel always corrects the bias
            # The step counts go to the device in one copy: the kernel reads them there.
            steps = torch.tensor(t, dtype=torch.float32, device=params[0].device).unbind()
            torch._fused_adamw_(params, grads, m, v, [], steps, lr=lr, beta1=beta1, beta2=beta2,
                                weight_decay=group["weight_decay"], eps=eps, amsgrad=False, maximize=False)
            return

        torch._foreach_mul_(params, 1 - lr * group["weight_decay"])
        torch._foreach_mul_(m, beta1)
        torch._foreach_add_(m, grads, alpha=1 - beta1)
        torch._foreach_mul_(v, beta2)
        torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
        # Bias correction: both moments start at zero and are biased towards it in early steps. A parameter that
        # missed steps (no gradient) has its own t, so the corrections are one per parameter.
        denominators = torch._foreach_sqrt(v)
        if group["correct_bias"]:
            torch._foreach_div_(denominators, [math.sqrt(1 - beta2 ** step) for step in t])
            step_sizes = [-lr / (1 - beta1 ** step) for step in t]
        else:
            step_sizes = [-lr] * len(params)
        torch._foreach_add_(denominators, eps)
        torch._foreach_addcdiv_(params, m, denominators, step_sizes)
