"""Data-parallel training over the processes torchrun starts: one per GPU (NCCL), or several on a CPU (gloo).

Every process holds the whole model, started from the same seed, and trains on its own share of each batch.
After the backward pass the gradients are averaged over the processes (average_gradients), so every replica
takes the same optimizer step and the weights stay equal: what torch's DistributedDataParallel does, done
once per step instead of from backward hooks, because our steps run several backward passes of their own
(gradient caching, PCGrad's Jacobians, Contrastive Tension's two models).

A plain `python ...` run is a world of one process: every function here is then a no-op.
"""
import os

import torch
import torch.distributed as dist


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def setup(device: torch.device) -> torch.device:
    """Join torchrun's process group (NCCL on GPUs, gloo on CPU); returns this process's device."""
    if not launched_by_torchrun() or dist.is_initialized():
        return device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return device


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def is_main() -> bool:
    """Rank 0 writes checkpoints, predictions and logs; the others only train."""
    return rank() == 0


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


def average_gradients(parameters) -> None:
    """Replace every gradient by its mean over the processes, in one all_reduce of a flat buffer.

    Only parameters that have a gradient take part. All processes follow the same schedule (the same task,
    the same method), so they have gradients for the same parameters; a parameter without one stays without,
    and the optimizer leaves it alone as in a single-process run.
    """
    world = world_size()
    if world == 1:
        return
    grads = [p.grad for p in parameters if p.grad is not None]
    flat = torch._utils._flatten_dense_tensors(grads)
    dist.all_reduce(flat)
    flat /= world
    for grad, averaged in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads)):
        grad.copy_(averaged)


def all_gather_objects(value) -> list:
    """Every process's `value`, in rank order (e.g. each one's random state, for a checkpoint)."""
    if world_size() == 1:
        return [value]
    values = [None] * world_size()
    dist.all_gather_object(values, value)
    return values


def broadcast_object(value):
    """Rank 0's `value` on every process (e.g. a decision only rank 0 can make)."""
    if world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


class _GatherRows(torch.autograd.Function):
    """All processes' rows, concatenated in rank order; the gradient flows back into this process's rows.

    Every process computes the same loss from the gathered rows, so the loss's gradient with respect to this
    process's rows is the slice of the gathered gradient that belongs to them. It is multiplied by the number
    of processes because average_gradients later divides by it: the encoder's averaged gradient then sums
    each process's part, which is the gradient of the one loss over the whole batch.
    """

    @staticmethod
    def forward(ctx, rows: torch.Tensor) -> torch.Tensor:
        sizes = [torch.zeros(1, dtype=torch.long, device=rows.device) for _ in range(world_size())]
        dist.all_gather(sizes, torch.tensor([len(rows)], device=rows.device))
        sizes = [int(s) for s in sizes]
        padded = rows.new_zeros((max(sizes), *rows.shape[1:]))
        padded[:len(rows)] = rows
        parts = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(parts, padded.contiguous())
        ctx.sizes, ctx.rank = sizes, rank()
        return torch.cat([part[:size] for part, size in zip(parts, sizes)])

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        start = sum(ctx.sizes[:ctx.rank])
        return grad[start:start + ctx.sizes[ctx.rank]] * len(ctx.sizes)


def gather_rows(rows: torch.Tensor, differentiable: bool = True) -> torch.Tensor:
    """[sum of all processes' rows, ...]: in-batch negatives from every process (SimCSE, MNRL, ConSERT)."""
    if world_size() == 1:
        return rows
    if differentiable:
        return _GatherRows.apply(rows)
    with torch.no_grad():
        return _GatherRows.apply(rows)
