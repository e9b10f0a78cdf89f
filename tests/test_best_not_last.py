"""A finished run whose best/ is not its last/: everything that reads a run reads best/.

In the other tests' runs best/ and last/ hold the same weights, so reading the wrong one goes unnoticed. Here
the SST and Quora dev sets are built so that their accuracy cannot change: each SST sentence is there once with
each of the 5 labels (accuracy 1/5 whatever the model predicts), each Quora pair once as a paraphrase and once
not (accuracy 1/2). With --metric-for-best sst every evaluation scores the same, an equal score is not better,
so best/ is the first evaluation's (step 2, --eval-every 2) and --patience 2 stops the run two evaluations
later (step 6), when last/ is saved: four steps of training apart, on any machine (copies of one input are
the same rows of one evaluation batch, so they get the same prediction).
"""
import contextlib
import io
import json
import random
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from minbert.commands import ensemble
import multitask_classifier
from minbert.commands import predict
from minbert.common.files import read_json
from minbert.predictor import MultitaskPredictor
from minbert.tasks import REGISTRY
from tests.conftest import (assert_same_weights, checkpoint_weights, multitask_argv, rows_of, sentence,
                            write_course_files)
from minbert.training import multitask

pytestmark = pytest.mark.usefixtures("one_thread")
TASKS = ("sst", "para", "sts")
# --max-length 8 cuts the longer sentences (up to 11 tokens): what reads the run must cut them where it did.
FLAGS = ("--epochs", "1", "--eval-every", "2", "--patience", "2", "--metric-for-best", "sst", "--max-length", "8",
         "--log-every", "1")
BEST_STEP, LAST_STEP = 2, 6
# The soft outputs of one checkpoint computed twice (in the run, then by predict.py) agree to float32 rounding
# through two tiny layers; best/ and last/ must differ by far more for the comparisons to mean anything.
SAME, APART = 1e-5, 1e-3


def write_dev_file(path: Path, columns: str, label_column: str, texts: list[tuple[str, ...]], labels) -> None:
    """A course dev file holding every example once with each of `labels`."""
    lines = [f"\tid\t{columns}\t{label_column}"]
    for n, (text, label) in enumerate((text, label) for text in texts for label in labels):
        lines.append(f"{n}\tdev-{n}\t" + "\t".join(text) + f"\t{label}")
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    folder = write_course_files(tmp_path_factory.mktemp("data"), random.Random(0), train_rows=40)
    rng = random.Random(1)
    write_dev_file(folder / REGISTRY["sst"].files[1], "sentence", "sentiment",
                   [(sentence(rng),) for _ in range(12)], labels=range(5))
    write_dev_file(folder / REGISTRY["para"].files[1], "sentence1\tsentence2", "is_duplicate",
                   [(sentence(rng), sentence(rng)) for _ in range(12)], labels=(0, 1))
    return folder


@dataclass
class Finished:
    folder: Path  # OUTPUT_DIR
    predictions: Path  # PREDICTIONS_DIR
    metrics: dict  # what multitask_classifier.main returned
    printed: str


@pytest.fixture(scope="module")
def run(tiny_model, data, tmp_path_factory, one_thread) -> Finished:
    out = tmp_path_factory.mktemp("best-not-last")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        metrics = multitask_classifier.main(multitask_argv(tiny_model, data, out, *FLAGS))
    return Finished(out / "run", out / "predictions", metrics, printed.getvalue())


def log_lines(folder: Path, event: str) -> list[dict]:
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [line for line in lines if line["event"] == event]


def evaluations(folder: Path) -> list[dict]:
    return log_lines(folder, "eval")


def examples(path: Path, task: str) -> tuple[list[str], list]:
    """(ids, sentences or pairs) of a course file, read without our readers."""
    rows = rows_of(path)
    texts = [row["sentence"] if task in ("sst", "cfimdb") else (row["sentence1"], row["sentence2"]) for row in rows]
    return [row["id"] for row in rows], texts


def saved_outputs(checkpoint: Path, task: str, split: str) -> tuple[list[str], torch.Tensor]:
    saved = torch.load(checkpoint / f"outputs-{task}-{split}.pt", weights_only=True)
    return saved["ids"], saved["outputs"]


def max_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


def leaderboard(predictions: Path, task: str, split: str) -> dict[str, float]:
    lines = (predictions / f"{task}-{split}-output.csv").read_text().splitlines()[1:]
    return {sentence_id.strip(): float(value) for sentence_id, value in (line.split(",") for line in lines)}


# ---- the run itself: --eval-every, --patience, what an equal score does ----

def test_the_dev_scores_cannot_change_so_the_fixture_holds_on_any_machine(run):
    for record in evaluations(run.folder):
        assert record["dev"]["sst"] == 12 / 60 and record["dev"]["para"] == 12 / 24, record


def test_patience_stops_the_run_two_evaluations_after_its_best_one(run):
    assert [record["step"] for record in evaluations(run.folder)] == [2, 4, 6]  # --eval-every 2, then --patience 2
    assert read_json(run.folder / "last/metrics.json")["step"] == LAST_STEP


def test_each_evaluations_training_losses_are_the_means_over_the_epoch_so_far(run):
    """Not since the previous evaluation: with --log-every 1 each train line holds one step's loss of its task."""
    steps = log_lines(run.folder, "train")
    assert [line["step"] for line in steps] == list(range(1, LAST_STEP + 1))
    for record in evaluations(run.folder):
        so_far = [line["loss"] for line in steps if line["step"] <= record["step"]]
        expected = {task: sum(losses) / len(losses) for task in TASKS
                    if (losses := [loss[task] for loss in so_far if task in loss])}
        assert record["train_loss"] == pytest.approx(expected, rel=1e-9), record["step"]


def test_an_equal_score_does_not_replace_best(run):
    assert read_json(run.folder / "best/metrics.json")["step"] == BEST_STEP


def test_best_and_last_hold_different_weights(run):
    best, last = checkpoint_weights(run.folder / "best"), checkpoint_weights(run.folder / "last")
    assert max(max_difference(best[name], last[name]) for name in best) > APART


# ---- what reads a finished run ----

@pytest.mark.parametrize("task", TASKS)
def test_predict_py_on_a_run_folder_predicts_with_best(run, data, tmp_path, task):
    column = {"sst": "probabilities", "para": "probability", "sts": "similarity"}[task]

    def predicted(folder: Path) -> torch.Tensor:
        out = tmp_path / f"{folder.name}.tsv"
        predict.main([str(folder), "--task", task, "--input", str(data / REGISTRY[task].files[1]), "--output",
                      str(out), "--device", "cpu", "--precision", "fp32"])
        return torch.tensor([json.loads(row[column]) for row in rows_of(out)])

    ids, best = saved_outputs(run.folder / "best", task, "dev")  # what the run computed at its best evaluation
    assert [row["id"] for row in rows_of(data / REGISTRY[task].files[1])] == ids
    assert max_difference(predicted(run.folder / "last"), best) > APART  # the test can tell them apart
    assert max_difference(predicted(run.folder), best) < SAME


def test_multitask_predictor_from_a_run_folder_is_its_best_checkpoint(run, data):
    _, pairs = examples(data / REGISTRY["sts"].files[1], "sts")
    _, best = saved_outputs(run.folder / "best", "sts", "dev")
    last = MultitaskPredictor.from_run(run.folder / "last", device="cpu", precision="fp32").soft_outputs(
        "sts", pairs)
    assert max_difference(last, best) > APART
    from_run = MultitaskPredictor.from_run(run.folder, device="cpu", precision="fp32").soft_outputs(
        "sts", pairs)
    assert max_difference(from_run, best) < SAME


@pytest.mark.parametrize("split", ["dev", "test"])
def test_the_runs_leaderboard_files_hold_best_checkpoints_predictions(run, data, split):
    best = MultitaskPredictor.from_run(run.folder / "best", device="cpu", precision="fp32")
    last = MultitaskPredictor.from_run(run.folder / "last", device="cpu", precision="fp32")
    for task in TASKS:
        ids, texts = examples(data / REGISTRY[task].files[1 if split == "dev" else 2], task)
        written = leaderboard(run.predictions, task, split)
        assert list(written) == ids
        expected = REGISTRY[task].hard(best.soft_outputs(task, texts))
        if task == "sts":  # a float: last/'s differ
            assert max_difference(REGISTRY[task].hard(last.soft_outputs(task, texts)), expected) > APART
            assert max_difference(torch.tensor(list(written.values())), expected) < SAME
        else:
            assert list(written.values()) == expected.tolist(), task


def test_the_run_returns_and_prints_its_best_evaluations_metrics(run):
    first, *_, final = evaluations(run.folder)
    assert first["dev"]["sts"] != final["dev"]["sts"]  # last/'s metrics are another evaluation's
    assert run.metrics == first["dev"] == read_json(run.folder / "best/metrics.json")["dev"]
    assert f"best/ picked by sst (accuracy): {12 / 60:.4f}" in run.printed


def test_an_ensemble_of_the_run_folder_is_its_best_checkpoint(run, data, tmp_path):
    report = ensemble.main(["--members", str(run.folder), "--data-dir", str(data), "--predictions-dir",
                            str(tmp_path / "predictions"), "--out", str(tmp_path / "ensemble.json")])
    best = read_json(run.folder / "best/metrics.json")["dev"]
    assert report["members"][str(run.folder)] == pytest.approx(best, abs=1e-6)
    for task in TASKS:
        for split in ("dev", "test"):
            name = f"{task}-{split}-output.csv"
            assert (tmp_path / "predictions" / name).read_bytes() == (run.predictions / name).read_bytes(), name


# ---- --resume keeps what picks best/ and counts patience ----

def test_a_run_resumed_between_evaluations_keeps_its_best_and_its_patience(run, tiny_model, data, tmp_path,
                                                                           monkeypatch):
    argv = multitask_argv(tiny_model, data, tmp_path, *FLAGS)
    step = multitask.MultitaskRun.step

    def dies(self, item, share):
        if self.engine.state.step == 5:  # the checkpoint of step 4 (an evaluation not better than step 2's) is on disk
            raise RuntimeError("killed")
        return step(self, item, share)

    monkeypatch.setattr(multitask.MultitaskRun, "step", dies)
    with pytest.raises(RuntimeError, match="killed"):
        multitask_classifier.main(argv)
    monkeypatch.setattr(multitask.MultitaskRun, "step", step)
    multitask_classifier.main(argv + ["--resume"])
    resumed = tmp_path / "run"
    assert [record["step"] for record in evaluations(resumed)] == [2, 4, 6]
    assert read_json(resumed / "best/metrics.json")["step"] == BEST_STEP
    for folder in ("best", "last"):
        assert_same_weights(checkpoint_weights(resumed / folder), checkpoint_weights(run.folder / folder))
