"""A run saves last/ every --save-every-minutes (10 by default), so that the quick start killed in its first
minutes resumes; killed before its first save, what to run is said, whether rerun as it was or with --resume."""
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import assert_same_weights, checkpoint_weights

ROOT = Path(__file__).resolve().parents[1]

# The command, killed (SIGKILL, as by a user's Ctrl-\ or the machine) as step KILL_AT begins. Its clock is the
# steps: one minute a step, so that the default --save-every-minutes 10 saves last/ at steps 10, 20, ... without a
# test that sleeps or races a timer.
KILLED = """
import os, signal, sys, types
sys.path.insert(0, {root!r})
from minbert.engine import callbacks
from minbert.training import multitask
import multitask_classifier
step, minutes = multitask.MultitaskRun.step, [0]
def counted(self, item, share):
    minutes[0] = self.engine.state.step + 1  # the step under way ends at this minute
    if minutes[0] == {kill_at}:
        os.kill(os.getpid(), signal.SIGKILL)
    return step(self, item, share)
multitask.MultitaskRun.step = counted
callbacks.time = types.SimpleNamespace(monotonic=lambda: 60.0 * minutes[0])
multitask_classifier.main(sys.argv[1:])
"""


def quick_start(model: Path, data: Path, out: Path) -> list[str]:
    """The README's quick start, on a tiny model and the tiny course files (40 rows a task: 30 steps of 4)."""
    return ["--config", "quick-start", "--model", str(model), "--data-dir", str(data),
            "--max-train-examples", "40", "--batch-size", "4", "--output-dir", str(out / "run"),
            "--predictions-dir", str(out / "predictions"), "--device", "cpu"]


def command(args: list[str], script: str = "multitask_classifier.py") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, script, *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def killed(tmp_path: Path, args: list[str], at: int) -> subprocess.CompletedProcess:
    script = tmp_path / f"killed-at-{at}.py"
    script.write_text(KILLED.format(root=str(ROOT), kill_at=at))
    return command(args, str(script))


def test_the_quick_start_killed_after_its_first_timed_save_resumes_to_the_same_weights(tiny_model, course_data,
                                                                                       tmp_path):
    assert command(quick_start(tiny_model, course_data, tmp_path / "whole")).returncode == 0
    args = quick_start(tiny_model, course_data, tmp_path / "killed")
    assert killed(tmp_path, args, at=13).returncode == -9
    resumed = command([*args, "--resume"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming at step 10 of" in resumed.stderr  # the timed save of minute 10
    for folder in ("best", "last"):
        assert_same_weights(checkpoint_weights(tmp_path / f"killed/run/{folder}"),
                            checkpoint_weights(tmp_path / f"whole/run/{folder}"))
    for name in ("sst-test-output.csv", "para-test-output.csv", "sts-test-output.csv"):
        assert (tmp_path / "killed/predictions" / name).read_text() == \
            (tmp_path / "whole/predictions" / name).read_text()


def test_a_run_killed_before_its_first_save_says_the_command_that_starts_it_again(tiny_model, course_data, tmp_path):
    args = quick_start(tiny_model, course_data, tmp_path)
    assert killed(tmp_path, [*args, "--log-every", "2"], at=5).returncode == -9  # its metrics log has 2 lines
    again = shlex.join(["python", "multitask_classifier.py", *args, "--log-every", "2", "--overwrite"])
    rerun = command([*args, "--log-every", "2"])
    assert rerun.returncode == 2
    assert rerun.stderr.strip().splitlines()[-1] == (
        f"error: --output-dir {tmp_path / 'run'} holds a run that stopped before it saved a checkpoint to resume "
        f"from; start it again: {again}")
    resume = command([*args, "--log-every", "2", "--resume"])
    assert resume.returncode == 2
    assert resume.stderr.strip().splitlines()[-1] == (
        f"error: --resume: the run in {tmp_path / 'run'} stopped before it saved a checkpoint to resume from; start "
        f"it again: {again}")
    assert command(shlex.split(again)[2:]).returncode == 0
