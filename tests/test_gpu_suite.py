"""benchmarks/gpu_suite.sh, the GPU plan, and benchmarks/rehearse_gpu_plan.sh, its rehearsal on the CPU: the plan's
two calls run as the GPU machine will run them, and their bundle is complete; --help and bad input start nothing."""
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLAN, REHEARSAL = ROOT / "benchmarks" / "gpu_suite.sh", ROOT / "benchmarks" / "rehearse_gpu_plan.sh"
STAGE = ROOT.parent / "shared" / "tools" / "device-stage.sh"


def bash(script, tmp_path, *args, env=(), timeout=60):
    return subprocess.run(["bash", str(script), *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PLAN_DIR": str(tmp_path / "results"), **dict(env)})


def rehearse(tmp_path, **settings):
    """The rehearsal, its sandbox under tmp_path; skipped where staging cannot run (exit code 3)."""
    if not STAGE.exists():
        pytest.skip(f"no {STAGE} to stage with")
    result = bash(REHEARSAL, tmp_path, env={"PYTHON": sys.executable, "TMPDIR": str(tmp_path), **settings},
                  timeout=900)
    if result.returncode == 3:
        pytest.skip(result.stderr.strip().splitlines()[-1])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result.stdout


def test_the_plan_rehearsed_on_the_cpu_returns_a_complete_bundle(tmp_path):
    output = rehearse(tmp_path)
    assert "bundle checked:" in output and "out-call2" in output
    # Each call as the device tool runs it, the campaign living on between them in a session of its own.
    assert "rehearsal: call1 returned 0" in output and "rehearsal: call2 returned 0" in output
    assert "call2: waiting for the campaign" in output
    # call1's DDP smoke step ran (on gloo here; a failed step would have failed the bundle's check).
    assert "call1: ddp (at most" in output
    # The full recipe's study: its two workers' trials and a table of them in the search call's bundle (checked).
    assert "rehearsal: search returned 0" in output and output.count("bundle checked:") == 2
    assert not any(tmp_path.glob("gpu-rehearsal.*"))  # the sandbox removed, the campaign ended


@pytest.mark.skipif(not os.environ.get("REHEARSE_TORCH"),
                    reason="REHEARSE_TORCH=2.11.0: the rehearsal with the GPU machine's torch (a 4.5 GB install)")
def test_the_plan_rehearsed_with_the_gpu_machines_torch(tmp_path):
    output = rehearse(tmp_path, TORCH_VERSION=os.environ["REHEARSE_TORCH"])
    assert "bundle checked:" in output
    assert f"the machine's python3: Python {platform.python_version()} torch {os.environ['REHEARSE_TORCH']}" in output


@pytest.mark.skipif(not os.environ.get("REHEARSE_PYTHON"),
                    reason="REHEARSE_PYTHON=/path/to/python3.12: the rehearsal with the GPU machine's Python and torch "
                           "(REHEARSE_TORCH, else 2.11.0: a 4.5 GB install)")
def test_the_plan_rehearsed_with_the_gpu_machines_python_and_torch(tmp_path):
    """The bare machine's python3 is that interpreter, not this one: the staged wheels as they are, and only the
    packages the GPU machine has."""
    python, torch_version = os.environ["REHEARSE_PYTHON"], os.environ.get("REHEARSE_TORCH", "2.11.0")
    version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    output = rehearse(tmp_path, MACHINE_PYTHON=python, TORCH_VERSION=torch_version)
    assert "bundle checked:" in output
    assert f"the machine's python3: Python {version} torch {torch_version}" in output


@pytest.mark.parametrize("script, usage", [(PLAN, "usage: bash benchmarks/gpu_suite.sh call1|call2|search|compiled|list"),
                                           (REHEARSAL, "usage: bash benchmarks/rehearse_gpu_plan.sh")])
def test_help_prints_usage_and_starts_nothing(tmp_path, script, usage):
    result = bash(script, tmp_path, "--help")
    assert result.returncode == 0 and usage in result.stdout
    assert not any(line.startswith("#") for line in result.stdout.splitlines())  # the comment, without its marks
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args, env, message", [
    (["call3"], {}, "gpu_suite.sh: give call1, call2, search, compiled or list (got 'call3'; see --help)"),
    (["call1"], {"MODEL": "", "DATA": "/data"}, "gpu_suite.sh: MODEL is not set: begin with  source .device/setup.sh &&"),
])
def test_bad_calls_are_usage_errors(tmp_path, args, env, message):
    result = bash(PLAN, tmp_path, *args, env=env)
    assert result.returncode == 2 and result.stderr.strip() == message
    assert not any(tmp_path.iterdir())


def test_the_rehearsal_takes_no_arguments(tmp_path):
    result = bash(REHEARSAL, tmp_path, "call1")
    assert result.returncode == 2 and "rehearse_gpu_plan.sh: takes no arguments (got call1" in result.stderr
    assert not any(tmp_path.iterdir())


def test_the_rehearsal_refuses_a_machine_python_it_cannot_use(tmp_path):
    """An interpreter that does not run, or another Python without TORCH_VERSION (it would have no torch): one line,
    exit code 2, and no sandbox made."""
    missing = tmp_path / "no-python"
    result = bash(REHEARSAL, tmp_path, env={"MACHINE_PYTHON": str(missing), "TMPDIR": str(tmp_path)})
    assert result.returncode == 2
    assert result.stderr == f"rehearse_gpu_plan.sh: MACHINE_PYTHON={missing} does not run a Python\n"
    other = tmp_path / "bin" / "python3"  # another interpreter, as sys.executable names it
    other.parent.mkdir()
    other.symlink_to(sys.executable)
    result = bash(REHEARSAL, tmp_path, env={"PYTHON": sys.executable, "MACHINE_PYTHON": str(other),
                                            "TORCH_VERSION": "", "TMPDIR": str(tmp_path)})
    assert result.returncode == 2 and result.stderr == (
        f"rehearse_gpu_plan.sh: MACHINE_PYTHON={other} needs TORCH_VERSION (torch and the packages the GPU machine "
        "has are installed for it)\n")
    assert not any(tmp_path.glob("gpu-rehearsal.*"))


def test_list_names_the_campaign_the_session_fits(tmp_path):
    """Five seeds of the recipe (base-s1 is call1's solo run), SMART and layer-wise decay once, the three single
    runs; the rehearsal's tiny scale two seeds of the recipe."""
    assert bash(PLAN, tmp_path, "list").stdout.split() == [
        "base-s1", "base-s2", "base-s3", "base-s4", "base-s5", "smart-s1", "lld-s1", "cls-s1", "cross-sts-s1",
        "rr-batch-s1"]
    assert bash(PLAN, tmp_path, "list", env={"SCALE": "tiny"}).stdout.split()[:3] == ["base-s1", "base-s2", "smart-s1"]
    assert not any(tmp_path.iterdir())


def test_a_failed_step_is_recorded_and_the_call_exits_1_after_it(tmp_path):
    """Here the compiled call's Python cannot even start: its step is a line with its exit code, and the call ends
    with exit code 1 for the device tool to show."""
    result = bash(PLAN, tmp_path, "compiled", env={"MODEL": "/tmp/minilm", "DATA": "/data", "PYTHON": "false"})
    assert result.returncode == 1
    assert "compiled: exit code 1 (124: its 240 s limit); see" in result.stdout
    step = json.loads((tmp_path / "results" / "steps.jsonl").read_text())
    assert (step["call"], step["step"], step["limit"], step["rc"]) == ("compiled", "compiled", 240, 1)


def test_the_wheels_staged_for_the_plan_are_the_versions_installed_here():
    """benchmarks/device-wheels.txt (what the GPU machine lacks for the search call): the versions setup.sh
    installs, so that the study there runs the Optuna tested here."""
    from importlib.metadata import version
    pins = dict(line.split("==") for line in (ROOT / "benchmarks" / "device-wheels.txt").read_text().split())
    assert pins == {name: version(name) for name in pins} and "optuna" in pins


def test_the_graph_check_passes_on_the_cpu():
    """benchmarks/graph_check.py, call1's check of the trainer's CUDA graphs: on a CPU torch compiles the same way
    and replays no graph, so its checks hold there too (on the GPU they are the point)."""
    from benchmarks import graph_check
    assert graph_check.main(["--device", "cpu"]) == 0
