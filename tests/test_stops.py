"""Every stop says where it stands: a signal at any phase of a run (its set-up, a step, a save, its final
predictions) ends the command with one line naming what it was doing, what it kept, and the command that goes on
(--resume) or starts it again; no lock or temporary file stays behind, and the printed command, run as printed,
ends as the run never stopped would have (the same weights and leaderboard files). test_timed_save.py stops a run
between its steps; here the signal comes where there is no step to finish, or twice within a save.

Each case runs the quick start (tiny model and data, 30 steps) through a script that sends the signal itself at
one point of the run (a hook on what the run calls there), so that the phase is certain, not a race."""
import os
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.conftest import assert_same_weights, checkpoint_weights, contents
from tests.test_timed_save import ROOT, command, interpreter, quick_start

# The command, with `hook` (code that sends a signal at one point of the run) in place first.
STOPPED = """
import os, pathlib, signal, sys
sys.path.insert(0, {root!r})
import torch
from minbert.common import cli
from minbert.training import multitask
import multitask_classifier
{hook}
cli.run(lambda: multitask_classifier.main(sys.argv[1:]))  # as the script runs it
"""

# While the final leaderboard files are written: the set's first file is in its temporary folder.
IN_THE_FINAL_PREDICTIONS = """
leaderboard_files = multitask.leaderboard_files
def stopping(*args, **kwargs):
    files = leaderboard_files(*args, **kwargs)
    name, write = next(iter(files.items()))
    def write_then_stop(path):
        write(path)
        os.kill(os.getpid(), signal.{signal})
    return {{**files, name: write_then_stop}}
multitask.leaderboard_files = stopping
"""

# Ctrl-C TIMES while last/ is saved for the SAVE-th time: as its training state is written, or (AFTER_SWAP) once the
# old last/ is renamed away and the new one not yet in its place.
IN_A_SAVE = """
save, rename, saves = torch.save, pathlib.Path.rename, [0]
def signalled():
    for _ in range({times}):
        os.kill(os.getpid(), signal.SIGINT)
def saved(obj, file, *args, **kwargs):
    if str(file).endswith("training_state.pt"):
        saves[0] += 1
        if saves[0] == {save} and not {after_swap}:
            signalled()
    return save(obj, file, *args, **kwargs)
def renamed(self, target):
    result = rename(self, target)
    if saves[0] == {save} and {after_swap} and pathlib.Path(target).name == ".last.old":
        signalled()
    return result
torch.save, pathlib.Path.rename = saved, renamed
"""

# While the model loads, before any step.
IN_THE_SET_UP = """
load = multitask.MultitaskRun._load
def stopping(self, *args, **kwargs):
    os.kill(os.getpid(), signal.{signal})
    return load(self, *args, **kwargs)
multitask.MultitaskRun._load = stopping
"""


# The command, sent SIGTERM as it starts loading its training code (torch and the model's modules: seconds).
AS_IT_STARTS = """
import importlib.abc, os, signal, sys
sys.path.insert(0, {root!r})
class SignalAtImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "minbert.engine.engine":
            os.kill(os.getpid(), signal.SIGTERM)
        return None
sys.meta_path.insert(0, SignalAtImport())
from minbert.common import cli
import multitask_classifier
cli.run(lambda: multitask_classifier.main(sys.argv[1:]))  # as the script runs it
"""


def stopped(tmp_path: Path, args: list[str], hook: str) -> subprocess.CompletedProcess:
    """The command with `hook`, run from a script in tmp_path (its outputs: in tmp_path/out)."""
    script = tmp_path / f"stopped-{len(list(tmp_path.glob('stopped-*.py')))}.py"
    script.write_text(STOPPED.format(root=str(ROOT), hook=hook))
    return command(args, str(script))


def as_printed(line: str, told: str) -> str:
    """The command a stop line ends with, once it is seen to begin as `told` says."""
    assert line.startswith(told), line
    return line[len(told):]


def run_as_printed(again: str) -> subprocess.CompletedProcess:
    """The printed command, as the shell runs it (OMP_NUM_THREADS from the command itself)."""
    return subprocess.run(["bash", "-c", again], cwd=ROOT, capture_output=True, text=True,
                          env={name: value for name, value in os.environ.items() if name != "OMP_NUM_THREADS"})


def leftovers(folder: Path) -> list[str]:
    """Lock files and the temporary files of a write (atomic_file's, atomic_directory's, atomic_files') under
    `folder`."""
    return sorted(str(path.relative_to(folder)) for path in folder.rglob(".*")
                  if path.name.endswith((".lock", ".tmp", ".old", ".ready")))


def assert_same_results(stopped_out: Path, whole_out: Path) -> None:
    for folder in ("best", "last"):
        assert_same_weights(checkpoint_weights(stopped_out / "run" / folder),
                            checkpoint_weights(whole_out / "run" / folder))
    names = sorted(path.name for path in (whole_out / "predictions").glob("*-output.csv"))
    assert len(names) == 6
    for name in names:
        assert (stopped_out / "predictions" / name).read_text() == (whole_out / "predictions" / name).read_text()


@pytest.fixture(scope="module")
def whole(tiny_model, course_data, tmp_path_factory) -> Path:
    """The quick start never stopped."""
    out = tmp_path_factory.mktemp("whole")
    assert command(quick_start(tiny_model, course_data, out)).returncode == 0
    return out


def resumed_line(args: list[str]) -> list[str]:
    return ["OMP_NUM_THREADS=1", interpreter(), "multitask_classifier.py", *args, "--resume"]


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_signal_in_the_final_predictions_says_what_it_kept_and_its_command_finishes_the_run(
        name, tiny_model, course_data, whole, tmp_path):
    out = tmp_path / "out"
    args = quick_start(tiny_model, course_data, out)
    stop = stopped(tmp_path, args, IN_THE_FINAL_PREDICTIONS.format(signal=name))
    assert stop.returncode == 128 + getattr(signal, name), stop.stderr[-2000:]
    line = stop.stderr.strip().splitlines()[-1]
    again = as_printed(line, f"{name}: stopped after step 30 of 30, while writing its final predictions (the "
                             f"leaderboard files); {out / 'run/last'} holds step 30; to go on: ")
    assert shlex.split(again) == resumed_line(args)
    assert "Traceback" not in stop.stderr
    assert leftovers(out) == []
    assert not list((out / "predictions").glob("*-output.csv"))  # the set was not half written
    resumed = run_as_printed(again)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming at step 30 of 30" in resumed.stderr
    assert_same_results(out, whole)
    assert leftovers(out) == []


def test_ctrl_c_twice_in_the_first_save_says_what_was_lost_and_its_command_starts_the_run_again(
        tiny_model, course_data, whole, tmp_path):
    out = tmp_path / "out"
    args = [*quick_start(tiny_model, course_data, out), "--save-every", "5"]
    stop = stopped(tmp_path, args, IN_A_SAVE.format(save=1, after_swap=False, times=2))
    assert stop.returncode == 130, stop.stderr[-2000:]
    line = stop.stderr.strip().splitlines()[-1]
    again = as_printed(line, "SIGINT: stopped while saving last/ after step 5 of 30; nothing was saved, so its 5 "
                             "step(s) are lost; to start it again: ")
    at = args.index("--output-dir")  # the run's own command, its folder named last, with --overwrite
    own = [*args[:at], *args[at + 2:], "--output-dir", args[at + 1], "--overwrite"]
    assert shlex.split(again) == ["OMP_NUM_THREADS=1", interpreter(), "multitask_classifier.py", *own]
    assert not (out / "run/last").exists() and leftovers(out) == []
    again_run = run_as_printed(again)
    assert again_run.returncode == 0, again_run.stderr[-2000:]
    assert_same_results(out, whole)


@pytest.mark.parametrize("after_swap", [False, True], ids=["writing", "after-the-old-last-is-renamed-away"])
def test_ctrl_c_twice_in_a_later_save_keeps_the_previous_last_and_its_command_resumes_from_it(
        after_swap, tiny_model, course_data, whole, tmp_path):
    out = tmp_path / "out"
    args = [*quick_start(tiny_model, course_data, out), "--save-every", "5"]
    stop = stopped(tmp_path, args, IN_A_SAVE.format(save=2, after_swap=after_swap, times=2))
    assert stop.returncode == 130, stop.stderr[-2000:]
    line = stop.stderr.strip().splitlines()[-1]
    again = as_printed(line, f"SIGINT: stopped while saving last/ after step 10 of 30; {out / 'run/last'} holds "
                             f"step 5, so the 5 step(s) after it are lost; to go on: ")
    assert shlex.split(again) == resumed_line(args)
    assert leftovers(out) == []
    resumed = run_as_printed(again)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming at step 5 of 30" in resumed.stderr
    assert_same_results(out, whole)


def test_ctrl_c_in_the_last_save_stops_the_run_before_its_final_predictions(tiny_model, course_data, whole, tmp_path):
    """The loop has no step left to stop after: the run stops as it ends, before its finish."""
    out = tmp_path / "out"
    args = [*quick_start(tiny_model, course_data, out), "--save-every", "5"]
    stop = stopped(tmp_path, args, IN_A_SAVE.format(save=6, after_swap=False, times=1))  # saves at 5, 10, ..., 30
    assert stop.returncode == 130, stop.stderr[-2000:]
    line = stop.stderr.strip().splitlines()[-1]
    again = as_printed(line, f"SIGINT: stopped after step 30 of 30, while writing its final predictions (the "
                             f"leaderboard files); {out / 'run/last'} holds step 30; to go on: ")
    assert shlex.split(again) == resumed_line(args)
    assert leftovers(out) == [] and not list((out / "predictions").glob("*-output.csv"))
    resumed = run_as_printed(again)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_same_results(out, whole)


def test_a_signal_as_the_command_starts_says_nothing_was_written_and_its_command_starts_the_run(
        tiny_model, course_data, whole, tmp_path):
    out = tmp_path / "out"
    args = quick_start(tiny_model, course_data, out)
    script = tmp_path / "as-it-starts.py"
    script.write_text(AS_IT_STARTS.format(root=str(ROOT)))
    stop = command(args, str(script))
    assert stop.returncode == 143, stop.stderr[-2000:]
    again = as_printed(stop.stderr.strip(), "SIGTERM: stopped while starting, before it wrote anything; to start "
                                            "it: ")  # its one line
    assert shlex.split(again) == ["OMP_NUM_THREADS=1", interpreter(), "multitask_classifier.py", *args]
    assert not out.exists()
    started = run_as_printed(again)
    assert started.returncode == 0, started.stderr[-2000:]
    assert_same_results(out, whole)


def test_a_signal_in_the_set_up_of_a_new_run_leaves_nothing_behind_and_its_command_starts_it(
        tiny_model, course_data, whole, tmp_path):
    out = tmp_path / "out"
    args = quick_start(tiny_model, course_data, out)
    stop = stopped(tmp_path, args, IN_THE_SET_UP.format(signal="SIGTERM"))
    assert stop.returncode == 143, stop.stderr[-2000:]
    line = stop.stderr.strip().splitlines()[-1]
    again = as_printed(line, "SIGTERM: stopped while setting up; nothing was trained; to start it again: ")
    assert leftovers(out) == []
    started = run_as_printed(again)
    assert started.returncode == 0, started.stderr[-2000:]
    assert_same_results(out, whole)


def test_a_signal_in_the_set_up_of_a_resume_keeps_last_and_its_command_resumes(tiny_model, course_data, whole,
                                                                                tmp_path):
    out = tmp_path / "out"
    args = [*quick_start(tiny_model, course_data, out), "--save-every", "5"]
    first = stopped(tmp_path, args, IN_A_SAVE.format(save=3, after_swap=False, times=2))  # last/ holds step 10
    assert first.returncode == 130, first.stderr[-2000:]
    stop = stopped(tmp_path, [*args, "--resume"], IN_THE_SET_UP.format(signal="SIGINT"))
    assert stop.returncode == 130, stop.stderr[-2000:]
    line = stop.stderr.strip().splitlines()[-1]
    again = as_printed(line, f"SIGINT: stopped while setting up; {out / 'run/last'} holds step 10; to go on: ")
    assert shlex.split(again) == resumed_line(args)
    assert leftovers(out) == []
    resumed = run_as_printed(again)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_same_results(out, whole)


def test_a_signal_in_the_set_up_of_an_overwrite_leaves_the_old_run_as_it_was(tiny_model, course_data, whole,
                                                                            tmp_path):
    out = Path(shutil.copytree(whole, tmp_path / "out"))
    before = contents(out)
    args = [*quick_start(tiny_model, course_data, out), "--overwrite"]
    stop = stopped(tmp_path, args, IN_THE_SET_UP.format(signal="SIGTERM"))
    assert stop.returncode == 143, stop.stderr[-2000:]
    line = stop.stderr.strip().splitlines()[-1]
    again = as_printed(line, f"SIGTERM: stopped while setting up; --output-dir {out / 'run'} is as it was; to start "
                             f"the run: ")
    assert shlex.split(again) == ["OMP_NUM_THREADS=1", interpreter(), "multitask_classifier.py", *args]
    assert contents(out) == before
    started = run_as_printed(again)
    assert started.returncode == 0, started.stderr[-2000:]
    assert_same_results(out, whole)


def test_pretraining_stopped_while_it_saves_its_encoder_says_what_it_kept_and_its_command_finishes_it(
        tiny_model, contrastive_data, tmp_path, monkeypatch, capsys):
    """pretrain's final phase, in this process: SIGTERM once its encoder is written into the set's temporary folder.
    The set is not moved in (no half of it), last/ stays, and the printed command ends the run as one never stopped."""
    import pretrain_contrastive
    from minbert.common import cli
    from minbert.training import contrastive

    def argv(out: Path) -> list[str]:
        return ["--model", str(tiny_model), "--data-dir", str(contrastive_data), "--output-dir", str(out),
                "--method", "simcse", "--data", "sts", "--save-every", "1", "--device", "cpu",
                "--precision", "fp32"]

    pretrain_contrastive.main(argv(tmp_path / "whole"))
    save = contrastive.checkpoint.save

    def save_then_stop(folder, *args, **kwargs):
        save(folder, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(contrastive.checkpoint, "save", save_then_stop)
    out = tmp_path / "stopped"
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        cli.run(lambda: pretrain_contrastive.main(argv(out)))
    monkeypatch.setattr(contrastive.checkpoint, "save", save)
    assert stop.value.code == 143
    line = capsys.readouterr().err.strip().splitlines()[-1]
    again = as_printed(line, f"SIGTERM: stopped after step 1 of 1, while finishing the run; {out / 'last'} holds step "
                             f"1; to go on: ")
    words = [word for word in shlex.split(again) if not word.startswith("OMP_NUM_THREADS=")]  # as this process has it
    assert words == [interpreter(), "pretrain_contrastive.py", *argv(out), "--resume"]
    assert leftovers(out) == [] and not (out / "model.safetensors").exists()
    resumed = run_as_printed(again)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_same_weights(load_file(out / "model.safetensors"), load_file(tmp_path / "whole" / "model.safetensors"))
    assert leftovers(out) == [] and not (out / "last").exists()
