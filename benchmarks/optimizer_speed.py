"""Our AdamW's step time on a bert-base-shaped set of parameters, as the reference (the CPU's path) and fused (one
kernel: the trainers' path on CUDA), as ratios to torch.optim.AdamW in the same run.

    python benchmarks/optimizer_speed.py --device cpu --threads 1

References: torch.optim.AdamW with foreach=False (a loop over the parameters, as our AdamW was written before), with
foreach=True (torch's multi-tensor path) and with fused=True (its one kernel). A ratio below 1 is faster than the
reference. Off a terminal, a progress line at least every 30 seconds.
"""
import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minbert.common.cli import HelpFormatter  # noqa: E402
from minbert.common.progress import Progress, log_to_stderr  # noqa: E402
from minbert.models import AdamW  # noqa: E402

# bert-base: embeddings, 12 layers (attention, its output, the feed-forward pair, two LayerNorms), the pooler.
LAYER = [(768, 768), (768,)] * 4 + [(768,), (768,)] + [(3072, 768), (3072,), (768, 3072), (768,), (768,), (768,)]
SHAPES = [(30522, 768), (512, 768), (2, 768), (768,), (768,)] + LAYER * 12 + [(768, 768), (768,)]


def step_time(optimizer, device: str) -> float:
    """The wall seconds of one optimizer step."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    optimizer.step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def step_seconds(make_optimizer, device: str, repeats: int, bar: Progress) -> float:
    """The median of `repeats` steps, after one that allocates the moments; each step counted by `bar`."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(shape, device=device) * 0.02) for shape in SHAPES]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    optimizer = make_optimizer(params)
    times = []
    for repeat in range(repeats + 1):
        seconds = step_time(optimizer, device)
        times += [seconds] if repeat else []  # the first step allocates the moments
        bar.update()
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="where the parameters live: cpu, cuda, cuda:1, ... (by default cuda when present)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per optimizer; the median is printed")
    args = parser.parse_args(argv)
    log_to_stderr(logging.WARNING, progress_lines=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    settings = dict(lr=1e-4, weight_decay=0.01)
    references = {f"torch.optim.AdamW({name}={value})": {name: value}
                  for name, value in (("foreach", False), ("foreach", True), ("fused", True))}
    bar = Progress(5 * (args.repeats + 1), "optimizer_speed", unit="step")  # ours twice, the three references
    ours = {fused: step_seconds(lambda p: AdamW(p, fused=fused, **settings), args.device, args.repeats, bar)
            for fused in (False, True)}
    print(f"{sum(torch.Size(s).numel() for s in SHAPES) / 1e6:.1f}M parameters in {len(SHAPES)} tensors on "
          f"{args.device}: our AdamW step {ours[False] * 1000:.1f} ms, fused {ours[True] * 1000:.1f} ms")
    for name, choice in references.items():
        reference = step_seconds(lambda p: torch.optim.AdamW(p, **choice, **settings), args.device, args.repeats,
                                 bar)
        print(f"  {name}: {reference * 1000:.1f} ms; ours / it = {ours[False] / reference:.2f}, fused / it = "
              f"{ours[True] / reference:.2f}", flush=True)
    bar.close()


if __name__ == "__main__":
    main()
