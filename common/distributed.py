"""Data-parallel training over the processes torchrun starts: one per GPU (NCCL), or several on a CPU (gloo).

Every process holds the whole model and trains on its own share of each step's batch; the steps are those of one
process with the whole batch:

    start      each process joins the group first (setup), and asks its rank only after; rank 0's starting weights
               are broadcast, then each process draws its own random stream (dropout, augmentations) from the seed
               and its rank (start_replicas); a world of one keeps the seed's own stream
    each step  a process's loss weighs its share of the step's rows, so that the gradients averaged over the
               processes are the gradients of the mean loss over all the rows; a process without rows computes a
               stand-in row whose loss counts zero (data.batching.Share): every process then runs the same forward
               and backward passes, has gradients (zeros, for it) for the same parameters, and meets the others
               in the same collectives
    gradients  averaged by GradientSync: while the plain backward pass runs, in buckets sent as their gradients
               are ready (communication overlaps the pass, as in torch's DistributedDataParallel); after other
               passes (PCGrad's Jacobians, gradient caching's replays) in one all_reduce of a flat buffer
    logging    each process keeps its part of the logged losses; they are summed at log lines (sum_over_processes)
    files      rank 0 alone reads and writes the output folder; what it reads or decides reaches the others by
               broadcast (on_main), so machines need not share a disk
    refusals   printed once: by rank 0 where every process refuses alike (on_main), else by each machine's first
               process (refuse)
    a failure  a collective that fails because processes stopped (killed, crashed, their machine gone) raises
               ProcessStopped, which names their ranks (each process beats in the group's store, and the failing
               process looks whose beat stopped); a process that waits longer than --dist-timeout fails too
    end        a finished command's processes leave the group together and exit at once (exit_finished_process)

A plain `python ...` run is a world of one process: every function here is then a no-op.
"""
import contextlib
import datetime
import logging
import os
import socket
import sys
import threading
import time

import torch
import torch.distributed as dist

from common.errors import UserError
from common.seeding import derived_seed, seed_everything

# DistributedDataParallel's default bucket: large enough that a message is not dominated by its latency, small
# enough that the first one leaves early in the backward pass.
BUCKET_BYTES = 25 * 2**20


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def restarts() -> int:
    """How many times torchrun has restarted this job's processes (--max-restarts): 0 in its first attempt."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def job() -> str | None:
    """The torchrun job of this process, the same in each of its attempts: its run id, this machine and its
    torchrun agent (the processes' parent, which restarts them); None without torchrun."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return None
    return f"{os.environ['TORCHELASTIC_RUN_ID']} on {socket.gethostname()}, agent pid {os.getppid()}"


def setup(device: torch.device, timeout: float) -> torch.device:
    """Join torchrun's process group (NCCL on GPUs, gloo on CPU); returns this process's device. `timeout`: the
    seconds a collective waits for the other processes (--dist-timeout) before it fails.

    The other processes then log errors only: they read the same data and train the same model, so their
    warnings and reports would repeat rank 0's.
    """
    if not launched_by_torchrun() or dist.is_initialized():
        return device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    backend, timeout = "nccl" if device.type == "cuda" else "gloo", datetime.timedelta(seconds=timeout)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # torchrun keeps one store for every attempt of a job (--max-restarts), and the group's keys are the same in
        # each: a restarted attempt would meet the addresses of the processes before it and fail to connect, or
        # hang. Each attempt meets under its own prefix instead.
        world = int(os.environ["WORLD_SIZE"])
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size=world,
                              is_master=False, timeout=timeout)
        dist.init_process_group(backend, store=dist.PrefixStore(f"attempt {restarts()}", store), timeout=timeout,
                                rank=int(os.environ["RANK"]), world_size=world)
    else:
        dist.init_process_group(backend, timeout=timeout)
    _start_heartbeat()
    if dist.get_rank() != 0:
        logging.getLogger().setLevel(logging.ERROR)
    return device


# ---- a process that stops ----

# How often each process adds 1 to its counter in the job's store (from a thread of its own, so that a process busy
# in a long evaluation beats too), and how long a process whose collective failed watches the counters before it
# names those that did not move: three beats, so that a process slowed down by a busy machine still counts as alive.
BEAT_SECONDS = 1.0
ROLL_CALL_SECONDS = 3 * BEAT_SECONDS
_heartbeats = None  # the counters in the store, once this process has joined the group


class ProcessStopped(Exception):
    """Other processes of the job stopped (killed, crashed, refused on their own, or their machine is gone), and so
    a collective of this process failed: its message, one line, names them and this process."""


def _start_heartbeat() -> None:
    global _heartbeats
    # The store the processes met in to form the group: torchrun's of rank 0's machine (or rank 0 itself, where
    # torchrun keeps none), which every process reaches. torch has no public way to it.
    _heartbeats = dist.PrefixStore("heartbeat", dist.distributed_c10d._get_default_store())
    key = str(dist.get_rank())

    def beat():
        try:
            while True:
                _heartbeats.add(key, 1)
                time.sleep(BEAT_SECONDS)
        except RuntimeError:  # the store is gone, and with it whoever would read the beats
            return

    threading.Thread(target=beat, name="heartbeat", daemon=True).start()


def _stopped_ranks() -> list[int] | None:
    """The ranks whose counters did not move over ROLL_CALL_SECONDS; None where the store is gone."""
    keys = [str(rank) for rank in range(dist.get_world_size())]
    try:
        before = [_heartbeats.add(key, 0) for key in keys]
        time.sleep(ROLL_CALL_SECONDS)
        after = [_heartbeats.add(key, 0) for key in keys]
    except RuntimeError:
        return None
    return [rank for rank, (then, now) in enumerate(zip(before, after)) if then == now]


@contextlib.contextmanager
def _collective():
    """Around every collective: its failure because other processes stopped becomes ProcessStopped, naming them.
    Any other failure (a bug; a process that hangs past --dist-timeout, beating still) keeps its traceback."""
    try:
        yield
    except RuntimeError as error:  # gloo's failures are RuntimeErrors; NCCL's and the store's subclass it
        if _heartbeats is None:  # a group this module did not set up: no beats to tell who stopped
            raise
        stopped = _stopped_ranks()
        if stopped == []:
            raise
        # The backend's first sentence, without its source file: e.g. "Read error [10.0.0.2]:51234: Connection reset
        # by peer" (gloo), or "Timed out waiting 1800000ms for recv operation to complete".
        reason = str(error).strip().splitlines()[0].split("] ", 1)[-1].split(". ")[0]
        if stopped is None:  # it lives with rank 0's torchrun, or with rank 0
            who = "the process of rank 0, or its torchrun, stopped (the job's store, which they keep, is gone; "
        else:
            who = (f"the process{'es' * (len(stopped) > 1)} of rank{'s' * (len(stopped) > 1)} "
                   f"{', '.join(map(str, stopped))} stopped (")
        raise ProcessStopped(f"{who}{reason}); this process (rank {dist.get_rank()}) ends too") from error


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


@_collective()
def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


def _device() -> torch.device:
    """Where collectives take their tensors: NCCL's live on this process's GPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# ---- refusals, and the end ----

def processes() -> str:
    """This job's processes as torchrun's flags count them: "2 x 4 = 8 processes (--nnodes x --nproc-per-node)"
    ("8 processes" where the machines run different numbers; "1 process" without torchrun). Read from torchrun's
    environment, so it can be said before joining the group."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return "1 process"
    nodes, per_node = int(os.environ.get("GROUP_WORLD_SIZE", "1")), int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if nodes * per_node != world:
        return f"{world} processes"
    return f"{nodes} x {per_node} = {world} processes (--nnodes x --nproc-per-node)"


def on_every_process(error: Exception) -> Exception:
    """Mark a refusal that every process raises alike, as it follows from what rank 0 decided or from what all of
    them share: rank 0 alone prints it (refuse)."""
    error.on_every_process = True
    return error


# How long a torchrun process that leaves a refusal to another process of its machine waits before it exits:
# torchrun ends a machine's processes as soon as one of them exits, and would end the one that prints before it
# printed, had a silent one exited first. The one that prints reaches the same refusal within seconds (a process
# that started later, or reads the data more slowly) and exits; torchrun ends this one meanwhile.
SILENT_WAIT_SECONDS = 60


def refuse(line: str, error: Exception | None = None) -> None:
    """End this process with a refusal: `line` on stderr, exit code 2 (cli.run; cli.Parser for the command line,
    error None). Under torchrun the line is printed once, not once a process: a refusal marked by on_every_process
    by rank 0, after which every process leaves at once (a barrier: none exits before rank 0 has printed); any
    other (a flag, a data file, the device) by the first process of each machine (LOCAL_RANK 0), since a machine's
    processes run one command on the same files and devices and so refuse alike, while another machine may refuse
    what rank 0 accepts and must say so itself. The others end silently."""
    every = getattr(error, "on_every_process", False)
    prints = os.environ.get("RANK" if every else "LOCAL_RANK", "0") == "0"  # torchrun's: known before joining too
    if prints:
        print(line, file=sys.stderr, flush=True)
    if every:
        barrier()
    elif not prints:
        time.sleep(SILENT_WAIT_SECONDS)
    exit_process(2)


def _end_now(code: int) -> None:
    # Without Python's finalization: a gloo process that ends the usual way may abort there ("terminate called
    # without an active exception", pytorch/pytorch issue 190489: the group's threads still reach for Python objects
    # while the interpreter is torn down), which replaces its exit code (a finished run's then reads as failed).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def exit_process(code: int) -> None:
    """Exit with `code`: a process of torchrun's group at once, what is buffered flushed; any other by sys.exit (a
    command called in Python raises SystemExit)."""
    if dist.is_initialized():
        _end_now(code)
    sys.exit(code)


def exit_finished_process() -> None:
    """The end of a torchrun process whose command finished: the processes leave the group together (a barrier,
    then destroy_process_group) and each exits at once with code 0. Outside torchrun: nothing."""
    if not dist.is_initialized():
        return
    barrier()
    dist.destroy_process_group()
    _end_now(0)


# ---- rank 0's files and decisions ----

@_collective()
def all_gather_objects(value) -> list:
    """Every process's `value`, in rank order (e.g. each one's random state, for a checkpoint)."""
    if world_size() == 1:
        return [value]
    values = [None] * world_size()
    dist.all_gather_object(values, value)
    return values


@_collective()
def broadcast_object(value):
    """Rank 0's `value` on every process (e.g. a decision only rank 0 can make)."""
    if world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def on_main(read):
    """read() on rank 0 (a file of the output folder, which only its machine need have), its value on every
    process. A UserError it raises is raised on every process, so that all of them stop, and rank 0 alone prints
    it (on_every_process)."""
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
        raise on_every_process(error)
    return value


# ---- the start: one set of weights, a random stream each ----

def _unique_tensors(modules) -> list[torch.Tensor]:
    """The parameters and buffers of `modules`, each once (modules may share an encoder)."""
    tensors = {}
    for module in modules:
        for tensor in (*module.parameters(), *module.buffers()):
            tensors.setdefault(id(tensor), tensor)
    return list(tensors.values())


@_collective()
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


# ---- the logged sums ----

@_collective()
def sum_over_processes(values: list) -> list[float]:
    """Each value (a number or a one-element tensor) summed over the processes, in one all_reduce: the whole
    step's losses and examples at a log line. Reading them waits for the device, so call it at log lines only."""
    if world_size() == 1 or not values:
        return [float(value) for value in values]
    total = torch.stack([torch.as_tensor(value, dtype=torch.float64).to(_device()).reshape(()) for value in values])
    dist.all_reduce(total)
    return total.tolist()


# ---- gradients ----

@_collective()
def average_gradients(parameters) -> None:
    """Replace every gradient by its mean over the processes, in one all_reduce of a flat buffer.

    Only parameters that have a gradient take part: every process runs the same passes (on a stand-in row where
    it has none), so they have gradients for the same parameters; a parameter without one stays without, and the
    optimizer leaves it alone as in a single-process run.
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
    """Consecutive runs of parameters of one dtype and device, of about bucket_bytes each; a matrix larger than a
    bucket in a bucket of its own (it is sent by rows: _sent_by_rows)."""
    buckets, size = [], 0
    for p in parameters:
        alone = _sent_by_rows([p], bucket_bytes)
        if (not buckets or alone or size >= bucket_bytes or _sent_by_rows(buckets[-1], bucket_bytes)
                or (p.dtype, p.device) != (buckets[-1][0].dtype, buckets[-1][0].device)):
            buckets.append([])
            size = 0
        buckets[-1].append(p)
        size += p.numel() * p.element_size()
    return buckets


def _sent_by_rows(bucket: list[torch.Tensor], bucket_bytes: int) -> bool:
    """Whether a bucket is one matrix larger than a bucket, whose gradient is averaged by its nonzero rows.

    In BERT that is the word embeddings (30522 rows: 94 MB in bert-base, a third of all the gradients). Their
    gradient is the last that a backward pass produces (the embedding layer is the first of the forward pass), so
    its all_reduce can overlap with nothing and makes the step wait alone at the end; but it is zero except in
    the rows of the tokens in the batch (a few thousand): sending the rows that some process touched averages
    the same numbers in a small part of the time."""
    return len(bucket) == 1 and bucket[0].dim() == 2 and bucket[0].numel() * bucket[0].element_size() > bucket_bytes


class _OverlappedAverage:
    """One backward pass whose gradients are averaged bucket by bucket while it runs.

    Buckets are sent in their fixed order, each as soon as it and those before it are complete, so every process
    starts the same all_reduces in the same order, whatever order its pass produces the gradients in (NCCL needs
    that; DDP's reducer does the same). A bucket is complete when each of its parameters that takes part has its
    gradient: those the pass reaches (read from its graph before it runs, as DDP's find_unused_parameters does),
    and those with a gradient from an earlier pass of the step (accumulation), which are final already.
    """

    def __init__(self, buckets: list[list[torch.Tensor]], by_rows: list[bool], loss: torch.Tensor):
        reached = _parameters_reached(loss)
        self.buckets = [[p for p in bucket if id(p) in reached or p.grad is not None] for bucket in buckets]
        self.by_rows = by_rows
        self.missing = [{id(p) for p in bucket if id(p) in reached} for bucket in self.buckets]
        self.bucket_of = {id(p): index for index, bucket in enumerate(self.buckets) for p in bucket}
        self.sent = []  # (bucket, all_reduce in flight, its flat buffer), in bucket order
        self.hooks = [p.register_post_accumulate_grad_hook(self._ready)
                      for bucket in self.buckets for p in bucket if id(p) in reached]
        self._send_complete()  # buckets whose every gradient came from earlier passes

    def _ready(self, parameter: torch.Tensor) -> None:
        self.missing[self.bucket_of[id(parameter)]].discard(id(parameter))
        self._send_complete()

    @_collective()
    def _send_complete(self) -> None:
        while len(self.sent) < len(self.buckets) and not self.missing[len(self.sent)]:
            index = len(self.sent)
            bucket = [p for p in self.buckets[index] if p.grad is not None]
            rows = None
            if bucket and self.by_rows[index]:
                # The rows any process touched (one small all_reduce, waited for: their number sizes the next).
                touched = bucket[0].grad.ne(0).any(dim=1).to(torch.int32)
                dist.all_reduce(touched)
                rows = touched.nonzero().squeeze(1)
                flat = bucket[0].grad.index_select(0, rows)
            else:
                flat = torch._utils._flatten_dense_tensors([p.grad for p in bucket]) if bucket else None
            work = dist.all_reduce(flat, async_op=True) if bucket else None
            self.sent.append((bucket, work, flat, rows))

    @_collective()
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
        for bucket, work, flat, rows in self.sent:
            if not bucket:
                continue
            work.wait()
            flat /= world
            if rows is not None:  # the untouched rows are zero on every process: their average too
                bucket[0].grad.index_copy_(0, rows, flat)
                continue
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

    Buckets follow the parameters in reverse: a backward pass produces the last layers' gradients first. The word
    embeddings, whose gradient comes last of all, go by their touched rows (_sent_by_rows).
    """

    def __init__(self, parameters: list[torch.Tensor], bucket_bytes: int = BUCKET_BYTES, by_rows: bool = True):
        """by_rows=False: every bucket sent whole (benchmarks/distributed_step.py compares the two)."""
        self.parameters = [p for p in parameters if p.requires_grad]
        self.buckets = _buckets(self.parameters[::-1], bucket_bytes)
        self.by_rows = [by_rows and _sent_by_rows(bucket, bucket_bytes) for bucket in self.buckets]
        self.overlapped = None

    def backward(self, loss: torch.Tensor, overlap: bool = True) -> None:
        if overlap and world_size() > 1:
            self.overlapped = _OverlappedAverage(self.buckets, self.by_rows, loss)
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
    @_collective()
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
