"""ensemble.py on fabricated members (outputs-*.pt files) and tiny dev files; no model is run."""
import csv
import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import pearsonr
from sklearn.metrics import accuracy_score

from minbert.commands import ensemble
from minbert.common.errors import CheckpointError

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("sst", "para", "sts")
DEV_IDS = {task: [f"{task}-dev-{i}" for i in range(6)] for task in TASKS}
TEST_IDS = {task: [f"{task}-test-{i}" for i in range(4)] for task in TASKS}
LABELS = {"sst": [0, 1, 2, 3, 4, 2], "para": [1, 0, 1, 1, 0, 0], "sts": [0.5, 1.0, 2.0, 3.5, 4.0, 5.0]}
DEV_FILES = {"sst": ("ids-sst-dev.csv", "sentence", "sentiment"),
             "para": ("quora-dev.csv", "sentence1\tsentence2", "is_duplicate"),
             "sts": ("sts-dev.csv", "sentence1\tsentence2", "similarity")}


@pytest.fixture
def dev_dir(tmp_path) -> Path:
    """The course's dev files for DEV_IDS and LABELS, rows in reverse order: labels must be matched by id."""
    folder = tmp_path / "data"
    folder.mkdir()
    for task, (name, columns, label_column) in DEV_FILES.items():
        lines = [f"\tid\t{columns}\t{label_column}"]
        for row, (sentence_id, label) in enumerate(reversed(list(zip(DEV_IDS[task], LABELS[task])))):
            texts = "\t".join("some words" for _ in columns.split("\t"))
            lines.append(f"{row}\t{sentence_id}\t{texts}\t{label}")
        (folder / name).write_text("\n".join(lines) + "\n")
    return folder


def make_member(folder: Path, dev: dict, test: dict | None = None, dev_ids: dict | None = None) -> Path:
    """A checkpoint folder with outputs-{task}-{split}.pt for the tasks in `dev`; test defaults to dev's first rows."""
    folder.mkdir(parents=True)
    for task, outputs in dev.items():
        test_outputs = test[task] if test else outputs[:len(TEST_IDS[task])]
        for split, ids, values in (("dev", (dev_ids or DEV_IDS)[task], outputs), ("test", TEST_IDS[task], test_outputs)):
            torch.save({"ids": ids, "outputs": torch.as_tensor(values, dtype=torch.float)},
                       folder / f"outputs-{task}-{split}.pt")
    return folder


def random_outputs(seed: int) -> dict:
    """Outputs of a so-so member: random SST probabilities and P(paraphrase), STS scores = gold + noise."""
    generator = torch.Generator().manual_seed(seed)
    return {"sst": torch.randn(6, 5, generator=generator).softmax(-1),
            "para": torch.rand(6, generator=generator),
            "sts": torch.tensor(LABELS["sts"]) + 2 * torch.randn(6, generator=generator)}


def run(tmp_path, dev_dir, members, method="mean", *extra) -> tuple[dict, Path]:
    predictions = tmp_path / "predictions"
    report = ensemble.main(["--members", ",".join(str(m) for m in members), "--method", method,
                            "--data-dir", str(dev_dir), "--predictions-dir", str(predictions),
                            "--out", str(tmp_path / "ensemble.json"), *extra])
    assert json.loads((tmp_path / "ensemble.json").read_text()) == report
    return report, predictions


def read_predictions(predictions: Path, task: str, split: str) -> tuple[list[str], list[float]]:
    """A prediction file read the tolerant way: csv, fields stripped."""
    with open(predictions / f"{task}-{split}-output.csv", newline="") as f:
        f.readline()
        rows = [[field.strip() for field in row] for row in csv.reader(f)]
    return [row[0] for row in rows], [float(row[1]) for row in rows]


def hard(task: str, outputs) -> list[float]:
    """Predictions computed here with numpy, independently of evaluation.evaluate."""
    outputs = np.asarray(outputs, dtype=np.float64)
    if task == "sst":
        return outputs.argmax(-1).astype(float).tolist()
    return (outputs > 0.5).astype(float).tolist() if task == "para" else outputs.tolist()


def metric(task: str, outputs) -> float:
    """sklearn accuracy or scipy Pearson r against LABELS."""
    if task == "sts":
        return float(pearsonr(hard(task, outputs), LABELS[task]).statistic)
    return float(accuracy_score(LABELS[task], hard(task, outputs)))


def overall(metrics: dict) -> float:
    return (metrics["sst"] + metrics["para"] + (metrics["sts"] + 1) / 2) / 3


def test_member_metrics_are_accuracy_and_pearson_against_the_labels_matched_by_id(tmp_path, dev_dir):
    outputs = random_outputs(0)
    report, _ = run(tmp_path, dev_dir, [make_member(tmp_path / "a", outputs)])
    scored = report["members"][str(tmp_path / "a")]
    expected = {task: metric(task, outputs[task]) for task in TASKS}
    for task in TASKS:
        assert scored[task] == pytest.approx(expected[task])
    assert scored["overall"] == pytest.approx(overall(expected))


@pytest.mark.parametrize("method", ensemble.METHODS)
def test_an_ensemble_of_identical_members_is_that_member(tmp_path, dev_dir, method):
    outputs = random_outputs(1)
    members = [make_member(tmp_path / name, outputs) for name in ("a", "b", "c")]
    report, predictions = run(tmp_path, dev_dir, members, method)
    assert report["ensemble"] == report["members"][str(members[0])]
    _, alone = run(tmp_path / "alone", dev_dir, [members[0]])
    for task in TASKS:
        for split in ("dev", "test"):
            name = f"{task}-{split}-output.csv"
            assert (predictions / name).read_bytes() == (alone / name).read_bytes()
        assert sum(report["weights"][task].values()) == pytest.approx(1)


# Two members whose average predicts differently from both (worked out by hand in the comments).
SST_A = [[.5, .4, .1, 0, 0], [0, .6, .4, 0, 0], [0, 0, .2, .8, 0], [0, 0, 0, .9, .1], [.1, 0, 0, 0, .9], [.3, .3, .4, 0, 0]]
SST_B = [[.1, .4, .5, 0, 0], [0, .2, .8, 0, 0], [0, 0, .9, .1, 0], [0, 0, 0, .2, .8], [0, 0, 0, .2, .8], [.6, 0, .4, 0, 0]]
PARA_A = [0.9, 0.2, 0.6, 0.4, 0.1, 0.7]
PARA_B = [0.3, 0.4, 0.2, 0.9, 0.3, 0.2]
STS_A = [1.0, 2.0, 3.0, 4.0, 5.0, 0.0]
STS_B = [3.0, 2.0, 1.0, 4.0, 5.0, 2.0]


def test_mean_of_two_members_is_their_average(tmp_path, dev_dir):
    a = make_member(tmp_path / "a", {"sst": SST_A, "para": PARA_A, "sts": STS_A})
    b = make_member(tmp_path / "b", {"sst": SST_B, "para": PARA_B, "sts": STS_B})
    report, predictions = run(tmp_path, dev_dir, [a, b], "mean")
    # Averages: sst rows [.3 .4 .3] [0 .4 .6] [0 0 .55 .45] [0 0 0 .55 .45] [.05 0 0 .1 .85] [.45 .15 .4];
    # para [.6 .3 .4 .65 .2 .45]; sts [2 2 2 4 5 1].
    expected = {"sst": [1, 2, 2, 3, 4, 0], "para": [1, 0, 0, 1, 0, 0], "sts": [2, 2, 2, 4, 5, 1]}
    for task in TASKS:
        ids, values = read_predictions(predictions, task, "dev")
        assert ids == DEV_IDS[task]
        assert values == pytest.approx(expected[task])
        assert read_predictions(predictions, task, "test") == (TEST_IDS[task], pytest.approx(expected[task][:4]))
        assert report["weights"][task] == {str(a): 0.5, str(b): 0.5}
    assert report["ensemble"]["sst"] == pytest.approx(3 / 6)  # right on rows 2, 3, 4
    assert report["ensemble"]["para"] == pytest.approx(5 / 6)  # wrong on row 2 only
    sts = float(pearsonr(expected["sts"], LABELS["sts"]).statistic)
    assert report["ensemble"]["sts"] == pytest.approx(sts)
    assert report["ensemble"]["overall"] == pytest.approx((3 / 6 + 5 / 6 + (sts + 1) / 2) / 3)
    assert report["members"][str(a)]["para"] == pytest.approx(4 / 6)  # the ensemble beats both members here
    assert report["members"][str(b)]["para"] == pytest.approx(4 / 6)


def test_best_takes_each_task_from_the_member_best_on_dev(tmp_path, dev_dir):
    perfect_sst = np.eye(5)[LABELS["sst"]] * 0.8 + 0.04
    wrong_sst = np.eye(5)[[(label + 1) % 5 for label in LABELS["sst"]]] * 0.8 + 0.04
    noisy_sts = [3.0, 1.0, 2.5, 0.5, 4.5, 2.0]
    a = make_member(tmp_path / "a", {"sst": perfect_sst, "para": PARA_A, "sts": noisy_sts})  # best on SST
    b = make_member(tmp_path / "b", {"sst": wrong_sst, "para": PARA_B, "sts": LABELS["sts"]})  # best on STS
    report, predictions = run(tmp_path, dev_dir, [a, b], "best")
    assert report["weights"]["sst"] == {str(a): 1.0, str(b): 0.0}
    assert report["weights"]["sts"] == {str(a): 0.0, str(b): 1.0}
    assert report["weights"]["para"] == {str(a): 1.0, str(b): 0.0}  # a tie (4/6 each) goes to the first member
    assert report["ensemble"]["sst"] == 1.0
    assert report["ensemble"]["sts"] == pytest.approx(1.0)
    assert report["members"][str(a)]["sts"] == pytest.approx(metric("sts", noisy_sts))
    assert metric("sts", noisy_sts) < 0.9
    assert read_predictions(predictions, "sst", "dev")[1] == hard("sst", perfect_sst)
    assert read_predictions(predictions, "sts", "dev")[1] == pytest.approx(LABELS["sts"])
    assert report["dev_is_optimistic"] is True


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_weighted_never_scores_below_the_best_member_on_dev(tmp_path, dev_dir, seed):
    members = [make_member(tmp_path / f"m{i}", random_outputs(10 * seed + i)) for i in range(3)]
    report, predictions = run(tmp_path, dev_dir, members, "weighted")
    outputs = [{task: torch.load(m / f"outputs-{task}-dev.pt")["outputs"].double().numpy() for task in TASKS}
               for m in members]
    for task in TASKS:
        weights = [report["weights"][task][str(m)] for m in members]
        assert min(weights) >= 0 and sum(weights) == pytest.approx(1)
        best_member = max(metric(task, member[task]) for member in outputs)
        assert report["ensemble"][task] >= best_member - 1e-12
        combined = sum(w * member[task] for w, member in zip(weights, outputs))
        assert report["ensemble"][task] == pytest.approx(metric(task, combined), abs=1e-6)
        assert read_predictions(predictions, task, "dev")[1] == pytest.approx(hard(task, combined))


@pytest.mark.parametrize("rounds", [3, 20])  # round 3 can only make [1, 1] worse: the best round must be kept
def test_weighted_finds_a_mix_better_than_either_member(tmp_path, dev_dir, rounds):
    errors = np.array([1.0, -1.0, 1.0, -1.0, 1.0, -1.0])
    a = make_member(tmp_path / "a", {"sts": np.array(LABELS["sts"]) + errors})
    b = make_member(tmp_path / "b", {"sts": np.array(LABELS["sts"]) - errors})  # the errors cancel in the average
    report, predictions = run(tmp_path, dev_dir, [a, b], "weighted", "--rounds", str(rounds))
    assert max(report["members"][str(m)]["sts"] for m in (a, b)) < 0.9
    assert report["weights"]["sts"] == {str(a): 0.5, str(b): 0.5}
    assert report["ensemble"]["sts"] == pytest.approx(1.0)
    assert read_predictions(predictions, "sts", "dev")[1] == pytest.approx(LABELS["sts"])


def test_a_member_without_a_task_is_left_out_of_that_task(tmp_path, dev_dir, caplog):
    full = random_outputs(5)
    a = make_member(tmp_path / "a", full)
    sst_only = make_member(tmp_path / "sst-only", {"sst": random_outputs(6)["sst"]})
    report, predictions = run(tmp_path, dev_dir, [a, sst_only], "mean")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # nothing said of cfimdb, which none has
    assert "cfimdb" not in report["weights"]
    assert report["weights"]["sst"] == {str(a): 0.5, str(sst_only): 0.5}
    assert report["weights"]["sts"] == {str(a): 1.0}
    assert set(report["members"][str(sst_only)]) == {"sst"}  # no overall without all three tasks
    assert report["ensemble"]["sts"] == pytest.approx(metric("sts", full["sts"]))
    assert "overall" in report["ensemble"]
    assert read_predictions(predictions, "para", "test")[1] == hard("para", full["para"][:4])


def test_a_run_folder_stands_for_its_best_checkpoint(tmp_path, dev_dir):
    outputs = random_outputs(7)
    make_member(tmp_path / "run" / "best", outputs)
    report, _ = run(tmp_path, dev_dir, [tmp_path / "run"])
    assert report["ensemble"]["para"] == pytest.approx(metric("para", outputs["para"]))


def test_members_with_different_ids_are_refused(tmp_path, dev_dir):
    outputs = random_outputs(8)
    a = make_member(tmp_path / "a", outputs)
    swapped = {**DEV_IDS, "sts": DEV_IDS["sts"][1::-1] + DEV_IDS["sts"][2:]}
    b = make_member(tmp_path / "b", outputs, dev_ids=swapped)
    with pytest.raises(CheckpointError, match=r"sts dev: members .*a and .*b have different ids \(position 0"):
        run(tmp_path, dev_dir, [a, b])
    shorter = make_member(tmp_path / "c", {task: values[:5] for task, values in outputs.items()},
                          test={task: values[:4] for task, values in outputs.items()},
                          dev_ids={task: ids[:5] for task, ids in DEV_IDS.items()})
    with pytest.raises(CheckpointError, match=r"sst dev: .*different ids \(6 vs 5 ids\)"):
        run(tmp_path, dev_dir, [a, shorter])


def test_the_command_reports_a_mismatch_in_one_line(tmp_path, dev_dir):
    outputs = random_outputs(9)
    a = make_member(tmp_path / "a", outputs)
    b = make_member(tmp_path / "b", outputs, dev_ids={**DEV_IDS, "para": DEV_IDS["para"][::-1]})
    result = subprocess.run([sys.executable, str(ROOT / "ensemble.py"), "--members", f"{a},{b}",
                             "--data-dir", str(dev_dir), "--predictions-dir", str(tmp_path / "p"),
                             "--out", str(tmp_path / "e.json")], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: para dev: members")
    assert not (tmp_path / "e.json").exists()


def test_missing_outputs_files_are_named(tmp_path, dev_dir):
    half = make_member(tmp_path / "half", {"sst": random_outputs(10)["sst"]})
    (half / "outputs-sst-test.pt").unlink()
    with pytest.raises(CheckpointError, match=r"half: outputs-sst-test\.pt is missing"):
        run(tmp_path, dev_dir, [half])
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"empty: no outputs-"):
        run(tmp_path, dev_dir, [tmp_path / "empty"])
    with pytest.raises(CheckpointError, match=r"gone: no such folder$"):  # a run not made (yet), or a typo
        run(tmp_path, dev_dir, [make_member(tmp_path / "whole", random_outputs(10)), tmp_path / "gone"])


def test_prints_a_table_of_members_and_ensemble(tmp_path, dev_dir, capsys):
    a = make_member(tmp_path / "a", random_outputs(11))
    run(tmp_path, dev_dir, [a], "weighted")
    printed = capsys.readouterr().out
    assert f"| {a} |" in printed and "| ensemble (weighted) |" in printed and "optimistic" in printed
