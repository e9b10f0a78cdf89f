"""benchmarks/seed_sweep.sh: --help prints its usage, and no option starts a run."""
import re
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "seed_sweep.sh"


def sweep(tmp_path, *args):
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("option", ["--help", "-h"])
def test_help_prints_usage_and_starts_no_run(tmp_path, option):
    result = sweep(tmp_path, option)
    assert result.returncode == 0, result.stderr
    assert 'usage: bash benchmarks/seed_sweep.sh "NAME|FLAGS" ...' in result.stdout
    # Every setting is explained, with its default.
    for setting in ("MODEL", "DATA", "DEVICE", "PRECISION", "RUNS", "RESULTS", "LIMIT", "PYTHON"):
        assert re.search(rf"^  {setting} +\S.*\[.+\]$", result.stdout, re.MULTILINE), setting
    assert "#" not in result.stdout
    assert not any(tmp_path.iterdir())  # no runs/ folder: nothing was started


def test_an_unknown_option_is_a_usage_error(tmp_path):
    result = sweep(tmp_path, "--seed", "1")
    assert result.returncode == 2 and "unknown option --seed" in result.stderr
    assert not any(tmp_path.iterdir())
