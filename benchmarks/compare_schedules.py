"""The five multitask schedules, and PCGrad, under one equal budget: the same data, seed and number of task batches.

    python benchmarks/compare_schedules.py --model all-MiniLM-L6-v2 --max-train-examples 1024 --epochs 2

Each schedule sees every task's N examples E times (sequential gets 3 x E epochs, E per task, since it
trains one task per epoch; avg and pcgrad, avg's steps with --combine pcgrad, take one batch of every task per
step, so they take a third of the steps of the others for the same batches). Prints a Markdown table of best dev
metrics, steps and wall time; each run's files are under --output-root/SCHEDULE. Any other multitask_classifier.py
flag is passed on to every run. Off a terminal, a progress line at least every 30 seconds (the runs' own, and one as
each run ends).
"""
import argparse
import json
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import multitask_classifier  # noqa: E402
from minbert.common.cli import HelpFormatter  # noqa: E402
from minbert.common.files import in_repository  # noqa: E402
from minbert.common.progress import log_to_stderr, progress  # noqa: E402
from minbert.common.run_folder import RunFolder  # noqa: E402
from minbert.common.tables import markdown_table  # noqa: E402
from minbert.tasks import COURSE_TASKS  # noqa: E402
from minbert.training.schedules import SCHEDULES  # noqa: E402

# What each compared name trains with: a schedule, or pcgrad (avg's steps, their task gradients combined by PCGrad).
VARIANTS = {**{name: ["--schedule", name] for name in SCHEDULES},
            "pcgrad": ["--schedule", "avg", "--combine", "pcgrad"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--model", default="all-MiniLM-L6-v2",
                        help="encoder every run starts from: hub id, checkpoint folder, or all-MiniLM-L6-v2")
    parser.add_argument("--max-train-examples", type=int, default=1024,
                        help="the random sample of training examples per task that every schedule sees")
    parser.add_argument("--epochs", type=int, default=2,
                        help="passes over the sample (sequential gets 3 x this many epochs, this many per task)")
    parser.add_argument("--schedules", default=",".join(VARIANTS),
                        help=f"the schedules to compare, comma-separated, of: {', '.join(VARIANTS)} (what each does: "
                             f"`multitask_classifier.py --help`, --schedule and --combine)")
    parser.add_argument("--output-root", type=Path, default=Path(in_repository("runs/schedules")),
                        help="each schedule's run goes to OUTPUT_ROOT/SCHEDULE/run, its leaderboard files to "
                             "OUTPUT_ROOT/SCHEDULE/predictions")
    args, passthrough = parser.parse_known_args(argv)  # any other multitask_classifier.py flag is passed on
    log_to_stderr(logging.WARNING, progress_lines=True)
    rows = []
    for schedule in progress(args.schedules.split(","), "compare_schedules", unit="run"):
        out = args.output_root / schedule
        epochs = 3 * args.epochs if schedule == "sequential" else args.epochs
        started = time.time()
        metrics = multitask_classifier.main([
            "--model", args.model, *VARIANTS[schedule], "--epochs", str(epochs),
            "--max-train-examples", str(args.max_train_examples), "--output-dir", str(out / "run"),
            "--predictions-dir", str(out / "predictions"), *passthrough])
        steps = json.loads((RunFolder(out / "run").last / "metrics.json").read_text())["step"]
        rows.append((schedule, metrics, steps, time.time() - started))
    print(f"\n{args.model}, {args.max_train_examples} examples per task, {args.epochs} epochs' worth of "
          f"batches, extra flags: {' '.join(passthrough) or 'none'}")
    table = {schedule: {**m, "steps": steps, "minutes": f"{seconds / 60:.1f}"} for schedule, m, steps, seconds in rows}
    print(markdown_table(table, [*COURSE_TASKS, "overall", "steps", "minutes"], label="schedule", digits=3,
                         headers=["SST acc", "Quora acc", "STS r", "overall", "steps", "minutes"]))


if __name__ == "__main__":
    main()
