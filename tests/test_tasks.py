"""tasks.py, the task registry: each kind's predictions in words, its dev errors against sklearn, scipy and hand
counts, its report and panel, its training file as contrastive data, the course's scores, and the task lists
of the command line."""
import random

import numpy as np
import pytest
import scipy.stats
import sklearn.metrics
import torch

from analysis.errors import PANELS
from data.contrastive import PairSet, SentenceSet
from data.readers import PairExample, SentenceExample
from tasks import (COURSE_TASKS, CONTRASTIVE_DATA, REGISTRY, parse_task_order, parse_task_weights, task_weights_text,
                   selection_score, summary)
from tests.conftest import rows_of, write_course_files

TASKS = ("sst", "para", "sts")
SST, PARA, STS = (REGISTRY[name] for name in TASKS)


# ---- predictions in words ----

def test_each_kind_describes_its_predictions_in_words():
    probabilities = torch.tensor([[0.1, 0.2, 0.1, 0.5, 0.1], [0.6, 0.1, 0.1, 0.1, 0.1]])
    assert SST.describe(probabilities) == [
        {"class": 3, "name": "somewhat positive", "probabilities": pytest.approx([0.1, 0.2, 0.1, 0.5, 0.1])},
        {"class": 0, "name": "negative", "probabilities": pytest.approx([0.6, 0.1, 0.1, 0.1, 0.1])}]
    assert PARA.describe(torch.tensor([0.7, 0.2])) == [{"paraphrase": 1, "probability": pytest.approx(0.7)},
                                                       {"paraphrase": 0, "probability": pytest.approx(0.2)}]
    assert STS.describe(torch.tensor([4.25, 0.5])) == [{"similarity": 4.25}, {"similarity": 0.5}]


# ---- dev errors ----

def sentences(n):
    return [SentenceExample(f"s{i}", f"sentence {i}", None) for i in range(n)]


def test_classification_errors_against_sklearn_and_confidence_by_hand():
    rng = np.random.default_rng(0)
    probabilities = torch.tensor(rng.dirichlet(np.ones(5), size=40), dtype=torch.float)
    gold = rng.integers(0, 5, 40)
    gold[gold == 4] = 3  # a class with no gold example: its row of fractions stays zero
    records = [SentenceExample(f"s{i}", f"sentence {i}", int(g)) for i, g in enumerate(gold)]
    result = SST.errors(records, probabilities, tolerance=1.0)
    predicted = probabilities.argmax(-1).numpy()
    assert result["accuracy"] == pytest.approx(sklearn.metrics.accuracy_score(gold, predicted))
    assert result["confusion"] == sklearn.metrics.confusion_matrix(gold, predicted, labels=range(5)).tolist()
    with np.errstate(invalid="ignore"):
        fractions = np.nan_to_num(sklearn.metrics.confusion_matrix(gold, predicted, labels=range(5), normalize="true"))
    assert np.allclose(result["confusion_normalised"], fractions)
    wrong = [i for i in range(40) if gold[i] != predicted[i]]
    assert result["wrong"] == [gold[i] != predicted[i] for i in range(40)]
    confidences = [e["confidence"] for e in result["misclassified"]]
    assert sorted(e["id"] for e in result["misclassified"]) == sorted(f"s{i}" for i in wrong)
    assert confidences == sorted(confidences, reverse=True)
    assert confidences[0] == pytest.approx(max(probabilities[i].max().item() for i in wrong))


def test_paraphrase_errors_split_false_positives_and_negatives_by_hand():
    p = torch.tensor([0.9, 0.6, 0.4, 0.1, 0.8, 0.3])
    gold = [0, 0, 1, 1, 1, 0]  # false positives: 0 (0.9), 1 (0.6); false negatives: 2 (0.4), 3 (0.1)
    records = [PairExample(f"q{i}", f"a{i}", f"b{i}", float(g)) for i, g in enumerate(gold)]
    result = PARA.errors(records, p, tolerance=1.0)
    assert result["accuracy"] == pytest.approx(2 / 6)
    assert [e["id"] for e in result["false_positives"]] == ["q0", "q1"]
    assert [e["id"] for e in result["false_negatives"]] == ["q3", "q2"]  # the most confident first: 1 - 0.1
    assert [e["confidence"] for e in result["false_negatives"]] == pytest.approx([0.9, 0.6])
    assert result["wrong"] == [True, True, True, True, False, False]


def test_similarity_errors_against_scipy_and_the_tolerance():
    scores = torch.tensor([4.0, 1.0, 2.5, 0.0])
    gold = [3.5, 2.5, 2.5, 0.2]
    records = [PairExample(f"p{i}", f"a{i}", f"b{i}", g) for i, g in enumerate(gold)]
    result = STS.errors(records, scores, tolerance=1.0)
    assert result["pearson"] == pytest.approx(scipy.stats.pearsonr(scores.numpy(), gold).statistic)
    assert [e["id"] for e in result["largest_errors"]] == ["p1", "p0", "p3", "p2"]
    assert [e["error"] for e in result["largest_errors"]] == pytest.approx([1.5, 0.5, 0.2, 0.0])
    assert result["wrong"] == [False, True, False, False]
    assert STS.errors(records, scores, tolerance=0.4)["wrong"] == [True, True, False, False]


@pytest.mark.parametrize("name", REGISTRY)
def test_every_kind_reports_its_errors_and_draws_a_known_panel(name):
    task, rng = REGISTRY[name], random.Random(0)
    if task.pair:
        records = [PairExample(f"x{i}", f"a | {i}", f"b {i}", float(rng.randint(0, 1))) for i in range(6)]
        soft = torch.rand(6, generator=torch.Generator().manual_seed(0)) * (5 if task.metric_name == "pearson" else 1)
    else:
        records = [SentenceExample(f"x{i}", f"a | {i}", rng.randrange(task.num_classes)) for i in range(6)]
        soft = torch.softmax(torch.randn(6, task.num_classes, generator=torch.Generator().manual_seed(0)), -1)
    result = task.errors(records, soft, tolerance=1.0)
    report = "\n".join(task.error_report(result, top=2))
    assert report.startswith(f"## {task.title}") and "a \\| " in report  # a | in a sentence cannot end its cell
    kind, arguments = task.error_panel(result, records, soft)
    assert kind in PANELS and arguments["title"] == task.title


# ---- its training file as contrastive data ----

@pytest.fixture(scope="module")
def course(tmp_path_factory):
    return write_course_files(tmp_path_factory.mktemp("course"), random.Random(0), train_rows=12)


def test_each_course_file_is_contrastive_data_of_its_kind(course, tokenizer):
    quora, sst, sts = CONTRASTIVE_DATA.load("all3", course, tokenizer, 32)
    assert CONTRASTIVE_DATA.course == ["quora", "sst", "sts"]  # Chen's CS224N report's order
    rows = {name: rows_of(course / REGISTRY[name].files[0]) for name in TASKS}
    assert isinstance(sst, SentenceSet) and sst.texts == [r["sentence"] for r in rows["sst"]]
    assert sst.labels == [int(r["sentiment"]) for r in rows["sst"]]
    assert isinstance(quora, PairSet) and quora.texts == [(r["sentence1"], r["sentence2"]) for r in rows["para"]]
    assert quora.labels == [float(r["is_duplicate"]) for r in rows["para"]]
    distinct = list(dict.fromkeys(s for r in rows["sts"] for s in (r["sentence1"], r["sentence2"])))
    assert isinstance(sts, SentenceSet) and sts.texts == distinct and sts.labels is None


# ---- the course's scores ----

def test_summary_adds_the_overall_and_mean_scores_only_with_all_three_course_tasks():
    metrics = {"sst": 0.5, "para": 0.8, "sts": 0.6}
    assert summary(metrics) == {**metrics, "overall": pytest.approx((0.5 + 0.8 + 0.8) / 3),
                                "mean": pytest.approx((0.5 + 0.8 + 0.6) / 3)}
    assert summary({"sst": 0.5, "sts": 0.6}) == {"sst": 0.5, "sts": 0.6}
    assert COURSE_TASKS == TASKS


def test_selection_score_is_the_mean_of_the_trained_tasks_scores_on_0_to_1():
    assert selection_score({"sst": 0.5, "sts": -0.2}) == pytest.approx((0.5 + 0.4) / 2)
    # The summary's own scores are not counted twice.
    assert selection_score(summary({"sst": 0.5, "para": 0.8, "sts": 0.6})) == pytest.approx((0.5 + 0.8 + 0.8) / 3)


# ---- task lists of the command line ----

def test_parse_task_weights():
    assert parse_task_weights("para=2,sst=1", TASKS) == {"para": 2.0, "sst": 1.0}
    assert parse_task_weights(" sts = 0.5 ", TASKS) == {"sts": 0.5}


def test_task_weights_text_is_what_parse_task_weights_reads_back():
    assert task_weights_text({"para": 0.8, "sst": 2.0}) == "para=0.8,sst=2"
    weights = {"sts": 0.125, "para": 3.0}
    assert parse_task_weights(task_weights_text(weights), TASKS) == weights


@pytest.mark.parametrize("text, message", [
    ("para2", "task=weight"),
    ("para=", "task=weight"),
    ("=2", "task=weight"),
    ("nli=2", "unknown task 'nli'"),
    ("para=two", "not a number"),
    ("para=-1", ">= 0"),
    ("para=nan", ">= 0"),
    ("para=inf", ">= 0"),
    ("para=1,para=2", "given twice"),
    ("para=1,,sst=2", "empty entries"),
    ("", "empty entries"),
    ("sst=0,para=0,sts=0", "positive weight"),
])
def test_parse_task_weights_errors_name_the_problem(text, message):
    with pytest.raises(ValueError, match=message):
        parse_task_weights(text, TASKS)


def test_parse_task_order():
    assert parse_task_order("sst, para,sts", TASKS) == ("sst", "para", "sts")
    assert parse_task_order("sts,sst,sts", TASKS) == ("sts", "sst", "sts")
    with pytest.raises(ValueError, match="unknown task 'quora'"):
        parse_task_order("sst,quora", TASKS)
    with pytest.raises(ValueError, match="--tasks 'sst,x': unknown task 'x'"):
        parse_task_order("sst,x", TASKS, option="--tasks")
