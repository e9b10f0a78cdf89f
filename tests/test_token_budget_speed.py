"""benchmarks/token_budget_speed.py prints what a user keeps: each run's time and dev accuracy and their ratio; not
the runs' own summaries, which list files in its temporary folder, gone when it ends, and each warning once."""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_it_prints_times_and_ratio_and_each_warning_once(tiny_model, course_data):
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "token_budget_speed.py"), "--model",
                             str(tiny_model), "--data-dir", str(course_data), "--max-eval-examples", "4",
                             "--max-tokens", "128", "--batch-size", "8", "--device", "cpu"],
                            capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [re.sub(r"[\d.]+", "N", line) for line in lines] == [
        "  batch size: N s wall, N s CPU, dev accuracy N", "token budget: N s wall, N s CPU, dev accuracy N",
        "ratio token budget / batch size: N wall, N CPU"]
    assert result.stderr.count("not a full submission") == 1, result.stderr
