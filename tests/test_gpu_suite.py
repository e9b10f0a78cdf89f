"""benchmarks/gpu_suite.sh: --dry-run runs every part at tiny shapes on the CPU and writes one table and one JSON
file; --help and bad options start nothing."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_suite.sh"


def suite(tmp_path, *args, timeout=600):
    env = {**os.environ, "PYTHON": sys.executable, "RESULTS": str(tmp_path / "results")}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_the_dry_run_measures_every_part(tmp_path, minilm_dir, data_dir):
    result = suite(tmp_path, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "failed" not in result.stderr, result.stderr
    results = tmp_path / "results"
    report = json.loads((results / "suite.json").read_text())
    assert set(report["parts_seconds"]) == {"throughput", "compiled", "recipe", "eval"}
    assert {(r["side"], r["compiled"]) for r in report["throughput"]["rows"]} == {("ours", False),
                                                                                 ("transformers", False)}
    assert [(r["side"], r["compiled"]) for r in report["compiled"]["rows"]] == [("ours", True)]
    assert [(r["model"], r["side"], r["rc"]) for r in report["recipe"]] == [("tiny", "ours", 0),
                                                                           ("tiny", "transformers", 0)]
    assert set(report["recipe"][0]["dev"]) >= {"sst", "para", "sts"}
    assert report["recipe"][0]["train_and_dev_seconds"] > 0
    assert sorted((e["task"], e["split"]) for e in report["eval"] if e["rc"] == 0) == sorted(
        (task, split) for task in ("sst", "para", "sts") for split in ("dev", "test-student"))
    # predict.py wrote one prediction a line of the tiny files (24 examples each)
    assert len((results / "runs/tiny/predict-sts-dev.tsv").read_text().splitlines()) >= 24
    table = (results / "suite.md").read_text()
    for heading in ("## Training throughput (throughput): CPU", "## Training throughput (compiled)",
                    "## One epoch of the documented recipe", "## Prediction time"):
        assert heading in table


@pytest.mark.parametrize("option", ["--help", "-h"])
def test_help_prints_usage_and_starts_nothing(tmp_path, option):
    result = suite(tmp_path, option, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "usage: bash benchmarks/gpu_suite.sh [--part throughput|compiled|recipe|eval]... [--dry-run]" \
        in result.stdout
    assert not any(line.startswith("#") for line in result.stdout.splitlines())  # the comment, without its marks
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args, message", [(["--part", "speed"], "--part takes one of: throughput compiled recipe "
                                                                  "eval (got 'speed')"),
                                           (["--epochs", "3"], "unknown option --epochs")])
def test_bad_options_are_usage_errors(tmp_path, args, message):
    result = suite(tmp_path, *args, timeout=30)
    assert result.returncode == 2 and message in result.stderr
    assert not any(tmp_path.iterdir())
