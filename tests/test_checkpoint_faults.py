"""A run that dies at any point of a checkpoint save resumes from the newest complete checkpoint to the weights of
an uninterrupted run, and leaves no half-written folder or repeated log line behind.

The save of last/ writes a temporary folder, renames last/ to .last.old, renames the temporary folder to last/,
then removes .last.old. The process is killed (os._exit: no clean-up of any kind) after each of these operations.
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from minbert.common.files import recover_directory
from tests.conftest import assert_same_weights, checkpoint_weights, multitask_argv, write_course_files

ROOT = Path(__file__).resolve().parents[1]

# The run saves last/ after steps 2 and 4 (--save-every 2) and logs every step; the wrapper kills it during the
# save after step 4. Renames of last/: #1 at step 2 (temp -> last), #2 last -> .last.old, #3 temp -> last at step 4.
DIES = """
import os, pathlib, sys
import torch
sys.path.insert(0, {root!r})
point = {point!r}
renames, saves = [0], [0]
rename = pathlib.Path.rename
def renamed(self, target):
    result = rename(self, target)
    if "last" in self.name or "last" in pathlib.Path(target).name:
        renames[0] += 1
        if point == f"after rename {{renames[0]}}":
            os._exit(137)
    return result
pathlib.Path.rename = renamed
save = torch.save
def saved(obj, file, *a, **k):
    save(obj, file, *a, **k)
    if str(file).endswith("training_state.pt"):
        saves[0] += 1
        if point == "while writing" and saves[0] == 2:  # the state of step 4 is written, last/ not yet swapped
            os._exit(137)
torch.save = saved
import multitask_classifier
multitask_classifier.main(sys.argv[1:])
"""
POINTS = {"while writing": 2, "after rename 2": 2, "after rename 3": 4}  # crash point -> step it resumes at


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_course_files(tmp_path_factory.mktemp("data"), random.Random(0), train_rows=24)


def args(model, data, out: Path) -> list[str]:
    return multitask_argv(model, data, out, "--epochs", "1", "--save-every", "2", "--log-every", "1")


def run(*command):
    return subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def log_lines(out: Path) -> list[dict]:
    lines = [json.loads(line) for line in (out / "run/metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in line.items() if not k.endswith("seconds") and k != "examples_per_s"} for line in lines]


@pytest.fixture(scope="module")
def uninterrupted(tiny_model, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    assert run("multitask_classifier.py", *args(tiny_model, data, out)).returncode == 0
    return out


@pytest.mark.parametrize("point", POINTS)
def test_killed_at_each_point_of_a_save_resumes_to_the_uninterrupted_weights(tiny_model, data, uninterrupted,
                                                                                tmp_path, point):
    script = tmp_path / "dies.py"
    script.write_text(DIES.format(root=str(ROOT), point=point))
    died = run(str(script), *args(tiny_model, data, tmp_path))
    assert died.returncode == 137, died.stderr[-2000:]
    resumed = run("multitask_classifier.py", *args(tiny_model, data, tmp_path), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resuming at step {POINTS[point]} " in resumed.stderr
    assert_same_weights(checkpoint_weights(tmp_path / "run/last"), checkpoint_weights(uninterrupted / "run/last"))
    leftovers = [p.name for p in (tmp_path / "run").iterdir() if p.name.startswith(".")]
    assert not leftovers, leftovers
    # The log has each step once, and the epoch's mean training loss counts the steps before the kill too.
    assert log_lines(tmp_path) == log_lines(uninterrupted)


# A log line every 3 steps, a checkpoint every 2: killed after the checkpoint of step 4, the run dies inside the log
# window of steps 4 to 6, whose line the resumed run must write as the uninterrupted one does.
def window_args(model, data, out: Path) -> list[str]:
    return multitask_argv(model, data, out, "--epochs", "1", "--save-every", "2", "--log-every", "3")


# What a resumed run cannot repeat: the seconds since its start and the examples a second, measured on its own clock.
# What a clock measures differs from run to run: every other byte of the log must not.
WALL_CLOCK = re.compile(rb'"(seconds|train_seconds|eval_seconds|finish_seconds|examples_per_s)": [-+.e0-9]+')


def without_wall_clock(log: Path) -> bytes:
    return WALL_CLOCK.sub(rb'"\1": null', log.read_bytes())


@pytest.fixture(scope="module")
def killed_in_a_log_window(tiny_model, data, tmp_path_factory):
    """(uninterrupted, killed, killed and then copied elsewhere): the run folders' parents."""
    full, killed, copied = (tmp_path_factory.mktemp(name) for name in ("window-full", "window-killed", "copied"))
    assert run("multitask_classifier.py", *window_args(tiny_model, data, full)).returncode == 0
    script = killed / "dies.py"
    script.write_text(DIES.format(root=str(ROOT), point="after rename 3"))
    assert run(str(script), *window_args(tiny_model, data, killed)).returncode == 137
    assert (killed / "run/.lock").exists()  # the killed command's lock file stays; its lock went with the process
    shutil.copytree(killed / "run", copied / "elsewhere" / "run")
    return full, killed, copied / "elsewhere"


@pytest.fixture(scope="module")
def resumed_in_a_log_window(tiny_model, data, killed_in_a_log_window):
    full, killed, _ = killed_in_a_log_window
    resumed = run("multitask_classifier.py", *window_args(tiny_model, data, killed), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming at step 4 " in resumed.stderr
    return full, killed


def test_the_resumed_runs_metrics_log_is_the_uninterrupted_runs_byte_for_byte(resumed_in_a_log_window):
    full, resumed = resumed_in_a_log_window
    assert b'"event": "train", "step": 6' in (full / "run/metrics.jsonl").read_bytes()
    assert without_wall_clock(resumed / "run/metrics.jsonl") == without_wall_clock(full / "run/metrics.jsonl")


def test_the_resumed_runs_provenance_keeps_the_command_it_started_with_and_adds_the_resume(resumed_in_a_log_window):
    _, resumed = resumed_in_a_log_window
    provenance = json.loads((resumed / "run/run_config.json").read_text())["provenance"]
    assert not provenance["command"].endswith("--resume")
    assert [entry["command"] for entry in provenance["resumed"]] == [provenance["command"] + " --resume"]
    assert provenance["resumed"][0]["data_sha256"] == provenance["data_sha256"]


def test_a_run_folder_copied_elsewhere_resumes_there(tiny_model, data, killed_in_a_log_window):
    full, _, copied = killed_in_a_log_window
    resumed = run("multitask_classifier.py", *window_args(tiny_model, data, copied), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_same_weights(checkpoint_weights(copied / "run/last"), checkpoint_weights(full / "run/last"))


def test_recover_directory_puts_back_the_complete_folder_and_removes_temporaries(tmp_path):
    old, temp = tmp_path / ".last.old", tmp_path / ".last.abc.tmp"
    old.mkdir(), temp.mkdir()
    (old / "model.safetensors").write_text("complete")
    recover_directory(tmp_path / "last")
    assert (tmp_path / "last" / "model.safetensors").read_text() == "complete"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last"]
