"""benchmarks/quality_campaign.sh: --help prints its usage; an unknown stage is a usage error; neither starts a run."""
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "quality_campaign.sh"


def campaign(tmp_path, *args):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=30,
                          env={"RUNS": str(tmp_path / "runs"), "PATH": "/usr/bin:/bin"})


def test_help_prints_usage_and_starts_no_run(tmp_path):
    result = campaign(tmp_path, "--help")
    assert result.returncode == 0 and "usage: bash benchmarks/quality_campaign.sh [runs|tables]" in result.stdout
    assert not (tmp_path / "runs").exists()


def test_an_unknown_stage_is_a_usage_error(tmp_path):
    result = campaign(tmp_path, "everything")
    assert result.returncode == 2 and "unknown stage everything" in result.stderr
    assert not (tmp_path / "runs").exists()
