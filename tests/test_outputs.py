"""Outputs outside a run folder (common/outputs.py): a command never writes over its own input, into a run or
checkpoint folder, or a file another command holds; a leaderboard folder is one writer's set, whole after a kill at
any of its renames; a lock a killed command left is taken over. Kills go through a deterministic point: os.replace
and os.rename intercepted in a subprocess, which kills itself at the k-th call."""
import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from minbert.commands import ensemble
from minbert.commands import predict
from minbert.common import cli
from minbert.common.precision import Precision
from minbert.predictor import MultitaskPredictor
from tests.conftest import contents
from tests.test_ensemble import dev_dir, make_member, random_outputs  # noqa: F401 (dev_dir: a fixture)

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def refused(main, argv: list[str], capsys) -> str:
    """The one line a command refuses with (exit code 2)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        cli.run(lambda: main(argv))
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error
    return error.strip().splitlines()[-1]


def test_predict_refuses_to_write_over_its_own_input(tmp_path, capsys):
    source = tmp_path / "sentences.txt"
    source.write_text("a red car\nthe big dog\n")
    line = refused(predict.main, ["some-run", "--task", "sst", "--input", str(source), "--output", str(source)],
                   capsys)
    assert line == (f"error: --output {source}: the file --input reads; writing it would destroy it before it is "
                    f"read; choose another --output")
    assert source.read_text() == "a red car\nthe big dog\n"


def test_predict_refuses_to_replace_a_file_it_did_not_write(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    line = refused(predict.main, ["some-run", "--sst", "a red car", "--output", str(notes)], capsys)
    assert line == (f"error: --output {notes}: a file predict.py did not write (its first line is not a header of "
                    f"predictions); choose another --output, or remove it first")
    assert notes.read_text() == "my notes\n"


def run_folder_with_member(folder: Path) -> Path:
    """A finished run's folder as ensemble.py reads it: its run config, and best/ (a checkpoint with outputs)."""
    make_member(folder / "best", random_outputs(1))
    (folder / "best" / "config.json").write_text("{}")
    (folder / "best" / "run_config.json").write_text("{}")
    (folder / "run_config.json").write_text('{"finished": {"step": 3, "stopped_early": false}}')
    return folder


@pytest.mark.parametrize("flag, place, kind", [("--predictions-dir", "A/best", "A/best, a checkpoint folder"),
                                               ("--out", "A/run_config.json", "A, a run folder")])
def test_an_ensemble_never_writes_into_a_run_or_checkpoint_folder(tmp_path, dev_dir, capsys, flag, place, kind):
    run = run_folder_with_member(tmp_path / "A")
    before = contents(run)
    places = {"--predictions-dir": str(tmp_path / "predictions"), "--out": str(tmp_path / "ensemble.json")}
    places[flag] = str(tmp_path / place)
    line = refused(ensemble.main, ["--members", str(run), "--data-dir", str(dev_dir), "--predictions-dir",
                                   places["--predictions-dir"], "--out", places["--out"]], capsys)
    where, what = kind.split(", ")
    assert line == (f"error: {flag} {tmp_path / place}: inside {tmp_path / where}, {what}, whose files its own "
                    f"commands write and replace; choose a place outside it")
    assert contents(run) == before


def ensemble_args(members: list[Path], dev_dir: Path, predictions: Path, out: Path, method: str = "mean") -> list:
    return ["--members", ",".join(map(str, members)), "--data-dir", str(dev_dir), "--predictions-dir",
            str(predictions), "--out", str(out), "--method", method]


def test_a_leaderboard_folder_records_its_ensemble_and_another_is_refused_unless_overwrite(tmp_path, dev_dir,
                                                                                          capsys):
    members = [make_member(tmp_path / name, random_outputs(seed)) for seed, name in enumerate(("a", "b"))]
    predictions = tmp_path / "predictions"
    ensemble.main(ensemble_args(members, dev_dir, predictions, predictions / "first.json"))
    record = json.loads((predictions / "written-by.json").read_text())
    assert record["written_by"] == f"the ensemble reported in {predictions / 'first.json'}"
    assert sorted(record["files"]) == sorted(["first.json", *(f"{task}-{split}-output.csv" for task in
                                                              ("sst", "para", "sts") for split in ("dev", "test"))])
    for name, digest in record["files"].items():
        assert hashlib.sha256((predictions / name).read_bytes()).hexdigest() == digest
    # The same ensemble's files (its --out), replaced as a run's are: with --overwrite.
    ensemble.main([*ensemble_args(members, dev_dir, predictions, predictions / "first.json", "best"), "--overwrite"])
    before = contents(predictions)
    line = refused(ensemble.main, ensemble_args(members, dev_dir, predictions, predictions / "second.json"), capsys)
    assert line.startswith(f"error: --predictions-dir {predictions} holds leaderboard files of the ensemble reported "
                           f"in {predictions / 'first.json'} (first.json, para-dev-output.csv, ")
    assert line.endswith("); choose another --predictions-dir, or replace them with --overwrite")
    assert contents(predictions) == before
    ensemble.main([*ensemble_args(members, dev_dir, predictions, predictions / "second.json"), "--overwrite"])
    assert not (predictions / "first.json").exists(), "the old set's report went with its set"
    assert json.loads((predictions / "written-by.json").read_text())["written_by"].endswith("second.json")


# A command held at a point (the file `ready` touched) until the test lets it go on (the file `go`), or killed
# there: predict.py's loading of its run (a stand-in model that predicts class 2 comes back); ensemble.py's k-th
# rename (os.replace, os.rename).
HELD = """
import os, pathlib, signal, sys, time
sys.path.insert(0, {root!r})
import torch
from minbert.commands import predict
from minbert.common.precision import Precision
from minbert.predictor import MultitaskPredictor
class Model:
    tasks = ["sst"]
    precision = Precision("fp32", torch.device("cpu"))
    quantized_layers = 0
    def predictions(self, task, examples):
        return [{{"class": 2}} for _ in examples]
def held(*args, **kwargs):
    pathlib.Path({ready!r}).touch()
    if {kill!r}:
        os.kill(os.getpid(), signal.SIGKILL)
    while not pathlib.Path({go!r}).exists():
        time.sleep(0.05)
    return Model()
MultitaskPredictor.from_run = held
predict.main(sys.argv[1:])
"""

KILLED_AT_RENAME = """
import os, signal, sys
sys.path.insert(0, {root!r})
calls = [0]
def killing(rename):
    def renamed(*args, **kwargs):
        calls[0] += 1
        if calls[0] == {k}:
            os.kill(os.getpid(), {signal})
        return rename(*args, **kwargs)
    return renamed
os.replace, os.rename = killing(os.replace), killing(os.rename)
from minbert.commands import ensemble
ensemble.main(sys.argv[1:])
"""


def start_held(tmp_path: Path, argv: list[str], kill: bool = False) -> subprocess.Popen:
    ready, go, script = tmp_path / "ready", tmp_path / "go", tmp_path / "held.py"
    script.write_text(HELD.format(root=str(ROOT), ready=str(ready), go=str(go), kill=kill))
    first = subprocess.Popen([sys.executable, str(script), *argv], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not ready.exists() and first.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert ready.exists(), first.stderr.read()[-2000:] if first.poll() is not None else "not ready in time"
    return first


def test_two_predicts_into_one_output_the_second_is_refused_and_the_first_goes_on(tmp_path):
    out = tmp_path / "predictions.tsv"
    first = start_held(tmp_path, ["some-run", "--sst", "a red car", "--output", str(out)])
    try:
        second = subprocess.run([sys.executable, "predict.py", "some-run", "--sst", "a dog", "--output", str(out)],
                                cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
        assert second.returncode == 2
        assert second.stderr.strip().splitlines()[-1] == (
            f"error: --output {out} is being written by another command (pid {first.pid}); wait until it ends, or "
            f"choose another --output")
        (tmp_path / "go").touch()
        assert first.wait(timeout=300) == 0, first.stderr.read()[-2000:]
    finally:
        first.kill()
    assert out.read_text() == "task\tinput\tclass\nsst\ta red car\t2\n", "the first one's predictions"
    assert not (tmp_path / ".predictions.tsv.lock").exists(), "the lock goes with the command"


def test_the_lock_and_temporaries_a_killed_predict_left_are_taken_over(tmp_path, monkeypatch):
    out = tmp_path / "predictions.tsv"
    first = start_held(tmp_path, ["some-run", "--sst", "a red car", "--output", str(out)], kill=True)
    assert first.wait(timeout=300) == -signal.SIGKILL
    lock = tmp_path / ".predictions.tsv.lock"
    assert lock.read_text() == f"{first.pid}\n", "the killed command's lock is left"
    (tmp_path / ".predictions.tsv.abc123.tmp").write_text("id\tclass\n1\t")  # atomic_file's, cut short
    held_by = []

    class Model:
        tasks = ["sst"]
        precision = Precision("fp32", torch.device("cpu"))
        quantized_layers = 0

        def predictions(self, task, examples):
            held_by.append(lock.read_text())
            return [{"class": 2} for _ in examples]

    monkeypatch.setattr(MultitaskPredictor, "from_run", lambda *args, **kwargs: Model())
    predict.main(["some-run", "--sst", "a red car", "--output", str(out)])
    assert held_by == [f"{os.getpid()}\n"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["held.py", "predictions.tsv", "ready"]


def leaderboard_state(folder: Path) -> dict[str, bytes]:
    return {name: data for name, data in contents(folder).items() if not name.startswith(".")}


def test_an_ensemble_killed_at_any_rename_leaves_one_whole_set_and_the_next_writer_no_leftovers(tmp_path, dev_dir):
    members = [make_member(tmp_path / name, random_outputs(seed)) for seed, name in enumerate(("a", "b", "c"))]
    predictions = tmp_path / "predictions"
    old_args = [*ensemble_args(members, dev_dir, predictions, predictions / "ensemble.json", "mean"), "--overwrite"]
    new_args = [*ensemble_args(members, dev_dir, predictions, predictions / "ensemble.json", "best"), "--overwrite"]
    ensemble.main(new_args)
    new = leaderboard_state(predictions)
    ensemble.main(old_args)
    old = leaderboard_state(predictions)
    assert set(old) == set(new) and all(old[name] != new[name] for name in old if name != "written-by.json"), \
        "every file of the two sets differs (but the record's)"
    from minbert.common.outputs import LeaderboardFolder  # here: the other tests run on code without it

    renames = 0
    for k in range(1, 100):
        script = tmp_path / "killed.py"
        kill = signal.SIGTERM if k % 2 else signal.SIGKILL
        script.write_text(KILLED_AT_RENAME.format(root=str(ROOT), k=k, signal=int(kill)))
        killed = subprocess.run([sys.executable, str(script), *new_args], cwd=ROOT, env=ENV, capture_output=True,
                                text=True, timeout=300)
        if killed.returncode == 0:
            break  # k is past the last rename
        assert killed.returncode == -kill, killed.stderr[-2000:]
        renames = k
        # What the next writer finds once it holds the folder: one whole set, the old or the new, no temporaries.
        LeaderboardFolder(predictions, "--predictions-dir", "a reader").claim(overwrite=True).release()
        state = leaderboard_state(predictions)
        assert state in (old, new), f"killed at rename {k}: a mix of two sets"
        assert sorted(contents(predictions)) == sorted(state), f"killed at rename {k}: temporaries left"
        ensemble.main(old_args)
        assert contents(predictions) == old
    assert renames >= 8, "a rename a file of the set (6 CSVs, the report, the record), and more"


def test_a_refused_command_takes_back_the_folders_it_made(tiny_model, tmp_path, capsys):
    import multitask_classifier

    new = tmp_path / "new"
    line = refused(multitask_classifier.main, ["--model", str(tiny_model), "--data-dir", str(tmp_path / "no-data"),
                                               "--output-dir", str(new / "run"), "--predictions-dir",
                                               str(new / "predictions"), "--device", "cpu"], capsys)
    assert line == f"error: {tmp_path / 'no-data' / 'ids-sst-train.csv'}: file not found"
    assert not new.exists(), "no empty --output-dir or --predictions-dir left"
    line = refused(predict.main, [str(tmp_path / "nowhere"), "--sst", "a film", "--output", str(new / "p.tsv")],
                   capsys)
    assert line == f"error: {tmp_path / 'nowhere'}: not found"
    assert not new.exists(), "no empty folder of --output left"


def test_a_contrastive_tension_run_lists_what_it_wrote_and_its_init_line_fine_tunes(tiny_model, course_data,
                                                                                  tmp_path, capsys, one_thread,
                                                                                  monkeypatch):
    import multitask_classifier
    import pretrain_contrastive

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # as the README's commands run

    sentences = tmp_path / "sentences.txt"
    sentences.write_text("".join(f"sentence number {i} is here\n" for i in range(24)))
    out = tmp_path / "ct"
    (tmp_path / "from-ct-model1").mkdir()  # taken: the hint names the next free folder
    pretrain_contrastive.main(["--model", str(tiny_model), "--method", "ct", "--data", str(sentences),
                               "--output-dir", str(out), "--max-steps", "2", "--batch-size", "8", "--device", "cpu"])
    printed = capsys.readouterr().out
    written = printed.split("written:\n")[1].split("\n")
    listed = [Path(line.strip()) for line in written if line.startswith("  ")]
    assert listed and all(path.exists() for path in listed), listed
    assert {out / "model1", out / "model2"} <= set(listed)
    hints = [line for line in written if line.startswith("fine-tune it")]
    assert hints[0].startswith("fine-tune it (model1): ") and hints[1].startswith("fine-tune it (model2): ")
    words = shlex.split(hints[0].partition(": ")[2])
    tuned = tmp_path / "from-ct-model1-2"
    # The thread setting the run had, the program's words, then the flags.
    assert words[0] == "OMP_NUM_THREADS=1"
    assert words[3:] == ["--config", "quick-start", "--init", str(out / "model1"), "--pooling", "mean",
                         "--output-dir", str(tuned)]
    # The line, run (after the program's words), on the tiny data for a step: the first checkpoint fine-tuned.
    multitask_classifier.main([*words[3:], "--data-dir", str(course_data), "--max-steps", "1", "--batch-size", "8",
                               "--device", "cpu", "--max-train-examples", "16"])
    assert (tuned / "best" / "model.safetensors").is_file()
    assert (tuned / "predictions" / "sst-test-output.csv").is_file()


def test_every_test_docs_bad_input_names_exists():
    named = re.findall(r"`(tests/\w+\.py)::(\w+)`", (ROOT / "docs" / "bad-input.md").read_text())
    assert len(named) >= 13
    for file, test in named:
        assert f"\ndef {test}(" in (ROOT / file).read_text(), f"{file}::{test}"
