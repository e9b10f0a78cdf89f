"""The chain from a model to the leaderboard files, each link checked against independent truth.

model -> evaluation.inference.soft_outputs (length-sorted batches, put back in id order) -> soft outputs
(softmax, sigmoid, clamp) -> hard predictions (argmax, 0.5 threshold) -> a run's dev metrics ->
its saved outputs (best/outputs-*.pt) -> its leaderboard CSVs -> an ensemble's CSVs from its members'
saved outputs and the weights fitted on dev. The truth is the model run one example at a time,
numpy, sklearn, scipy and pandas: a wrong leaderboard file (misaligned ids, a dropped sigmoid,
weights other than the fitted ones) fails here.
"""
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import pearsonr
from sklearn.metrics import accuracy_score

import multitask_classifier
from minbert.evaluation.inference import soft_outputs
from minbert.model import MultitaskModel
from minbert.models import Tokenizer, from_pretrained
from tests.test_ensemble import LABELS as ENSEMBLE_DEV_LABELS
from tests.test_ensemble import TEST_IDS, dev_dir, hard, make_member, random_outputs, read_predictions  # noqa: F401
from tests.test_ensemble import run as run_ensemble
from tests.conftest import multitask_argv
from minbert.tasks import REGISTRY

TASKS = ("sst", "para", "sts")


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def direct_soft(task: str, raw: np.ndarray) -> np.ndarray:
    """Soft outputs computed here: softmax over classes, sigmoid of the logit, the score clamped to [0, 5]."""
    raw = np.asarray(raw, dtype=np.float64)
    if task == "sst":
        e = np.exp(raw - raw.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    return 1 / (1 + np.exp(-raw)) if task == "para" else np.clip(raw, 0.0, 5.0)


def dev_labels(data: Path, task: str) -> dict[str, float]:
    """id -> gold label, read with pandas from the course-format dev file."""
    frame = pd.read_csv(data / REGISTRY[task].files[1], sep="\t", index_col=0)
    return dict(zip(frame["id"], frame.iloc[:, -1].astype(float)))


def saved(run_dir, task: str, split: str) -> tuple[list[str], np.ndarray]:
    outputs = torch.load(run_dir / "best" / f"outputs-{task}-{split}.pt", weights_only=True)
    return list(outputs["ids"]), outputs["outputs"].double().numpy()


# ---- 1, 2: predict, soft outputs, hard predictions ----

@pytest.mark.parametrize("task", TASKS)
def test_predict_gives_each_id_the_output_of_that_example_alone(tiny_model, course_data, task):
    torch.manual_seed(0)
    model = MultitaskModel(from_pretrained(tiny_model), pooling="mean").eval()
    tokenizer = Tokenizer.from_pretrained(tiny_model)
    split = REGISTRY[task].load_split(course_data / REGISTRY[task].files[1], tokenizer, max_length=64, encoding="bi")
    lengths = split.lengths()
    assert sorted(range(len(split)), key=lengths.__getitem__) != list(range(len(split))), "lengths must be mixed"
    batched = soft_outputs(model, split, tokenizer.pad_id, batch_size=4).double().numpy()
    with torch.no_grad():  # no padding, no batch: nothing to reorder
        alone = np.stack([direct_soft(task, model(task, split.batch([i], tokenizer.pad_id)["inputs"]).numpy()[0])
                          for i in range(len(split))])
    assert len({round(float(v), 6) for v in alone.reshape(len(split), -1)[:, 0]}) > 1, "outputs must differ"
    np.testing.assert_allclose(batched, alone, atol=1e-5)


def test_inference_without_autocast_runs_with_gradients_off(tiny_model, course_data):
    model = MultitaskModel(from_pretrained(tiny_model), pooling="mean")
    tokenizer = Tokenizer.from_pretrained(tiny_model)
    split = REGISTRY["sst"].load_split(course_data / REGISTRY["sst"].files[1], tokenizer, max_length=64,
                                       encoding="single")
    grad_enabled = []
    model.register_forward_hook(lambda module, inputs, output: grad_enabled.append(torch.is_grad_enabled()))
    outputs = soft_outputs(model, split, tokenizer.pad_id, batch_size=4)
    assert grad_enabled and not any(grad_enabled), "every batch's forward pass builds no autograd graph"
    assert not outputs.requires_grad


def test_soft_outputs_and_hard_predictions_on_hand_picked_values():
    sst = torch.tensor([[2.0, 1.0, 0.0, -1.0, 0.5], [0.0, 0.1, -2.0, 3.0, 2.9]])
    for row, logits in zip(REGISTRY["sst"].soft(sst).tolist(), sst.tolist()):
        exp = [math.exp(v) for v in logits]
        assert row == pytest.approx([v / sum(exp) for v in exp], rel=1e-6)
    assert REGISTRY["sst"].hard(REGISTRY["sst"].soft(sst)).tolist() == [0, 3]
    # Logits 0.3 and 0.45 are below 0.5 but their probabilities are above: a threshold on logits says 0.
    # Logit 0 is P = 0.5 exactly, which the course starter's sigmoid().round() (half to even) calls 0.
    para = torch.tensor([0.3, 0.45, -0.2, 2.0, -3.0, 0.0])
    assert REGISTRY["para"].soft(para).tolist() == pytest.approx([sigmoid(x) for x in para.tolist()], rel=1e-6)
    assert REGISTRY["para"].hard(REGISTRY["para"].soft(para)).tolist() == [1, 1, 0, 1, 0, 0]
    assert para.sigmoid().round().tolist() == [1, 1, 0, 1, 0, 0]
    sts = torch.tensor([-0.7, 0.0, 2.3, 5.0, 6.2])
    assert REGISTRY["sts"].soft(sts).tolist() == pytest.approx([0.0, 0.0, 2.3, 5.0, 5.0])
    assert REGISTRY["sts"].hard(REGISTRY["sts"].soft(sts)).tolist() == pytest.approx([0.0, 0.0, 2.3, 5.0, 5.0])


# ---- 3, 4: a run's dev metrics, saved outputs and leaderboard files ----

@pytest.fixture(scope="module")
def trained(tiny_model, course_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("chain")
    metrics = multitask_classifier.main(multitask_argv(tiny_model, course_data, out))
    return out, metrics


def test_dev_metrics_are_recomputed_from_the_saved_outputs_and_the_dev_labels(trained, course_data):
    out, metrics = trained
    recomputed = {}
    for task in TASKS:
        ids, outputs = saved(out / "run", task, "dev")
        gold = dev_labels(course_data, task)
        assert sorted(ids) == sorted(gold)  # every dev example scored once
        labels = [gold[i] for i in ids]
        recomputed[task] = (float(pearsonr(hard(task, outputs), labels).statistic) if task == "sts"
                            else accuracy_score(np.array(labels, dtype=int), np.array(hard(task, outputs), dtype=int)))
        assert metrics[task] == pytest.approx(recomputed[task], abs=1e-6), task
    assert metrics["overall"] == pytest.approx((recomputed["sst"] + recomputed["para"] + (recomputed["sts"] + 1) / 2)
                                               / 3, abs=1e-6)


def test_saved_outputs_are_probabilities_and_scores(trained):
    out, _ = trained
    for split in ("dev", "test"):
        sst, para, sts = (saved(out / "run", task, split)[1] for task in TASKS)
        np.testing.assert_allclose(sst.sum(-1), 1.0, atol=1e-5)
        assert (sst >= 0).all() and (para >= 0).all() and (para <= 1).all() and (sts >= 0).all() and (sts <= 5).all()


@pytest.mark.parametrize("split", ["dev", "test"])
def test_leaderboard_files_hold_the_saved_outputs_predictions_id_by_id(trained, course_data, split):
    out, _ = trained
    for task in TASKS:
        ids, outputs = saved(out / "run", task, split)
        file_ids, values = read_predictions(out / "predictions", task, split)
        source = REGISTRY[task].files[1 if split == "dev" else 2]
        assert file_ids == pd.read_csv(course_data / source, sep="\t", index_col=0)["id"].tolist()
        written = dict(zip(file_ids, values))
        expected = dict(zip(ids, hard(task, outputs)))
        assert written.keys() == expected.keys()
        for sentence_id in file_ids:
            assert written[sentence_id] == pytest.approx(expected[sentence_id], rel=1e-6), (task, sentence_id)


# ---- 5: ensembles apply on test the weights fitted on dev ----

def test_weighted_ensemble_applies_its_dev_fitted_weights_on_test(tmp_path, dev_dir):
    good = {"sst": np.eye(5)[ENSEMBLE_DEV_LABELS["sst"]] * 0.6 + 0.08,
            "para": np.array(ENSEMBLE_DEV_LABELS["para"]) * 0.6 + 0.2,
            "sts": np.array(ENSEMBLE_DEV_LABELS["sts"]) + np.array([0.3, -0.2, 0.1, -0.4, 0.2, -0.1])}
    members = [make_member(tmp_path / name, dev, test={task: random_outputs(seed)[task][:4] for task in TASKS})
               for name, dev, seed in (("good", good, 20), ("m1", random_outputs(21), 22),
                                       ("m2", random_outputs(23), 24))]
    report, predictions = run_ensemble(tmp_path, dev_dir, members, "weighted")
    for task in TASKS:
        weights = [report["weights"][task][str(m)] for m in members]
        tests = [torch.load(m / f"outputs-{task}-test.pt", weights_only=True)["outputs"].double().numpy()
                 for m in members]
        combined = sum(w * t for w, t in zip(weights, tests))
        equal = sum(tests) / len(tests)
        assert hard(task, combined) != pytest.approx(hard(task, equal)), f"{task}: equal weights must differ here"
        ids, values = read_predictions(predictions, task, "test")
        assert ids == TEST_IDS[task]
        assert values == pytest.approx(hard(task, combined), rel=1e-6), task
