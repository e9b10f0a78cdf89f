"""tasks.py, the task registry: each kind's predictions in words, its training file as contrastive data, and the
course's scores."""
import random

import pytest
import torch

from minbert.data.contrastive import PairSet, SentenceSet
from minbert.tasks import COURSE_TASKS, CONTRASTIVE_DATA, REGISTRY, selection_score, summary
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
