"""training/multitask.py through multitask_classifier.py, on a tiny random encoder and tiny course-format files."""
import copy
import json
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file

from minbert import checkpoint
import multitask_classifier
from minbert.common.cli import shown_path
from minbert.common import cli
from minbert.common.errors import CheckpointError
from minbert.data.readers import read_quora, read_sentiment, read_sts
from minbert.data.splits import TaskSplit
from minbert.tasks import REGISTRY
from tests.conftest import killed_and_resumed, multitask_argv
from minbert.training import multitask
from minbert.engine.config import TrainingConfig
from minbert.engine.engine import Engine
from minbert.models.optimizer import AdamW
from minbert.training.multitask_config import MultitaskConfig
from minbert.training.schedules import SCHEDULES

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("pair_encoding", ["bi", "para=cross,sts=bi"])
def test_run_writes_checkpoints_metrics_and_leaderboard_files(tiny_model, course_data, tmp_path, pair_encoding):
    metrics = multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--schedule", "mtdnn",
                                                       "--pair-encoding", pair_encoding))
    assert set(metrics) >= {"sst", "para", "sts", "overall", "mean"}
    run = tmp_path / "run"
    assert (run / "best" / "model.safetensors").exists() and (run / "last" / "training_state.pt").exists()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("epoch") for r in records] == [1, 2, None]  # an evaluation per epoch, numbered from 1; the finish
    # The best folder is a plain Hugging Face checkpoint: transformers loads its encoder as is.
    transformers.BertModel.from_pretrained(run / "best")
    # It is made to be shared: no file of it says where the files lay (last/, which --resume reads, does).
    for path in (run / "best").rglob("*"):
        if path.is_file():
            text = path.read_bytes()
            assert str(tmp_path).encode() not in text and str(tiny_model).encode() not in text, path
    assert str(course_data) in (run / "last" / "run_config.json").read_text()
    readers = {"sst": lambda p, **k: read_sentiment(p, 5, **k), "para": read_quora, "sts": read_sts}
    for task, stem in (("sst", "ids-sst"), ("para", "quora"), ("sts", "sts")):
        for split, source in (("dev", f"{stem}-dev.csv"), ("test", f"{stem}-test-student.csv")):
            records, _ = readers[task](course_data / source, labeled=split == "dev")
            lines = (tmp_path / "predictions" / f"{task}-{split}-output.csv").read_text().splitlines()
            assert [line.split(",")[0].strip() for line in lines[1:]] == [r.id for r in records]


@pytest.mark.parametrize("combine", ["mean", "pcgrad"])
def test_resumed_run_ends_with_the_same_weights(tiny_model, course_data, tmp_path, monkeypatch, combine):
    """Killed in its second epoch after the checkpoint of step 6, then resumed. mean: --resume alone, the run's
    run_config.json gives every flag; pcgrad: the command repeated, as before."""
    flags = ["--schedule", "avg", "--combine", combine, "--eval-every", "2"]
    interrupted, resume = killed_and_resumed(
        monkeypatch, lambda out: multitask_argv(tiny_model, course_data, out, *flags), tmp_path, 6,
        None if combine == "mean" else lambda killed: [*killed, "--resume"])
    start = json.loads((tmp_path / "resumed/run/run_config.json").read_text())["provenance"]
    assert [start["command"], *(command["command"] for command in start["resumed"])] == [
        shlex.join([shown_path(sys.executable), "multitask_classifier.py", *argv]) for argv in (interrupted, resume)]
    # The best checkpoint too: the resumed run knows the best score of the evaluations before the kill.
    best = [json.loads((tmp_path / run / "run/best/metrics.json").read_text())["step"] for run in ("full", "resumed")]
    assert best[0] == best[1]


def test_resume_refuses_changed_flags(tiny_model, course_data, tmp_path):
    multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--epochs", "1"))
    with pytest.raises(CheckpointError, match=r"--resume: --batch-size 4 \(the run's: 8\): the run continues with "
                                              r"its own flags \(from .*last/run_config.json\); leave these out"):
        multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--epochs", "1", "--resume",
                                                 "--batch-size", "4"))


def test_resume_takes_flags_newer_than_the_run_as_their_defaults(tiny_model, course_data, tmp_path):
    multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--epochs", "1"))
    saved = tmp_path / "run" / "last" / "run_config.json"
    config = json.loads(saved.read_text())
    del config["loss_weights"], config["layer_lr_decay"]  # as written before these flags existed
    saved.write_text(json.dumps(config))
    multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--epochs", "1", "--resume"))
    with pytest.raises(CheckpointError, match=r"--layer-lr-decay 0.5 \(the run's: 1.0\)"):
        multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--epochs", "1", "--resume",
                                                 "--layer-lr-decay", "0.5"))


def test_init_refuses_heads_trained_under_other_head_flags(tiny_model, course_data, tmp_path):
    multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path / "plain", "--epochs", "1",
                                             "--pair-mlp", "plain"))
    init = ["--init", str(tmp_path / "plain/run/best"), "--epochs", "1"]
    # Same tensors, other meaning: these would load without the check.
    with pytest.raises(CheckpointError, match="--pair-mlp plain"):
        multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path / "residual", *init))
    with pytest.raises(CheckpointError, match="--pooling mean"):
        multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path / "cls", *init,
                                                 "--pair-mlp", "plain", "--pooling", "cls"))
    with pytest.raises(CheckpointError, match="--no-common-layer"):
        multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path / "cl", *init, "--pair-mlp", "plain",
                                                 "--common-layer"))
    # The same encodings spelled another way (the default para=cross,sts=bi; a pair task left out is bi) are the
    # same flags.
    multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path / "again", *init, "--pair-mlp", "plain",
                                             "--pair-encoding", "para=cross"))


def test_init_from_an_encoder_alone_still_sets_the_cosine_floor(tiny_model, course_data, tmp_path):
    # A contrastive checkpoint has no heads, so M must be measured as for --model, not left at -1.
    def floor(*start):
        argv = multitask_argv(tiny_model, course_data, tmp_path, *start, "--sts-target", "cosine-range", "--overwrite")
        config = cli.parse_config(MultitaskConfig, "", argv)
        return multitask.MultitaskRun(config, Engine(config)).model.heads["sts"].cosine_floor.item()

    from_model = floor()
    assert from_model > -1
    assert floor("--init", str(tiny_model)) == pytest.approx(from_model)


def run_cli(*argv, env_extra=None, cwd=ROOT):
    """multitask_classifier.py with `argv`; the leaderboard files (unless argv names their folder) go beside
    --output-dir, never into the repository's predictions/, which a user's own run may hold."""
    import os
    env = {**os.environ, **(env_extra or {})}
    if "--predictions-dir" not in argv and "--output-dir" in argv:
        argv = [*argv, "--predictions-dir", argv[argv.index("--output-dir") + 1] + "-predictions"]
    return subprocess.run([sys.executable, "multitask_classifier.py", *argv], cwd=cwd, capture_output=True,
                          text=True, env=env, timeout=300)


def test_offline_hub_model_is_a_clear_error_not_a_traceback(tmp_path):
    result = run_cli("--model", "bert-base-uncased", "--output-dir", str(tmp_path),
                     env_extra={"HF_HUB_CACHE": str(tmp_path / "empty-cache")})
    assert result.returncode == 2
    assert "error: could not get 'bert-base-uncased' from the Hugging Face hub" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_data_file_is_a_clear_error(tiny_model, tmp_path):
    result = run_cli("--model", str(tiny_model), "--data-dir", str(tmp_path), "--output-dir", str(tmp_path / "o"))
    assert result.returncode == 2 and "ids-sst-train.csv: file not found" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("flag, value, message", [
    ("--task-weights", "para=two", "weight 'two' of 'para' is not a number"),
    ("--loss-weights", "sst=-1", "--loss-weights 'sst=-1': weight of 'sst' must be a finite number >= 0"),
    ("--layer-lr-decay", "0", "--layer-lr-decay must be > 0 and <= 1, got 0"),
    ("--sts-target", "cosine-range --pair-encoding cross", "it needs sts=bi in --pair-encoding")])
def test_bad_flag_values_are_usage_errors(tmp_path, flag, value, message):
    result = run_cli(flag, *value.split(), "--output-dir", str(tmp_path))
    assert result.returncode == 2 and message in result.stderr


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_an_epoch_under_a_token_budget_visits_every_training_row_once(tiny_model, course_data, tmp_path, monkeypatch,
                                                                     schedule):
    """One epoch's steps, batched by --max-tokens and shared out between --grad-accum parts, train on each row of
    each task once: every schedule takes all of a task's batches in an epoch (sequential: of its epoch's task),
    but avg, whose steps take a batch of every task, as many of them as the task with the fewest batches has."""
    visited, in_step = {}, []  # (epoch, task) -> how often each row was trained on; the epoch of the step running
    step, batch = multitask.MultitaskRun.step, TaskSplit.batch

    def recorded_step(run, item, share):
        in_step.append(item[0])
        try:
            return step(run, item, share)
        finally:
            in_step.pop()

    def recorded_batch(split, rows, *args):
        if in_step:  # a training step's batch (not an evaluation's, nor calibration's)
            visited.setdefault((in_step[-1], split.task), Counter()).update(rows)
        return batch(split, rows, *args)

    monkeypatch.setattr(multitask.MultitaskRun, "step", recorded_step)
    monkeypatch.setattr(TaskSplit, "batch", recorded_batch)
    epochs = 3 if schedule == "sequential" else 1  # sequential: an epoch a task
    multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--schedule", schedule, "--epochs",
                                             str(epochs), "--max-length", "32", "--max-tokens", "64",
                                             "--grad-accum", "2", "--task-weights", ""))
    rows = {task: len((course_data / REGISTRY[task].files[0]).read_text().splitlines()) - 1
            for task in ("sst", "para", "sts")}
    every_row_once = {task: Counter(range(count)) for task, count in rows.items()}
    if schedule == "sequential":
        assert visited == {(epoch, task): every_row_once[task] for epoch, task in enumerate(rows)}
    elif schedule == "avg":
        assert visited.keys() == {(0, task) for task in rows}
        assert all(set(counts.values()) == {1} for counts in visited.values())  # no row twice
        assert any(visited[0, task] == every_row_once[task] for task in rows)  # the task of fewest batches whole
        assert any(visited[0, task] != every_row_once[task] for task in rows)  # and the others' sampled
    else:
        assert visited == {(0, task): every_row_once[task] for task in rows}


def test_schedule_pcgrad_is_the_old_spelling_of_combine_pcgrad(caplog):
    with caplog.at_level("WARNING"):
        config = cli.parse_config(MultitaskConfig, "", ["--schedule", "pcgrad"])
    assert (config.schedule, config.combine) == ("avg", "pcgrad")
    assert caplog.messages == ["--schedule pcgrad: now --schedule avg --combine pcgrad (avg's steps, PCGrad's "
                               "gradients)"]
    assert cli.parse_config(MultitaskConfig, "", ["--schedule", "pcgrad", "--combine", "upgrad"]).combine == "upgrad"


@pytest.mark.parametrize("schedule", ["mtdnn", "rr-batch", "rr-epoch", "sequential"])
def test_combine_needs_steps_of_several_tasks(schedule):
    with pytest.raises(ValueError, match=f"--combine pcgrad: combines the gradients of the tasks of a step, and "
                                         f"--schedule {schedule} takes one task a step; use --schedule avg"):
        MultitaskConfig(schedule=schedule, combine="pcgrad")


def test_every_part_of_the_config_checks_its_flags(monkeypatch):
    """MultitaskConfig is ModelConfig + SmartConfig + EvaluationConfig + TrainingConfig: TrainingConfig's checks run
    too (ModelConfig's __post_init__ once called no other, and they never ran)."""
    checked, original = [], TrainingConfig.__post_init__
    monkeypatch.setattr(TrainingConfig, "__post_init__", lambda config: checked.append(config) or original(config))
    config = MultitaskConfig()
    assert checked == [config]


def test_weighted_losses_weigh_each_task_and_their_mean_is_the_step_loss():
    losses = {"sst": torch.tensor(2.0), "para": torch.tensor(4.0)}
    assert [l.item() for l in multitask.weighted_losses(losses, {})] == [2.0, 4.0]
    assert sum(multitask.weighted_losses(losses, {})).item() / 2 == 3.0
    assert sum(multitask.weighted_losses(losses, {"sst": 3.0})).item() / 2 == (3 * 2 + 4) / 2


def first_step(monkeypatch, tiny_model, course_data, out, one_pass: bool):
    """The first update's gradients, and the heads that had gradients at each forward pass of the step. one_pass:
    every task's forward pass, then one backward pass of their mean (as PCGrad's steps run)."""
    gradients, heads_at_forward = [], []
    start, forward = multitask.MultitaskRun.__init__, multitask.TaskLosses.forward

    def init(self, *args):
        start(self, *args)
        self.passes_apart = one_pass

    def recording_forward(self, batches):
        if not gradients:
            heads_at_forward.append({name.split(".")[1] for name, p in self.model.named_parameters()
                                     if name.startswith("heads.") and p.grad is not None})
        return forward(self, batches)

    def step(self, *args, **kwargs):
        if not gradients:
            gradients.append([p.grad.clone() for group in self.param_groups for p in group["params"]
                              if p.grad is not None])
        return adamw_step(self, *args, **kwargs)

    adamw_step = AdamW.step
    monkeypatch.setattr(multitask.MultitaskRun, "__init__", init)
    monkeypatch.setattr(multitask.TaskLosses, "forward", recording_forward)
    monkeypatch.setattr(AdamW, "step", step)
    multitask_classifier.main(multitask_argv(tiny_model, course_data, out, "--schedule", "avg", "--epochs", "1"))
    return gradients[0], heads_at_forward


def test_each_task_is_backpropagated_before_the_next_tasks_forward_pass_with_the_gradients_of_one_pass(
        monkeypatch, tiny_model, course_data, tmp_path):
    """A step of the three tasks, dropout on: each task's loss is backpropagated before the next task's forward pass
    (its activations are freed: the step's peak is one task's), and the gradients are those of one backward pass of
    the mean. They differ only in the order the three tasks' gradients are added in: fp32 rounding, a few eps of
    the gradient's size (64 eps allowed); a task left out or weighed twice would differ by its whole share."""
    per_task, heads_at_forward = first_step(monkeypatch, tiny_model, course_data, tmp_path / "per-task", False)
    one_pass, heads_in_one_pass = first_step(monkeypatch, tiny_model, course_data, tmp_path / "one-pass", True)
    assert heads_at_forward == [set(), {"sst"}, {"sst", "para"}]
    assert heads_in_one_pass == [set()]
    assert len(per_task) == len(one_pass)
    eps = torch.finfo(torch.float32).eps
    for mine, reference in zip(per_task, one_pass):
        assert (mine - reference).abs().max() <= 64 * eps * reference.abs().max()


def test_a_step_of_the_avg_schedule_has_the_gradients_of_the_mean_of_its_task_losses(
        monkeypatch, tiny_model_without_dropout, course_data, tmp_path):
    """The first step's gradients (the sst, para and sts passes added up) against those of the mean of the three
    losses, computed by hand: the model as it was before the step, on the step's batches, one backward pass of
    (sst + para + sts) / 3. A sum instead of the mean would triple them."""
    seen = {}
    forward, adamw_step = multitask.TaskLosses.forward, AdamW.step

    def recording_forward(self, batches):
        if "gradients" not in seen:
            seen.setdefault("before", copy.deepcopy(self))  # the first pass: nothing has a gradient yet
            seen.setdefault("batches", {}).update(batches)
            seen["live"] = self
        return forward(self, batches)

    def step(self, *args, **kwargs):
        if "gradients" not in seen:
            seen["gradients"] = {name: p.grad.clone() for name, p in seen["live"].named_parameters()
                                 if p.grad is not None}
        return adamw_step(self, *args, **kwargs)

    monkeypatch.setattr(multitask.TaskLosses, "forward", recording_forward)
    monkeypatch.setattr(AdamW, "step", step)
    multitask_classifier.main(multitask_argv(tiny_model_without_dropout, course_data, tmp_path, "--schedule", "avg",
                                             "--epochs", "1", "--head-dropout", "0", "--max-steps", "1",
                                             "--max-grad-norm", "0"))  # unclipped: the gradients as computed
    before = seen["before"]
    losses = forward(before, seen["batches"])
    assert sorted(losses) == ["para", "sst", "sts"]
    ((losses["sst"] + losses["para"] + losses["sts"]) / 3).backward()
    expected = {name: p.grad for name, p in before.named_parameters() if p.grad is not None}
    assert expected.keys() == seen["gradients"].keys()
    for name, gradient in seen["gradients"].items():
        assert torch.allclose(gradient, expected[name], rtol=1e-4, atol=1e-7), name


def test_a_zero_loss_weight_leaves_its_head_untouched(tiny_model, course_data, tmp_path):
    # With no weight decay, a task weighted 0 gives its head zero gradients and AdamW moves nothing, while the other
    # task's head trains: one epoch and two end with the same STS head and different SST heads. (All trained tasks
    # weighted 0 train nothing: refused, see tests/test_bad_inputs.py.)
    def heads_after(epochs):
        out = tmp_path / f"epochs-{epochs}"
        multitask_classifier.main(multitask_argv(tiny_model, course_data, out, "--tasks", "sst,sts",
                                                 "--epochs", str(epochs), "--weight-decay", "0",
                                                 "--loss-weights", "sts=0"))
        return load_file(out / "run" / "last" / checkpoint.HEADS)

    one, two = heads_after(1), heads_after(2)
    assert all(torch.equal(one[name], two[name]) for name in one if name.startswith("heads.sts."))
    assert not all(torch.equal(one[name], two[name]) for name in one if name.startswith("heads.sst."))


def test_layer_lr_decay_gives_lower_layers_smaller_rates(tiny_model, course_data, tmp_path):
    config = MultitaskConfig(model=str(tiny_model), data_dir=str(course_data), output_dir=str(tmp_path / "run"),
                             predictions_dir=str(tmp_path / "predictions"), device="cpu", lr=1e-3, head_lr=1e-2,
                             layer_lr_decay=0.5)
    run = multitask.MultitaskRun(config, Engine(config))
    rate = {id(p): (group["lr"], group.get("weight_decay", config.weight_decay)) for group in run.parameter_groups()
            for p in group["params"]}
    expected = {"encoder.embeddings.word_embeddings.weight": 1e-3 * 0.5 ** 2,  # two layers below the top
                "encoder.encoder.layer.0.attention.self.query.weight": 1e-3 * 0.5,
                "encoder.encoder.layer.1.output.dense.weight": 1e-3,
                "encoder.pooler.dense.weight": 1e-3,
                "heads.sst.mlp.first.1.weight": 1e-2}
    parameters = dict(run.model.named_parameters())
    for name, lr in expected.items():
        assert rate[id(parameters[name])] == pytest.approx((lr, config.weight_decay)), name
    assert rate[id(parameters["encoder.encoder.layer.0.output.LayerNorm.bias"])] == pytest.approx((1e-3 * 0.5, 0.0))
    assert len(rate) == sum(p.requires_grad for p in parameters.values())


@pytest.mark.parametrize("schedule", ["mtdnn", "rr-epoch"])
def test_one_task_trains_with_the_default_task_order(tiny_model, course_data, tmp_path, schedule):
    metrics = multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--tasks", "sst",
                                                       "--epochs", "1", "--schedule", schedule))
    assert "sst" in metrics and "para" not in metrics and "sts" not in metrics


def test_task_order_must_match_the_trained_tasks(tmp_path):
    result = run_cli("--tasks", "sst,sts", "--task-order", "sst,para,sts", "--output-dir", str(tmp_path))
    assert result.returncode == 2 and "must name each task of --tasks 'sst,sts'" in result.stderr
    assert "Traceback" not in result.stderr


# ---- every flag that shapes training reaches the run the command builds ----

def built(tiny_model, course_data, tmp_path, *flags) -> multitask.MultitaskRun:
    """The run multitask_classifier.py builds from these flags, before it trains (40 training rows a task). A build
    writes run_config.json: --overwrite lets a test build several into its one folder."""
    config = cli.parse_config(MultitaskConfig, "",
                              multitask_argv(tiny_model, course_data, tmp_path, "--overwrite", *flags))
    return multitask.MultitaskRun(config, Engine(config))


def batches_per_task(run) -> list[Counter]:
    return [Counter(task for _, batches in epoch for task, _ in batches) for epoch in run.plan()]


@pytest.mark.parametrize("flags, per_epoch", [
    # mtdnn: every task's 5 batches of 8 (40 rows); --task-weights w: ceil(w x 5) of them (MT-DNN's sampling)
    (["--schedule", "mtdnn"], {"sst": 5, "para": 4, "sts": 5}),  # the default --task-weights: para=0.8
    (["--schedule", "mtdnn", "--task-weights", "para=2,sts=0.5"], {"sst": 5, "para": 10, "sts": 3}),
    # avg: one batch of every task a step, as many steps as the smallest task has batches
    (["--schedule", "avg", "--tasks", "sst,sts"], {"sst": 5, "sts": 5}),
    # a step's batch is shared out between the accumulation parts: --grad-accum 2 makes batches of 16
    (["--schedule", "mtdnn", "--grad-accum", "2"], {"sst": 3, "para": 3, "sts": 3}),
    (["--schedule", "mtdnn", "--batch-size", "16"], {"sst": 3, "para": 3, "sts": 3}),
])
def test_schedule_flags_reach_the_plan(tiny_model, course_data, tmp_path, flags, per_epoch):
    run = built(tiny_model, course_data, tmp_path, "--batch-size", "8", "--epochs", "2", *flags)
    assert batches_per_task(run) == [Counter(per_epoch)] * 2
    # Each task's batches of an epoch are numbered in order: the stream's k-th batch, once each.
    for epoch in run.plan():
        numbers = {}
        for _, batches in epoch:
            for task, k in batches:
                numbers.setdefault(task, []).append(k)
        assert all(ks == list(range(len(ks))) for ks in numbers.values())


def test_task_order_and_sequential_epochs_reach_the_plan(tiny_model, course_data, tmp_path):
    run = built(tiny_model, course_data, tmp_path, "--batch-size", "8", "--schedule", "rr-epoch",
                "--task-order", "sts,sst,para", "--epochs", "1")
    assert [batches[0][0] for _, batches in run.plan()[0]] == ["sts"] * 5 + ["sst"] * 5 + ["para"] * 5
    run = built(tiny_model, course_data, tmp_path, "--batch-size", "8", "--schedule", "sequential",
                "--task-order", "para,sts,sst", "--epochs", "3")
    assert [set(batches_per_task_epoch) for batches_per_task_epoch in batches_per_task(run)] == [
        {"para"}, {"sts"}, {"sst"}]


def test_sample_sizes_and_max_length_reach_the_splits(tiny_model, course_data, tmp_path):
    run = built(tiny_model, course_data, tmp_path, "--max-train-examples", "10", "--max-eval-examples", "4",
                "--max-length", "9")
    for splits in run.splits.values():
        assert [len(splits[name]) for name in ("train", "dev", "test")] == [10, 4, 4]
        lengths = [length for split in splits.values() for length in split.lengths()]
        assert max(lengths) == 9  # sentences of up to 9 words, 11 tokens with [CLS] and [SEP]: cut at 9


def test_option_pretrain_trains_the_heads_alone(tiny_model, course_data, tmp_path):
    run = built(tiny_model, course_data, tmp_path, "--option", "pretrain")
    trained = {id(p) for p in run.parameters()}
    assert not trained & {id(p) for p in run.model.encoder.parameters()}
    assert trained == {id(p) for p in run.model.heads.parameters()}
    everything = built(tiny_model, course_data, tmp_path / "finetune")
    assert len(everything.parameters()) == len(list(everything.model.parameters()))


def test_smart_flags_reach_its_terms(tiny_model, course_data, tmp_path):
    assert built(tiny_model, course_data, tmp_path).smart is None
    run = built(tiny_model, course_data, tmp_path, "--smart", "--bregman-weight", "0", "--smart-epsilon", "0.01")
    assert run.smart.average is None and run.smart.config.smart_epsilon == 0.01
