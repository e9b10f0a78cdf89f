"""What a command may remove, replace and write, as a user meets it: --overwrite removes only what a run recorded
writing, and never through a symbolic link; a run folder moved or removed while its run trains stops the run; a
copied run owns its own predictions; an ensemble's report is replaced only with --overwrite; weights that are not
finite are never resumed from; the paths a run records work from any folder; a lock that a full disk cannot take
leaves nothing behind. The exact lines of these refusals are cases of tests/test_bad_inputs.py's catalogue."""
import json
import os
import random
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import multitask_classifier
from minbert.commands import ensemble, predict
from minbert.common import cli
from minbert.engine.callbacks import Callback
from tests.conftest import contents, full_file_system, multitask_argv, write_course_files
from tests.test_ensemble import dev_dir, make_member, random_outputs  # noqa: F401 (dev_dir: a fixture)

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_course_files(tmp_path_factory.mktemp("data"), random.Random(0), train_rows=16)


def train(model, data, out: Path, *extra, callbacks=()) -> None:
    """A tiny run of one epoch into out/run, its leaderboard files in out/predictions."""
    multitask_classifier.main(multitask_argv(model, data, out, "--epochs", "1", *extra), callbacks=list(callbacks))


def refused(main, capsys) -> str:
    """The one line a command refuses with (exit code 2, no traceback)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        cli.run(main)
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error
    return error.strip().splitlines()[-1]


def unfinished(run: Path) -> Path:
    """The run as a kill after its last checkpoint leaves it: its command did not end (--resume goes on)."""
    config = json.loads((run / "run_config.json").read_text())
    (run / "run_config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "finished"}))
    return run


@pytest.fixture(scope="module")
def finished(tiny_model, data, tmp_path_factory) -> Path:
    """A finished tiny run (OUT/run, OUT/predictions), copied by the tests that change it."""
    out = tmp_path_factory.mktemp("finished")
    train(tiny_model, data, out)
    return out


# ---- --overwrite removes what a run recorded writing, and nothing through a link ----

def test_overwrite_keeps_the_users_files_that_no_run_wrote(tiny_model, data, tmp_path, capsys):
    """best/x.bin, metrics.jsonl and tensorboard/x of the user's, in a folder that holds no run: --overwrite is
    refused, and every file is kept."""
    run = tmp_path / "run"
    for name in ("best/x.bin", "metrics.jsonl", "tensorboard/x"):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(f"the user's {name}")
    before = contents(run)
    line = refused(lambda: train(tiny_model, data, tmp_path, "--overwrite"), capsys)
    assert line.startswith(f"error: --overwrite: metrics.jsonl, best in {run} were not written by a run")
    assert contents(run) == before


def test_overwrite_removes_what_the_old_run_recorded_and_keeps_what_it_did_not(tiny_model, data, finished, tmp_path):
    """A file of the user's in the run folder and in its TensorBoard folder stays; the old run's checkpoints, log
    and TensorBoard file go."""
    out = Path(shutil.copytree(finished, tmp_path / "out"))
    train(tiny_model, data, out, "--overwrite", "--report-to", "tensorboard", "--max-steps", "1")
    old_events = sorted((out / "run" / "tensorboard").iterdir())
    assert len(old_events) == 1
    for folder in (out / "run", out / "run" / "tensorboard"):
        (folder / "notes.txt").write_text("the user's")
    train(tiny_model, data, out, "--overwrite", "--max-steps", "1")
    assert (out / "run" / "notes.txt").read_text() == "the user's"
    assert sorted((out / "run" / "tensorboard").iterdir()) == [out / "run" / "tensorboard" / "notes.txt"]
    recorded = json.loads((out / "run" / "run_config.json").read_text())["wrote"]
    assert set(recorded) == {"best", "last", "metrics.jsonl"}, "the new run wrote no TensorBoard file"


@pytest.mark.parametrize("linked", ["best", "tensorboard"])
def test_overwrite_removes_nothing_when_an_entry_is_a_link_out_of_the_run(tiny_model, data, finished, tmp_path,
                                                                          capsys, linked):
    """best/ a link to the user's folder (checked after last/ and metrics.jsonl, which go first unless everything
    is checked first), or the TensorBoard folder of a recorded event file a link: one line, nothing removed, no
    temporary folder left."""
    out = Path(shutil.copytree(finished, tmp_path / "out"))
    users = tmp_path / "users"
    users.mkdir()
    (users / "events.out.tfevents.1").write_text("the user's")
    run = out / "run"
    if linked == "best":
        shutil.rmtree(run / "best")
    else:
        config = json.loads((run / "run_config.json").read_text())
        (run / "run_config.json").write_text(json.dumps({**config, "wrote": [
            *config["wrote"], "tensorboard/events.out.tfevents.1"]}))
    (run / linked).symlink_to(users)
    before, users_before = contents(run), contents(users)
    line = refused(lambda: train(tiny_model, data, out, "--overwrite", "--max-steps", "1"), capsys)
    if linked == "best":
        assert line.startswith(f"error: --overwrite would remove {run / 'best'}, a symbolic link to {users};")
    else:
        assert line.startswith(f"error: --overwrite would remove {run / 'tensorboard/events.out.tfevents.1'}, which "
                               f"lies outside it, through a symbolic link;")
    assert contents(run) == before and contents(users) == users_before
    assert not [path for path in run.iterdir() if path.name.endswith(".tmp")]


# ---- a run owns its folder while it runs ----

class MovesItsFolder(Callback):
    """After step 2: the run folder moved elsewhere (mv), or removed."""

    def __init__(self, run: Path, moved: Path | None):
        self.run, self.moved = run, moved

    def on_step_end(self, state, control, losses):
        if state.step == 2:
            os.rename(self.run, self.moved) if self.moved else shutil.rmtree(self.run)


@pytest.mark.parametrize("how", ["moved", "moved-before-its-first-checkpoint", "removed"])
def test_a_run_whose_folder_is_moved_or_removed_stops_with_one_line(tiny_model, data, tmp_path, capsys, how):
    """It never writes where the folder was (no folder made again there, without a lock), and keeps what it
    saved where the folder is now, its lock gone with it; the line ends with the command that goes on there (or,
    moved before its first checkpoint, starts it again there), which runs as printed."""
    run, moved = tmp_path / "run", tmp_path / "moved" if how.startswith("moved") else None
    mover = MovesItsFolder(run, moved)
    saves = ["--save-every", "1"] if how != "moved-before-its-first-checkpoint" else ["--save-every-minutes", "0"]
    line = refused(lambda: train(tiny_model, data, tmp_path, *saves, "--log-every", "1", callbacks=[mover]), capsys)
    assert not run.exists(), "nothing written where the folder was"
    if how == "removed":
        assert line == f"error: --output-dir {run} was removed while the command ran in it; it stopped, and wrote " \
                       f"nothing more"
        return
    told = (f"error: --output-dir {run} was moved to {moved} while the command ran in it; it stopped, and wrote "
            f"nothing more where the folder was; ")
    assert line.startswith(told) and not (moved / ".lock").exists()
    if how == "moved":
        assert line[len(told):].startswith(f"what it saved is in {moved}; to go on: ")
        assert (moved / "last" / "training_state.pt").is_file()
        steps = [json.loads(line)["step"] for line in (moved / "metrics.jsonl").read_text().splitlines()]
        assert steps == [1], "every line until the move, in the moved folder"
        again = line.split("; to go on: ", 1)[1]
        assert shlex.split(again)[-3:] == ["--output-dir", str(moved), "--resume"]
    else:
        assert line[len(told):].startswith("it saved no checkpoint to resume from; to start it again: ")
        again = line.split("; to start it again: ", 1)[1]
        assert shlex.split(again)[-3:] == ["--output-dir", str(moved), "--overwrite"]
    assert subprocess.run(["bash", "-c", again], cwd=ROOT, capture_output=True).returncode == 0
    assert json.loads((moved / "run_config.json").read_text())["finished"]


class ChangesWhatTheRunHolds(Callback):
    """After step 2: the run's --predictions-dir moved, removed or replaced by a file, or its metrics.jsonl removed
    (an rm -rf of the run folder under way: its files go before the folder)."""

    def __init__(self, out: Path, how: str):
        self.out, self.how = out, how

    def on_step_end(self, state, control, losses):
        if state.step != 2:
            return
        predictions = self.out / "predictions"
        if self.how == "metrics.jsonl removed":
            (self.out / "run" / "metrics.jsonl").unlink()
        elif self.how == "moved":
            os.rename(predictions, self.out / "moved")
        else:
            shutil.rmtree(predictions)
            if self.how == "replaced by a file":
                predictions.write_text("the user's")


@pytest.mark.parametrize("how", ["moved", "removed", "replaced by a file", "metrics.jsonl removed"])
def test_a_run_whose_predictions_folder_or_log_goes_stops_with_one_line(tiny_model, data, tmp_path, capsys, how):
    """Nothing made again where the folder or the log was (no new folder, no FileExistsError on the file), no lock
    left in the moved folder."""
    changer = ChangesWhatTheRunHolds(tmp_path, how)
    line = refused(lambda: train(tiny_model, data, tmp_path, "--save-every", "1", "--log-every", "1",
                                 callbacks=[changer]), capsys)
    predictions = tmp_path / "predictions"
    if how == "metrics.jsonl removed":
        assert line == (f"error: --output-dir {tmp_path / 'run'}: metrics.jsonl was removed while the command ran in "
                        f"it; it stopped, and wrote nothing more")
        assert not (tmp_path / "run" / "metrics.jsonl").exists()
        return
    where = f"moved to {tmp_path / 'moved'}" if how == "moved" else "removed (or replaced)"
    assert line == (f"error: --predictions-dir {predictions} was {where} while the command ran; it stopped, and wrote "
                    f"nothing more where the folder was")
    if how == "replaced by a file":
        assert predictions.read_text() == "the user's"
    else:
        assert not predictions.exists(), "nothing made again where the folder was"
    if how == "moved":
        assert list((tmp_path / "moved").iterdir()) == [], "no stale .lock in the moved folder"


def test_a_copied_run_is_refused_its_originals_predictions_and_the_advice_works(tiny_model, data, tmp_path, capsys):
    """cp -r RUN COPY; --resume of COPY would write RUN's --predictions-dir: refused, the leaderboard files as they
    were; followed, the advice gives the copy its own, and RUN resumes into its own as before."""
    out = tmp_path / "out"
    train(tiny_model, data, out)
    run, predictions = unfinished(out / "run"), out / "predictions"
    copy = Path(shutil.copytree(run, tmp_path / "copy"))
    before = contents(predictions)
    line = refused(lambda: multitask_classifier.main(["--output-dir", str(copy), "--resume"]), capsys)
    assert line.startswith(f"error: --resume: {copy} is a copy of the run in {run}, and would write its "
                           f"--predictions-dir {predictions}; give the copy its own: ")
    assert contents(predictions) == before
    multitask_classifier.main(shlex.split(line.split("give the copy its own: ")[1]))
    assert (copy / "predictions" / "sst-test-output.csv").is_file()
    assert contents(predictions) == before
    multitask_classifier.main(["--output-dir", str(run), "--resume"])
    assert json.loads((predictions / "written-by.json").read_text())["written_by"] == f"the run in {run}"


def test_an_ensembles_report_is_replaced_only_with_overwrite(tmp_path, dev_dir, capsys):
    """A second ensemble of other members into the same report (here the report inside its leaderboard folder, as
    the default predictions/ensemble.json is): refused, the report and the folder as they were; --overwrite
    replaces them."""
    members = [make_member(tmp_path / name, random_outputs(seed)) for seed, name in enumerate(("a", "b", "c"))]
    predictions = tmp_path / "predictions"

    def args(*chosen):
        return ["--members", ",".join(map(str, chosen)), "--data-dir", str(dev_dir), "--predictions-dir",
                str(predictions), "--out", str(predictions / "ensemble.json")]

    ensemble.main(args(*members[:2]))
    before = contents(predictions)
    line = refused(lambda: ensemble.main(args(*members[1:])), capsys)
    assert line == (f"error: --out {predictions / 'ensemble.json'} holds the report of an ensemble already (--method "
                    f"mean of {members[0]}, {members[1]}); replace it with --overwrite, or choose another --out")
    assert contents(predictions) == before
    ensemble.main([*args(*members[1:]), "--overwrite"])
    assert list(json.loads((predictions / "ensemble.json").read_text())["members"]) == list(map(str, members[1:]))


# ---- weights that are not finite ----

def with_nan(checkpoint: Path) -> None:
    """A NaN in the checkpoint's word embeddings."""
    tensors = load_file(checkpoint / "model.safetensors")
    tensors["embeddings.word_embeddings.weight"][0, 0] = float("nan")
    save_file(tensors, checkpoint / "model.safetensors")


def test_resume_with_no_checkpoint_of_finite_weights_says_none_is(finished, tmp_path, capsys):
    run = unfinished(Path(shutil.copytree(finished / "run", tmp_path / "run")))
    for checkpoint in ("last", "best"):
        with_nan(run / checkpoint)
    line = refused(lambda: multitask_classifier.main(["--output-dir", str(run), "--resume", "--predictions-dir",
                                                      str(tmp_path / "p")]), capsys)
    assert line == (f"error: --resume: {run / 'last'}: weights that are not finite (model.safetensors: "
                    f"embeddings.word_embeddings.weight), nothing to resume from; no checkpoint of the run holds "
                    f"finite weights")


# ---- recorded paths work from any folder ----

def test_a_run_started_with_relative_paths_resumes_from_another_folder(tiny_model, data, tmp_path, monkeypatch):
    """Started in W with --config my.yaml, --data-dir, --output-dir and --predictions-dir relative to W: its run
    config records them absolute, and `--output-dir W/k1 --resume` run elsewhere reads W's data and writes W/k1p."""
    work, elsewhere = tmp_path / "w", tmp_path / "elsewhere"
    shutil.copytree(data, work / "data")
    elsewhere.mkdir()
    (work / "my.yaml").write_text("epochs: 1\nbatch-size: 8\n")
    monkeypatch.chdir(work)
    multitask_classifier.main(["--config", "my.yaml", "--model", str(tiny_model), "--data-dir", "data",
                               "--output-dir", "k1", "--predictions-dir", "k1p", "--device", "cpu"])
    recorded = json.loads((work / "k1" / "run_config.json").read_text())
    assert {name: recorded[name] for name in ("data_dir", "output_dir", "predictions_dir")} == {
        "data_dir": str(work / "data"), "output_dir": str(work / "k1"), "predictions_dir": str(work / "k1p")}
    unfinished(work / "k1")
    shutil.rmtree(work / "k1p")
    monkeypatch.chdir(elsewhere)
    multitask_classifier.main(["--output-dir", str(work / "k1"), "--resume"])
    assert (work / "k1p" / "sst-test-output.csv").is_file()
    assert list(elsewhere.iterdir()) == []


class KilledBeforeItsFirstStep(Callback):
    def on_train_begin(self, state, control):
        raise KeyboardInterrupt


def test_the_advice_to_start_again_works_from_another_folder(tiny_model, data, tmp_path, monkeypatch, capsys):
    """A run started in W with relative paths and killed before its first save; `--output-dir W/k1 --resume` from
    another folder is told a command that goes to W first; followed from there, it trains the run again."""
    work, elsewhere = tmp_path / "w", tmp_path / "elsewhere"
    shutil.copytree(data, work / "data")
    elsewhere.mkdir()
    (work / "my.yaml").write_text(f"model: {tiny_model}\nepochs: 1\nbatch-size: 8\ndevice: cpu\n")
    monkeypatch.chdir(work)
    with pytest.raises(KeyboardInterrupt):
        multitask_classifier.main(["--config", "my.yaml", "--data-dir", "data", "--output-dir", "k1",
                                   "--predictions-dir", "k1p"], callbacks=[KilledBeforeItsFirstStep()])
    monkeypatch.chdir(elsewhere)
    line = refused(lambda: multitask_classifier.main(["--output-dir", str(work / "k1"), "--resume"]), capsys)
    words = shlex.split(line.split("start it again: ", 1)[1])
    assert words[:3] == ["cd", str(work), "&&"]
    assert words[words.index("--output-dir") + 1] == str(work / "k1") and words[-1] == "--overwrite"
    monkeypatch.chdir(words[1])
    multitask_classifier.main(words[words.index("multitask_classifier.py") + 1:] + ["--max-steps", "1"])
    assert (work / "k1" / "best" / "model.safetensors").is_file() and (work / "k1p").is_dir()


# ---- a full disk at the lock ----

def test_a_full_disk_at_the_lock_leaves_no_lock_nor_folder(tiny_model, data, tmp_path, capsys, request):
    """On a real full file system the lock file is made (an empty file takes no block) and its pid does not fit:
    one line, no traceback from a second flush of the pid as the lock file is closed, nothing left behind."""
    full = tmp_path / "full"
    request.addfinalizer(full_file_system(full))
    new = full / "new"
    line = refused(lambda: train(tiny_model, data, new), capsys)
    assert line == f"error: --output-dir {new / 'run'}: cannot write there (No space left on device)"
    line = refused(lambda: train(tiny_model, data, new, "--output-dir", str(tmp_path / "run")), capsys)
    assert line == f"error: --predictions-dir {new / 'predictions'}: cannot write there (No space left on device)"
    line = refused(lambda: predict.main(["some-run", "--sst", "a film", "--output", str(new / "p.tsv")]), capsys)
    assert line == f"error: --output {new / 'p.tsv'}: cannot write there (No space left on device)"
    assert [path.name for path in full.iterdir()] == ["filler"], "no .lock, no folder the commands made"
