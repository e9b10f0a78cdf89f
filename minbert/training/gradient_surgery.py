"""Gradient surgery (Chen's CS224N report section 4.2, Mohammed and Sabane's CS224N report "GS"): combine the tasks' gradients of the shared
encoder with torchjd's PCGrad or UPGrad instead of averaging the losses.

How torchjd 0.18 does it: torchjd.autojac.backward(losses, inputs=params) stores in each param's
`.jac` its Jacobian, one row per loss; torchjd.autojac.jac_to_grad(params, aggregator) flattens and
concatenates those Jacobians, aggregates the rows into one gradient and accumulates it into `.grad`.
The projections therefore happen in the space of all shared parameters at once, as in PCGrad.

Scale. torchjd's PCGrad returns the *sum* of the projected gradients (Yu et al., Algorithm 1); seeds
002 and 003 take their *mean*. Both aggregators are invariant to scaling every gradient by the same
positive factor, so we divide every loss by the number of tasks and aggregate with the sum rule
(PCGrad as is; UPGrad with preference vector all ones instead of its default 1/m): the result is the
mean, and when no two tasks conflict it equals the gradient of the average loss, the "avg" schedule.
UPGrad solves a small quadratic program: it needs torchjd's extra, pip install "torchjd[quadprog-projector]".
Heads get exactly what "avg" gives them: their own task's gradient divided by the number of tasks.
"""
from collections.abc import Callable, Iterable, Sequence

import torch
from torchjd.aggregation import Aggregator, PCGrad, UPGrad
from torchjd.autojac import backward as jacobian_backward
from torchjd.autojac import jac_to_grad

from minbert.training.multitask_config import SURGERY_METHODS as METHODS


def surgery_backward(task_losses: Sequence[torch.Tensor], shared_params: Iterable[torch.Tensor],
                     head_params: Sequence[Iterable[torch.Tensor]], method: str = "pcgrad",
                     average: Callable[[list[torch.Tensor]], None] | None = None) -> None:
    """Accumulate gradients into `.grad` like loss.backward() would (so zero them first).

    task_losses: one scalar loss per task.
    shared_params: the parameters every task uses (encoder, common layer); they receive the
        aggregated gradient.
    head_params: per task, the parameters of its own head; each receives only its own task's
        gradient. A parameter listed for two tasks (the shared first MLP layer of the paraphrase and
        STS heads) receives the sum of both, just as with the average loss.
    Parameters with requires_grad=False (a frozen encoder) are skipped.
    average: under torchrun, replaces the tasks' gradients of the shared parameters (their Jacobians) by their
        means over the processes before they are combined, so that the surgery is that of the whole batch.
    """
    if method not in METHODS:
        raise ValueError(f"unknown gradient surgery method {method!r}; expected one of {', '.join(METHODS)}")
    if len(task_losses) != len(head_params):
        raise ValueError(f"{len(task_losses)} task losses but {len(head_params)} groups of head parameters")
    shared = [p for p in shared_params if p.requires_grad]
    heads = [[p for p in params if p.requires_grad] for params in head_params]
    shared_ids = {id(p) for p in shared}
    if any(id(p) in shared_ids for params in heads for p in params):
        raise ValueError("a parameter is listed both as shared and as a head parameter")

    # Built before any backward pass: UPGrad needs torchjd's optional quadprog extra and fails here
    # (ImportError naming it) without having touched any .grad.
    aggregator = _sum_rule_aggregator(method, len(task_losses), shared[0]) if shared else None
    scaled_losses = [loss / len(task_losses) for loss in task_losses]
    # Heads first, keeping the graph alive: the Jacobian pass below goes through the same graph.
    for loss, params in zip(scaled_losses, heads):
        if params:
            torch.autograd.backward(loss, inputs=params, retain_graph=True)
    if not shared:
        return
    jacobian_backward(scaled_losses, inputs=shared)
    if average is not None:
        average([p.jac for p in shared])
    jac_to_grad(shared, aggregator)


def _sum_rule_aggregator(method: str, num_tasks: int, like: torch.Tensor) -> Aggregator:
    if method == "pcgrad":
        return PCGrad()
    return UPGrad(pref_vector=torch.ones(num_tasks, device=like.device, dtype=like.dtype))
