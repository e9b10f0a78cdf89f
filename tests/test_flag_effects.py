"""Flags whose effect could be lost or shifted by one without another test noticing: each test here fails when
its flag is ignored, counted off by one, or applied to the wrong thing (issue #30's mutation pass)."""
import json

import pytest
import torch
import transformers
from sentence_transformers import SentenceTransformer

import multitask_classifier
import pretrain_contrastive
from minbert.common.cli import parse_config
from minbert.common.files import read_json
from minbert.data.splits import encode_views
from minbert.model import MultitaskModel
from minbert.models import Tokenizer, embed_sentences, from_pretrained
from minbert.models.shareable import write_shareable_files
from minbert.tasks import summary
from minbert.training import multitask
from minbert.training.methods import ContrastiveConfig
from tests.conftest import assert_same_weights, checkpoint_weights, multitask_argv

pytestmark = pytest.mark.usefixtures("one_thread")


def run_args(model, data, out, *extra) -> list[str]:
    return multitask_argv(model, data, out, "--epochs", "1", "--head-dropout", "0", *extra)


# ---- --metric-for-best ----

# Two evaluations' dev metrics, chosen so that each metric picks its own: the first is better by SST, Quora and the
# overall score (0.5167 > 0.4667), the second by STS and the plain mean (0.4000 > 0.3667).
SCRIPTED_DEV = [{"sst": 0.5, "para": 0.5, "sts": 0.1}, {"sst": 0.3, "para": 0.3, "sts": 0.6}]


@pytest.mark.parametrize("metric, best_evaluation", [("overall", 0), ("mean", 1), ("sst", 0), ("para", 0),
                                                     ("sts", 1)])
def test_metric_for_best_picks_the_evaluation_best_by_that_metric(tiny_model, course_data, tmp_path, monkeypatch,
                                                                   capsys, metric, best_evaluation):
    """The run's own dev scores cannot be steered, so the two evaluations' metrics are scripted (the run still
    evaluates, and saves what it evaluated)."""
    scripted, evaluate = list(SCRIPTED_DEV), multitask.MultitaskRun.evaluate

    def scripted_evaluate(self):
        evaluate(self)
        return summary(scripted.pop(0))

    monkeypatch.setattr(multitask.MultitaskRun, "evaluate", scripted_evaluate)
    metrics = multitask_classifier.main(run_args(tiny_model, course_data, tmp_path, "--max-steps", "2",
                                                 "--eval-every", "1", "--metric-for-best", metric))
    dev = SCRIPTED_DEV[best_evaluation]
    assert read_json(tmp_path / "run/best/metrics.json")["step"] == best_evaluation + 1
    assert {task: metrics[task] for task in dev} == dev
    by_hand = {"overall": (dev["sst"] + dev["para"] + (dev["sts"] + 1) / 2) / 3,
               "mean": (dev["sst"] + dev["para"] + dev["sts"]) / 3}
    summary_line = capsys.readouterr().out.split("best/ picked by ")[1].splitlines()[0]
    assert summary_line.endswith(f": {by_hand.get(metric, dev.get(metric)):.4f}"), summary_line


# ---- --max-tokens ----

def test_max_tokens_with_grad_accum_2_trains_like_twice_the_budget(tiny_model_without_dropout, course_data, tmp_path):
    """--max-tokens is the budget of each accumulation part's batch, as --batch-size is its rows: N tokens twice
    accumulated is one step of a 2N-token batch (the rows weighted as in one batch), not two steps of N."""
    model = tiny_model_without_dropout
    flags = ("--tasks", "sst", "--max-length", "16")
    multitask_classifier.main(run_args(model, course_data, tmp_path / "accum", *flags, "--max-tokens", "40",
                                       "--grad-accum", "2"))
    multitask_classifier.main(run_args(model, course_data, tmp_path / "big", *flags, "--max-tokens", "80"))
    big = checkpoint_weights(tmp_path / "big/run/last")
    assert_same_weights(checkpoint_weights(tmp_path / "accum/run/last"), big, atol=1e-5, rtol=1e-4)
    # Not merely because nothing moved: a 40-token budget without accumulation takes other steps.
    multitask_classifier.main(run_args(model, course_data, tmp_path / "small", *flags, "--max-tokens", "40"))
    small = checkpoint_weights(tmp_path / "small/run/last")
    assert not torch.allclose(small["encoder.layer.0.attention.self.query.weight"],
                              big["encoder.layer.0.attention.self.query.weight"], atol=1e-5)


def test_max_tokens_counts_the_real_tokens_of_every_view_of_a_pair(tiny_model, course_data, tmp_path, monkeypatch):
    """A bi-encoded pair's batch is its first and its second sentences in one encoder call: the budget holds the
    tokens of both, counted here from the attention mask the model receives."""
    seen = {}
    forward = MultitaskModel.forward

    def spy(self, task, inputs, perturbation=None):
        if self.training:
            seen.setdefault(task, []).append(int(inputs["attention_mask"].sum()))
        return forward(self, task, inputs, perturbation)

    monkeypatch.setattr(MultitaskModel, "forward", spy)
    budget = 64
    multitask_classifier.main(run_args(tiny_model, course_data, tmp_path, "--max-length", "32", "--pair-encoding",
                                       "bi", "--max-tokens", str(budget)))
    assert set(seen) == {"sst", "para", "sts"}
    for task, tokens in seen.items():
        assert max(tokens) <= budget, task
        # As full as the examples allow: none holds more than 22 tokens (two sentences of up to 11), so every batch
        # but a pass's last holds more than 64 - 22.
        assert sum(tokens) / len(tokens) > budget / 2, task


# ---- --epochs: each epoch shuffles anew ----

def test_each_mtdnn_epoch_draws_a_new_order_of_steps_and_new_batches(tiny_model, course_data, tmp_path,
                                                                    monkeypatch):
    """Seen at the model: the task of each training forward pass and its rows (their token ids). Both epochs
    have the same number of steps of each task, in another order and, for each task, other batches."""
    steps = []
    forward = MultitaskModel.forward

    def spy(self, task, inputs, perturbation=None):
        if self.training:
            steps.append((task, tuple(map(tuple, inputs["input_ids"].tolist()))))
        return forward(self, task, inputs, perturbation)

    monkeypatch.setattr(MultitaskModel, "forward", spy)
    multitask_classifier.main(run_args(tiny_model, course_data, tmp_path, "--epochs", "2", "--schedule", "mtdnn"))
    assert len(steps) % 2 == 0
    first, second = steps[:len(steps) // 2], steps[len(steps) // 2:]
    tasks = lambda epoch: [task for task, _ in epoch]  # noqa: E731
    assert sorted(tasks(first)) == sorted(tasks(second)) and tasks(first) != tasks(second)
    for task in ("sst", "para", "sts"):
        assert [rows for name, rows in first if name == task] != [rows for name, rows in second if name == task], task


# ---- --pair-encoding ----

def test_a_pairs_views_are_what_transformers_tokenizer_makes_of_it(tiny_model, tokenizer):
    """cross: "[CLS] s1 [SEP] s2 [SEP]" and the other order; bi: each sentence alone."""
    pairs = [("a cat sat on the mat", "the dog ran"), ("big red car", "a small house on a tree")]
    firsts, seconds = [a for a, _ in pairs], [b for _, b in pairs]
    theirs = transformers.AutoTokenizer.from_pretrained(tiny_model)

    def ids(encoding):
        return [[e.input_ids for e in view] for view in encode_views(tokenizer, pairs, encoding, 32, source="test")]

    assert ids("cross") == [theirs(firsts, seconds)["input_ids"], theirs(seconds, firsts)["input_ids"]]
    assert ids("bi") == [theirs(firsts)["input_ids"], theirs(seconds)["input_ids"]]


# ---- what an exported folder inherits: Normalize, pooling ----

def test_a_run_from_init_inherits_the_normalize_of_the_init_checkpoint(save_tiny_checkpoint, tiny_model,
                                                                      course_data, tmp_path):
    """--init names the checkpoint the run starts from, which --model does not then: a run from a folder whose
    sentence-transformers users get length-1 embeddings (all-MiniLM-L6-v2's Normalize) exports them too."""
    init = save_tiny_checkpoint({})
    write_shareable_files(init, pooling="mean", max_length=32, base_model="all-MiniLM-L6-v2", command="",
                          metrics={}, data_files=[])
    multitask_classifier.main(run_args(tiny_model, course_data, tmp_path, "--init", str(init), "--max-steps", "1",
                                       "--pooling", "mean"))
    best = tmp_path / "run/best"
    sentences = ["a cat sat on the mat", "the big red car ran fast", "dog"]
    ours = embed_sentences(from_pretrained(best), Tokenizer.from_pretrained(best), sentences, pooling="mean")
    theirs = SentenceTransformer(str(best), device="cpu").encode(sentences, convert_to_tensor=True).cpu()
    torch.testing.assert_close(theirs, torch.nn.functional.normalize(ours, dim=-1), atol=1e-5, rtol=0)
    assert not torch.allclose(ours.norm(dim=-1), torch.ones(3), atol=1e-3)  # normalised by the export, not by chance
    assert any(module["type"].endswith(".Normalize") for module in json.loads((best / "modules.json").read_text()))


def test_a_contrastive_run_exports_the_pooling_it_trained_with(tiny_model, contrastive_data, tmp_path):
    """SimCSE pools the [CLS] vector (its default): SentenceTransformer(folder) must too, not mean-pool."""
    out = tmp_path / "simcse"
    pretrain_contrastive.main(["--model", str(tiny_model), "--method", "simcse", "--data", "sts", "--data-dir",
                               str(contrastive_data), "--batch-size", "8", "--max-steps", "1", "--device", "cpu",
                               "--output-dir", str(out), "--quiet"])
    sentences = ["a cat sat on the mat", "the big red car ran fast", "dog"]
    encoder, tokenizer = from_pretrained(out), Tokenizer.from_pretrained(out)
    cls, mean = (embed_sentences(encoder, tokenizer, sentences, pooling=pooling) for pooling in ("cls", "mean"))
    assert not torch.allclose(cls, mean, atol=1e-3)
    theirs = SentenceTransformer(str(out), device="cpu").encode(sentences, convert_to_tensor=True).cpu()
    torch.testing.assert_close(theirs, cls, atol=1e-5, rtol=0)
    # The folder is made to be shared: none of its files says where the files lay.
    for path in out.rglob("*"):
        if path.is_file():
            text = path.read_bytes()
            assert str(tmp_path).encode() not in text and str(tiny_model).encode() not in text, path


# ---- --config ----

def test_a_config_files_false_turns_off_a_flag_that_defaults_to_true(tmp_path):
    for text in ("negatives: false\n", '{"negatives": false}'):  # YAML, and JSON as run_config.json has it
        config_file = tmp_path / "config.yaml"
        config_file.write_text(text)
        assert parse_config(ContrastiveConfig, "", ["--config", str(config_file)]).negatives is False
    assert parse_config(ContrastiveConfig, "", ["--config", str(config_file), "--negatives"]).negatives is True


# ---- contrastive runs ----

def test_projection_auto_is_on_for_simcse_and_off_for_mnrl(tiny_model, contrastive_data, tmp_path):
    """The projection head is used in training only: its effect shows in the encoder it trains."""
    def trained(method, projection):
        out = tmp_path / f"{method}-{projection}"
        pretrain_contrastive.main(["--model", str(tiny_model), "--method", method, "--data", "sts", "--data-dir",
                                   str(contrastive_data), "--batch-size", "8", "--max-steps", "2", "--device", "cpu",
                                   "--output-dir", str(out), "--projection", projection, "--quiet"])
        return checkpoint_weights(out)

    for method, auto_is in (("simcse", "on"), ("mnrl", "off")):
        auto, other = trained(method, "auto"), trained(method, "off" if auto_is == "on" else "on")
        assert_same_weights(auto, trained(method, auto_is), atol=0)
        assert any(not torch.allclose(auto[name], other[name], atol=1e-6) for name in auto), method
