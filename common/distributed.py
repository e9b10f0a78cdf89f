"""Data-parallel training over the processes torchrun starts: one per GPU (NCCL), or several on a CPU (gloo).

Every process holds the whole model and trains on its own share of each step's batch; the steps are those of one
process with the whole batch:

    start      each process joins the group first (setup), and asks its rank only after; rank 0's starting weights
               are broadcast, then each process draws its own random stream (dropout, augmentations) from the seed
               and its rank (start_replicas); a world of one keeps the seed's own stream
    each step  a process's loss weighs its share of the step's rows (loss_weight), so that the gradients averaged
               over the processes are the gradients of the mean loss over all the rows; a process without rows
               computes a stand-in row whose loss counts zero (rows_to_compute): every process then runs the same
               forward and backward passes, has gradients (zeros, for it) for the same parameters, and meets the
               others in the same collectives
    gradients  averaged by GradientSync: while the plain backward pass runs, in buckets sent as their gradients
               are ready (communication overlaps the pass, as in torch's DistributedDataParallel); after other
               passes (PCGrad's Jacobians, gradient caching's replays) in one all_reduce of a flat buffer
    logging    each process keeps its part of the logged losses; they are summed at log lines (sum_over_processes)
    files      rank 0 alone reads and writes the output folder; what it reads or decides reaches the others by
               broadcast (on_main), so machines need not share a disk
    end        a finished command's processes leave the group together and exit at once (exit_finished_process)

A plain `python ...` run is a world of one process: every function here is then a no-op.
"""
import logging
import os
import sys

import torch
import torch.distributed as dist

from common.errors import UserError
from common.seeding import derived_seed, seed_everything

# DistributedDataParallel's default bucket: large enough that a message is not dominated by its latency, small
# enough that the first one leaves early in the backward pass.
BUCKET_BYTES = 25 * 2**20


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def setup(device: torch.device) -> torch.device:
    """Join torchrun's process group (NCCL on GPUs, gloo on CPU); returns this process's device.

    The other processes then log errors only: they read the same data and train the same model, so their
    warnings and reports would repeat rank 0's.
    """
    if not launched_by_torchrun() or dist.is_initialized():
        return device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if dist.get_rank() != 0:
        logging.getLogger().setLevel(logging.ERROR)
    return device


def exit_finished_process() -> None:
    """The end of a torchrun process whose command finished: the processes leave the group together (a barrier,
    then destroy_process_group), what is buffered is flushed, and the process exits with code 0 without Python's
    finalization. A gloo process that ends the usual way may abort there, its work done ("terminate called without
    an active exception", pytorch/pytorch issue 190489: the group's threads still reach for Python objects while the
    interpreter is torn down), and torchrun then reports a finished run as failed. Outside torchrun: nothing."""
    if not dist.is_initialized():
        return
    barrier()
    dist.destroy_process_group()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _check_joined() -> None:
    # Before setup every torchrun process would answer "rank 0 of 1": and all of them would act as rank 0.
    if launched_by_torchrun() and not dist.is_initialized():
        raise RuntimeError("asked for the rank before joining torchrun's process group (common.distributed.setup)")


def world_size() -> int:
    _check_joined()
    return dist.get_world_size() if dist.is_initialized() else 1


def rank() -> int:
    _check_joined()
    return dist.get_rank() if dist.is_initialized() else 0


def is_main() -> bool:
    """Rank 0 reads and writes the output folder, evaluates and logs; the others only train."""
    return rank() == 0


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


def _device() -> torch.device:
    """Where collectives take their tensors: NCCL's live on this process's GPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# ---- rank 0's files and decisions ----

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


def on_main(read):
    """read() on rank 0 (a file of the output folder, which only its machine need have), its value on every
    process. A UserError it raises is raised on every process, so that all of them stop with its message."""
    if world_size() == 1:
        return read()
    outcome = None
    if is_main():
        try:
            outcome = (read(), None)
        except UserError as error:
            outcome = (None, error)
    value, error = broadcast_object(outcome)
    if error is not None:
        raise error
    return value


# ---- the start: one set of weights, a random stream each ----

def _unique_tensors(modules) -> list[torch.Tensor]:
    """The parameters and buffers of `modules`, each once (modules may share an encoder)."""
    tensors = {}
    for module in modules:
        for tensor in (*module.parameters(), *module.buffers()):
            tensors.setdefault(id(tensor), tensor)
    return list(tensors.values())


def _broadcast_flat(tensors: list[torch.Tensor]) -> None:
    """Rank 0's values of `tensors` on every process, one broadcast per dtype."""
    for dtype in dict.fromkeys(t.dtype for t in tensors):
        group = [t for t in tensors if t.dtype == dtype]
        flat = torch._utils._flatten_dense_tensors([t.data for t in group]).to(_device())
        dist.broadcast(flat, src=0)
        for tensor, value in zip(group, torch._utils._unflatten_dense_tensors(flat, group)):
            tensor.data.copy_(value)


def start_replicas(modules, seed: int) -> None:
    """Rank 0's weights (parameters and buffers) on every process, as DistributedDataParallel starts; then each
    process's own random stream, from the seed and its rank, so that the processes draw different dropout masks
    and augmentations, as one process does for the rows of a whole batch. Call it once the model is built;
    a resumed run then restores each process's saved stream. A world of one keeps the stream it has."""
    if world_size() == 1:
        return
    _broadcast_flat(_unique_tensors(modules))
    seed_everything(derived_seed(seed, rank()))


# ---- a step's rows ----

def loss_weight(rows: int, step_rows: int) -> float:
    """The factor of the mean loss over this process's `rows` of a step's `step_rows` (all processes' together):
    the gradients averaged over the processes are then those of the mean loss over all the step's rows, however
    unevenly they are shared out. 1 in a single process with the whole batch; 0 for a process with none."""
    return world_size() * rows / step_rows


def rows_to_compute(piece: list, rows: list) -> list | None:
    """The rows this process computes for its `piece` of a batch's `rows`: the piece; or, where it is empty under
    torchrun, the batch's first row as a stand-in, whose loss the caller weighs zero (loss_weight(0, ...)), so that
    this process runs the same passes as the others. None in a single process: it skips an empty piece."""
    if piece:
        return piece
    return rows[:1] if world_size() > 1 else None


def sum_over_processes(values: list) -> list[float]:
    """Each value (a number or a one-element tensor) summed over the processes, in one all_reduce: the whole
    step's losses and examples at a log line. Reading them waits for the device, so call it at log lines only."""
    if world_size() == 1 or not values:
        return [float(value) for value in values]
    total = torch.stack([torch.as_tensor(value, dtype=torch.float64).to(_device()).reshape(()) for value in values])
    dist.all_reduce(total)
    return total.tolist()


# ---- gradients ----

def average_gradients(parameters) -> None:
    """Replace every gradient by its mean over the processes, in one all_reduce of a flat buffer.

    Only parameters that have a gradient take part: every process runs the same passes (rows_to_compute), so
    they have gradients for the same parameters; a parameter without one stays without, and the optimizer
    leaves it alone as in a single-process run.
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


def _parameters_reached(loss: torch.Tensor) -> set[int]:
    """The ids of the leaf tensors whose gradients loss.backward() will accumulate: the leaves of its graph."""
    seen, stack, leaves = set(), [loss.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable"):  # AccumulateGrad: the node that writes a leaf's .grad
            leaves.add(id(node.variable))
        stack.extend(next_node for next_node, _ in node.next_functions)
    return leaves


def _buckets(parameters: list[torch.Tensor], bucket_bytes: int) -> list[list[torch.Tensor]]:
    """Consecutive runs of parameters of one dtype and device, of about bucket_bytes each."""
    buckets, size = [], 0
    for p in parameters:
        if not buckets or size >= bucket_bytes or (p.dtype, p.device) != (buckets[-1][0].dtype, buckets[-1][0].device):
            buckets.append([])
            size = 0
        buckets[-1].append(p)
        size += p.numel() * p.element_size()
    return buckets


class _OverlappedAverage:
    """One backward pass whose gradients are averaged bucket by bucket while it runs.

    Buckets are sent in their fixed order, each as soon as it and those before it are complete, so every process
    starts the same all_reduces in the same order, whatever order its pass produces the gradients in (NCCL needs
    that; DDP's reducer does the same). A bucket is complete when each of its parameters that takes part has its
    gradient: those the pass reaches (read from its graph before it runs, as DDP's find_unused_parameters does),
    and those with a gradient from an earlier pass of the step (accumulation), which are final already.
    """

    def __init__(self, buckets: list[list[torch.Tensor]], loss: torch.Tensor):
        reached = _parameters_reached(loss)
        self.buckets = [[p for p in bucket if id(p) in reached or p.grad is not None] for bucket in buckets]
        self.missing = [{id(p) for p in bucket if id(p) in reached} for bucket in self.buckets]
        self.bucket_of = {id(p): index for index, bucket in enumerate(self.buckets) for p in bucket}
        self.sent = []  # (bucket, all_reduce in flight, its flat buffer), in bucket order
        self.hooks = [p.register_post_accumulate_grad_hook(self._ready)
                      for bucket in self.buckets for p in bucket if id(p) in reached]
        self._send_complete()  # buckets whose every gradient came from earlier passes

    def _ready(self, parameter: torch.Tensor) -> None:
        self.missing[self.bucket_of[id(parameter)]].discard(id(parameter))
        self._send_complete()

    def _send_complete(self) -> None:
        while len(self.sent) < len(self.buckets) and not self.missing[len(self.sent)]:
            bucket = [p for p in self.buckets[len(self.sent)] if p.grad is not None]
            flat = torch._utils._flatten_dense_tensors([p.grad for p in bucket]) if bucket else None
            work = dist.all_reduce(flat, async_op=True) if bucket else None
            self.sent.append((bucket, work, flat))

    def finish(self) -> None:
        """Wait for every bucket and write the averages into .grad."""
        for hook in self.hooks:
            hook.remove()
        # A parameter the graph reaches may still get no gradient (an undefined one, e.g. through an output the
        # loss does not use): the same on every process, as the graph is. Its bucket goes now, without it.
        for missing in self.missing:
            missing.clear()
        self._send_complete()
        world = world_size()
        for bucket, work, flat in self.sent:
            if not bucket:
                continue
            work.wait()
            flat /= world
            grads = [p.grad for p in bucket]
            for grad, averaged in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads)):
                grad.copy_(averaged)


class GradientSync:
    """Averages each step's gradients over the processes: overlapped with the step's last backward pass where
    that pass is a plain loss.backward(), else in one flat all_reduce once the passes are done.

        sync = GradientSync(parameters)
        sync.backward(loss, overlap=False)   # an earlier accumulation step: its gradients stay local (DDP's no_sync)
        sync.backward(loss)                  # the step's last pass: buckets leave as their gradients are ready
        sync.average()                       # before clipping and the optimizer step

    Buckets follow the parameters in reverse: a backward pass produces the last layers' gradients first.
    """

    def __init__(self, parameters: list[torch.Tensor], bucket_bytes: int = BUCKET_BYTES):
        self.parameters = [p for p in parameters if p.requires_grad]
        self.buckets = _buckets(self.parameters[::-1], bucket_bytes)
        self.overlapped = None

    def backward(self, loss: torch.Tensor, overlap: bool = True) -> None:
        if overlap and world_size() > 1:
            self.overlapped = _OverlappedAverage(self.buckets, loss)
        loss.backward()

    def average(self) -> None:
        if self.overlapped is not None:
            self.overlapped.finish()
            self.overlapped = None
        else:  # passes of their own (PCGrad, gradient caching), or a single process
            average_gradients(self.parameters)


# ---- in-batch negatives ----

class _GatherRows(torch.autograd.Function):
    """All processes' rows, concatenated in rank order; the gradient flows back into this process's rows.

    Every process computes the same loss from the gathered rows, so the loss's gradient with respect to this
    process's rows is the slice of the gathered gradient that belongs to them. It is multiplied by the number
    of processes because the gradients are then averaged: the encoder's averaged gradient sums each process's
    part, which is the gradient of the one loss over the whole batch. A process may have no rows: it still
    takes part, and its gradient is empty.
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
