"""Issue 71 on the CPU: a bucketed training step (--length-buckets: lengths padded up to a multiple of 32, rows up
to the batch size, padding rows weighing nothing) computes the unbucketed step's losses and gradients to fp32
rounding, and so do evaluation and a whole run; --cuda-graphs' decision, its one line and its record, for each
setting that cannot be captured."""
import json
from types import SimpleNamespace

import pytest
import torch

import multitask_classifier
from minbert.data.batching import BUCKET_TOKENS, Buckets
from minbert.data.splits import TaskSplit
from minbert.evaluation.inference import soft_outputs
from minbert.model import build_model
from minbert.models import Tokenizer
from minbert.tasks import REGISTRY
from minbert.training import step_shapes as step_shapes_module
from minbert.training.multitask import task_loss
from minbert.training.multitask_config import MultitaskConfig
from minbert.training.step_shapes import cuda_graphs, step_shapes
from tests.conftest import assert_same_weights, checkpoint_weights, multitask_argv

pytestmark = pytest.mark.usefixtures("one_thread")

MAX_LENGTH = 48  # not a multiple of 32: the last bucket is --max-length itself
# Bucketing adds keys whose attention weights are exactly 0 (exp of the mask's lowest value underflows) and rows that
# the loss leaves out: what moves is the order of fp32 sums (the longer softmax and matrix-product reductions), a few
# units of fp32's last place (1.2e-7) per operation over the few hundred operations from an input to a gradient of
# this 2-layer model: within 1e-5 of the largest value compared.
RELATIVE = 1e-5


def test_a_batch_is_padded_to_its_bucket():
    buckets = Buckets(MAX_LENGTH, rows=8)
    assert [buckets.width(n) for n in (1, 32, 33, 47, 48)] == [32, 32, 48, 48, 48]
    assert BUCKET_TOKENS == 32 and Buckets(256).width(100) == 128
    assert buckets.padded_rows([5, 2, 9]) == [5, 2, 9, 5, 5, 5, 5, 5]
    assert Buckets(MAX_LENGTH).padded_rows([5, 2]) == [5, 2]  # rows 0: as they are


@pytest.fixture(scope="module")
def model_and_splits(tiny_model_without_dropout, course_data):
    config = MultitaskConfig(model=str(tiny_model_without_dropout), max_length=MAX_LENGTH,
                             pair_encoding="para=cross,sts=bi")
    torch.manual_seed(0)
    model = build_model(config, str(tiny_model_without_dropout))
    tokenizer = Tokenizer.from_pretrained(tiny_model_without_dropout)
    splits = {task: REGISTRY[task].load_splits(str(course_data), tokenizer, MAX_LENGTH,
                                               config.head_options.encoding(REGISTRY[task]), 0, 0)
              for task in ("sst", "para", "sts")}
    return model.eval(), splits, tokenizer.pad_id  # no dropout (the heads' too): both compute the same function


def loss_and_gradients(model, task: str, split: TaskSplit, rows: list[int], pad_id: int,
                       buckets: Buckets | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    batch = split.batch(rows, pad_id, buckets)
    with model.encoder.padding_known(batch["padded"]):
        loss = task_loss(model, task, batch)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def biggest_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys() and a
    return max((a[name] - b[name]).abs().max().item() for name in a)


@pytest.mark.parametrize("attention", ["padded", "packed"])
@pytest.mark.parametrize("task", ["sst", "para", "sts"])  # a sentence, a cross-encoded pair, a bi-encoded pair
def test_a_bucketed_step_gives_the_unbucketed_losses_and_gradients(model_and_splits, task, attention):
    model, splits, pad_id = model_and_splits
    model.encoder.attention = attention
    split, rows = splits[task]["train"], [3, 17, 8, 30, 11]  # 5 rows of mixed lengths, padded to 8
    plain_loss, plain = loss_and_gradients(model, task, split, rows, pad_id, None)
    bucketed_batch = split.batch(rows, pad_id, Buckets(MAX_LENGTH, rows=8))
    assert bucketed_batch["inputs"]["input_ids"].shape[0] == 8 * len(split.views)
    assert bucketed_batch["inputs"]["input_ids"].shape[1] in (32, MAX_LENGTH) and bucketed_batch["padded"]
    bucketed_loss, bucketed = loss_and_gradients(model, task, split, rows, pad_id, Buckets(MAX_LENGTH, rows=8))
    assert abs(bucketed_loss - plain_loss) <= RELATIVE * abs(plain_loss)
    scale = max(g.abs().max().item() for g in plain.values())
    assert biggest_difference(bucketed, plain) <= RELATIVE * scale
    # The comparison can fail: the padding rows counted in the loss move it far past the tolerance.
    batch = split.batch(rows, pad_id, Buckets(MAX_LENGTH, rows=8))
    with model.encoder.padding_known(True):
        counted = task_loss(model, task, {**batch, "rows": 8, "labels": split.labels[Buckets(MAX_LENGTH, 8)
                                                                                         .padded_rows(rows)]})
    assert abs(counted.detach() - plain_loss) > 100 * RELATIVE * abs(plain_loss)


def test_bucketed_evaluation_gives_the_unbucketed_outputs(model_and_splits):
    model, splits, pad_id = model_and_splits
    for task in ("sst", "para", "sts"):
        dev = splits[task]["dev"]
        plain = soft_outputs(model, dev, pad_id, batch_size=5)
        bucketed = soft_outputs(model, dev, pad_id, batch_size=5, buckets=Buckets(MAX_LENGTH, rows=5))
        assert bucketed.shape == plain.shape == (len(dev), *REGISTRY[task].soft_shape)
        torch.testing.assert_close(bucketed, plain, atol=RELATIVE * plain.abs().max().item(), rtol=0)


def test_a_bucketed_run_trains_the_unbucketed_weights_and_records_it(tiny_model_without_dropout, course_data,
                                                                      tmp_path, monkeypatch):
    widths = []
    original = TaskSplit.batch

    def spy(self, rows, pad_id, buckets=None):
        batch = original(self, rows, pad_id, buckets)
        if buckets or flag == "off":  # (the heads' calibration, before training, measures on unbucketed batches)
            widths.append((batch["inputs"]["input_ids"].shape, len(self.views)))
        return batch

    for name, flag in (("plain", "off"), ("bucketed", "on")):
        widths.clear()
        monkeypatch.setattr(TaskSplit, "batch", spy)
        multitask_classifier.main(multitask_argv(tiny_model_without_dropout, course_data, tmp_path / name,
                                                 "--epochs", "1", "--max-length", str(MAX_LENGTH),
                                                 "--length-buckets", flag))
        monkeypatch.setattr(TaskSplit, "batch", original)
        seen = {shape[1] for shape, _ in widths}
        if flag == "on":  # training's batches of 8 rows a view (evaluation's 128: the whole dev set, padded)
            assert seen <= {32, MAX_LENGTH} and {shape[0] // views for shape, views in widths} == {8, 128}
        else:
            assert len(seen) > 2, "without buckets, a width a batch"
    assert_same_weights(checkpoint_weights(tmp_path / "plain" / "run" / "best"),
                        checkpoint_weights(tmp_path / "bucketed" / "run" / "best"), atol=1e-4)
    resolved = json.loads((tmp_path / "bucketed" / "run" / "run_config.json").read_text())["resolved"]
    assert resolved["length_buckets"] == "on" and resolved["cuda_graphs"] == "off"
    assert resolved["cuda_graphs_reason"] == "CUDA graphs need a CUDA device, not cpu: trained without CUDA graphs"


def flags(**changed) -> SimpleNamespace:
    """A multi-task run's flags (their defaults but `changed`), as cuda_graphs reads them."""
    return SimpleNamespace(**{**MultitaskConfig().to_dict(), **changed})


CUDA = torch.device("cuda")


@pytest.mark.parametrize("changed, reason", [
    ({"combine": "pcgrad", "schedule": "avg"}, "--combine pcgrad's per-task passes, combined on the host"),
    ({"combine": "upgrad", "schedule": "avg"}, "--combine upgrad's per-task passes, combined on the host"),
    ({"smart": True}, "--smart's perturbation steps"),
    ({"max_tokens": 512}, "--max-tokens: batches whose rows change every step"),
    ({"silver": "silver/"}, "--silver: silver batches of their own sizes"),
    ({"attention": "packed"}, "packed attention: rows as many as each batch's real tokens"),
    ({"gradient_checkpointing": True}, "--gradient-checkpointing's recomputed layers"),
])
def test_a_setting_that_cannot_be_captured_trains_eagerly_saying_why(changed, reason):
    for asked in ("auto", "on"):
        assert cuda_graphs(flags(cuda_graphs=asked, **changed), CUDA, buckets=True) == (
            False, f"{reason}: trained without CUDA graphs")


def test_cuda_graphs_where_they_can_be_captured():
    on = (True, "the encoder's forward and backward passes replayed as a CUDA graph a batch shape")
    assert cuda_graphs(flags(), CUDA, buckets=True) == on  # auto, padded attention (auto on a GPU)
    assert cuda_graphs(flags(cuda_graphs="on"), CUDA, buckets=True) == on
    assert cuda_graphs(flags(cuda_graphs="off"), CUDA, buckets=True) == (False, "--cuda-graphs off")
    assert cuda_graphs(flags(), CUDA, buckets=False) == (
        False, "--length-buckets off: every batch length would be a graph of its own: trained without CUDA graphs")
    assert cuda_graphs(flags(cuda_graphs="on"), torch.device("cpu"), buckets=True) == (
        False, "CUDA graphs need a CUDA device, not cpu: trained without CUDA graphs")


def test_under_torchrun_the_step_runs_eagerly(monkeypatch):
    monkeypatch.setattr(step_shapes_module.distributed, "world_size", lambda: 2)
    assert cuda_graphs(flags(), CUDA, buckets=True) == (
        False, "torchrun: DistributedDataParallel's gradient hooks: trained without CUDA graphs")


def test_the_decision_is_one_line_and_buckets_follow_the_device(caplog):
    with caplog.at_level("INFO", logger="minbert.training.step_shapes"):
        on_cuda = step_shapes(flags(smart=True), CUDA)
        on_cpu = step_shapes(flags(), torch.device("cpu"))
    assert [record.getMessage() for record in caplog.records] == [
        "length buckets on; CUDA graphs off: --smart's perturbation steps: trained without CUDA graphs",
        "length buckets off; CUDA graphs off: CUDA graphs need a CUDA device, not cpu: trained without CUDA graphs"]
    # auto: buckets on a GPU; SMART's rows stay as they are (its perturbed passes see every row), evaluation's not.
    assert on_cuda.train == Buckets(128, rows=0) and on_cuda.eval == Buckets(128, rows=128)
    assert on_cuda.silver == Buckets(128) and not on_cuda.cuda_graphs
    assert on_cpu.train is on_cpu.eval is on_cpu.silver is None
    assert on_cpu.record() == {"length_buckets": "off", "cuda_graphs": "off", "cuda_graphs_reason":
                               "CUDA graphs need a CUDA device, not cpu: trained without CUDA graphs"}
    assert step_shapes(flags(length_buckets="on", batch_size=16), torch.device("cpu")).train == Buckets(128, 16)
