"""benchmarks/quality_campaign.sh: --help prints its usage; list names the runs the seeds make; an unknown stage or
run is a usage error; none of these starts a run."""
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "quality_campaign.sh"


def campaign(tmp_path, *args, **env):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=30,
                          env={"RUNS": str(tmp_path / "runs"), "PATH": "/usr/bin:/bin", **env})


def test_help_prints_usage_and_starts_no_run(tmp_path):
    result = campaign(tmp_path, "--help")
    assert result.returncode == 0 and "usage: bash benchmarks/quality_campaign.sh [runs [NAME]...|list|tables]" \
        in result.stdout
    assert not (tmp_path / "runs").exists()


def test_list_names_a_run_per_seed_and_variant(tmp_path):
    assert campaign(tmp_path, "list").stdout.split() == [
        "base-s1", "base-s2", "base-s3", "base-s4", "base-s5", "smart-s1", "smart3-s1", "lld-s1", "smart-s2",
        "smart3-s2", "lld-s2", "smart-s3", "smart3-s3", "lld-s3", "cls-s1", "cross-sts-s1", "rr-batch-s1"]
    assert campaign(tmp_path, "list", BASE_SEEDS="1 2", VARIANT_SEEDS="1").stdout.split() == [
        "base-s1", "base-s2", "smart-s1", "smart3-s1", "lld-s1", "cls-s1", "cross-sts-s1", "rr-batch-s1"]
    assert not (tmp_path / "runs").exists()


def test_an_unknown_stage_or_run_is_a_usage_error(tmp_path):
    result = campaign(tmp_path, "everything")
    assert result.returncode == 2 and "unknown stage everything" in result.stderr
    result = campaign(tmp_path, "runs", "base-s1", "base-s9")
    assert result.returncode == 2
    assert result.stderr.strip() == "quality_campaign.sh: no run named base-s9 (see: quality_campaign.sh list)"
    assert not (tmp_path / "runs").exists()
