"""Data-parallel training over the processes torchrun starts: one per GPU (NCCL), or several on a CPU (gloo).

Every process holds the whole model and trains on its own share of each step's batch; this module keeps the
processes' life cycle (how their gradients meet: engine/ddp.py):

    start      each process joins the group (setup), and asks its rank only after
    logging    each process keeps its part of the logged losses; they are summed at log lines (sum_over_processes)
    files      rank 0 alone reads and writes the output folder; what it reads or decides reaches the others by
               broadcast (on_main), so machines need not share a disk
    refusals   printed once: by rank 0 where every process refuses alike (on_main), else by each machine's first
               process (refuse)
    a failure  a collective that fails because processes stopped (killed, their machine gone) raises ProcessStopped
               naming them (whose beat in the group's store stopped); waiting past --dist-timeout fails too
    end        a finished command's processes leave the group together and exit at once (exit_finished_process)

A plain `python ...` run is a world of one process: every function here is then a no-op. torch is loaded where a
function needs it: every command uses this module (refusals, torchrun's words) before its flags are parsed, and
--help needs no torch.
"""
import contextlib
import datetime
import logging
import os
import socket
import sys
import threading
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from minbert.common.errors import UserError

if TYPE_CHECKING:
    import torch


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


def torchrun_words() -> list[str] | None:
    """The words that started this process's torchrun, up to the program it runs (["python", "-m",
    "torch.distributed.run", "--nproc-per-node", "2"], [".venv/bin/torchrun", "--standalone", ...]), from its command
    line, which ends with the program and this process's own arguments; None without torchrun, or where that
    command line cannot be read (Linux's /proc: torchrun's is this process's parent)."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return None
    try:
        words = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().decode().split("\0")[:-1]
    except (OSError, UnicodeDecodeError):
        return None
    own = len(sys.argv) - 1
    before = words[:len(words) - own]  # torchrun's own words and the program: a script, or -m and a module
    if words[len(words) - own:] != sys.argv[1:] or len(before) < 2:
        return None
    before = before[:-2] if before[-2] in ("-m", "--module") else before[:-1]
    if len(before) > 1 and Path(before[1]).name == "torchrun":  # the console script, run by its #! interpreter
        before = before[1:]
    return before


def joined():
    """torch.distributed where this process has joined torchrun's process group (setup), else None. A process that
    has not loaded torch has joined none: a refusal before any work loads no torch to say so."""
    dist = sys.modules.get("torch.distributed")
    return dist if dist is not None and dist.is_initialized() else None


def setup(device: "torch.device", timeout: float) -> "torch.device":
    """Join torchrun's process group (NCCL on GPUs, gloo on CPU); returns this process's device. `timeout`: the
    seconds a collective waits for the others (--dist-timeout). Ranks but 0 then log errors only (the same data,
    the same model: their warnings would repeat rank 0's)."""
    import torch
    import torch.distributed as dist

    if not launched_by_torchrun() or dist.is_initialized():
        return device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    backend, timeout = "nccl" if device.type == "cuda" else "gloo", datetime.timedelta(seconds=timeout)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # torchrun keeps one store for every attempt of a job (--max-restarts): a restarted attempt would meet the
        # addresses of the one before under the same keys, and hang. Each attempt meets under its own prefix.
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

# Each process adds 1 to its counter in the job's store every beat (from a thread, so a process busy evaluating
# beats too); a process whose collective failed names those whose counters stood still for three beats.
BEAT_SECONDS = 1.0
ROLL_CALL_SECONDS = 3 * BEAT_SECONDS
_heartbeats = None  # the counters in the store, once this process has joined the group


class ProcessStopped(Exception):
    """A collective failed because other processes stopped (killed, crashed, their machine gone): one line naming
    them and this process."""


def _start_heartbeat() -> None:
    global _heartbeats
    dist = joined()
    # The store the processes met in (torchrun's, or rank 0's), which every process reaches; no public way to it.
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
    keys = [str(rank) for rank in range(world_size())]
    try:
        before = [_heartbeats.add(key, 0) for key in keys]
        time.sleep(ROLL_CALL_SECONDS)
        after = [_heartbeats.add(key, 0) for key in keys]
    except RuntimeError:
        return None
    return [rank for rank, (then, now) in enumerate(zip(before, after)) if then == now]


@contextlib.contextmanager
def collective():
    """Around collectives: a failure because other processes stopped becomes ProcessStopped, naming them; any
    other (a bug; a process that hangs past --dist-timeout, beating still) keeps its traceback."""
    try:
        yield
    except RuntimeError as error:  # gloo's failures are RuntimeErrors; NCCL's and the store's subclass it
        if _heartbeats is None:  # a group this module did not set up: no beats to tell who stopped
            raise
        stopped = _stopped_ranks()
        if stopped == []:
            raise
        # The backend's first sentence, without its source file (gloo's "Read error ...: Connection reset by peer").
        reason = str(error).strip().splitlines()[0].split("] ", 1)[-1].split(". ")[0]
        if stopped is None:  # it lives with rank 0's torchrun, or with rank 0
            who = "the process of rank 0, or its torchrun, stopped (the job's store, which they keep, is gone; "
        else:
            who = (f"the process{'es' * (len(stopped) > 1)} of rank{'s' * (len(stopped) > 1)} "
                   f"{', '.join(map(str, stopped))} stopped (")
        raise ProcessStopped(f"{who}{reason}); this process (rank {rank()}) ends too") from error


def _check_joined() -> None:  # before setup every process would answer "rank 0 of 1", and act as rank 0
    if launched_by_torchrun() and not joined():
        raise RuntimeError("asked for the rank before joining torchrun's process group (common.distributed.setup)")


def world_size() -> int:
    _check_joined()
    group = joined()
    return group.get_world_size() if group else 1


def rank() -> int:
    _check_joined()
    group = joined()
    return group.get_rank() if group else 0


def is_main() -> bool:
    """Rank 0 reads and writes the output folder, evaluates and logs; the others only train."""
    return rank() == 0


@collective()
def barrier() -> None:
    if world_size() > 1:
        joined().barrier()


# ---- refusals, and the end ----

def processes() -> str:
    """This job's processes as torchrun's flags count them: "2 x 4 = 8 processes (--nnodes x --nproc-per-node)",
    "8 processes" (machines of different numbers), "1 process"; from torchrun's environment, before joining too."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return "1 process"
    nodes, per_node = int(os.environ.get("GROUP_WORLD_SIZE", "1")), int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if nodes * per_node != world:
        return f"{world} processes"
    return f"{nodes} x {per_node} = {world} processes (--nnodes x --nproc-per-node)"


def on_every_process(error: Exception) -> Exception:
    """Mark a refusal that every process raises alike (what rank 0 decided, what all share): rank 0 prints it."""
    error.on_every_process = True
    return error


# How long a process that leaves a refusal to another of its machine waits: torchrun ends a machine's processes as
# soon as one exits, and would end the one that prints before it printed, had a silent one exited first.
SILENT_WAIT_SECONDS = 60


def refuse(line: str, error: Exception | None = None) -> None:
    """End this process with a refusal: `line` on stderr, exit code 2 (cli.run; cli.Parser for the command line,
    error None). Under torchrun the line is printed once, not once a process: a refusal marked by on_every_process
    by rank 0, after which every process leaves at once (a barrier: none exits before rank 0 has printed); any
    other (a flag, a data file, the device) by the first process of each machine (LOCAL_RANK 0), since a machine's
    processes refuse alike, while another machine may refuse what rank 0 accepts. The others end silently (torchrun
    then ends them: SIGTERM, -15 in its report). Nor is it printed again by a restarted attempt (--max-restarts)."""
    every = getattr(error, "on_every_process", False)
    prints = os.environ.get("RANK" if every else "LOCAL_RANK", "0") == "0"  # torchrun's: known before joining too
    if prints and not _printed_before(line):
        print(line, file=sys.stderr, flush=True)
    if every:
        barrier()
    elif not prints:
        time.sleep(SILENT_WAIT_SECONDS)
    exit_process(2)


def _printed_before(line: str) -> bool:
    """Whether an earlier attempt of this torchrun job printed `line` on this machine (torchrun restarts a refused
    command too); it is recorded for the next attempts."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return False
    record = Path(tempfile.gettempdir()) / f"refusal-of-torchrun-job-{os.environ['TORCHELASTIC_RUN_ID']}"
    before = restarts() > 0 and record.exists() and record.read_text() == line
    record.write_text(line)
    return before


def _end_now(code: int) -> None:
    # Without Python's finalization, where a gloo process may abort (pytorch/pytorch issue 190489: the group's
    # threads reach for Python objects being torn down) and lose its exit code.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def exit_process(code: int) -> None:
    """Exit with `code`: a process of torchrun's group at once, flushed; any other by sys.exit (SystemExit)."""
    if joined():
        _end_now(code)
    sys.exit(code)


def exit_finished_process() -> None:
    """The end of a finished command's torchrun process: all leave the group together and exit at once with 0."""
    group = joined()
    if not group:
        return
    barrier()
    group.destroy_process_group()
    _end_now(0)


# ---- rank 0's files and decisions; the logged sums ----

@collective()
def all_gather_objects(value) -> list:
    """Every process's `value`, in rank order (e.g. each one's random state, for a checkpoint)."""
    if world_size() == 1:
        return [value]
    values = [None] * world_size()
    joined().all_gather_object(values, value)
    return values


@collective()
def broadcast_object(value):
    """Rank 0's `value` on every process (e.g. a decision only rank 0 can make)."""
    if world_size() == 1:
        return value
    box = [value]
    joined().broadcast_object_list(box, src=0)
    return box[0]


def on_main(read):
    """read() on rank 0 (a file of the output folder, which only its machine need have), its value on every
    process. A UserError it raises is raised on every process, and rank 0 alone prints it (on_every_process)."""
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


@collective()
def sum_over_processes(values: list) -> list[float]:
    """Each value (a number or a one-element tensor) summed over the processes in one all_reduce: the logged
    losses and examples (it waits for the device: at log lines only)."""
    if world_size() == 1 or not values:
        return [float(value) for value in values]
    import torch

    dist = joined()
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    total = torch.stack([torch.as_tensor(value, dtype=torch.float64).to(device).reshape(()) for value in values])
    dist.all_reduce(total)
    return total.tolist()
