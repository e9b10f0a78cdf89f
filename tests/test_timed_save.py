"""A run saves last/ every --save-every-minutes (1 by default), so that the quick start killed in its first
minutes resumes; killed before its first save, what to run is said, whether rerun as it was or with --resume.
Stopped by Ctrl-C (SIGINT), SIGTERM or SIGUSR1, it finishes its step, saves last/ and prints the command that
resumes it; the same signal twice stops it at once, two Ctrl-C back to back too, saying what was lost and what
starts it again (tests/test_stops.py runs that command)."""
import os
import re
import shlex
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest

from minbert.engine import callbacks
from tests.conftest import assert_same_weights, checkpoint_weights

ROOT = Path(__file__).resolve().parents[1]

# The command, killed (SIGKILL, as by a user's Ctrl-\ or the machine) as step KILL_AT begins. Its clock is the
# steps: one minute a step, so that --save-every-minutes 10 saves last/ at steps 10, 20, ... without a test that
# sleeps or races a timer (a save takes no time on this clock).
KILLED = """
import os, signal, sys, types
sys.path.insert(0, {root!r})
from minbert.common import cli
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
cli.run(lambda: multitask_classifier.main(sys.argv[1:]))  # as the script runs it
"""


def quick_start(model: Path, data: Path, out: Path) -> list[str]:
    """The README's quick start, on a tiny model and the tiny course files (40 rows a task: 30 steps of 4)."""
    return ["--config", "quick-start", "--model", str(model), "--data-dir", str(data),
            "--max-train-examples", "40", "--batch-size", "4", "--output-dir", str(out / "run"),
            "--predictions-dir", str(out / "predictions"), "--device", "cpu"]


def command(args: list[str], script: str = "multitask_classifier.py") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, script, *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def interpreter() -> str:
    """This interpreter, as a command printed by a command run in ROOT names it."""
    return str(Path(sys.executable).relative_to(ROOT)) if Path(sys.executable).is_relative_to(ROOT) else sys.executable


def killed(tmp_path: Path, args: list[str], at: int) -> subprocess.CompletedProcess:
    script = tmp_path / f"killed-at-{at}.py"
    script.write_text(KILLED.format(root=str(ROOT), kill_at=at))
    return command(args, str(script))


def test_the_quick_start_killed_after_its_first_timed_save_resumes_to_the_same_weights(tiny_model, course_data,
                                                                                       tmp_path):
    assert command(quick_start(tiny_model, course_data, tmp_path / "whole")).returncode == 0
    args = [*quick_start(tiny_model, course_data, tmp_path / "killed"), "--save-every-minutes", "10"]
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
    args += ["--save-every-minutes", "10"]
    assert killed(tmp_path, [*args, "--log-every", "2"], at=5).returncode == -9  # its metrics log has 2 lines
    # The run's own command, in its own folder (named last), with --overwrite.
    at = args.index("--output-dir")
    own = [*args[:at], *args[at + 2:], "--log-every", "2", "--output-dir", args[at + 1], "--overwrite"]
    again = "OMP_NUM_THREADS=1 " + shlex.join([interpreter(), "multitask_classifier.py", *own])  # as it ran
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
    assert subprocess.run(["bash", "-c", again], cwd=ROOT).returncode == 0  # the interpreter, never a bare python


def test_by_default_the_first_timed_save_comes_after_a_minute_and_each_save_logs_a_line(tiny_model, course_data,
                                                                                       tmp_path):
    args = quick_start(tiny_model, course_data, tmp_path)
    assert killed(tmp_path, args, at=3).returncode == -9  # a step a minute: saved after steps 1 and 2
    assert "resuming at step 2 of" in command([*args, "--resume"]).stderr
    again = killed(tmp_path, [*args, "--overwrite"], at=4).stderr
    saves = re.findall(r"step (\d+): saved (.*) in \d+\.\d s \(--resume goes on from here\)", again)
    assert saves == [(str(step), str(tmp_path / "run" / "last")) for step in (1, 2, 3)]


def test_a_save_of_s_seconds_puts_the_next_timed_save_at_least_50_s_later(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(callbacks, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    saver, state = callbacks.TimedSave(1.0), callbacks.EngineState()
    saver.on_train_begin(state, callbacks.Control())
    asked = []
    for step in range(1, 400):  # a step a second; each save takes 3 s
        clock[0] += 1
        control = callbacks.Control()
        saver.on_step_end(state, control, {})
        if control.should_save:
            asked.append(step)
            clock[0] += 3
            saver.on_save(state, control, Path("last"), False)
    # The first a minute after the start; each next one 3 / 0.02 = 150 s after the end of the last, not 60:
    # step 60 ends at 60 s, its save at 63 s; step 210 ends at 213 s (63 + 150), its save at 216 s; step 360 at 366 s.
    assert asked == [60, 210, 360]


# The command, sent `signal` (once, or `times` times) by itself while step AT runs.
SIGNALLED = """
import os, signal, sys
sys.path.insert(0, {root!r})
from minbert.common import cli
from minbert.training import multitask
import multitask_classifier
step = multitask.MultitaskRun.step
def signalled(self, item, share):
    if self.engine.state.step + 1 == {at}:
        for _ in range({times}):
            os.kill(os.getpid(), signal.{signal})
    return step(self, item, share)
multitask.MultitaskRun.step = signalled
cli.run(lambda: multitask_classifier.main(sys.argv[1:]))  # as the script runs it
"""


def signalled(tmp_path: Path, args: list[str], name: str, at: int, times: int = 1) -> subprocess.CompletedProcess:
    script = tmp_path / f"{name}-at-{at}.py"
    script.write_text(SIGNALLED.format(root=str(ROOT), at=at, signal=name, times=times))
    return command(args, str(script))


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGUSR1"])
def test_the_quick_start_stopped_by_a_signal_saves_and_its_printed_command_resumes_it_to_the_same_weights(
        name, tiny_model, course_data, tmp_path):
    assert command(quick_start(tiny_model, course_data, tmp_path / "whole")).returncode == 0
    args = quick_start(tiny_model, course_data, tmp_path / "stopped")
    stopped = signalled(tmp_path, args, name, at=7)
    assert stopped.returncode == 128 + getattr(signal, name), stopped.stderr[-2000:]
    assert f"{name}: finishing the step under way, then saving last/ (again to stop at once)" in stopped.stderr
    last = stopped.stderr.strip().splitlines()[-1]
    told = f"{name}: stopped after step 7 of 30, saved in {tmp_path / 'stopped/run/last'}; to go on: "
    assert last.startswith(told), last
    again = last[len(told):]
    # With the one thread it ran on (command() sets it), as the shell runs it.
    assert shlex.split(again) == ["OMP_NUM_THREADS=1", interpreter(), "multitask_classifier.py", *args, "--resume"]
    resumed = subprocess.run(["bash", "-c", again], cwd=ROOT, capture_output=True, text=True,
                             env={name: value for name, value in os.environ.items() if name != "OMP_NUM_THREADS"})
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming at step 7 of 30" in resumed.stderr
    for folder in ("best", "last"):
        assert_same_weights(checkpoint_weights(tmp_path / f"stopped/run/{folder}"),
                            checkpoint_weights(tmp_path / f"whole/run/{folder}"))
    for name in ("sst-test-output.csv", "para-test-output.csv", "sts-test-output.csv"):
        assert (tmp_path / "stopped/predictions" / name).read_text() == \
            (tmp_path / "whole/predictions" / name).read_text()


def test_a_second_ctrl_c_stops_at_once_without_saving(tiny_model, course_data, tmp_path):
    args = [*quick_start(tiny_model, course_data, tmp_path), "--save-every-minutes", "0"]
    stopped = signalled(tmp_path, args, "SIGINT", at=3, times=2)
    assert stopped.returncode == 130
    assert stopped.stderr.strip().splitlines()[-1] == stopped_in_step_3(args)
    assert not (tmp_path / "run" / "last").exists()


def stopped_in_step_3(args: list[str]) -> str:
    """The line of a run stopped at once in step 3, before any save: the run's own command starts it again."""
    at = args.index("--output-dir")
    own = [*args[:at], *args[at + 2:], "--output-dir", args[at + 1], "--overwrite"]
    return ("SIGINT: stopped in step 3 of 30; nothing was saved, so its 2 step(s) are lost; to start it again: "
            "OMP_NUM_THREADS=1 " + shlex.join([interpreter(), "multitask_classifier.py", *own]))


# The command, sent SIGINT twice back to back while step AT runs, as by two quick Ctrl-C during a backward pass: the
# main thread is in C code (here a lock's wait) while both arrive, so that Python calls its handler once for both.
DOUBLE_CTRL_C = """
import signal, sys, threading, time
sys.path.insert(0, {root!r})
from minbert.common import cli
from minbert.training import multitask
import multitask_classifier
step = multitask.MultitaskRun.step
def twice(done):
    time.sleep(0.1)  # the main thread waits on `done` by then
    for _ in range(2):  # each delivered to this thread, before pthread_kill returns
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
    done.release()
def signalled(self, item, share):
    if self.engine.state.step + 1 == {at}:
        done = threading.Lock()
        done.acquire()
        threading.Thread(target=twice, args=(done,)).start()
        done.acquire()  # in C until both have arrived
    return step(self, item, share)
multitask.MultitaskRun.step = signalled
cli.run(lambda: multitask_classifier.main(sys.argv[1:]))  # as the script runs it
"""


def test_two_ctrl_c_back_to_back_stop_at_once_even_where_python_handles_them_as_one(tiny_model, course_data,
                                                                                      tmp_path):
    args = [*quick_start(tiny_model, course_data, tmp_path), "--save-every-minutes", "0"]
    script = tmp_path / "double-ctrl-c.py"
    script.write_text(DOUBLE_CTRL_C.format(root=str(ROOT), at=3))
    stopped = command(args, str(script))
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    assert stopped.stderr.strip().splitlines()[-1] == stopped_in_step_3(args)
    assert not (tmp_path / "run" / "last").exists()
