"""data/contrastive.py with the registry's course files (tasks.CONTRASTIVE_DATA): each --data name gives the
batches of its file's rows; plans of random batches and Contrastive Tension's pairs."""
import math

import pytest
import torch

from minbert.common.errors import DataError
from minbert.data.contrastive import (PairBatch, SentenceBatch, TripletBatch, TripletSet, as_sentences, plan_epoch,
                                      plan_tension_epoch)
from minbert.tasks import CONTRASTIVE_DATA
from tests.conftest import rows_of


def decode(tokenizer, inputs, row):
    ids = inputs["input_ids"][row][inputs["attention_mask"][row].bool()].tolist()
    return tokenizer.backend.decode(ids, skip_special_tokens=True)


def whole_epoch(datasets, batch_size=100, epoch=0):
    return plan_epoch(datasets, batch_size, seed=1, epoch=epoch)


def built(planned, tokenizer):
    """A planned batch, whole, as a single process builds it: its loss weighs 1."""
    batch, weight = planned.build(tokenizer.pad_id)
    assert weight == 1.0
    return batch


def first_batch(datasets, tokenizer):
    """All of a small set in one batch."""
    return built(whole_epoch(datasets)[0], tokenizer)


def test_nli_gives_triplets_in_the_files_rows(contrastive_data, tokenizer):
    datasets = CONTRASTIVE_DATA.load("nli", contrastive_data, tokenizer, max_length=32)
    assert [type(d) for d in datasets] == [TripletSet]
    batch = first_batch(datasets, tokenizer)
    assert isinstance(batch, TripletBatch)
    triplets = {(r["sent0"], r["sent1"], r["hard_neg"]) for r in rows_of(contrastive_data / "nli_for_simcse.csv", ",")}
    got = {tuple(decode(tokenizer, inputs, i) for inputs in (batch.anchor, batch.positive, batch.negative))
           for i in range(len(batch.anchor["input_ids"]))}
    assert got == triplets


def test_quora_gives_pairs_with_the_files_labels(contrastive_data, tokenizer):
    batch = first_batch(CONTRASTIVE_DATA.load("quora", contrastive_data, tokenizer, max_length=32), tokenizer)
    assert isinstance(batch, PairBatch)
    expected = {(r["sentence1"], r["sentence2"]): float(r["is_duplicate"])
                for r in rows_of(contrastive_data / "quora-train.csv")}
    got = {(decode(tokenizer, batch.first, i), decode(tokenizer, batch.second, i)): label
           for i, label in enumerate(batch.labels.tolist())}
    assert got == expected and 0 < sum(expected.values()) < len(expected)  # both kinds of pair present


def test_sst_gives_sentences_with_sentiment_labels(contrastive_data, tokenizer):
    batch = first_batch(CONTRASTIVE_DATA.load("sst", contrastive_data, tokenizer, max_length=32), tokenizer)
    assert isinstance(batch, SentenceBatch)
    expected = {r["sentence"]: int(r["sentiment"]) for r in rows_of(contrastive_data / "ids-sst-train.csv")}
    assert {decode(tokenizer, batch.inputs, i): y for i, y in enumerate(batch.labels.tolist())} == expected


@pytest.mark.parametrize("mode, file", [("sts", "sts-train.csv"), ("unlabeled", "unlabeled-sentences.txt")])
def test_sts_and_unlabeled_give_each_distinct_sentence_once(contrastive_data, tokenizer, mode, file):
    batch = first_batch(CONTRASTIVE_DATA.load(mode, contrastive_data, tokenizer, max_length=32), tokenizer)
    assert isinstance(batch, SentenceBatch) and batch.labels is None
    if mode == "sts":
        expected = [s for r in rows_of(contrastive_data / file) for s in (r["sentence1"], r["sentence2"])]
    else:
        expected = (contrastive_data / file).read_text().splitlines()
    got = [decode(tokenizer, batch.inputs, i) for i in range(len(batch.inputs["input_ids"]))]
    assert sorted(got) == sorted(set(expected))


def test_all3_visits_quora_then_sst_then_sts_in_every_epoch(contrastive_data, tokenizer):
    datasets = CONTRASTIVE_DATA.load("all3", contrastive_data, tokenizer, max_length=32)
    sizes = {d.name: len(d) for d in datasets}
    for epoch in range(2):
        plan = plan_epoch(datasets, batch_size=8, seed=1, epoch=epoch)
        expected = [name for name in ("quora", "sst", "sts") for _ in range(math.ceil(sizes[name] / 8))]
        assert [p.source for p in plan] == expected
        kinds = {p.source: type(built(p, tokenizer)) for p in plan}
        assert kinds == {"quora": PairBatch, "sst": SentenceBatch, "sts": SentenceBatch}
    first, second = (built(plan_epoch(datasets, 8, seed=1, epoch=e)[0], tokenizer) for e in (0, 1))
    assert not torch.equal(first.first["input_ids"], second.first["input_ids"])  # reshuffled every epoch


def test_a_path_is_read_in_the_format_its_header_names(contrastive_data, tokenizer, tmp_path):
    pairs = tmp_path / "my-pairs.tsv"
    pairs.write_text((contrastive_data / "quora-train.csv").read_text())
    assert isinstance(CONTRASTIVE_DATA.load(str(pairs), contrastive_data, tokenizer, 32)[0].batch([0, 1], 0), PairBatch)
    lines = tmp_path / "mine.txt"
    lines.write_text("a cat\nthe dog\n")
    assert CONTRASTIVE_DATA.load(str(lines), contrastive_data, tokenizer, 32)[0].texts == ["a cat", "the dog"]
    odd = tmp_path / "odd.csv"
    odd.write_text("x,y\n1,2\n")
    with pytest.raises(DataError, match="cannot tell the format"):
        CONTRASTIVE_DATA.load(str(odd), contrastive_data, tokenizer, 32)


def test_sentence_methods_take_the_distinct_sentences_of_pairs_and_ct_builds_its_own_pairs(contrastive_data, tokenizer):
    nli = CONTRASTIVE_DATA.load("nli", contrastive_data, tokenizer, 32)[0]
    sentences = as_sentences(nli, tokenizer, 32)
    assert sorted(sentences.texts) == sorted({s for row in nli.texts for s in row})
    plan = plan_tension_epoch([sentences], batch_size=16, negatives_per_positive=7, seed=0, epoch=0)
    assert len(plan) == math.ceil(len(sentences) / 2)  # 2 anchors a batch: every sentence an anchor once on average
    batch = built(plan[0], tokenizer)
    assert isinstance(batch, PairBatch) and batch.labels.tolist() == ([1.0] + [0.0] * 7) * 2
    for group in (0, 8):
        anchor = decode(tokenizer, batch.first, group)
        assert decode(tokenizer, batch.second, group) == anchor  # (s, s)
        assert all(decode(tokenizer, batch.second, group + k) != anchor for k in range(1, 8))
