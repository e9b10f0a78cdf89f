"""Output folders are never wiped and runs never mixed: a command writes only what it owns, refuses to start in a
folder that holds files unless it continues the run there (--resume) or starts a new one over it (--overwrite),
and --resume refuses data that changed since the run started (--allow-changed-data goes on, saying so)."""
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

import multitask_classifier
import pretrain_contrastive
from minbert.common.errors import UsageError
from minbert.common import files
from minbert.common.run_folder import RunFolder
from minbert.common.cli import last_wins
from tests.conftest import contents, write_course_files

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_course_files(tmp_path_factory.mktemp("data"), random.Random(0), train_rows=16)


def multitask_args(model, data, out: Path, *extra) -> list[str]:
    return last_wins(["--model", str(model), "--data-dir", str(data), "--output-dir", str(out / "run"),
                      "--predictions-dir", str(out / "predictions"), "--epochs", "1", "--batch-size", "8", "--device",
                      "cpu", *extra])


# The first command, stopped before its first step until the test lets it go on.
WAITS = """
import pathlib, sys, time
sys.path.insert(0, {root!r})
from minbert.engine import engine
fit = engine.Engine.fit
def waits(self, run):
    pathlib.Path({ready!r}).touch()
    while not pathlib.Path({go!r}).exists():
        time.sleep(0.05)
    return fit(self, run)
engine.Engine.fit = waits
import multitask_classifier
multitask_classifier.main(sys.argv[1:])
"""


def test_a_second_command_into_a_folder_in_use_is_refused_and_the_first_runs_on_untouched(tiny_model, data,
                                                                                        tmp_path):
    ready, go, out = tmp_path / "ready", tmp_path / "go", tmp_path / "out"
    script = tmp_path / "waits.py"
    script.write_text(WAITS.format(root=str(ROOT), ready=str(ready), go=str(go)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen([sys.executable, str(script), *multitask_args(tiny_model, data, out, "--seed", "1")],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        while not ready.exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert ready.exists(), first.stderr.read()[-2000:] if first.poll() is not None else "not ready in time"
        before = contents(out)
        # The second the most destructive way: --overwrite, which would remove the first's files.
        second = subprocess.run([sys.executable, "multitask_classifier.py",
                                 *multitask_args(tiny_model, data, out, "--seed", "2", "--overwrite")],
                                cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert second.returncode == 2
        assert second.stderr.strip().splitlines()[-1] == (
            f"error: --output-dir {out / 'run'} is in use by another command (pid {first.pid}); wait until it ends, "
            f"or choose another --output-dir")
        assert contents(out) == before
        go.touch()
        _, errors = first.communicate(timeout=300)
        assert first.returncode == 0, errors[-2000:]
    finally:
        if first.poll() is None:
            first.kill()
    assert json.loads((out / "run/best/run_config.json").read_text())["seed"] == 1
    assert [json.loads(line)["event"] for line in (out / "run/metrics.jsonl").read_text().splitlines()] == ["eval", "finish"]
    assert not (out / "run/.lock").exists()  # released when the command ended


def test_starting_again_in_a_run_folder_is_refused_and_changes_nothing(tiny_model, data, tmp_path, one_thread):
    multitask_classifier.main(multitask_args(tiny_model, data, tmp_path))
    before = contents(tmp_path / "run")
    with pytest.raises(UsageError, match=f"--output-dir {tmp_path / 'run'} already holds files"):
        multitask_classifier.main(multitask_args(tiny_model, data, tmp_path, "--seed", "2"))
    assert contents(tmp_path / "run") == before  # best/, last/ and metrics.jsonl are the first run's


def test_overwrite_starts_a_new_run_over_the_old_one_and_keeps_other_files(tiny_model, data, tmp_path, one_thread):
    multitask_classifier.main(multitask_args(tiny_model, data, tmp_path, "--log-every", "1"))
    (tmp_path / "run" / "notes.txt").write_text("the user's")
    multitask_classifier.main(multitask_args(tiny_model, data, tmp_path, "--seed", "2", "--overwrite"))
    log = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [line["event"] for line in log] == ["eval", "finish"], "the new run's lines only: no train lines of the first"
    assert json.loads((tmp_path / "run" / "best" / "run_config.json").read_text())["seed"] == 2
    assert json.loads((tmp_path / "run" / "last" / "run_config.json").read_text())["seed"] == 2
    assert (tmp_path / "run" / "notes.txt").read_text() == "the user's"


def pretrain_args(model, out: Path, sentences: Path, *extra) -> list[str]:
    return last_wins(["--model", str(model), "--data", str(sentences), "--output-dir", str(out), "--max-steps", "2",
                      "--batch-size", "4", "--device", "cpu", *extra])


@pytest.fixture
def sentences(tmp_path):
    path = tmp_path / "sentences.txt"
    path.write_text("".join(f"sentence number {i} is here\n" for i in range(12)))
    return path


def test_pretraining_keeps_a_tensorboard_folder_inside_its_output_folder(tiny_model, sentences, tmp_path,
                                                                         one_thread):
    out = tmp_path / "simcse"
    pretrain_contrastive.main(pretrain_args(tiny_model, out, sentences, "--tensorboard", str(out / "tensorboard"),
                                            "--save-every", "1", "--log-every", "1"))
    assert list((out / "tensorboard").glob("events.out.tfevents.*")), "the final save removed the TensorBoard folder"
    assert (out / "model.safetensors").is_file() and (out / "metrics.jsonl").is_file()
    assert not (out / "last").exists(), "a finished run leaves no resumable checkpoint"
    assert not [path.name for path in out.iterdir() if path.name.startswith(".")]


def test_pretraining_over_a_folder_of_runs_replaces_only_its_own_files(tiny_model, sentences, tmp_path, one_thread):
    runs = tmp_path / "runs"
    for name in ("first", "second"):
        (runs / name / "best").mkdir(parents=True)
        (runs / name / "best" / "model.safetensors").write_text(f"the {name} run's weights")
    before = contents(runs)
    pretrain_contrastive.main(pretrain_args(tiny_model, runs, sentences, "--overwrite"))
    after = contents(runs)
    assert {name: after[name] for name in before} == before
    assert "model.safetensors" in after and "config.json" in after


def test_resume_refuses_a_changed_data_file_unless_allowed_and_then_says_so(tiny_model, data, tmp_path, one_thread,
                                                                          caplog):
    import shutil

    copy = Path(shutil.copytree(data, tmp_path / "data"))
    argv = multitask_args(tiny_model, copy, tmp_path)
    multitask_classifier.main(argv)
    with open(copy / "sts-train.csv", "a") as f:
        f.write("99\tlater\ta b\tc d\t2.5\n")
    from minbert.common.errors import CheckpointError

    with pytest.raises(CheckpointError, match=f"--resume: {copy / 'sts-train.csv'} changed since the run started"):
        multitask_classifier.main(argv + ["--resume"])
    with caplog.at_level("WARNING"):
        multitask_classifier.main(argv + ["--resume", "--allow-changed-data"])
    assert f"--resume --allow-changed-data: {copy / 'sts-train.csv'} changed since the run started" in caplog.text


# ---- the functions underneath ----

def claimed(folder: Path, owned=("last",), overwrite=False, sources=None, start=False) -> None:
    """A command's claim of the folder, ended at once (start: once its run started, as before its first step)."""
    run = RunFolder(folder)
    run.claim(owned, resume=False, overwrite=overwrite, sources=sources or {})
    if start:
        run.start()
    run.release()


def wrote(folder: Path, *names: str) -> None:
    """The run config of a run in `folder` that recorded writing `names` there (what --overwrite may remove)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run_config.json").write_text(json.dumps({"wrote": list(names)}))


def test_a_folder_holding_only_empty_folders_holds_no_run(tmp_path):
    (tmp_path / "run" / "predictions").mkdir(parents=True)  # what a start refused after check_writable leaves
    claimed(tmp_path / "run")
    (tmp_path / "run" / "predictions" / ".hidden").write_text("")
    with pytest.raises(UsageError, match=r"already holds files \(predictions\)"):
        claimed(tmp_path / "run")


def test_overwrite_replaces_a_checkpoint_a_kill_left_between_its_two_renames(tmp_path):
    """A run killed as a save of best/ renamed the old one away (.best.old, no best/): --overwrite removes that
    checkpoint too, never puts it back beside the new run."""
    (tmp_path / ".best.old").mkdir()
    (tmp_path / ".best.old" / "model.safetensors").write_text("the old run's")
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    wrote(tmp_path, "last", "metrics.jsonl", "best")
    claimed(tmp_path, ("last", "metrics.jsonl", "best"), overwrite=True, start=True)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run_config.json"]


def test_overwrite_removes_nothing_when_an_entry_it_would_remove_holds_what_the_command_reads(tmp_path):
    for name in ("best", "last"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_text(name)
    wrote(tmp_path, "last", "best")
    before = contents(tmp_path)
    with pytest.raises(UsageError, match=f"--overwrite would remove {tmp_path / 'best'}, which --init "
                                         f"{tmp_path / 'last' / '..' / 'best'} reads"):
        claimed(tmp_path, ("last", "best"), overwrite=True,
                sources={"--model": "bert-base-uncased", "--init": str(tmp_path / "last" / ".." / "best")})
    assert contents(tmp_path) == before


def test_overwrite_removes_only_the_entries_the_command_owns_once_its_run_starts(tmp_path):
    (tmp_path / "last").mkdir()
    (tmp_path / "last" / "model.safetensors").write_text("old")
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    (tmp_path / "notes.txt").write_text("the user's")
    wrote(tmp_path, "last", "metrics.jsonl", "best")
    before = contents(tmp_path)
    claimed(tmp_path, ("last", "metrics.jsonl", "best"), overwrite=True)
    assert contents(tmp_path) == before, "a command that ends before its run starts removes nothing"
    claimed(tmp_path, ("last", "metrics.jsonl", "best"), overwrite=True, start=True)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.txt", "run_config.json"]


@pytest.mark.parametrize("recorded", ["absolute", "dot-dot"])
def test_overwrite_never_removes_what_a_run_record_names_outside_the_run_folder(tmp_path, recorded):
    """A hand-edited or copied run_config.json whose `wrote` names a file outside the folder (an absolute path, or
    one through ..): refused in one line, nothing removed, the file outside kept."""
    outside = tmp_path / "precious.txt"
    outside.write_text("the user's")
    run = tmp_path / "run"
    (run / "last").mkdir(parents=True)
    (run / "last" / "model.safetensors").write_text("old")
    wrote(run, "last", str(outside) if recorded == "absolute" else "../precious.txt")
    before = contents(tmp_path)
    named = outside if recorded == "absolute" else run / ".." / "precious.txt"
    with pytest.raises(UsageError) as refused:
        claimed(run, ("last",), overwrite=True, start=True)
    assert str(refused.value) == (f"--overwrite would remove {named}, which lies outside {run} (its run_config.json "
                                  f"records it); --overwrite removes only what lies inside the run folder, and "
                                  f"removed nothing: choose another --output-dir")
    assert contents(tmp_path) == before


def undeletable(file: Path, request) -> None:
    """`file` made one that no process may remove, root included: immutable (chattr +i), taken back when the test
    ends. Skips the test, saying why, where the file system or the user cannot set the attribute."""
    made = subprocess.run(["chattr", "+i", str(file)], capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"cannot make a file immutable here (chattr +i: {made.stderr.strip() or 'failed'})")
    request.addfinalizer(lambda: subprocess.run(["chattr", "-i", str(file)], check=True))


def test_overwrite_checks_every_file_can_go_before_it_removes_any(tmp_path, request):
    """best/config.json immutable (checked after last/ and metrics.jsonl, which would go first): one line naming it,
    and nothing removed, best/ not half-removed."""
    for name in ("last/model.safetensors", "metrics.jsonl", "best/model.safetensors", "best/config.json"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(name)
    wrote(tmp_path, "last", "metrics.jsonl", "best")
    undeletable(tmp_path / "best" / "config.json", request)
    before = contents(tmp_path)
    with pytest.raises(UsageError) as refused:
        claimed(tmp_path, ("last", "metrics.jsonl", "best"), overwrite=True, start=True)
    assert str(refused.value) == (f"--overwrite cannot remove {tmp_path / 'best'} ({tmp_path / 'best' / 'config.json'}"
                                  f": Operation not permitted), and removed nothing: make it removable, or choose "
                                  f"another --output-dir")
    assert contents(tmp_path) == before
    assert sorted(path.name for path in tmp_path.rglob("*")) == sorted(
        ["best", "config.json", "last", "metrics.jsonl", "model.safetensors", "model.safetensors", "run_config.json"])


def test_overwrite_never_removes_a_file_put_into_a_saved_checkpoint(tmp_path):
    """A file of the user's put into best/ after the run saved it: --overwrite refuses, naming it, and removes
    nothing; once it is moved out, --overwrite removes best/."""
    run = RunFolder(tmp_path)
    run.claim(("best",), resume=False, overwrite=False, sources={})
    with run.save_checkpoint(True, {"wrote": ["best"]}) as temp:
        (temp / "model.safetensors").write_text("the run's weights")
    run.release()
    wrote(tmp_path, "best")
    (tmp_path / "best" / "mine.txt").write_text("the user's")
    before = contents(tmp_path)
    with pytest.raises(UsageError) as refused:
        claimed(tmp_path, ("best",), overwrite=True, start=True)
    assert str(refused.value) == (
        f"--overwrite would remove {tmp_path / 'best' / 'mine.txt'}, which the run did not write (.written-by.json in "
        f"{tmp_path / 'best'}, the record of what its save wrote there, does not list it), and removed nothing: move "
        f"it out of {tmp_path / 'best'}, or choose another --output-dir")
    assert contents(tmp_path) == before
    (tmp_path / "best" / "mine.txt").unlink()
    claimed(tmp_path, ("best",), overwrite=True, start=True)
    assert not (tmp_path / "best").exists()


class Killed(BaseException):
    """A kill: no except clause of ours runs (os._exit would end the test too)."""


def test_a_set_of_files_killed_while_moving_in_is_finished_by_recovery(tmp_path, monkeypatch):
    import os

    (tmp_path / "config.json").write_text("old")
    (tmp_path / "notes.txt").write_text("the user's")
    replace, moved = os.replace, []

    def dies_after_one(source, target):
        if moved:
            raise Killed
        moved.append(target)
        replace(source, target)

    monkeypatch.setattr(os, "replace", dies_after_one)
    with pytest.raises(Killed):
        with files.atomic_files(tmp_path) as temp:
            for name in ("config.json", "model.safetensors", "1_Pooling/config.json"):
                (temp / name).parent.mkdir(exist_ok=True)
                (temp / name).write_text("new")
    monkeypatch.setattr(os, "replace", replace)
    assert (tmp_path / files.READY).is_dir()
    files.recover_files(tmp_path)
    assert contents(tmp_path) == {"1_Pooling/config.json": b"new", "config.json": b"new",
                                  "model.safetensors": b"new", "notes.txt": b"the user's"}


def test_a_set_of_files_killed_before_it_was_complete_leaves_the_old_files(tmp_path):
    (tmp_path / "config.json").write_text("old")
    half = tmp_path / ".files.abc.tmp"  # what a kill while writing the set leaves
    half.mkdir()
    (half / "config.json").write_text("new")
    files.recover_files(tmp_path)
    assert contents(tmp_path) == {"config.json": b"old"}
