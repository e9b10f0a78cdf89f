"""pretrain_contrastive.py on a tiny random BERT and tiny data files: batches, methods, checkpoints, evaluation."""
import importlib.util
import json
import math
import random
from pathlib import Path

import pytest
import scipy.stats
import torch
import transformers
from safetensors.torch import load_file

import multitask_classifier
import pretrain_contrastive
from common import cli
from common.errors import DataError
from data.contrastive import (PairBatch, SentenceBatch, TripletBatch, TripletSet, as_sentences, load_data, plan_epoch,
                              plan_tension_epoch)
from evaluation.sts_benchmark import EVAL_SETS, sts_benchmark
from losses import multiple_negatives_ranking_loss, quora_simcse_loss, simcse_loss
from models import BertConfig, BertModel, Tokenizer, from_pretrained
from training import contrastive
from training.consert import ConsertUnsupervised
from training.contrastive import ContrastiveConfig, ContrastiveTrainer, backward
from training.multitask import MultitaskConfig, MultitaskTrainer
from training.objectives import CT_LR_STEPS, ContrastiveTension, MultipleNegatives, SimCSE, max_pooled_layers
from training.precision import Precision

from tests.conftest import sentence

ROOT = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return Tokenizer.from_pretrained(tiny_model)


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    """Every file --data and --eval read, and the course files multitask_classifier.py needs, in their formats."""
    folder, rng = tmp_path_factory.mktemp("data"), random.Random(0)
    course = {"ids-sst": ("sentence", "sentiment", lambda: rng.randint(0, 4)),
              "quora": ("sentence1\tsentence2", "is_duplicate", lambda: float(rng.randint(0, 1))),
              "sts": ("sentence1\tsentence2", "similarity", lambda: round(rng.uniform(0, 5), 1))}
    for stem, (columns, label, draw) in course.items():
        for split, rows in (("train", 20), ("dev", 12), ("test-student", 10)):
            lines = ["\tid\t" + columns + ("" if split == "test-student" else f"\t{label}")]
            for i in range(rows):
                texts = "\t".join(sentence(rng) for _ in columns.split("\t"))
                lines.append(f"{i}\t{stem}-{split}-{i}\t{texts}" + ("" if split == "test-student" else f"\t{draw()}"))
            (folder / f"{stem}-{split}.csv").write_text("\n".join(lines) + "\n")
    nli = ["sent0,sent1,hard_neg"] + [",".join(sentence(rng) for _ in range(3)) for _ in range(12)]
    (folder / "nli_for_simcse.csv").write_text("\n".join(nli) + "\n")
    (folder / "unlabeled-sentences.txt").write_text("\n".join(sentence(rng) for _ in range(24)) + "\n")
    (folder / "sts-eval").mkdir()
    for name in EVAL_SETS:
        rows = [f"{name}-part\t{sentence(rng)}\t{sentence(rng)}\t{rng.uniform(0, 5):.2f}" for _ in range(10)]
        header = "subset\tsentence1\tsentence2\tscore\n"
        (folder / "sts-eval" / f"{name}.tsv").write_text(header + "\n".join(rows) + "\n")
    return folder


def rows_of(path: Path, delimiter="\t"):
    lines = path.read_text().splitlines()
    header = lines[0].split(delimiter)
    return [dict(zip(header, line.split(delimiter))) for line in lines[1:]]


def config(tiny_model, tiny_data, out, *extra) -> ContrastiveConfig:
    return cli.parse_config(ContrastiveConfig, "", ["--model", str(tiny_model), "--data-dir", str(tiny_data),
                                                    "--output-dir", str(out), "--device", "cpu", "--lr", "1e-3",
                                                    *extra])


def state(module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def changed(before: dict, after: dict) -> set[str]:
    return {k for k in before if not torch.equal(before[k], after[k])}


# ---- data modes build the right batches ----

def decode(tokenizer, inputs, row):
    ids = inputs["input_ids"][row][inputs["attention_mask"][row].bool()].tolist()
    return tokenizer.backend.decode(ids, skip_special_tokens=True)


def whole_epoch(datasets, batch_size=100, epoch=0):
    return plan_epoch(datasets, batch_size, seed=1, epoch=epoch)


def test_nli_gives_triplets_in_the_files_rows(tiny_data, tokenizer):
    datasets = load_data("nli", tiny_data, tokenizer, max_length=32)
    assert [type(d) for d in datasets] == [TripletSet]
    batch = whole_epoch(datasets)[0].build(tokenizer.pad_id)
    assert isinstance(batch, TripletBatch)
    triplets = {(r["sent0"], r["sent1"], r["hard_neg"]) for r in rows_of(tiny_data / "nli_for_simcse.csv", ",")}
    got = {tuple(decode(tokenizer, inputs, i) for inputs in (batch.anchor, batch.positive, batch.negative))
           for i in range(len(batch.anchor["input_ids"]))}
    assert got == triplets


def test_quora_gives_pairs_with_the_files_labels(tiny_data, tokenizer):
    batch = whole_epoch(load_data("quora", tiny_data, tokenizer, max_length=32))[0].build(tokenizer.pad_id)
    assert isinstance(batch, PairBatch)
    expected = {(r["sentence1"], r["sentence2"]): float(r["is_duplicate"])
                for r in rows_of(tiny_data / "quora-train.csv")}
    got = {(decode(tokenizer, batch.first, i), decode(tokenizer, batch.second, i)): label
           for i, label in enumerate(batch.labels.tolist())}
    assert got == expected and 0 < sum(expected.values()) < len(expected)  # both kinds of pair present


def test_sst_gives_sentences_with_sentiment_labels(tiny_data, tokenizer):
    batch = whole_epoch(load_data("sst", tiny_data, tokenizer, max_length=32))[0].build(tokenizer.pad_id)
    assert isinstance(batch, SentenceBatch)
    expected = {r["sentence"]: int(r["sentiment"]) for r in rows_of(tiny_data / "ids-sst-train.csv")}
    assert {decode(tokenizer, batch.inputs, i): y for i, y in enumerate(batch.labels.tolist())} == expected


@pytest.mark.parametrize("mode, file", [("sts", "sts-train.csv"), ("unlabeled", "unlabeled-sentences.txt")])
def test_sts_and_unlabeled_give_each_distinct_sentence_once(tiny_data, tokenizer, mode, file):
    batch = whole_epoch(load_data(mode, tiny_data, tokenizer, max_length=32))[0].build(tokenizer.pad_id)
    assert isinstance(batch, SentenceBatch) and batch.labels is None
    if mode == "sts":
        expected = [s for r in rows_of(tiny_data / file) for s in (r["sentence1"], r["sentence2"])]
    else:
        expected = (tiny_data / file).read_text().splitlines()
    got = [decode(tokenizer, batch.inputs, i) for i in range(len(batch.inputs["input_ids"]))]
    assert sorted(got) == sorted(set(expected))


def test_all3_visits_quora_then_sst_then_sts_in_every_epoch(tiny_data, tokenizer):
    datasets = load_data("all3", tiny_data, tokenizer, max_length=32)
    sizes = {d.name: len(d) for d in datasets}
    for epoch in range(2):
        plan = plan_epoch(datasets, batch_size=8, seed=1, epoch=epoch)
        expected = [name for name in ("quora", "sst", "sts") for _ in range(math.ceil(sizes[name] / 8))]
        assert [p.source for p in plan] == expected
        kinds = {p.source: type(p.build(tokenizer.pad_id)) for p in plan}
        assert kinds == {"quora": PairBatch, "sst": SentenceBatch, "sts": SentenceBatch}
    first, second = (plan_epoch(datasets, 8, seed=1, epoch=e)[0].build(tokenizer.pad_id) for e in (0, 1))
    assert not torch.equal(first.first["input_ids"], second.first["input_ids"])  # reshuffled every epoch


def test_a_path_is_read_in_the_format_its_header_names(tiny_data, tokenizer, tmp_path):
    pairs = tmp_path / "my-pairs.tsv"
    pairs.write_text((tiny_data / "quora-train.csv").read_text())
    assert isinstance(load_data(str(pairs), tiny_data, tokenizer, 32)[0].batch([0, 1], 0), PairBatch)
    lines = tmp_path / "mine.txt"
    lines.write_text("a cat\nthe dog\n")
    assert load_data(str(lines), tiny_data, tokenizer, 32)[0].texts == ["a cat", "the dog"]
    odd = tmp_path / "odd.csv"
    odd.write_text("x,y\n1,2\n")
    with pytest.raises(DataError, match="cannot tell the format"):
        load_data(str(odd), tiny_data, tokenizer, 32)


def test_sentence_methods_take_the_distinct_sentences_of_pairs_and_ct_builds_its_own_pairs(tiny_data, tokenizer):
    nli = load_data("nli", tiny_data, tokenizer, 32)[0]
    sentences = as_sentences(nli, tokenizer, 32)
    assert sorted(sentences.texts) == sorted({s for row in nli.texts for s in row})
    plan = plan_tension_epoch([sentences], batch_size=16, negatives_per_positive=7, seed=0, epoch=0)
    assert len(plan) == math.ceil(len(sentences) / 2)  # 2 anchors a batch: every sentence an anchor once on average
    batch = plan[0].build(tokenizer.pad_id)
    assert isinstance(batch, PairBatch) and batch.labels.tolist() == ([1.0] + [0.0] * 7) * 2
    for group in (0, 8):
        anchor = decode(tokenizer, batch.first, group)
        assert decode(tokenizer, batch.second, group) == anchor  # (s, s)
        assert all(decode(tokenizer, batch.second, group + k) != anchor for k in range(1, 8))


# ---- objectives score each kind of batch with the paper's loss ----

def test_simcse_and_mnrl_losses_per_batch_kind():
    encoder = BertModel(BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=8))
    a, b, c = torch.randn(3, 6, 8, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    pairs, triplets = PairBatch("quora", {}, {}, labels), TripletBatch("nli", {}, {}, {})
    sentences = SentenceBatch("s", {})
    simcse = SimCSE(encoder, projection=False)
    assert torch.allclose(simcse.loss(pairs, a, b), quora_simcse_loss(a, b, labels, 0.05))
    assert torch.allclose(simcse.loss(triplets, a, b, c), simcse_loss(a, b, c))
    assert torch.allclose(SimCSE(encoder, projection=False, use_negative_pairs=False).loss(pairs, a, b),
                          simcse_loss(a[labels.bool()], b[labels.bool()]))
    mnrl = MultipleNegatives(encoder, scale=20.0)
    duplicates = labels.bool()
    assert torch.allclose(mnrl.loss(pairs, a, b), multiple_negatives_ranking_loss(a[duplicates], b[duplicates]))
    assert torch.allclose(mnrl.loss(sentences, a, b), multiple_negatives_ranking_loss(a, b, scale=20.0))


# ---- gradient caching through the real encoder ----

def grads(module):
    result = {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}
    module.zero_grad(set_to_none=True)
    return result


def assert_same_grads(a, b):
    assert a.keys() == b.keys() and a
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-5), name


@pytest.fixture
def nli_batch(tiny_data, tokenizer):
    nli = load_data("nli", tiny_data, tokenizer, 32)[0]
    return nli.batch(list(range(7)), tokenizer.pad_id)


def test_grad_cache_gives_the_plain_batch_gradients(tiny_model, nli_batch):
    objective = SimCSE(from_pretrained(tiny_model), projection=True).eval()  # no dropout: one big batch is exact
    precision = Precision("fp32", torch.device("cpu"))
    plain_loss = backward(objective, nli_batch, precision).item()
    plain = grads(objective)
    cached_loss = backward(objective, nli_batch, precision, grad_cache_chunk=3).item()  # chunks of 3, 3 and 1
    assert cached_loss == pytest.approx(plain_loss, abs=1e-5)
    assert_same_grads(grads(objective), plain)
    assert any(n.startswith("projection") for n in plain)  # the head's gradient comes from the loss itself


def test_grad_cache_replays_dropout_of_the_real_encoder(tiny_model, nli_batch):
    objective = SimCSE(from_pretrained(tiny_model), projection=True).train()
    precision = Precision("fp32", torch.device("cpu"))
    # What grad cache must equal: every chunk embedded with a graph, in its order, from the same RNG state.
    torch.manual_seed(5)
    views = objective.views(nli_batch)
    embeddings = [torch.cat([v.embed({k: t[s:s + 3] for k, t in v.inputs.items()}) for s in (0, 3, 6)])
                  for v in views]
    objective.loss_fp32(nli_batch, *embeddings).backward()
    expected = grads(objective)
    torch.manual_seed(5)
    backward(objective, nli_batch, precision, grad_cache_chunk=3)
    assert_same_grads(grads(objective), expected)
    objective.eval()  # and dropout did change them, so the replay was needed
    backward(objective, nli_batch, precision, grad_cache_chunk=3)
    assert not all(torch.allclose(a, b, atol=1e-5) for a, b in zip(grads(objective).values(), expected.values()))


def test_grad_cache_with_two_models_for_ct(tiny_model, tiny_data, tokenizer):
    sentences = load_data("unlabeled", tiny_data, tokenizer, 32)[0]
    batch = sentences.tension_batch(16, 7, seed=0, pad_id=tokenizer.pad_id)
    objective = ContrastiveTension(from_pretrained(tiny_model)).eval()
    precision = Precision("fp32", torch.device("cpu"))
    backward(objective, batch, precision)
    plain = grads(objective)
    backward(objective, batch, precision, grad_cache_chunk=5)
    assert_same_grads(grads(objective), plain)
    assert any(n.startswith("model2") for n in plain)


# ---- methods ----

def test_ct_copies_start_equal_and_are_updated_independently(tiny_model, tiny_data, tmp_path):
    trainer = ContrastiveTrainer(config(tiny_model, tiny_data, tmp_path / "ct", "--method", "ct", "--data", "sts",
                                        "--max-steps", "1"))
    ct = trainer.stages[0].objective
    start1, start2 = state(ct.model1), state(ct.model2)
    assert not changed(start1, start2)
    assert not set(map(id, ct.model1.parameters())) & set(map(id, ct.model2.parameters()))  # two copies, no sharing
    trainer.train()
    after1, after2 = state(ct.model1), state(ct.model2)
    assert changed(start1, after1) and changed(start2, after2) and changed(after1, after2)
    for name, after in (("model1", after1), ("model2", after2)):  # both copies saved, each as trained
        assert not changed(after, state(from_pretrained(tmp_path / "ct" / name)))


def test_ct_learning_rate_is_the_papers_step_schedule(tiny_model):
    ct = ContrastiveTension(from_pretrained(tiny_model))
    lr = {step: 1e-5 * ct.lr_multiplier(step, total_steps=50_000, warmup=0.0)
          for step in (0, 499, 500, 999, 1000, 1500, 1999, 2000, 49_999)}
    assert lr == pytest.approx({0: 1e-5, 499: 1e-5, 500: 8e-6, 999: 8e-6, 1000: 6e-6, 1500: 4e-6, 1999: 4e-6,
                                2000: 2e-6, 49_999: 2e-6})
    assert CT_LR_STEPS[0][0] == 500


@pytest.mark.parametrize("method", ["sg", "sg-opt"])
def test_sg_trains_bert_t_above_layer_0_and_leaves_bert_f(tiny_model, tiny_data, tmp_path, method):
    trainer = ContrastiveTrainer(config(tiny_model, tiny_data, tmp_path / "sg", "--method", method, "--data", "sts",
                                        "--max-steps", "1", "--batch-size", "8"))
    sg = trainer.stages[0].objective
    fixed, tuned = state(sg.fixed), state(sg.tuned)
    assert not changed(fixed, tuned)
    inputs = trainer.stages[0].datasets[0].batch([0, 1, 2], 0).inputs
    sg.train()  # BERT_F stays a fixed function in training: no dropout in its views
    assert torch.equal(max_pooled_layers(sg.fixed, inputs), max_pooled_layers(sg.fixed, inputs))
    trainer.train()
    assert not changed(fixed, state(sg.fixed))
    moved = changed(tuned, state(sg.tuned))
    assert not {n for n in moved if n.startswith("embeddings.")}
    layer_tensors = {n for n in tuned if n.startswith("encoder.layer.")}
    assert layer_tensors and moved >= layer_tensors
    assert not changed(state(sg.tuned), state(from_pretrained(tmp_path / "sg")))  # BERT_T is the checkpoint


def test_consert_unsupervised_turns_berts_dropout_off(tiny_model, tokenizer):
    encoder = from_pretrained(tiny_model).train()
    inputs = tokenizer(["the cat sat on the mat", "a dog"])
    assert not torch.equal(encoder(**inputs).last_hidden_state, encoder(**inputs).last_hidden_state)
    objective = ConsertUnsupervised(encoder, aug1="none", aug2="none").train()
    first, second = (view.embed(view.inputs) for view in objective.views(SentenceBatch("s", inputs)))
    assert torch.equal(first, second)  # only the augmentations make views differ
    shuffled = ConsertUnsupervised(encoder, aug1="shuffle", aug2="token-cutoff").train()
    first, second = (view.embed(view.inputs) for view in shuffled.views(SentenceBatch("s", inputs)))
    assert not torch.allclose(first, second)


def test_consert_joint_with_adversarial_view_trains_classifier_and_encoder(tiny_model, tiny_data, tmp_path):
    trainer = ContrastiveTrainer(config(tiny_model, tiny_data, tmp_path / "joint", "--method", "consert",
                                        "--schedule", "joint", "--aug1", "none", "--aug2", "adversarial",
                                        "--max-steps", "2", "--batch-size", "4"))
    joint = trainer.stages[0].objective
    before, encoder_before = state(joint.classifier), state(joint.encoder)
    metrics = trainer.train()
    assert math.isfinite(metrics["stages"]["joint"]["final_loss"])
    assert changed(before, state(joint.classifier)) and changed(encoder_before, state(joint.encoder))


def test_consert_sup_unsup_runs_nli_then_the_target_data(tiny_model, tiny_data, tmp_path):
    trainer = ContrastiveTrainer(config(tiny_model, tiny_data, tmp_path / "su", "--method", "consert",
                                        "--schedule", "sup-unsup", "--data", "sts", "--max-steps", "1",
                                        "--batch-size", "4", "--lr", "1e-3"))
    sup, unsup = trainer.stages
    assert (sup.name, unsup.name) == ("sup", "unsup")
    assert [type(d) for d in sup.datasets] == [TripletSet] and [d.name for d in unsup.datasets] == ["sts"]
    assert unsup.objective.encoder is sup.objective.encoder
    assert list(trainer.train()["stages"]) == ["sup", "unsup"]


def test_adversarial_without_supervision_is_a_usage_error(tiny_model, tiny_data, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        config(tiny_model, tiny_data, tmp_path, "--method", "consert", "--aug2", "adversarial")
    assert exit_info.value.code == 2


def test_fusion_puts_a_sentiment_step_before_each_sst_contrastive_step(tiny_model, tiny_data, tmp_path, monkeypatch):
    calls = []
    original = contrastive.backward

    def recording_backward(objective, batch, *args, **kwargs):
        calls.append((type(objective).__name__, batch.source))
        return original(objective, batch, *args, **kwargs)

    monkeypatch.setattr(contrastive, "backward", recording_backward)
    trainer = ContrastiveTrainer(config(tiny_model, tiny_data, tmp_path / "fusion", "--data", "all3", "--fusion",
                                        "--batch-size", "8"))
    head = state(trainer.fusion.head)
    metrics = trainer.train()
    sizes, expected = {d.name: len(d) for d in trainer.stages[0].datasets}, []
    for source in ("quora", "sst", "sts"):
        for _ in range(math.ceil(sizes[source] / 8)):
            expected += [("SentimentFusion", "sst")] * (source == "sst") + [("SimCSE", source)]
    assert calls == expected
    assert metrics["stages"]["train"]["updates"] == len(calls) and changed(head, state(trainer.fusion.head))


# ---- checkpoints and evaluation ----

def test_checkpoint_is_the_encoder_alone_and_starts_multitask_fine_tuning(tiny_model, tiny_data, tmp_path):
    trainer = ContrastiveTrainer(config(tiny_model, tiny_data, tmp_path / "simcse", "--data", "nli",
                                        "--max-steps", "2", "--batch-size", "4", "--projection", "on"))
    simcse = trainer.stages[0].objective
    head = state(simcse.projection)
    trainer.train()
    assert changed(head, state(simcse.projection))  # the projection head was trained ...
    folder = tmp_path / "simcse"
    saved = load_file(folder / "model.safetensors")
    assert set(saved) == set(BertModel(simcse.encoder.config).state_dict())  # ... and is not in the checkpoint
    assert not changed(saved, state(simcse.encoder)) and not (folder / "heads.safetensors").exists()
    assert changed(state(from_pretrained(tiny_model)), saved)

    argv = ["--init", str(folder), "--data-dir", str(tiny_data), "--output-dir", str(tmp_path / "mt"),
            "--predictions-dir", str(tmp_path / "predictions"), "--epochs", "1", "--batch-size", "8", "--device", "cpu"]
    fine_tuning = MultitaskTrainer(cli.parse_config(MultitaskConfig, "", argv))
    assert not changed(saved, state(fine_tuning.model.encoder))  # starts from our checkpoint
    assert {"sst", "para", "sts"} <= set(fine_tuning.train())
    assert {"sst", "para", "sts", "overall"} <= set(multitask_classifier.main(argv + ["--overwrite"]))


@pytest.mark.parametrize("method, rows", [("simcse", ["before", "after"]),
                                          ("ct", ["before", "after model1", "after model2"])])
def test_eval_prints_and_saves_the_sts_benchmark_before_and_after(tiny_model, tiny_data, tmp_path, capsys,
                                                                  method, rows):
    out = tmp_path / method
    pretrain_contrastive.main(["--model", str(tiny_model), "--data-dir", str(tiny_data), "--output-dir", str(out),
                               "--method", method, "--data", "sts", "--max-steps", "1", "--eval", "--device", "cpu",
                               "--lr", "1e-2"])
    saved = json.loads((out / "sts_benchmark.json").read_text())
    assert list(saved["results"]) == rows
    assert saved["results"]["before"]["uniformity"] != saved["results"][rows[1]]["uniformity"]  # training moved it
    pooling = saved["pooling"]
    tokenizer = Tokenizer.from_pretrained(tiny_model)
    for row, model in zip(rows, [tiny_model] + [out / r.removeprefix("after").strip() for r in rows[1:]]):
        assert saved["results"][row] == pytest.approx(sts_benchmark(from_pretrained(model), tokenizer, tiny_data,
                                                                    pooling), nan_ok=True)
    printed = capsys.readouterr().out
    assert all(f"| {row} |" in printed for row in rows)


def test_sts_benchmark_equals_a_direct_computation_with_transformers_and_scipy(tiny_model, tiny_data):
    hf_model = transformers.BertModel.from_pretrained(tiny_model).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_model)

    def embed(sentences):  # unit-length mean-pooled embeddings, all sentences padded together
        batch = hf_tokenizer(sentences, padding=True, return_tensors="pt")
        with torch.no_grad():
            hidden = hf_model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)

    sets = {name: (rows_of(tiny_data / "sts-eval" / f"{name}.tsv"), "score") for name in EVAL_SETS}
    sets["sts-dev"] = (rows_of(tiny_data / "sts-dev.csv"), "similarity")
    expected = {}
    for name, (rows, label) in sets.items():
        first, second = embed([r["sentence1"] for r in rows]), embed([r["sentence2"] for r in rows])
        gold = [float(r[label]) for r in rows]
        expected[name] = 100 * scipy.stats.spearmanr((first * second).sum(-1).numpy(), gold).statistic
    expected["mean"] = sum(expected.values()) / len(expected)
    positives = torch.tensor(gold) >= 4  # sts-dev's, the last set
    assert positives.any()
    expected["alignment"] = (first[positives] - second[positives]).pow(2).sum(-1).mean().item()
    both = torch.cat([first, second])
    distances = torch.cdist(both, both).pow(2)[tuple(torch.triu_indices(len(both), len(both), offset=1))]
    expected["uniformity"] = distances.mul(-2).exp().mean().log().item()

    results = sts_benchmark(from_pretrained(tiny_model), Tokenizer.from_pretrained(tiny_model), tiny_data, "mean")
    assert results == pytest.approx(expected, abs=1e-4)


def test_compare_contrastive_scores_the_zero_shot_encoder_and_every_saved_one(tiny_model, tiny_data, tmp_path):
    spec = importlib.util.spec_from_file_location("compare_contrastive", ROOT / "benchmarks/compare_contrastive.py")
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    rows = compare.main(["--model", str(tiny_model), "--data-dir", str(tiny_data), "--output-root", str(tmp_path),
                         "--runs", "simcse-nli,ct-unlabeled", "--max-steps", "1", "--pooling", "mean",
                         "--batch-size", "8", "--lr", "1e-2", "--device", "cpu"])
    assert list(rows) == ["zero-shot", "simcse-nli", "ct-unlabeled (model1)", "ct-unlabeled (model2)"]
    tokenizer = Tokenizer.from_pretrained(tiny_model)
    for name, model in zip(rows, [tiny_model, *(tmp_path / "mean" / f for f in
                                                ("simcse-nli", "ct-unlabeled/model1", "ct-unlabeled/model2"))]):
        assert rows[name]["results"] == pytest.approx(sts_benchmark(from_pretrained(model), tokenizer, tiny_data,
                                                                    "mean"), nan_ok=True)
    assert rows["zero-shot"]["results"] != rows["simcse-nli"]["results"]  # the runs trained the encoder
    saved = json.loads((tmp_path / "mean/results.json").read_text())["rows"]
    for name in rows:
        assert saved[name]["results"] == pytest.approx(rows[name]["results"], nan_ok=True)


def test_bad_data_is_one_clear_line_not_a_traceback(tiny_model, tiny_data, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.run(lambda: pretrain_contrastive.main(["--model", str(tiny_model), "--data", str(tmp_path / "none.csv"),
                                                   "--output-dir", str(tmp_path / "o"), "--device", "cpu"]))
    assert exit_info.value.code == 2
    assert "none.csv: file not found" in capsys.readouterr().err
