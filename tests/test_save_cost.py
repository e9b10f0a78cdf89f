"""benchmarks/save_cost.py: the quick start's timed saves as a share of its time, from the run's own save lines."""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_it_prints_each_save_and_their_share_of_the_whole_command(tiny_model, course_data):
    # A save every 0.001 min (then 50 times the last save's duration): several saves in a tiny run.
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "save_cost.py"), "--model", str(tiny_model),
                             "--data-dir", str(course_data), "--max-train-examples", "40", "--batch-size", "4",
                             "--device", "cpu", "--save-every-minutes", "0.001"],
                            capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    lines = [re.sub(r"\d+(\.\d+)?", "N", line) for line in result.stdout.splitlines()]
    assert len(lines) >= 4 and set(lines[:-2]) == {"step N: saved last/ at N s, in N s"}
    assert lines[-2:] == ["whole command: N s wall, N s CPU, N thread(s); N saves in N s",
                          "timed saves (all but the last): N s, N% of the wall time; first save at N s"]
    assert f"; {len(lines) - 2} saves in " in result.stdout
    steps = [int(line.split()[1].rstrip(":")) for line in result.stdout.splitlines()[:-2]]
    assert steps == sorted(steps) and steps[-1] == 30  # the last: the end of training (40 examples x 3 / 4)
