"""Inference, the one evaluation loop: a model's soft outputs on a task's split, in the split's order."""
from contextlib import nullcontext

import torch

from minbert.common.progress import progress
from minbert.common.ordering import sorted_batches
from minbert.data.batching import Buckets, sorted_token_budget_batches
from minbert.data.splits import TaskSplit
from minbert.tasks import REGISTRY


@torch.no_grad()
def soft_outputs(model, split: TaskSplit, pad_id: int, batch_size: int = 128, autocast=None,
                 max_tokens: int = 0, buckets: Buckets | None = None) -> torch.Tensor:
    """Soft outputs (tasks.Task.soft) for every example of `split`, in its order; batches sorted by length, of
    `batch_size` rows or (max_tokens > 0) up to `max_tokens` real tokens; each padded to one of `buckets`' shapes,
    as the training's batches are (--length-buckets)."""
    task = REGISTRY[split.task]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    outputs = None
    tokens = split.token_lengths()  # the longest batches come first: the time left is estimated from tokens
    batches = (sorted_token_budget_batches(tokens, max_tokens) if max_tokens
               else sorted_batches(split.lengths(), batch_size))
    for rows in progress(batches, f"predicting {split.task}", total=len(split), unit="example", weight=len,
                         effort=lambda rows: sum(tokens[i] for i in rows)):
        inputs = {k: v.to(device) for k, v in split.batch(rows, pad_id, buckets)["inputs"].items()}
        with autocast() if autocast else nullcontext():
            batch_outputs = task.soft(model(split.task, inputs)[:len(rows)]).cpu()  # without the padding rows
        if outputs is None:
            outputs = torch.empty((len(split), *batch_outputs.shape[1:]))
        outputs[rows] = batch_outputs
    model.train(was_training)
    return outputs
