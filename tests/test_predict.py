"""Using a trained run: predict.py and its Python API, folders sentence-transformers loads, what run_config.json
records, and logs a file can hold."""
import csv
import errno
import hashlib
import io
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sentence_transformers import SentenceTransformer

import multitask_classifier
from minbert.commands import predict
from minbert.common.cli import shown_path
from minbert.models import Tokenizer, embed_sentences, from_pretrained
from minbert.predictor import MultitaskPredictor
from minbert.tasks import REGISTRY
from tests.conftest import contents, write_course_files

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_course_files(tmp_path_factory.mktemp("data"), random.Random(0), train_rows=24,
                              tasks=("sst", "para", "sts", "cfimdb"))


@pytest.fixture(scope="module")
def run(tiny_model, data, tmp_path_factory):
    """A finished four-task run: [CLS] pooling, Quora cross-encoded, so every head kind is there."""
    out = tmp_path_factory.mktemp("run")
    multitask_classifier.main(["--model", str(tiny_model), "--data-dir", str(data), "--output-dir", str(out / "run"),
                               "--predictions-dir", str(out / "predictions"), "--tasks", "sst,para,sts,cfimdb",
                               "--pooling", "cls", "--pair-encoding", "para=cross,sts=bi", "--epochs", "1",
                               "--batch-size", "8", "--device", "cpu"])
    return out / "run"


@pytest.mark.parametrize("task", ["sst", "para", "sts", "cfimdb"])
def test_predict_command_on_the_dev_file_gives_the_runs_saved_dev_outputs(run, data, tmp_path, task):
    saved = torch.load(run / "best" / f"outputs-{task}-dev.pt")
    out = tmp_path / "predictions.tsv"
    predict.main([str(run), "--task", task, "--input", str(data / REGISTRY[task].files[1]), "--output", str(out),
                  "--device", "cpu"])
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert [row["id"] for row in rows] == saved["ids"]
    column = {"sst": "probabilities", "cfimdb": "probabilities", "para": "probability", "sts": "similarity"}[task]
    written = torch.tensor([json.loads(row[column]) for row in rows])
    torch.testing.assert_close(written, saved["outputs"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("separator", ["\u2028", "\u0085"])
def test_predict_input_in_csv_with_a_byte_order_mark_or_a_line_separator_keeps_its_ids_and_rows(run, tmp_path,
                                                                                                 separator):
    # An editor's byte-order mark before "id" must not turn the CSV into plain text (its header a sentence to
    # predict), nor a sentence holding a Unicode line separator into two examples.
    source = tmp_path / "input.csv"
    source.write_bytes(f"\ufeffid\tsentence\na\tone{separator}sentence\nb\ta red car\n".encode("utf-8"))
    out = tmp_path / "predictions.tsv"
    predict.main([str(run), "--task", "sst", "--input", str(source), "--output", str(out), "--device", "cpu"])
    with open(out, newline="") as f:
        assert [row["id"] for row in csv.DictReader(f, delimiter="\t")] == ["a", "b"]
    plain = tmp_path / "input.txt"
    plain.write_text(f"one{separator}sentence\na red car\n", encoding="utf-8")
    predict.main([str(run), "--task", "sst", "--input", str(plain), "--output", str(out), "--device", "cpu"])
    with open(out, newline="") as f:
        assert [row["id"] for row in csv.DictReader(f, delimiter="\t")] == ["1", "2"]


def test_a_file_is_predicted_a_chunk_at_a_time(run, tmp_path, monkeypatch, caplog):
    """Each chunk's predictions are those of its sentences alone; progress is logged a chunk at a time. (An
    interrupted command keeps the old --output whole: tests/test_outputs.py.)"""
    sentences = [f"sentence number {i} is a red car" for i in range(12)]
    source, out = tmp_path / "input.txt", tmp_path / "predictions.tsv"
    source.write_text("".join(f"{sentence}\n" for sentence in sentences))
    model = MultitaskPredictor.from_run(run, device="cpu")
    alone = [model.sentiment([sentence])[0]["probabilities"] for sentence in sentences]
    monkeypatch.setattr(predict, "CHUNK", 5)
    chunks, predictions = [], MultitaskPredictor.predictions

    def counted(self, task, examples):
        chunks.append(len(examples))
        return predictions(self, task, examples)

    monkeypatch.setattr(MultitaskPredictor, "predictions", counted)
    with caplog.at_level("INFO"):
        predict.main([str(run), "--task", "sst", "--input", str(source), "--output", str(out), "--device", "cpu"])
    assert chunks == [5, 5, 2]
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert [row["id"] for row in rows] == [str(line) for line in range(1, 13)]
    torch.testing.assert_close(torch.tensor([json.loads(row["probabilities"]) for row in rows]), torch.tensor(alone),
                               atol=1e-5, rtol=1e-5)
    assert "predicted 5 of 12 examples" in caplog.text and "predicted 10 of 12 examples" in caplog.text


def test_bytes_of_an_input_file_that_are_not_utf8_are_named_by_line(run, tmp_path, caplog):
    source = tmp_path / "input.txt"
    source.write_bytes(b"a red car\ncaf\xe9 au lait\nthe big dog\n")
    with caplog.at_level("WARNING"):
        predict.main([str(run), "--task", "sst", "--input", str(source), "--output", str(tmp_path / "out.tsv"),
                      "--device", "cpu"])
    assert "input.txt: kept 3 of 3 rows; replaced bytes that are not UTF-8 (line 2)" in caplog.text


def test_the_python_api_on_a_list_equals_the_command(run, capsys):
    model = MultitaskPredictor.from_run(run, device="cpu")
    pair = ("a cat sat on the mat", "the dog ran fast")
    api = {"sst": model.sentiment(["a red car"])[0], "para": model.paraphrase([pair])[0],
           "sts": model.similarity([pair])[0], "cfimdb": model.sentiment(["a big house"], task="cfimdb")[0]}
    command = predict.main([str(run), "--sst", "a red car", "--para", *pair, "--sts", *pair, "--cfimdb", "a big house",
                            "--device", "cpu"])
    assert {result.pop("task"): {k: v for k, v in result.items() if k != "input"} for result in command} == api
    printed = capsys.readouterr().out
    assert "task: sst" in printed and f"similarity: {api['sts']['similarity']:.3f}" in printed
    # A batch of several examples gives each one what it gives alone.
    batch = model.paraphrase([pair, ("the big red tree", "a small house"), pair])
    assert batch[0] == batch[2] == api["para"]


def test_best_folder_loads_in_sentence_transformers_with_the_runs_pooling(run):
    sentences = ["a cat sat", "the big red house ran on the mat fast", "dog"]
    ours = embed_sentences(from_pretrained(run / "best"), Tokenizer.from_pretrained(run / "best"), sentences,
                           pooling="cls")
    theirs = SentenceTransformer(str(run / "best"), device="cpu").encode(sentences, convert_to_tensor=True)
    torch.testing.assert_close(theirs.cpu(), ours, atol=1e-5, rtol=1e-5)
    assert (run / "last" / "modules.json").is_file() and (run / "last" / "README.md").is_file()
    card = (run / "best" / "README.md").read_text()
    metrics = json.loads((run / "best" / "metrics.json").read_text())["dev"]
    for name, value in metrics.items():
        assert name in card and f"{value:.4f}" in card, name


def test_run_config_records_the_command_code_libraries_and_data_hashes(run, data):
    saved = json.loads((run / "run_config.json").read_text())
    provenance = saved["provenance"]
    assert provenance["command"].startswith(f"{shown_path(sys.executable)} multitask_classifier.py --model ")
    assert "--tasks sst,para,sts,cfimdb" in provenance["command"]
    assert provenance["versions"]["torch"] == torch.__version__.split("+")[0] or torch.__version__.startswith(
        provenance["versions"]["torch"])
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert provenance["git_commit"].removesuffix("+changes") == commit
    files = [data / file for name in ("sst", "para", "sts", "cfimdb") for file in REGISTRY[name].files]
    assert provenance["data_sha256"] == {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def test_contrastive_run_config_records_the_learning_rate_chosen_by_default(tiny_model, data, tmp_path):
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(f"sentence number {i} is here" for i in range(20)) + "\n")
    out = tmp_path / "simcse"
    subprocess.run([sys.executable, "pretrain_contrastive.py", "--model", str(tiny_model), "--data", str(sentences),
                    "--max-steps", "1", "--batch-size", "8", "--output-dir", str(out), "--device", "cpu"], cwd=ROOT,
                   check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    saved = json.loads((out / "run_config.json").read_text())
    assert saved["lr"] is None and saved["resolved"]["lr"] == {"train": 3e-5}  # SimCSE, unsupervised
    assert (out / "modules.json").is_file() and (out / "README.md").is_file()


def test_a_runs_log_in_a_file_has_only_whole_lines_and_ends_with_a_summary(tiny_model, data, tmp_path):
    log_file = tmp_path / "log.txt"
    with open(log_file, "w") as log:
        result = subprocess.run([sys.executable, "multitask_classifier.py", "--model", str(tiny_model), "--data-dir",
                                 str(data), "--output-dir", str(tmp_path / "run"), "--predictions-dir",
                                 str(tmp_path / "predictions"), "--epochs", "1", "--batch-size", "8", "--log-every",
                                 "2", "--max-eval-examples", "6", "--device", "cpu"],
                                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0
    text = log_file.read_text()
    assert not any(c in text for c in "\r\x1b\b"), "control characters in the log"
    assert "step 2/" in text  # a log line instead of the progress bar
    assert "| best dev |" in text and str(tmp_path / "predictions" / "sst-test-output.csv") in text
    assert "not a full submission" in text  # --max-eval-examples: the leaderboard files are a sample


@pytest.mark.parametrize("old", [True, False], ids=["onto-an-old-file", "into-a-new-file"])
def test_a_full_disk_while_predicting_a_file_is_one_line_and_leaves_the_old_file_whole(run, tmp_path, monkeypatch,
                                                                                       capsys, old):
    from minbert.common import cli

    source, out = tmp_path / "input.txt", tmp_path / "predictions.tsv"
    source.write_text("".join(f"sentence number {i} is a red car\n" for i in range(12)))
    monkeypatch.setattr(predict, "CHUNK", 5)
    room = {"bytes": 1 << 30}

    class FullDisk(io.FileIO):
        """A file on a device with room for room["bytes"]: a write takes what fits, the next one fails (ENOSPC)."""
        def write(self, data):
            left = room["bytes"] - self.tell()
            if left <= 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(bytes(data)[:left])

    real_open = open

    def opened(file, mode="r", *args, **kwargs):  # the temporary file the predictions are written to, beside out
        if Path(file).parent == out.parent and Path(file).name.startswith(f".{out.name}.") and "w" in mode:
            return io.BufferedWriter(FullDisk(file, mode))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(predict, "open", opened, raising=False)
    argv = [str(run), "--task", "sst", "--input", str(source), "--output", str(out), "--device", "cpu"]
    predict.main(argv)
    whole = out.read_bytes()
    room["bytes"] = len(whole) // 2
    if not old:
        out.unlink()
    before = contents(tmp_path)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        cli.run(lambda: predict.main(argv))
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error
    kept = "the previous predictions.tsv is intact" if old else "nothing of it was written"
    assert error.strip().splitlines()[-1].startswith(f"error: {out}: no space left on the device; {kept} (")
    assert contents(tmp_path) == before, "the old file as it was, or none; no temporary file"


def test_a_checkpoint_of_non_default_head_flags_predicts_as_it_was_trained(tiny_model, course_data, tmp_path):
    """--sts-target score with bi-encoding (auto would be cosine-range): predict.py's similarity of each dev pair is
    the score the run itself computed for it at its best evaluation (best/outputs-sts-dev.pt), not another head's."""
    from minbert.evaluation.outputs import read_outputs
    from minbert.predictor import MultitaskPredictor
    from tests.conftest import multitask_argv, rows_of

    multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--tasks", "sts", "--epochs", "1",
                                             "--pair-encoding", "bi", "--sts-target", "score"))
    saved = read_outputs(tmp_path / "run" / "best" / "outputs-sts-dev.pt", "sts")
    rows = {row["id"]: (row["sentence1"], row["sentence2"]) for row in rows_of(course_data / "sts-dev.csv")}
    predictor = MultitaskPredictor.from_run(tmp_path / "run", device="cpu")
    assert predictor.config.sts_target == "score"
    predicted = predictor.soft_outputs("sts", [rows[id_] for id_ in saved["ids"]])
    torch.testing.assert_close(torch.as_tensor(predicted).float(), saved["outputs"].float(), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("task", ["sst", "para", "sts", "cfimdb"])
def test_an_output_named_csv_is_the_courses_leaderboard_file_the_run_wrote(run, data, tmp_path, task):
    """--output *.csv (or --format leaderboard): byte for byte the leaderboard file of the dev set that the run's own
    evaluation wrote; --format table keeps the table whatever the name."""
    written = tmp_path / f"{task}-dev-output.csv"
    predict.main([str(run), "--task", task, "--input", str(data / REGISTRY[task].files[1]), "--output", str(written),
                  "--device", "cpu"])
    assert written.read_bytes() == (run.parent / "predictions" / f"{task}-dev-output.csv").read_bytes()
    named = tmp_path / "dev.txt"
    predict.main([str(run), "--task", task, "--input", str(data / REGISTRY[task].files[1]), "--output", str(named),
                  "--format", "leaderboard", "--device", "cpu"])
    assert named.read_bytes() == written.read_bytes()
    predict.main([str(run), "--task", task, "--input", str(data / REGISTRY[task].files[1]), "--output", str(written),
                  "--format", "table", "--device", "cpu"])
    assert written.read_text().startswith("id\t")


def test_the_help_says_which_columns_each_format_has(capsys):
    with pytest.raises(SystemExit):
        predict.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "table: tab-separated" in text and "class, name, probabilities" in text
    assert "leaderboard: the course's leaderboard file" in text and "Predicted_Is_Paraphrase" in text
