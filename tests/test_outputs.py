"""Outputs outside a run folder (common/outputs.py): a command never writes over its own input, into a run or
checkpoint folder, or a file another command holds; a leaderboard folder is one writer's set, whole after a kill at
any of its renames; a lock a killed command left is taken over. Kills go through a deterministic point: os.replace
and os.rename intercepted in a subprocess, which kills itself at the k-th call."""
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from minbert.commands import benchmark, ensemble
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


class StandIn:
    """A stand-in for a run's model, which predicts class 2 of every sentence (predict.py's from_run returns it)."""
    tasks = ["sst"]
    precision = Precision("fp32", torch.device("cpu"))
    quantized_layers = 0

    def __init__(self, interrupt_at: int = 0, signal_number: int = signal.SIGINT):
        self.calls, self.interrupt_at, self.signal_number = 0, interrupt_at, signal_number

    def predictions(self, task, examples):
        self.calls += 1
        if self.calls == self.interrupt_at:  # a real signal, as Ctrl-C or kill sends it
            os.kill(os.getpid(), self.signal_number)
            time.sleep(1)  # the handler runs before this ends
        return [{"class": 2} for _ in examples]


def leaderboard_folder(folder: Path) -> Path:
    """A run's leaderboard folder: its file, listed in written-by.json."""
    folder.mkdir()
    (folder / "sst-dev-output.csv").write_text("id \t Predicted_Sentiment \n")
    (folder / "written-by.json").write_text(json.dumps({"written_by": "the run in runs/a", "files": {
        "sst-dev-output.csv": hashlib.sha256((folder / "sst-dev-output.csv").read_bytes()).hexdigest()}}))
    return folder / "sst-dev-output.csv"


def test_predict_replaces_only_a_file_a_command_of_ours_wrote(tmp_path, capsys, monkeypatch):
    """Whatever its first line, a file is the toolkit's only if the record of its write says so (a user's id<TAB>
    file is not); --overwrite replaces a user's file, never a run's leaderboard file, nor a file through a link."""
    monkeypatch.setattr(MultitaskPredictor, "from_run", lambda *args, **kwargs: StandIn())
    users = tmp_path / "sentences.tsv"
    users.write_text("id\tsentence\n1\ta gorgeous film\n")
    out = ["some-run", "--sst", "a red car", "--output"]
    line = refused(predict.main, [*out, str(users)], capsys)
    assert line == (f"error: --output {users}: a file no command of ours wrote (no record of the write beside it); "
                    f"choose another --output, or replace it with --overwrite")
    assert users.read_text() == "id\tsentence\n1\ta gorgeous film\n"
    predict.main([*out, str(users), "--overwrite"])
    assert users.read_text() == "task\tinput\tclass\nsst\ta red car\t2\n"
    predict.main([*out, str(users)])  # written by predict.py: replaced as it is
    users.write_text(users.read_text() + "the user's line\n")
    assert refused(predict.main, [*out, str(users)], capsys).endswith("or replace it with --overwrite"), \
        "changed since: the user's now"
    board = leaderboard_folder(tmp_path / "predictions")
    line = refused(predict.main, [*out, str(board), "--overwrite"], capsys)
    assert line == (f"error: --output {board}: a file of the leaderboard files of the run in runs/a (listed in "
                    f"{board.parent / 'written-by.json'}), which only their writer replaces; choose another --output")
    assert board.read_text() == "id \t Predicted_Sentiment \n"
    link = tmp_path / "link.tsv"
    link.symlink_to(users)
    line = refused(predict.main, [*out, str(link), "--overwrite"], capsys)
    assert line == (f"error: --output {link}: a symbolic link (to {users}); a command never writes through a link: "
                    f"give the path of the file itself")
    assert link.is_symlink()


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("old", [True, False], ids=["onto-an-old-file", "into-a-new-file"])
def test_an_interrupted_predict_keeps_the_old_file_whole_and_says_so(tmp_path, capsys, monkeypatch, signal_number,
                                                                     old):
    """Ctrl-C or SIGTERM in the middle of the chunks: the old --output exactly as it was (or no file), no lock, no
    temporary file; one line saying what was kept, and the exit code of the signal."""
    source, out = tmp_path / "input.txt", tmp_path / "predictions.tsv"
    source.write_text("".join(f"sentence number {i}\n" for i in range(12)))
    monkeypatch.setattr(predict, "CHUNK", 5)
    argv = ["some-run", "--task", "sst", "--input", str(source), "--output", str(out)]
    if old:
        monkeypatch.setattr(MultitaskPredictor, "from_run", lambda *args, **kwargs: StandIn())
        predict.main(argv)
    before = contents(tmp_path)
    monkeypatch.setattr(MultitaskPredictor, "from_run", lambda *args, **kwargs: StandIn(2, signal_number))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        cli.run(lambda: predict.main(argv))
    assert exit_.value.code == 128 + signal_number
    kept = f"--output {out} as it was before" if old else f"no --output {out}"
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"interrupted after 5 of 12 predictions: kept {kept}; the same command predicts the file again")
    assert contents(tmp_path) == before, "the old file and its record as they were; no lock, no temporary file"


def test_benchmark_never_writes_over_a_checkpoints_file_or_its_input(tiny_model, tmp_path, capsys):
    """--out onto the model's weights or config, or onto its own data: refused, --overwrite or not, nothing
    changed; a user's notes only with --overwrite (here the benchmark then reads its data, which the tiny model's
    folder lacks); a link never."""
    model = Path(shutil.copytree(tiny_model, tmp_path / "model"))
    data = tmp_path / "data"
    data.mkdir()
    (data / "sts-dev.csv").write_text("the course's file")
    (tmp_path / "notes.json").write_text("{}")
    (tmp_path / "link.json").symlink_to(tmp_path / "notes.json")
    before = contents(tmp_path)
    args = ["--model", str(model), "--data-dir", str(data), "--device", "cpu", "--out"]
    for name in ("model.safetensors", "config.json"):
        line = refused(benchmark.main, [*args, str(model / name), "--overwrite"], capsys)
        assert line == (f"error: --out {model / name}: a file of the checkpoint in {model}, which no command writes "
                        f"over, --overwrite or not; give a new file name")
    line = refused(benchmark.main, [*args, str(data / "sts-dev.csv"), "--overwrite"], capsys)
    assert line == (f"error: --out {data / 'sts-dev.csv'}: inside {data}, the folder --data-dir reads; writing there "
                    f"could replace a file it reads; choose a place outside it")
    line = refused(benchmark.main, [*args, str(tmp_path / "notes.json")], capsys)
    assert line.endswith("a file no command of ours wrote (no record of the write beside it); choose another --out, "
                         "or replace it with --overwrite")
    line = refused(benchmark.main, [*args, str(tmp_path / "link.json"), "--overwrite"], capsys)
    assert line.endswith("a symbolic link (to " + str(tmp_path / "notes.json") + "); a command never writes through "
                         "a link: give the path of the file itself")
    assert contents(tmp_path) == before
    line = refused(benchmark.main, [*args, str(tmp_path / "notes.json"), "--overwrite"], capsys)
    assert "sts-eval" in line, "past the checks: the benchmark looks for its data"


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


def test_an_ensembles_report_inside_its_predictions_folder_never_replaces_a_users_file(tmp_path, dev_dir, capsys):
    """--out predictions/notes.json, a file of the user's that no record lists: refused, the folder as it was;
    --overwrite replaces it."""
    members = [make_member(tmp_path / name, random_outputs(seed)) for seed, name in enumerate(("a", "b"))]
    predictions = tmp_path / "predictions"
    predictions.mkdir()
    notes = predictions / "notes.json"
    notes.write_text('{"method": "mine", "members": {}}')
    line = refused(ensemble.main, ensemble_args(members, dev_dir, predictions, notes), capsys)
    assert line == (f"error: --out {notes}: a file no command of ours wrote (no record of the write beside it); "
                    f"choose another --out, or replace it with --overwrite")
    assert contents(predictions) == {"notes.json": b'{"method": "mine", "members": {}}'}
    ensemble.main([*ensemble_args(members, dev_dir, predictions, notes), "--overwrite"])
    assert json.loads(notes.read_text())["method"] == "mean"


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
    assert sorted(path.name for path in tmp_path.iterdir()) == [".predictions.tsv.written-by.json", "held.py",
                                                                "predictions.tsv", "ready"]


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
