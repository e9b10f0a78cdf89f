"""Data-parallel training under torchrun (the processes' life cycle: common/distributed.py): every process holds
the whole model and trains on its own share of each step's batch, and the steps are those of one process with the
whole batch. PyTorch's DistributedDataParallel (DDP) averages the gradients.

    start        rank 0's weights on every process, and a random stream each (dropout, augmentations) from the
                 seed and the rank (start_replicas)
    the module   a run's forward entry point (Run.module(): a multi-task step's task losses, a contrastive stage's
                 loss) is wrapped in DDP when there are several processes; a world of one runs it as it is, so a
                 single-process run is plain PyTorch
    each step    a process's loss weighs its share of the step's rows, so that the averaged gradients are those of
                 the mean loss over all the rows; a process without rows computes a stand-in row whose loss counts
                 zero (data.batching.Share), so every process runs the same passes and meets the others in the same
                 collectives. Every pass but the step's last (an accumulation part; a multi-task step's task, each
                 backpropagated on its own) runs under no_sync(): its gradients stay local, and the last pass's
                 backward sends them all, bucket by bucket as they are ready
    own passes   PCGrad's per-task passes, gradient caching's replays and --fusion's update inside a step
                 (Run.passes_apart) run under no_sync(), then one explicit all_reduce (DataParallel.part says why)
    unused       heads a step does not use (another task's, --fusion's on a contrastive step) are found by DDP's
                 find_unused_parameters: they keep no gradient, as in one process (static_graph would need every
                 step to use the same parameters; docs/torchrun.md compares their speed)
    negatives    gather_rows: every process's embeddings, so that a contrastive loss sees the whole batch

--ddp-bucket-mb sets DDP's bucket size; --ddp-compress bf16 sends the buckets in bfloat16 (DDP's
bf16_compress_hook), half the bytes, for slow links between machines.
"""
import contextlib
import inspect

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as distributed_nn
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook
from torch.nn.parallel import DistributedDataParallel

from minbert.common import distributed
from minbert.common.seeding import derived_seed, seed_everything


class DataParallel:
    """A run's module, wrapped in DistributedDataParallel under torchrun, and how each part of a step meets the
    other processes (the engine's loop):

        with data_parallel.part(last=False): ...   # an earlier accumulation part: its gradients stay local
        with data_parallel.part(last=True): ...    # the last: DDP averages the gradients while its pass runs
        data_parallel.average()                    # before clipping: the all_reduce of a run whose passes run apart
    """

    def __init__(self, module: nn.Module | None, parameters: list[torch.Tensor], passes_apart: bool = False,
                 bucket_mb: float = 25, compress: str = "none", wrap: bool | None = None):
        """wrap: whether DDP wraps the module; by default where there are several processes (a world of one: the
        module as it is, and no collectives; benchmarks/ddp_smoke.py wraps one)."""
        self.module, self.parameters, self.passes_apart = module, parameters, passes_apart
        self.wrapped = distributed.world_size() > 1 if wrap is None else wrap
        if not self.wrapped:
            return
        device = next(module.parameters()).device
        # Buffers are rank 0's from the start (start_replicas, and DDP's own broadcast) and none changes while
        # training: a forward pass need not wait for rank 0's. (torch 2.13 renamed broadcast_buffers; the GPU
        # machine's 2.11 knows only that name.)
        names = inspect.signature(DistributedDataParallel).parameters
        buffers = "forward_sync_buffers" if "forward_sync_buffers" in names else "broadcast_buffers"
        self.module = DistributedDataParallel(module, device_ids=[device] if device.type == "cuda" else None,
                                              bucket_cap_mb=bucket_mb, find_unused_parameters=True,
                                              **{buffers: False})
        if compress == "bf16":
            self.module.register_comm_hook(None, bf16_compress_hook if device.type == "cuda" else _bf16_on_gloo)

    def part(self, last: bool):
        """Around a part of a step (its forward and backward passes): DDP's no_sync() but for the step's last part.

        A run whose passes run apart (PCGrad's per-task passes, gradient caching's replays, --fusion's update
        inside a step) is under no_sync() throughout, and average() sends its gradients in one all_reduce: DDP
        averages one backward pass of each forward pass through it, and those runs make several passes over one
        graph (it would send each, or refuse a parameter made ready twice). All their steps run so: DDP's
        find_unused_parameters counts what a step's parts use since its last averaging, and an earlier step's
        passes outside it would count in the next."""
        if self.wrapped and (self.passes_apart or not last):
            return self.module.no_sync()
        return contextlib.nullcontext()

    def average(self) -> None:
        """After a step's passes, before clipping: the explicit all_reduce of a run whose passes run apart."""
        if self.passes_apart and self.wrapped:
            average_gradients(self.parameters)


def _bf16_on_gloo(process_group, bucket):
    # DDP refuses bf16_compress_hook by its name without CUDA and NCCL, though gloo sums bfloat16 too: on CPU
    # processes (the tests) the same hook runs under this name.
    return bf16_compress_hook(process_group, bucket)


def start_replicas(modules, seed: int) -> None:
    """Rank 0's weights (parameters and buffers) on every process; then each process's own random stream, from
    the seed and its rank: the processes draw different dropout masks and augmentations, as one process does for
    the rows of a whole batch (a resumed run restores each one's saved stream). A world of one keeps its stream."""
    if distributed.world_size() == 1:
        return
    with distributed.collective():
        # Each tensor once (modules may share an encoder); they are on the process's device already.
        for tensor in {id(t): t for module in modules for t in (*module.parameters(), *module.buffers())}.values():
            dist.broadcast(tensor.data, src=0)
    seed_everything(derived_seed(seed, distributed.rank()))


@distributed.collective()
def average_gradients(parameters) -> None:
    """Replace every gradient by its mean over the processes, in one all_reduce of a flat buffer.

    Only parameters that have a gradient take part: every process runs the same passes (on a stand-in row where
    it has none), so they have gradients for the same parameters; a parameter without one stays without, and the
    optimizer leaves it alone as in a single-process run.
    """
    average_tensors([p.grad for p in parameters if p.grad is not None])


@distributed.collective()
def average_tensors(tensors: list[torch.Tensor]) -> None:
    """Replace each tensor by its mean over the processes, in one all_reduce of a flat buffer."""
    world = distributed.world_size()
    if world == 1 or not tensors:
        return
    flat = torch._utils._flatten_dense_tensors(tensors)
    dist.all_reduce(flat)
    flat /= world
    for tensor, averaged in zip(tensors, torch._utils._unflatten_dense_tensors(flat, tensors)):
        tensor.copy_(averaged)


@distributed.collective()
def gather_rows(rows: torch.Tensor, differentiable: bool = True) -> torch.Tensor:
    """[sum of all processes' rows, ...], in rank order: in-batch negatives from every process (SimCSE, MNRL,
    ConSERT). A process may have no rows (an empty share): it still takes part.

    The gradient flows back into this process's rows: torch.distributed.nn's all_gather sums, in its backward
    pass, every process's gradient of its rows; each process computes the same loss from the gathered rows, so
    that sum is the number of processes times the loss's gradient, and DDP's average of the encoder's gradients
    is then the gradient of the one loss over the whole batch. Its all_gather needs rows of one shape on every
    process, and shares may be uneven (17 rows on 2 processes): each process's rows are padded to the largest
    share and cut back after (the padding's gradient is dropped).
    """
    if distributed.world_size() == 1:
        return rows
    sizes = [torch.zeros(1, dtype=torch.long, device=rows.device) for _ in range(distributed.world_size())]
    dist.all_gather(sizes, torch.tensor([len(rows)], device=rows.device))
    sizes = [int(size) for size in sizes]
    padded = torch.cat([rows, rows.new_zeros((max(sizes) - len(rows), *rows.shape[1:]))])
    if differentiable:
        parts = distributed_nn.all_gather(padded)
    else:
        parts = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(parts, padded.contiguous())
    return torch.cat([part[:size] for part, size in zip(parts, sizes)])
