"""One epoch of SST on the course data with --max-tokens against the same with --batch-size, timed in one run.

    .venv/bin/python benchmarks/token_budget_speed.py [--max-train-examples N] [--max-tokens T] [--batch-size B]

Prints each run's seconds (the whole command: training, dev evaluation, test predictions), wall and CPU (user +
system, every thread), and dev accuracy, and the ratios token budget / batch size (below 1: the token budget is
faster). On a machine shared with other work the CPU time is the one to compare: the wall time measures the load
as much as the batching. The runs write into a temporary folder, removed when the command ends; a warning both
runs give is printed once. Off a terminal, the runs' progress lines come at least every 30 seconds."""
import argparse
import contextlib
import io
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import multitask_classifier  # noqa: E402
from minbert.common.files import DEFAULT_DATA  # noqa: E402
from minbert.common.progress import log_to_stderr  # noqa: E402


class Once(logging.Filter):
    """Each message once: the two runs give the same warnings (a sample of the dev sets, skipped rows)."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message in self.seen:
            return False
        self.seen.add(message)
        return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="the encoder to fine-tune (default: %(default)s)")
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA), help="the course's data folder (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="sentences a batch of the reference run (default: %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=1024, help="about --batch-size sentences of SST's mean")
    parser.add_argument("--max-train-examples", type=int, default=0, help="0: the whole training file")
    parser.add_argument("--max-eval-examples", type=int, default=200,
                        help="dev and test sentences each run predicts (default: %(default)s)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, ... (default: %(default)s: cuda when present)")
    args = parser.parse_args(argv)
    log_to_stderr(logging.WARNING, progress_lines=True)  # the runs are --quiet: their warnings, and progress
    for handler in logging.getLogger().handlers:
        handler.addFilter(Once())
    seconds, accuracy = {}, {}
    with tempfile.TemporaryDirectory() as folder:
        for name, extra in (("batch size", []), ("token budget", ["--max-tokens", str(args.max_tokens)])):
            out = Path(folder) / name.replace(" ", "-")
            argv = ["--model", args.model, "--data-dir", args.data_dir, "--tasks", "sst", "--epochs", "1",
                    "--batch-size", str(args.batch_size), "--max-train-examples", str(args.max_train_examples),
                    "--max-eval-examples", str(args.max_eval_examples), "--device", args.device, "--quiet",
                    "--output-dir", str(out / "run"), "--predictions-dir", str(out / "predictions"), *extra]
            started = time.perf_counter(), time.process_time()
            with contextlib.redirect_stdout(io.StringIO()):  # its summary lists files gone when this command ends
                accuracy[name] = multitask_classifier.main(argv)["sst"]
            seconds[name] = time.perf_counter() - started[0], time.process_time() - started[1]
    for name, (wall, cpu) in seconds.items():
        print(f"{name:>12}: {wall:.1f} s wall, {cpu:.1f} s CPU, dev accuracy {accuracy[name]:.4f}")
    wall, cpu = (seconds["token budget"][i] / seconds["batch size"][i] for i in (0, 1))
    print(f"ratio token budget / batch size: {wall:.2f} wall, {cpu:.2f} CPU")


if __name__ == "__main__":
    main()
