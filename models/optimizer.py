"""AdamW (Loshchilov & Hutter, 2019): Adam (Kingma & Ba, 2015) with decoupled weight decay."""
import math

import torch


class AdamW(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, correct_bias: bool = True):
        if lr < 0.0 or eps < 0.0 or weight_decay < 0.0:
            raise ValueError(f"lr, eps and weight_decay must be >= 0, got {lr}, {eps}, {weight_decay}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      correct_bias=correct_bias))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("AdamW does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                m, v, t = state["exp_avg"], state["exp_avg_sq"], state["step"]
                grad = p.grad.to(m.dtype)

                # Decoupled weight decay: shrink the weights directly, not through the gradient,
                # so the decay is not rescaled by Adam's per-parameter step sizes.
                p.mul_(1 - lr * group["weight_decay"])

                # First and second moment estimates.
                m.mul_(beta1).add_(grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)

                # Bias correction: both moments start at zero and are biased towards it in early steps.
                if group["correct_bias"]:
                    step_size = lr / (1 - beta1 ** t)
                    denom = (v.sqrt() / math.sqrt(1 - beta2 ** t)).add_(eps)
                else:
                    step_size, denom = lr, v.sqrt().add_(eps)
                p.addcdiv_(m, denom, value=-step_size)
        return loss
