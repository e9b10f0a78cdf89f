"""training/contrastive.py through pretrain_contrastive.py on a tiny random BERT and tiny data files: gradient
caching through the real encoder, each method's stages, --fusion, checkpoints and --eval."""
import importlib.util
import json
import math
from pathlib import Path

import pytest
import scipy.stats
import torch
import transformers
from safetensors.torch import load_file

from minbert import checkpoint
import multitask_classifier
import pretrain_contrastive
from minbert.common import cli
from minbert.data.contrastive import TripletSet
from minbert.evaluation.sts_benchmark import EVAL_SETS, sts_benchmark
from minbert.models import BertModel, SentenceEncoder, Tokenizer, from_pretrained
from minbert.tasks import CONTRASTIVE_DATA
from minbert.common.cli import last_wins
from tests.conftest import changed, module_state, multitask_argv, rows_of
from minbert.training import contrastive
from minbert.training.contrastive import Pretraining, backward
from minbert.engine.engine import Engine
from minbert.training.methods import ContrastiveConfig
from minbert.training.multitask import MultitaskRun
from minbert.training.multitask_config import MultitaskConfig
from minbert.training.objectives import ContrastiveTension, SimCSE, max_pooled_layers
from minbert.common.precision import Precision

ROOT = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("one_thread")


def config(tiny_model, data, out, *extra) -> ContrastiveConfig:
    return cli.parse_config(ContrastiveConfig, "", last_wins(["--model", str(tiny_model), "--data-dir", str(data),
                                                              "--output-dir", str(out), "--device", "cpu", "--lr",
                                                              "1e-3", *extra]))


def pretraining(config: ContrastiveConfig) -> Pretraining:
    return Pretraining(config, Engine(config))


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
def nli_batch(contrastive_data, tokenizer):
    nli = CONTRASTIVE_DATA.load("nli", contrastive_data, tokenizer, 32)[0]
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


def test_grad_cache_with_two_models_for_ct(tiny_model, contrastive_data, tokenizer):
    sentences = CONTRASTIVE_DATA.load("unlabeled", contrastive_data, tokenizer, 32)[0]
    batch = sentences.tension_batch(16, 7, seed=0, pad_id=tokenizer.pad_id)
    objective = ContrastiveTension(from_pretrained(tiny_model)).eval()
    precision = Precision("fp32", torch.device("cpu"))
    backward(objective, batch, precision)
    plain = grads(objective)
    backward(objective, batch, precision, grad_cache_chunk=5)
    assert_same_grads(grads(objective), plain)
    assert any(n.startswith("model2") for n in plain)


# ---- methods ----

def test_ct_copies_start_equal_and_are_updated_independently(tiny_model, contrastive_data, tmp_path):
    trainer = pretraining(config(tiny_model, contrastive_data, tmp_path / "ct", "--method", "ct", "--data", "sts",
                                        "--max-steps", "1"))
    ct = trainer.stages[0].objective
    start1, start2 = module_state(ct.model1), module_state(ct.model2)
    assert not changed(start1, start2)
    assert not set(map(id, ct.model1.parameters())) & set(map(id, ct.model2.parameters()))  # two copies, no sharing
    trainer.run()
    after1, after2 = module_state(ct.model1), module_state(ct.model2)
    assert changed(start1, after1) and changed(start2, after2) and changed(after1, after2)
    for name, after in (("model1", after1), ("model2", after2)):  # both copies saved, each as trained
        assert not changed(after, module_state(from_pretrained(tmp_path / "ct" / name)))


@pytest.mark.parametrize("method", ["sg", "sg-opt"])
def test_sg_trains_bert_t_above_layer_0_and_leaves_bert_f(tiny_model, contrastive_data, tmp_path, method):
    trainer = pretraining(config(tiny_model, contrastive_data, tmp_path / "sg", "--method", method, "--data", "sts",
                                        "--max-steps", "1", "--batch-size", "8"))
    sg = trainer.stages[0].objective
    fixed, tuned = module_state(sg.fixed), module_state(sg.tuned)
    assert not changed(fixed, tuned)
    inputs = trainer.stages[0].datasets[0].batch([0, 1, 2], 0).inputs
    sg.train()  # BERT_F stays a fixed function in training: no dropout in its views
    assert torch.equal(max_pooled_layers(sg.fixed, inputs), max_pooled_layers(sg.fixed, inputs))
    trainer.run()
    assert not changed(fixed, module_state(sg.fixed))
    moved = changed(tuned, module_state(sg.tuned))
    assert not {n for n in moved if n.startswith("embeddings.")}
    layer_tensors = {n for n in tuned if n.startswith("encoder.layer.")}
    assert layer_tensors and moved >= layer_tensors
    # BERT_T is the checkpoint.
    assert not changed(module_state(sg.tuned), module_state(from_pretrained(tmp_path / "sg")))


def test_consert_joint_with_adversarial_view_trains_classifier_and_encoder(tiny_model, contrastive_data, tmp_path):
    trainer = pretraining(config(tiny_model, contrastive_data, tmp_path / "joint", "--method", "consert",
                                        "--consert-stages", "joint", "--aug1", "none", "--aug2", "adversarial",
                                        "--max-steps", "2", "--batch-size", "4"))
    joint = trainer.stages[0].objective
    before, encoder_before = module_state(joint.classifier), module_state(joint.encoder)
    metrics = trainer.run()
    assert math.isfinite(metrics["stages"]["joint"]["mean_loss"])
    assert changed(before, module_state(joint.classifier)) and changed(encoder_before, module_state(joint.encoder))


def test_consert_sup_unsup_runs_nli_then_the_target_data(tiny_model, contrastive_data, tmp_path):
    trainer = pretraining(config(tiny_model, contrastive_data, tmp_path / "su", "--method", "consert",
                                        "--consert-stages", "sup-unsup", "--data", "sts", "--max-steps", "1",
                                        "--batch-size", "4", "--lr", "1e-3"))
    sup, unsup = trainer.stages
    assert (sup.name, unsup.name) == ("sup", "unsup")
    assert [type(d) for d in sup.datasets] == [TripletSet] and [d.name for d in unsup.datasets] == ["sts"]
    assert unsup.objective.encoder is sup.objective.encoder
    assert list(trainer.run()["stages"]) == ["sup", "unsup"]


def test_fusion_puts_a_sentiment_step_before_each_sst_contrastive_step(tiny_model, contrastive_data, tmp_path,
                                                                      monkeypatch):
    calls = []
    original = contrastive.backward

    def recording_backward(objective, batch, *args, **kwargs):
        calls.append((type(objective).__name__, batch.source))
        return original(objective, batch, *args, **kwargs)

    monkeypatch.setattr(contrastive, "backward", recording_backward)
    trainer = pretraining(config(tiny_model, contrastive_data, tmp_path / "fusion", "--data", "all3", "--fusion",
                                        "--batch-size", "8"))
    head = module_state(trainer.fusion.head)
    metrics = trainer.run()
    sizes, expected = {d.name: len(d) for d in trainer.stages[0].datasets}, []
    for source in ("quora", "sst", "sts"):
        for _ in range(math.ceil(sizes[source] / 8)):
            expected += [("SentimentFusion", "sst")] * (source == "sst") + [("SimCSE", source)]
    assert calls == expected
    assert metrics["stages"]["train"]["updates"] == len(calls) and changed(head, module_state(trainer.fusion.head))


# ---- checkpoints and evaluation ----

def test_checkpoint_is_the_encoder_alone_and_starts_multitask_fine_tuning(tiny_model, contrastive_data, tmp_path):
    trainer = pretraining(config(tiny_model, contrastive_data, tmp_path / "simcse", "--data", "nli",
                                        "--max-steps", "2", "--batch-size", "4", "--projection", "on"))
    simcse = trainer.stages[0].objective
    head = module_state(simcse.projection)
    trainer.run()
    assert changed(head, module_state(simcse.projection))  # the projection head was trained ...
    folder = tmp_path / "simcse"
    saved = load_file(folder / "model.safetensors")
    assert set(saved) == set(BertModel(simcse.encoder.config).state_dict())  # ... and is not in the checkpoint
    assert not changed(saved, module_state(simcse.encoder)) and not checkpoint.has_heads(folder)
    assert changed(module_state(from_pretrained(tiny_model)), saved)

    argv = multitask_argv(tiny_model, contrastive_data, tmp_path, "--init", str(folder), "--epochs", "1",
                          "--batch-size", "8")
    multitask_config = cli.parse_config(MultitaskConfig, "", argv)
    engine = Engine(multitask_config)
    fine_tuning = MultitaskRun(multitask_config, engine)
    assert not changed(saved, module_state(fine_tuning.model.encoder))  # starts from our checkpoint
    assert {"sst", "para", "sts"} <= set(engine.fit(fine_tuning))
    # The command again, over the run just made in the same folder.
    assert {"sst", "para", "sts", "overall"} <= set(multitask_classifier.main(argv + ["--overwrite"]))


@pytest.mark.parametrize("method, rows", [("simcse", ["before", "after"]),
                                          ("ct", ["before", "after model1", "after model2"])])
def test_eval_prints_and_saves_the_sts_benchmark_before_and_after(tiny_model, contrastive_data, tmp_path, capsys,
                                                                  method, rows):
    out = tmp_path / method
    pretrain_contrastive.main(["--model", str(tiny_model), "--data-dir", str(contrastive_data),
                               "--output-dir", str(out),
                               "--method", method, "--data", "sts", "--max-steps", "1", "--eval", "--device", "cpu",
                               "--precision", "fp32", "--lr", "1e-2"])
    saved = json.loads((out / "sts_benchmark.json").read_text())
    assert saved["model"] == tiny_model.name  # the file is in the exported folder: no path of this machine
    assert list(saved["results"]) == rows
    assert saved["results"]["before"]["uniformity"] != saved["results"][rows[1]]["uniformity"]  # training moved it
    pooling = saved["pooling"]
    tokenizer = Tokenizer.from_pretrained(tiny_model)
    for row, model in zip(rows, [tiny_model] + [out / r.removeprefix("after").strip() for r in rows[1:]]):
        encoder = SentenceEncoder(from_pretrained(model), tokenizer, pooling)
        assert saved["results"][row] == pytest.approx(sts_benchmark(encoder, contrastive_data), nan_ok=True)
    printed = capsys.readouterr().out
    assert all(f"| {row} |" in printed for row in rows)


def test_sts_benchmark_equals_a_direct_computation_with_transformers_and_scipy(tiny_model, contrastive_data):
    hf_model = transformers.BertModel.from_pretrained(tiny_model).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_model)

    def embed(sentences):  # unit-length mean-pooled embeddings, all sentences padded together
        batch = hf_tokenizer(sentences, padding=True, return_tensors="pt")
        with torch.no_grad():
            hidden = hf_model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)

    sets = {name: (rows_of(contrastive_data / "sts-eval" / f"{name}.tsv"), "score") for name in EVAL_SETS}
    sets["sts-dev"] = (rows_of(contrastive_data / "sts-dev.csv"), "similarity")
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

    results = sts_benchmark(SentenceEncoder(from_pretrained(tiny_model), Tokenizer.from_pretrained(tiny_model), "mean"),
                            contrastive_data)
    assert results == pytest.approx(expected, abs=1e-4)


def test_compare_contrastive_scores_the_zero_shot_encoder_and_every_saved_one(tiny_model, contrastive_data, tmp_path):
    spec = importlib.util.spec_from_file_location("compare_contrastive", ROOT / "benchmarks/compare_contrastive.py")
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    rows = compare.main(["--model", str(tiny_model), "--data-dir", str(contrastive_data),
                         "--output-root", str(tmp_path),
                         "--runs", "simcse-nli,ct-unlabeled", "--max-steps", "1", "--pooling", "mean",
                         "--batch-size", "8", "--lr", "1e-2", "--device", "cpu"])
    assert list(rows) == ["zero-shot", "simcse-nli", "ct-unlabeled (model1)", "ct-unlabeled (model2)"]
    tokenizer = Tokenizer.from_pretrained(tiny_model)
    for name, model in zip(rows, [tiny_model, *(tmp_path / "mean" / f for f in
                                                ("simcse-nli", "ct-unlabeled/model1", "ct-unlabeled/model2"))]):
        encoder = SentenceEncoder(from_pretrained(model), tokenizer, "mean")
        assert rows[name]["results"] == pytest.approx(sts_benchmark(encoder, contrastive_data), nan_ok=True)
    assert rows["zero-shot"]["results"] != rows["simcse-nli"]["results"]  # the runs trained the encoder
    saved = json.loads((tmp_path / "mean/results.json").read_text())["rows"]
    for name in rows:
        assert saved[name]["results"] == pytest.approx(rows[name]["results"], nan_ok=True)


def test_bad_data_is_one_clear_line_not_a_traceback(tiny_model, contrastive_data, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.run(lambda: pretrain_contrastive.main(["--model", str(tiny_model), "--data", str(tmp_path / "none.csv"),
                                                   "--output-dir", str(tmp_path / "o"), "--device", "cpu"]))
    assert exit_info.value.code == 2
    assert "none.csv: file not found" in capsys.readouterr().err
