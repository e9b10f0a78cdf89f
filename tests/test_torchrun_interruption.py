"""A torchrun job stopped by a signal: SIGTERM to torchrun (as SLURM or a `kill` sends it), which passes it on to its
processes; SIGUSR1 to a torchrun told to pass it on too (--signals-to-handle); a signal to one process alone. Every
process finishes the same step, rank 0 saves last/, the job ends, and the printed command, a torchrun command,
resumes the run to the weights of the run never stopped."""
import os
import random
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import assert_same_weights, checkpoint_weights, multitask_argv, write_course_files
from tests.test_timed_save import interpreter

ROOT = Path(__file__).resolve().parents[1]
ENV = {"OMP_NUM_THREADS": "1", **os.environ}
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
STOP_AT = 3  # the step during which the signal comes, of 6

# The command, whose rank 1 sends `signal` to `whom` while step STOP_AT runs, then waits until the signal has
# reached it (torchrun passes it on to each process in turn: rank 0 first). Its printed command names
# multitask_classifier.py: this script only stands in for it.
SIGNALLED = """
import os, signal, sys, time
sys.path.insert(0, {root!r})
from minbert.common import cli
from minbert.engine import callbacks
from minbert.training import multitask
import multitask_classifier
received, on_signal = [], callbacks.Interruption.on_signal
def noted(self, number, frame):
    received.append(number)
    on_signal(self, number, frame)
callbacks.Interruption.on_signal = noted
step = multitask.MultitaskRun.step
def signalled(self, item, share):
    if self.engine.state.step + 1 == {at} and os.environ["RANK"] == "1" and not received:
        os.kill({whom}, signal.{signal})
        while not received:
            time.sleep(0.01)
    return step(self, item, share)
multitask.MultitaskRun.step = signalled
cli.run(lambda: multitask_classifier.main(sys.argv[1:]))  # as the command runs: its log, its end
"""


@pytest.fixture(scope="module")
def data_48(tmp_path_factory) -> Path:
    """48 training rows a task: 6 steps of 2 processes x 4 rows."""
    return write_course_files(tmp_path_factory.mktemp("data-48"), random.Random(0), train_rows=48)


def args(model: Path, data: Path, out: Path) -> list[str]:
    """A tiny multitask run of one epoch on 2 processes, dropout on: a resumed process must restore its own
    random state to draw the masks the run never stopped draws."""
    return multitask_argv(model, data, out, "--batch-size", "4", "--epochs", "1", "--schedule", "avg",
                          "--dist-timeout", "60")


def run(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=ENV)


@pytest.fixture(scope="module")
def uninterrupted(tiny_model, data_48, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("uninterrupted")
    result = run([*TORCHRUN, "multitask_classifier.py", *args(tiny_model, data_48, out)])
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def signalled(tmp_path: Path, run_args: list[str], name: str, whom: str, torchrun: list[str] = TORCHRUN):
    """The job, signalled as SIGNALLED says; whom: "torchrun" (rank 1's parent) or "rank 1" (itself)."""
    script = tmp_path / "signalled.py"
    script.write_text(SIGNALLED.format(root=str(ROOT), at=STOP_AT, signal=name,
                                       whom="os.getppid()" if whom == "torchrun" else "os.getpid()"))
    return run([*torchrun, str(script), *run_args])


def told(result: subprocess.CompletedProcess, name: str, out: Path) -> list[str]:
    """The command rank 0 printed to go on, once, after saying where it stopped: its words after the setting of
    OMP_NUM_THREADS it ran with."""
    said = f"{name}: stopped after step {STOP_AT} of 6, saved in {out / 'run' / 'last'}; to go on: "
    lines = [line for line in result.stderr.splitlines() if line.startswith(said)]
    assert len(lines) == 1, result.stderr[-3000:]
    setting, *words = shlex.split(lines[0][len(said):])
    assert setting == f"OMP_NUM_THREADS={ENV['OMP_NUM_THREADS']}"  # as the job ran
    return words


def saved_step(out: Path) -> int:
    return torch.load(out / "run/last/training_state.pt", weights_only=True)["engine"]["step"]


def test_sigterm_to_torchrun_stops_every_process_after_the_step_and_its_printed_command_resumes_the_run(
        tiny_model, data_48, tmp_path, uninterrupted):
    run_args = args(tiny_model, data_48, tmp_path)
    stopped = signalled(tmp_path, run_args, "SIGTERM", "torchrun")
    assert stopped.returncode == 1  # torchrun's, after its processes' 128 + the signal
    assert saved_step(tmp_path) == STOP_AT
    again = told(stopped, "SIGTERM", tmp_path)
    # torchrun as it was started, the command it ran (named as it is run), its flags and --resume.
    assert again == [interpreter(), *TORCHRUN[1:], "multitask_classifier.py", *run_args, "--resume"]
    resumed = run(again)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming at step {STOP_AT} of 6" in resumed.stderr
    for folder in ("best", "last"):
        assert_same_weights(checkpoint_weights(tmp_path / "run" / folder),
                            checkpoint_weights(uninterrupted / "run" / folder))
    for name in ("sst-test-output.csv", "para-test-output.csv", "sts-test-output.csv"):
        assert (tmp_path / "predictions" / name).read_text() == (uninterrupted / "predictions" / name).read_text()


def test_sigusr1_to_a_torchrun_that_passes_it_on_stops_the_run_alike(tiny_model, data_48, tmp_path):
    """SLURM's --signal=USR1: torchrun passes SIGUSR1 on only when told to (--signals-to-handle). Here torchrun is
    the console command (a script its #! line's interpreter runs): the printed command starts with it."""
    torchrun = [str(Path(sys.executable).parent / "torchrun"), *TORCHRUN[3:],
                "--signals-to-handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"]
    run_args = args(tiny_model, data_48, tmp_path)
    stopped = signalled(tmp_path, run_args, "SIGUSR1", "torchrun", torchrun)
    assert stopped.returncode == 1  # torchrun's, after its processes' 128 + the signal
    assert saved_step(tmp_path) == STOP_AT
    shown = str(Path(torchrun[0]).relative_to(ROOT)) if Path(torchrun[0]).is_relative_to(ROOT) else torchrun[0]
    assert told(stopped, "SIGUSR1", tmp_path) == [shown, *torchrun[1:], "multitask_classifier.py", *run_args,
                                                  "--resume"]


def test_a_signal_that_reaches_one_process_alone_stops_every_process_after_the_same_step(tiny_model, data_48,
                                                                                          tmp_path):
    """A `kill` of rank 1's process: it tells the others at the end of its step, and all stop there."""
    stopped = signalled(tmp_path, args(tiny_model, data_48, tmp_path), "SIGTERM", "rank 1")
    assert stopped.returncode == 1  # torchrun's, after its processes' 128 + the signal
    assert saved_step(tmp_path) == STOP_AT
    assert re.search(r"exitcode\s*: 143", stopped.stderr), stopped.stderr[-3000:]  # 128 + SIGTERM: rank 0's too
    told(stopped, "SIGTERM", tmp_path)
