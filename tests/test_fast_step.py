"""Issue 23 through the command: --max-tokens batches within budget (predictions still id by id), --compile and
--attention packed training as eager padded does, a run that recorded the removed unpadded attention resuming
packed, and a training step that never reads from the device."""
import json
import sys

import pytest
import torch

import multitask_classifier
from minbert.common.run_folder import RunFolder
from minbert.data.splits import TaskStream
from minbert.evaluation.inference import soft_outputs
from tests.conftest import assert_same_weights, checkpoint_weights, killed_and_resumed, multitask_argv
from minbert.engine import engine as engine_module

pytestmark = pytest.mark.usefixtures("one_thread")


def losses(out) -> list[dict]:
    lines = (out / "run" / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines if json.loads(line)["event"] == "train"]


def test_max_tokens_batches_stay_within_budget_and_predictions_keep_their_ids(tiny_model, course_data, tmp_path,
                                                                              monkeypatch):
    seen = []
    original = TaskStream.batch_indices

    def spy(self, k):
        rows = original(self, k)
        seen.append((sum(self.lengths[i] for i in rows), self.max_tokens, len(rows)))
        return rows

    monkeypatch.setattr(TaskStream, "batch_indices", spy)
    multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--max-length", "32",
                                             "--max-tokens", "96", "--epochs", "1"))
    assert seen and all(tokens <= budget == 96 for tokens, budget, _ in seen)
    assert len({rows for *_, rows in seen}) > 1, "batches hold as many sentences as fit, not a fixed number"
    # Token-budget evaluation gives every example the output that row-count batches give it.
    from minbert.models import Tokenizer
    from minbert.model import build_model
    from minbert.training.multitask_config import MultitaskConfig
    from minbert.tasks import REGISTRY
    config = MultitaskConfig(model=str(tiny_model), max_length=32)
    model = build_model(config, str(tiny_model)).eval()
    tokenizer = Tokenizer.from_pretrained(tiny_model)
    for task in ("sst", "para", "sts"):
        split = REGISTRY[task].load_splits(str(course_data), tokenizer, 32, config.head_options.encoding(REGISTRY[task]),
                                           0, 0)["dev"]
        by_rows = soft_outputs(model, split, tokenizer.pad_id, batch_size=5)
        by_tokens = soft_outputs(model, split, tokenizer.pad_id, max_tokens=70)
        torch.testing.assert_close(by_tokens, by_rows, atol=1e-5, rtol=0)


def test_compiled_run_gives_the_eager_losses(tiny_model_without_dropout, course_data, tmp_path):
    runs = {}
    for name, extra in (("eager", ()), ("compiled", ("--compile",))):
        out = tmp_path / name
        multitask_classifier.main(multitask_argv(tiny_model_without_dropout, course_data, out, "--tasks", "sst",
                                                 "--epochs", "1", "--log-every", "1", *extra))
        runs[name] = losses(out)
    assert len(runs["eager"]) >= 3
    for eager, compiled in zip(runs["eager"], runs["compiled"]):
        assert abs(eager["sst"] - compiled["sst"]) <= 1e-4


def test_packed_attention_trains_the_padded_weights(tiny_model_without_dropout, course_data, tmp_path):
    for attention in ("padded", "packed"):
        multitask_classifier.main(multitask_argv(tiny_model_without_dropout, course_data, tmp_path / attention,
                                                 "--epochs", "1", "--attention", attention))
    assert_same_weights(checkpoint_weights(tmp_path / "padded" / "run" / "best"),
                        checkpoint_weights(tmp_path / "packed" / "run" / "best"), atol=1e-4)


def test_a_run_that_recorded_unpadded_attention_resumes_packed(tiny_model, course_data, tmp_path, monkeypatch,
                                                               caplog):
    """Unpadded attention was removed (issue 71); a run started with it resumes with --resume alone, packed, which
    computes the same numbers: it ends with the weights of the run trained packed throughout."""
    def resume(killed):
        saved = tmp_path / "resumed" / "run" / "last" / "run_config.json"
        saved.write_text(json.dumps({**json.loads(saved.read_text()), "attention": "unpadded"}))
        return ["--output-dir", str(tmp_path / "resumed" / "run"), "--resume"]

    with caplog.at_level("INFO"):
        killed_and_resumed(monkeypatch, lambda out: multitask_argv(tiny_model, course_data, out, "--eval-every", "3",
                                                                   "--attention", "packed"), tmp_path, 6, resume)
    assert "--attention unpadded no longer exists; it goes on packed" in caplog.text
    assert json.loads((tmp_path / "resumed/run/last/run_config.json").read_text())["attention"] == "packed"


SYNCING = ("item", "tolist", "__bool__", "__float__", "__int__", "cpu", "numpy")


def run_with_a_step_that_may_not_sync(tiny_model, course_data, out, monkeypatch):
    """A tiny run in which any read of a tensor back to the host inside Engine._train_step raises (log lines and
    evaluation, outside the step, may read; so may data/, which makes the batch on the host). Padded attention
    (the default on a GPU): packed attention sizes its packed tensors by each batch's real tokens."""
    inside = [False]
    for name in SYNCING:
        original = getattr(torch.Tensor, name)

        def guarded(self, *args, _original=original, _name=name, **kwargs):
            # data/ builds the batch on the host (CPU tensors, before the copy to the device): it may read them.
            if inside[0] and "/data/" not in sys._getframe(1).f_code.co_filename:
                raise AssertionError(f"Tensor.{_name} inside the training step waits for the device")
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, guarded)
    step = engine_module.Engine._train_step

    def watched(self, run, item):
        inside[0] = True
        try:
            return step(self, run, item)
        finally:
            inside[0] = False

    monkeypatch.setattr(engine_module.Engine, "_train_step", watched)
    multitask_classifier.main(multitask_argv(tiny_model, course_data, out, "--epochs", "1", "--log-every", "2",
                                             "--eval-every", "3", "--attention", "padded"))


def test_the_training_step_never_reads_from_the_device(tiny_model, course_data, tmp_path, monkeypatch):
    run_with_a_step_that_may_not_sync(tiny_model, course_data, tmp_path, monkeypatch)
    assert losses(tmp_path), "log lines read the summed losses"
    # The optimizer's state goes into last/ only, never into best/.
    assert RunFolder(tmp_path / "run").state_file.exists()
    assert not list((tmp_path / "run" / "best").glob("training_state*"))


def test_a_sync_added_to_the_step_is_caught(tiny_model, course_data, tmp_path, monkeypatch):
    from minbert.training.multitask import MultitaskRun
    step = MultitaskRun.step

    def step_that_reads_its_loss(self, item, share):
        reported, examples = step(self, item, share)
        for loss in reported.values():
            loss.item()  # what the test must catch
        return reported, examples

    monkeypatch.setattr(MultitaskRun, "step", step_that_reads_its_loss)
    with pytest.raises(AssertionError, match="Tensor.item inside the training step"):
        run_with_a_step_that_may_not_sync(tiny_model, course_data, tmp_path, monkeypatch)


def test_batches_of_both_trainers_reach_a_gpu_from_pinned_memory_without_waiting(monkeypatch):
    """Without a GPU: torch.Tensor's copy calls recorded, as the CUDA copies of a multitask batch (to_device) and
    of a contrastive one (its .to) would make them."""
    from minbert.data.batching import to_device
    from minbert.data.contrastive import PairBatch

    calls = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: calls.append("pin") or self)
    monkeypatch.setattr(torch.Tensor, "to", lambda self, device, **kwargs: calls.append(
        (str(device), kwargs.get("non_blocking"))) or self)
    to_device(torch.ones(2), torch.device("cuda"))
    assert calls == ["pin", ("cuda", True)]
    calls.clear()
    to_device(torch.ones(2), torch.device("cpu"))
    assert calls == [("cpu", True)], "nothing to pin on the CPU"
    calls.clear()
    inputs = {"input_ids": torch.ones(2, 3, dtype=torch.long), "attention_mask": torch.ones(2, 3, dtype=torch.long)}
    PairBatch("quora", inputs, dict(inputs), torch.ones(2)).to(torch.device("cuda"))
    assert calls == ["pin", ("cuda", True)] * 5  # two inputs of each sentence, and the labels
