"""Which task's batch each optimisation step consumes, for one epoch. Knows nothing of models.

plan_epoch(...) returns a list of steps; a step is a tuple of task names, one batch of each is
consumed in that step (all tasks for "avg", one task for the rest):

  avg         every step takes one batch of every task and optimises the average loss (Chen's CS224N report),
              or combines the task gradients by gradient surgery (--combine pcgrad, training/gradient_surgery.py).
              The epoch has as many steps as the smallest task has batches, so the larger sets are
              down-sampled: reshuffle every task's loader each epoch and stop after these steps, and
              each epoch sees a different random subset of the larger sets.
  rr-batch    one batch per task in task order, cycling. A task that has run out is skipped and the
              cycle goes on until every task is exhausted, so every batch is seen once per epoch (as
              in rr-epoch; only the interleaving differs). With unequal sizes the end of the epoch
              is the largest task alone: with the project's data, Quora-only steps after SST and
              STS have run out.
  rr-epoch    a whole pass over the first task in task order, then the next, within one epoch.
  sequential  the run's epochs are split into contiguous blocks, one per task in task order: all
              epochs of the first task, then all of the next (Mohammed and Sabane's CS224N report "ST"). With E epochs and T
              tasks, epoch e belongs to task order[e * T // E]; the earlier tasks get any spare
              epochs (E=10, T=3 gives 4, 3, 3). For E full epochs per task, run T * E epochs.
  mtdnn       all tasks' batches merged and shuffled every epoch (Mohammed and Sabane's CS224N report / MT-DNN Algorithm 1).
              Task weights are sampling weights: a task with weight w contributes ceil(w * n) of
              its n batches, so para=2 makes Quora batches twice as frequent relative to the other
              tasks (a second pass through the Quora loader) and para=0.1 uses a tenth of Quora.
              The loss is not re-weighted. Pass the same generator every epoch to get a new order
              each epoch.

A task order may repeat a task (Mohammed and Sabane's CS224N report Table 2 trains "STS,SST,QQP,SST,STS"): in rr-epoch each
occurrence is a full pass, in rr-batch each occurrence takes one batch per cycle, in sequential
each occurrence gets its own block of epochs. Steps beyond a loader's length mean the training
loop starts a new pass over that loader.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is loaded where a plan is drawn: --schedule's help, from here, needs none
    import torch

# Each schedule in a line: --schedule's help is made of these.
SCHEDULES = {
    "mtdnn": "all tasks' batches shuffled together (MT-DNN)",
    "avg": "one batch of every task a step, their losses averaged (or their gradients combined: --combine)",
    "rr-batch": "one batch a task in turn",
    "rr-epoch": "a pass over one task, then the next",
    "sequential": "all epochs of one task, then the next",
}

Step = tuple[str, ...]


def count_batches(dataset_sizes: Mapping[str, int], batch_size: int, drop_last: bool = False) -> dict[str, int]:
    """Batches per task that a DataLoader with this batch size yields."""
    if batch_size < 1:
        raise ValueError(f"batch size must be positive, got {batch_size}")
    rounding = math.floor if drop_last else math.ceil
    return {task: rounding(size / batch_size) for task, size in dataset_sizes.items()}


def plan_epoch(schedule: str, num_batches: Mapping[str, int], *, epoch: int = 0, num_epochs: int = 1,
               task_order: Sequence[str] | None = None, task_weights: Mapping[str, float] | None = None,
               generator: torch.Generator | None = None) -> list[Step]:
    """The steps of epoch `epoch` (0-based) of a run of `num_epochs` epochs.

    num_batches: batches per task (its keys are the tasks trained; see count_batches).
    task_order: for rr-batch, rr-epoch, sequential; defaults to the order of num_batches.
    task_weights: mtdnn only; tasks left out weigh 1.
    generator: mtdnn's shuffle; None uses torch's global generator.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; expected one of {', '.join(SCHEDULES)}")
    if not num_batches:
        raise ValueError("no tasks to schedule")
    empty = [task for task, count in num_batches.items() if count < 1]
    if empty:
        raise ValueError(f"every task needs at least one batch; none for {', '.join(empty)}")
    if not 0 <= epoch < num_epochs:
        raise ValueError(f"epoch {epoch} is outside a run of {num_epochs} epochs")
    order = tuple(num_batches) if task_order is None else tuple(task_order)
    unknown = [task for task in order if task not in num_batches]
    if unknown or not order:
        raise ValueError(f"task order {','.join(order)!r} must name tasks from {', '.join(num_batches)}")
    if task_weights is not None and schedule != "mtdnn" and any(w != 1 for w in task_weights.values()):
        raise ValueError(f"task weights are sampling weights of the mtdnn schedule, not of {schedule!r}")

    if schedule == "avg":
        return [tuple(num_batches)] * min(num_batches.values())
    if schedule == "rr-batch":
        return _round_robin_batches(num_batches, order)
    if schedule == "rr-epoch":
        return [(task,) for task in order for _ in range(num_batches[task])]
    if schedule == "sequential":
        if num_epochs < len(order):
            raise ValueError(f"sequential training of {len(order)} tasks needs at least {len(order)} epochs, "
                             f"got {num_epochs}")
        task = order[epoch * len(order) // num_epochs]
        return [(task,)] * num_batches[task]
    return _merged_and_shuffled(num_batches, task_weights or {}, generator)


def numbered(steps: Sequence[Step]) -> list[tuple[tuple[str, int], ...]]:
    """An epoch's steps with each task's batch number: (task, k) takes the task's k-th batch of the epoch."""
    taken: dict[str, int] = {}
    numbered_steps = []
    for step in steps:
        numbered_steps.append(tuple((task, taken.get(task, 0)) for task in step))
        for task in step:
            taken[task] = taken.get(task, 0) + 1
    return numbered_steps


def _round_robin_batches(num_batches: Mapping[str, int], order: Sequence[str]) -> list[Step]:
    remaining = dict(num_batches)
    # Tasks not in the order are not trained; only the listed ones count towards exhaustion.
    for task in set(num_batches) - set(order):
        remaining[task] = 0
    steps = []
    while any(remaining.values()):
        for task in order:
            if remaining[task]:
                steps.append((task,))
                remaining[task] -= 1
    return steps


def _merged_and_shuffled(num_batches: Mapping[str, int], task_weights: Mapping[str, float],
                         generator: torch.Generator | None) -> list[Step]:
    unknown = set(task_weights) - set(num_batches)
    if unknown:
        raise ValueError(f"task weights name tasks that are not trained: {', '.join(sorted(unknown))}")
    merged = [(task,) for task, count in num_batches.items()
              for _ in range(math.ceil(task_weights.get(task, 1.0) * count))]
    if not merged:
        raise ValueError("all task weights are zero; nothing to train")
    import torch

    permutation = torch.randperm(len(merged), generator=generator).tolist()
    return [merged[i] for i in permutation]


def check_plan(schedule: str, tasks: Sequence[str], num_epochs: int, task_order: Sequence[str] | None = None,
               task_weights: Mapping[str, float] | None = None) -> None:
    """Raise ValueError now, before any data is read, for the flags plan_epoch would refuse after it (task weights
    of a schedule other than mtdnn, fewer epochs than a sequential order's tasks, ...): it plans one epoch of a
    batch a task."""
    import torch

    try:
        plan_epoch(schedule, dict.fromkeys(tasks, 1), epoch=0, num_epochs=num_epochs, task_order=task_order,
                   task_weights=task_weights, generator=torch.Generator().manual_seed(0))
    except ValueError as error:
        raise ValueError(f"--schedule {schedule}: {error}") from None
