"""What the timed saves of last/ (--save-every-minutes, by default a minute, then never more than 2 percent of the
time) cost the quick start, measured in one run: the seconds spent saving as a share of the whole command's, and
when the first save made the run resumable.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/save_cost.py [FLAGS FOR minbert train ...]

Runs `minbert train --config quick-start` (plus the flags given) into a temporary folder, removed when it ends, and
prints each save's step, time since the start and seconds, then the totals. Off a terminal, the run's progress lines
come at least every 30 seconds."""
import argparse
import contextlib
import io
import logging
import re
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import multitask_classifier  # noqa: E402
from minbert.common.progress import log_to_stderr  # noqa: E402

SAVED = re.compile(r"step (\d+): saved .* in ([\d.]+) s")


class Saves(logging.Handler):
    """Each save's line: its step, the seconds since `started` when it was logged, and the save's seconds."""

    def __init__(self, started: float):
        super().__init__(logging.INFO)
        self.started, self.saves = started, []

    def emit(self, record: logging.LogRecord) -> None:
        found = SAVED.match(record.getMessage())
        if found:
            self.saves.append((int(found[1]), time.perf_counter() - self.started, float(found[2])))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    argv = parser.parse_known_args(argv)[1]  # every other flag is minbert train's
    log_to_stderr(logging.WARNING, progress_lines=True)
    started = time.perf_counter(), time.process_time()
    saves = Saves(started[0])
    logging.getLogger("minbert.engine.engine").addHandler(saves)
    logging.getLogger("minbert.engine.engine").setLevel(logging.INFO)
    # Its summary lists files gone when this command ends.
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()):
        multitask_classifier.main(["--config", "quick-start", "--output-dir", f"{folder}/run", "--predictions-dir",
                                   f"{folder}/predictions", "--quiet", *argv])
    wall, cpu = time.perf_counter() - started[0], time.process_time() - started[1]
    for step, at, seconds in saves.saves:
        print(f"step {step}: saved last/ at {at:.1f} s, in {seconds:.1f} s")
    spent = sum(seconds for _, _, seconds in saves.saves)
    # The save at the end of training (after its evaluation) is made whatever the interval: the timed ones cost.
    timed = sum(seconds for _, _, seconds in saves.saves[:-1])
    print(f"whole command: {wall:.1f} s wall, {cpu:.1f} s CPU, {torch.get_num_threads()} thread(s); "
          f"{len(saves.saves)} saves in {spent:.1f} s")
    if saves.saves:
        print(f"timed saves (all but the last): {timed:.1f} s, {100 * timed / wall:.2f}% of the wall time; "
              f"first save at {saves.saves[0][1]:.1f} s")

if __name__ == "__main__":
    main()
