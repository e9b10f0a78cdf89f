"""Step time under torchrun-style data parallelism: gradients averaged by DistributedDataParallel while the
backward pass runs (its buckets sent as their gradients are ready) against one flat all_reduce after it, measured
in the same run on processes of this machine (gloo), as a ratio.

    python benchmarks/distributed_step.py                   # 2 CPU processes, a MiniLM-L6-shaped encoder
    python benchmarks/distributed_step.py --layers 12 --hidden 768 --heads 12 --intermediate 3072   # bert-base

A step here is the part that differs: forward, backward and the averaged gradients (the optimizer step is the same
either way). The ways alternate step by step, so a load that comes and goes slows them alike; each process times
its steps and the slowest process's time counts (the others wait for it at the next collective). DDP runs as the
trainers run it (engine/ddp.py: find_unused_parameters, which walks each step's graph to find the heads a step
leaves unused) and with static_graph (which assumes every step uses the same parameters, as here, and learns the
order of their gradients in the first step); each way has its own copy of the model. Off a terminal, a progress
line at least every 30 seconds.
"""
import argparse
import logging
import socket
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minbert.common.progress import Progress, log_to_stderr  # noqa: E402
from minbert.common.tables import markdown_table  # noqa: E402
from minbert.models import BertConfig, BertModel, pool  # noqa: E402
from minbert.engine.ddp import average_gradients  # noqa: E402

WAYS = ("flat all_reduce after the backward pass", "DDP, find_unused_parameters (the trainers')",
        "DDP, static_graph")


class Loss(torch.nn.Module):
    def __init__(self, encoder: BertModel):
        super().__init__()
        self.encoder = encoder

    def forward(self, inputs: dict) -> torch.Tensor:
        return pool(self.encoder(**inputs), inputs["attention_mask"], "mean").pow(2).mean()


def step(models: dict, inputs: dict, way: str) -> float:
    dist.barrier()  # every process starts the step together
    start = time.perf_counter()
    models[way](inputs).backward()
    if way == WAYS[0]:
        average_gradients(list(models[way].parameters()))
    seconds = time.perf_counter() - start
    models[way].zero_grad(set_to_none=True)
    return seconds


def worker(rank: int, args, port: int, results):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.processes)
    torch.set_num_threads(args.threads)
    log_to_stderr(logging.WARNING, progress_lines=True)  # a process of its own: rank 0 counts the steps
    def model():
        torch.manual_seed(0)
        return Loss(BertModel(BertConfig(hidden_size=args.hidden, num_hidden_layers=args.layers,
                                         num_attention_heads=args.heads, intermediate_size=args.intermediate)))

    DDP = torch.nn.parallel.DistributedDataParallel
    models = {WAYS[0]: model(), WAYS[1]: DDP(model(), bucket_cap_mb=args.bucket_mb, find_unused_parameters=True),
              WAYS[2]: DDP(model(), bucket_cap_mb=args.bucket_mb, static_graph=True)}
    ids = torch.randint(1000, 30000, (args.batch_size, args.tokens), generator=torch.Generator().manual_seed(rank))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
    times = {way: [] for way in WAYS}  # per repeat, per step
    bar = Progress(args.repeats * len(WAYS) * (args.warmup + args.steps), "distributed_step", unit="step",
                   shown=rank == 0)
    for repeat in range(args.repeats):
        for way in WAYS:
            times[way].append([])
        for index in range(len(WAYS) * (args.warmup + args.steps)):
            way = WAYS[index % len(WAYS)]
            seconds = step(models, inputs, way)
            if index >= len(WAYS) * args.warmup:
                times[way][repeat].append(seconds)
            bar.update()
    bar.close()
    slowest = [None] * args.processes
    dist.all_gather_object(slowest, times)
    if rank == 0:
        results.update({way: [[max(process[way][r][i] for process in slowest) for i in range(args.steps)]
                              for r in range(args.repeats)] for way in WAYS})
        results["parameters"] = sum(p.numel() for p in models[WAYS[0]].parameters())
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=2, help="gloo processes on this machine (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per process")
    parser.add_argument("--layers", type=int, default=6, help="encoder layers (default: %(default)s, MiniLM-L6)")
    parser.add_argument("--hidden", type=int, default=384, help="hidden size (default: %(default)s)")
    parser.add_argument("--heads", type=int, default=12, help="attention heads (default: %(default)s)")
    parser.add_argument("--intermediate", type=int, default=1536,
                        help="feed-forward width (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=8, help="rows per process")
    parser.add_argument("--tokens", type=int, default=64, help="tokens a row (default: %(default)s)")
    parser.add_argument("--bucket-mb", type=float, default=25,
                        help="MB of gradients an all_reduce of DDP sends (its bucket_cap_mb; default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps of each way, each repeat")
    parser.add_argument("--steps", type=int, default=10, help="timed steps of each way, each repeat")
    parser.add_argument("--repeats", type=int, default=5, help="repeats; the table gives the median ratio over them "
                                                              "and its range (default: %(default)s)")
    args = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    results = mp.Manager().dict()
    mp.spawn(worker, args=(args, port, results), nprocs=args.processes)
    # Each repeat's ratio of medians; over the repeats, their median and range.
    flat = [statistics.median(steps) for steps in results[WAYS[0]]]
    rows = {}
    for way in WAYS:
        medians = [statistics.median(steps) for steps in results[way]]
        ratios = [median / reference for median, reference in zip(medians, flat)]
        rows[way] = {"median step (ms)": 1000 * statistics.median(medians),
                     "ratio to flat": statistics.median(ratios),
                     "range over repeats": f"{min(ratios):.2f}-{max(ratios):.2f}"}
    print(f"{args.processes} processes (gloo, {args.threads} thread each), {results['parameters'] / 1e6:.1f}M "
          f"parameters, DDP's buckets of {args.bucket_mb:g} MB, {args.batch_size} x {args.tokens} "
          f"tokens a process, {args.repeats} repeats of {args.steps} steps each way\n")
    print(markdown_table(rows, ["median step (ms)", "ratio to flat", "range over repeats"], label="gradient averaging"))


if __name__ == "__main__":
    main()
