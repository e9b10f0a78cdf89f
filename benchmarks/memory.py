"""Peak resident memory and time of the quick start and of `minbert predict` on a large file, each a command of its
own (one thread), as a user runs them; and where the quick start's memory goes, phase by phase:

    python benchmarks/memory.py --out runs/memory                  # the quick start, then predict on its run
    python benchmarks/memory.py --out runs/memory --skip-train     # predict only, on runs/memory/quick-start
    python benchmarks/memory.py --out runs/memory --breakdown      # and where the quick start's memory goes
    python benchmarks/memory.py --out runs/avg --skip-predict -- --schedule avg --task-weights auto  # training only

The quick start is `minbert train --config quick-start` (about 6 minutes of one thread); predict reads a file of
--lines Quora pairs (taken from quora-train.csv, written to OUT/pairs.tsv) with the quick start's run. For each it
prints the peak resident set size (the kernel's high-water mark of the command's process, as /usr/bin/time -v
reports it), the wall seconds and the CPU seconds. Extra arguments after `--` go to every command (e.g.
`-- --precision fp32`). The commands run quiet; off a terminal, a progress line at least every 30 seconds.

--breakdown runs the quick start in a process that also samples its own resident size every 20 ms and learns
its phases from the training loop's events (a callback, engine/callbacks.py): importing the trainer; reading the
data and building the model (to on_train_begin); training (to the last step); the dev predictions and best/ (to
on_train_end); the test predictions (to the end). It prints each phase's wall seconds, the resident size at its
start and its peak within it.
"""
import argparse
import csv
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from minbert.common.cli import HelpFormatter  # noqa: E402
from minbert.common.files import DEFAULT_DATA  # noqa: E402
from minbert.common.precision import processor  # noqa: E402
from minbert.common.progress import Progress, log_to_stderr  # noqa: E402

ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20


def measured(argv: list[str]) -> dict[str, float]:
    """Run a command to its end (it must succeed); its peak resident MB, wall and CPU seconds."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, env={**os.environ, **ONE_THREAD}, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed ({os.waitstatus_to_exitcode(status)}): {' '.join(argv)}")
    return {"peak_mb": usage.ru_maxrss / 1024, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime}


def resident_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE_MB


class PhaseProbe:
    """This process's resident size, sampled every 20 ms by a thread: at the start of each phase, and its peak."""

    def __init__(self):
        self.phases: list[dict] = []
        self.enter("importing the trainer (Python and torch started)")
        threading.Thread(target=self._sample, daemon=True).start()

    def enter(self, name: str) -> None:
        now = resident_mb()
        self.phases.append({"phase": name, "start_mb": now, "peak_mb": now, "started": time.perf_counter()})

    def _sample(self) -> None:
        while True:
            phase = self.phases[-1]
            phase["peak_mb"] = max(phase["peak_mb"], resident_mb())
            time.sleep(0.02)


def breakdown(argv: list[str], out: Path) -> list[dict]:
    """Run `minbert train argv` in this process under a PhaseProbe; its phases, written to `out` as JSON."""
    probe = PhaseProbe()
    from minbert.commands import train
    from minbert.engine.callbacks import Callback
    probe.enter("reading and tokenising the data, building the model")

    class Phases(Callback):
        def on_train_begin(self, state, control):
            probe.enter("training")

        def on_step_end(self, state, control, losses):
            if state.step == state.total_steps:
                probe.enter("dev predictions, saving best/")

        def on_train_end(self, state, control):
            probe.enter("test predictions (best/ reloaded), leaderboard files")

    train.main(argv, callbacks=[Phases()])
    probe.enter("end")
    phases = [{**phase, "seconds": following["started"] - phase["started"]}
              for phase, following in zip(probe.phases, probe.phases[1:])]
    out.write_text(json.dumps(phases, indent=1))
    return phases


def pairs_file(data_dir: Path, path: Path, lines: int) -> Path:
    """`lines` Quora pairs as predict reads them: sentence1 TAB sentence2, one pair a line."""
    with open(data_dir / "quora-train.csv", newline="", encoding="utf-8") as source:
        rows = [(row["sentence1"], row["sentence2"]) for row in csv.DictReader(source, delimiter="\t")
                if row["sentence1"].strip() and row["sentence2"].strip()]
    if len(rows) < lines:
        sys.exit(f"quora-train.csv has {len(rows):,} pairs, fewer than --lines {lines:,}")
    path.write_text("".join(f"{a.replace(chr(9), ' ')}\t{b.replace(chr(9), ' ')}\n" for a, b in rows[:lines]),
                    encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--out", required=True, help="folder for the quick start's run, the pairs file and output")
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA), help="folder with the course's data files")
    parser.add_argument("--lines", type=int, default=10_000, help="pairs in predict's input file")
    skip = parser.add_mutually_exclusive_group()  # both would measure nothing
    skip.add_argument("--skip-train", action="store_true", help="predict only, with OUT/quick-start's run")
    skip.add_argument("--skip-predict", action="store_true", help="the quick start only (then the flags after -- "
                        "may be training's alone, e.g. -- --max-steps 60)")
    parser.add_argument("--breakdown", action="store_true", help="the quick start's resident size phase by phase too")
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)  # the breakdown's own process
    parser.add_argument("extra", nargs="*", help="after --: flags for every command")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    minbert = [sys.executable, "-m", "minbert"]
    run = out / "quick-start"
    train = ["--config", "quick-start", "--data-dir", args.data_dir, "--overwrite", "--quiet", *args.extra]
    train += ["--output-dir", str(run), "--predictions-dir", str(out / "predictions")]
    if args.probe:
        return breakdown(train, out / "phases.json")
    results = {}
    log_to_stderr(logging.WARNING, progress_lines=True)
    bar = Progress(2 - args.skip_train - args.skip_predict, "memory", unit="command")
    if not args.skip_train:
        results["quick start"] = measured(
            [sys.executable, __file__, "--probe", "--out", str(out), "--data-dir", args.data_dir, "--", *args.extra]
            if args.breakdown else [*minbert, "train", *train])
        bar.update()
    if not args.skip_predict:
        source = pairs_file(Path(args.data_dir), out / "pairs.tsv", args.lines)
        results[f"predict, {args.lines:,} pairs"] = measured(
            [*minbert, "predict", str(run), "--task", "para", "--input", str(source),
             "--output", str(out / "predicted.tsv"), *args.extra])
    bar.close()
    print(f"{processor()}, torch {torch.__version__}, one thread\n")
    print("| command | peak resident MB | wall s | CPU s |\n|---|---|---|---|")
    for name, result in results.items():
        print(f"| {name} | {result['peak_mb']:,.0f} | {result['wall_s']:.0f} | {result['cpu_s']:.0f} |")
    if args.breakdown and not args.skip_train:
        print("\nThe quick start's phases (resident MB at the phase's start, and its peak in the phase):\n")
        print("| phase | wall s | at its start | its peak |\n|---|---|---|---|")
        for phase in json.loads((out / "phases.json").read_text()):
            print(f"| {phase['phase']} | {phase['seconds']:.0f} | {phase['start_mb']:,.0f} | {phase['peak_mb']:,.0f} |")
    return results


if __name__ == "__main__":
    main()
