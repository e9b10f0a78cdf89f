"""Peak resident memory and time of the quick start and of `minbert predict` on a large file, each a command of its
own (one thread), as a user runs them:

    python benchmarks/memory.py --out runs/memory                  # the quick start, then predict on its run
    python benchmarks/memory.py --out runs/memory --skip-train     # predict only, on runs/memory/quick-start

The quick start is `minbert train --config quick-start` (about 6 minutes of one thread); predict reads a file of
--lines Quora pairs (taken from quora-train.csv, written to OUT/pairs.tsv) with the quick start's run. For each it
prints the peak resident set size (the kernel's high-water mark of the command's process, as /usr/bin/time -v
reports it), the wall seconds and the CPU seconds. Extra arguments after `--` go to both commands (e.g.
`-- --precision fp32`). The commands run quiet; off a terminal, a progress line at least every 30 seconds.
"""
import argparse
import csv
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from minbert.common.cli import HelpFormatter  # noqa: E402
from minbert.common.files import DEFAULT_DATA  # noqa: E402
from minbert.common.precision import processor  # noqa: E402
from minbert.common.progress import Progress, log_to_stderr  # noqa: E402


def measured(argv: list[str]) -> dict[str, float]:
    """Run a command to its end (it must succeed); its peak resident MB, wall and CPU seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    start = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed ({os.waitstatus_to_exitcode(status)}): {' '.join(argv)}")
    return {"peak_mb": usage.ru_maxrss / 1024, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime}


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
    parser.add_argument("--skip-train", action="store_true", help="predict only, with OUT/quick-start's run")
    parser.add_argument("extra", nargs="*", help="after --: flags for both commands")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    minbert = [sys.executable, "-m", "minbert"]
    run = out / "quick-start"
    results = {}
    log_to_stderr(logging.WARNING, progress_lines=True)
    bar = Progress(1 if args.skip_train else 2, "memory", unit="command")
    if not args.skip_train:
        results["quick start"] = measured([*minbert, "train", "--config", "quick-start", "--data-dir", args.data_dir,
                                           "--output-dir", str(run), "--predictions-dir", str(out / "predictions"),
                                           "--overwrite", "--quiet", *args.extra])
        bar.update()
    source = pairs_file(Path(args.data_dir), out / "pairs.tsv", args.lines)
    results[f"predict, {args.lines:,} pairs"] = measured(
        [*minbert, "predict", str(run), "--task", "para", "--input", str(source),
         "--output", str(out / "predicted.tsv"), *args.extra])
    bar.close()
    print(f"{processor()}, torch {torch.__version__}, one thread\n")
    print("| command | peak resident MB | wall s | CPU s |\n|---|---|---|---|")
    for name, result in results.items():
        print(f"| {name} | {result['peak_mb']:,.0f} | {result['wall_s']:.0f} | {result['cpu_s']:.0f} |")
    return results


if __name__ == "__main__":
    main()
