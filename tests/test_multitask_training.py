"""multitask_classifier.py end to end on a tiny random encoder and tiny course-format files."""
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file

import multitask_classifier
from common import cli
from common.errors import CheckpointError
from data.readers import read_quora, read_sentiment, read_sts
from models import from_pretrained
from models.checkpoint import load_heads
from training import multitask

from tests.conftest import sentence

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    folder, rng = tmp_path_factory.mktemp("data"), random.Random(0)
    files = {"ids-sst": ("sentence", "sentiment", lambda: rng.randint(0, 4)),
             "quora": ("sentence1\tsentence2", "is_duplicate", lambda: float(rng.randint(0, 1))),
             "sts": ("sentence1\tsentence2", "similarity", lambda: round(rng.uniform(0, 5), 1))}
    for stem, (columns, label, draw) in files.items():
        for split, rows in (("train", 40), ("dev", 12), ("test-student", 10)):
            lines = ["\tid\t" + columns + ("" if split == "test-student" else f"\t{label}")]
            for i in range(rows):
                texts = "\t".join(sentence(rng) for _ in columns.split("\t"))
                lines.append(f"{i}\t{stem}-{split}-{i}\t{texts}" + ("" if split == "test-student" else f"\t{draw()}"))
            (folder / f"{stem}-{split}.csv").write_text("\n".join(lines) + "\n")
    return folder


def args(tiny_model, tiny_data, out: Path, *extra):
    return ["--model", str(tiny_model), "--data-dir", str(tiny_data), "--output-dir", str(out / "run"),
            "--predictions-dir", str(out / "predictions"), "--batch-size", "8", "--epochs", "2", "--lr", "1e-3",
            "--device", "cpu", *extra]


def weights(folder: Path) -> dict[str, torch.Tensor]:
    model = multitask.MultitaskModel(from_pretrained(folder))
    load_heads(model, folder)
    return model.state_dict()


@pytest.mark.parametrize("pair_encoding", ["bi", "para=cross,sts=bi"])
def test_run_writes_checkpoints_metrics_and_leaderboard_files(tiny_model, tiny_data, tmp_path, pair_encoding):
    metrics = multitask_classifier.main(args(tiny_model, tiny_data, tmp_path, "--schedule", "mtdnn",
                                             "--pair-encoding", pair_encoding))
    assert set(metrics) >= {"sst", "para", "sts", "overall", "mean"}
    run = tmp_path / "run"
    assert (run / "best" / "model.safetensors").exists() and (run / "last" / "training_state.pt").exists()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [1, 2]  # one evaluation per epoch, numbered from 1
    # The best folder is a plain Hugging Face checkpoint: transformers loads its encoder as is.
    transformers.BertModel.from_pretrained(run / "best")
    readers = {"sst": lambda p, **k: read_sentiment(p, 5, **k), "para": read_quora, "sts": read_sts}
    for task, stem in (("sst", "ids-sst"), ("para", "quora"), ("sts", "sts")):
        for split, source in (("dev", f"{stem}-dev.csv"), ("test", f"{stem}-test-student.csv")):
            records, _ = readers[task](tiny_data / source, labeled=split == "dev")
            lines = (tmp_path / "predictions" / f"{task}-{split}-output.csv").read_text().splitlines()
            assert [line.split(",")[0].strip() for line in lines[1:]] == [r.id for r in records]


@pytest.mark.parametrize("schedule", ["avg", "pcgrad"])
def test_resumed_run_ends_with_the_same_weights(tiny_model, tiny_data, tmp_path, monkeypatch, schedule):
    # Uninterrupted run.
    multitask_classifier.main(args(tiny_model, tiny_data, tmp_path / "full", "--schedule", schedule,
                                   "--eval-every", "2"))
    # The same run, killed in its second epoch after the checkpoint of step 6, then resumed.
    original_step = multitask.MultitaskTrainer.train_step

    def dies_at_step_7(self, *a):
        if self.engine.step == 6:
            raise KeyboardInterrupt
        return original_step(self, *a)

    monkeypatch.setattr(multitask.MultitaskTrainer, "train_step", dies_at_step_7)
    interrupted = args(tiny_model, tiny_data, tmp_path / "resumed", "--schedule", schedule, "--eval-every", "2")
    with pytest.raises(KeyboardInterrupt):
        multitask_classifier.main(interrupted)
    steps_after_resume = []

    def counted_step(self, *a):
        steps_after_resume.append(self.engine.step)
        return original_step(self, *a)

    monkeypatch.setattr(multitask.MultitaskTrainer, "train_step", counted_step)
    multitask_classifier.main(interrupted + ["--resume"])
    assert steps_after_resume[0] == 6, "the resumed run starts after the last checkpoint, not from scratch"

    full, resumed = weights(tmp_path / "full/run/last"), weights(tmp_path / "resumed/run/last")
    assert full.keys() == resumed.keys()
    for name in full:
        assert torch.allclose(full[name], resumed[name], atol=1e-6), name
    # The best checkpoint too: the resumed run knows the best score of the evaluations before the kill.
    best = [json.loads((tmp_path / run / "run/best/metrics.json").read_text())["step"] for run in ("full", "resumed")]
    assert best[0] == best[1]


def test_resume_refuses_changed_flags(tiny_model, tiny_data, tmp_path):
    multitask_classifier.main(args(tiny_model, tiny_data, tmp_path, "--epochs", "1"))
    with pytest.raises(Exception, match="flags differ.*batch_size"):
        multitask_classifier.main(args(tiny_model, tiny_data, tmp_path, "--epochs", "1", "--resume",
                                       "--batch-size", "4"))


def test_resume_takes_flags_newer_than_the_run_as_their_defaults(tiny_model, tiny_data, tmp_path):
    multitask_classifier.main(args(tiny_model, tiny_data, tmp_path, "--epochs", "1"))
    saved = tmp_path / "run" / "last" / "run_config.json"
    config = json.loads(saved.read_text())
    del config["loss_weights"], config["layer_lr_decay"]  # as written before these flags existed
    saved.write_text(json.dumps(config))
    multitask_classifier.main(args(tiny_model, tiny_data, tmp_path, "--epochs", "1", "--resume"))
    with pytest.raises(Exception, match="flags differ.*layer_lr_decay"):
        multitask_classifier.main(args(tiny_model, tiny_data, tmp_path, "--epochs", "1", "--resume",
                                       "--layer-lr-decay", "0.5"))


def test_init_refuses_heads_trained_under_other_head_flags(tiny_model, tiny_data, tmp_path):
    multitask_classifier.main(args(tiny_model, tiny_data, tmp_path / "plain", "--epochs", "1", "--pair-mlp", "plain"))
    init = ["--init", str(tmp_path / "plain/run/best"), "--epochs", "1"]
    # Same tensors, other meaning: these would load without the check.
    with pytest.raises(CheckpointError, match="--pair-mlp plain"):
        multitask_classifier.main(args(tiny_model, tiny_data, tmp_path / "residual", *init))
    with pytest.raises(CheckpointError, match="--pooling mean"):
        multitask_classifier.main(args(tiny_model, tiny_data, tmp_path / "cls", *init, "--pair-mlp", "plain",
                                       "--pooling", "cls"))
    with pytest.raises(CheckpointError, match="--no-common-layer"):
        multitask_classifier.main(args(tiny_model, tiny_data, tmp_path / "cl", *init, "--pair-mlp", "plain",
                                       "--common-layer"))
    # The same encodings spelled another way are the same flags.
    multitask_classifier.main(args(tiny_model, tiny_data, tmp_path / "again", *init, "--pair-mlp", "plain",
                                   "--pair-encoding", "para=bi"))


def test_init_from_an_encoder_alone_still_sets_the_cosine_floor(tiny_model, tiny_data, tmp_path):
    # A contrastive checkpoint has no heads, so M must be measured as for --model, not left at -1.
    def floor(*start):
        config = cli.parse_config(multitask.MultitaskConfig, "", args(tiny_model, tiny_data, tmp_path, *start,
                                                                      "--sts-target", "cosine-range"))
        return multitask.MultitaskTrainer(config).model.heads["sts"].cosine_floor.item()

    from_model = floor()
    assert from_model > -1
    assert floor("--init", str(tiny_model)) == pytest.approx(from_model)


def run_cli(*argv, env_extra=None, cwd=ROOT):
    import os
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "multitask_classifier.py", *argv], cwd=cwd, capture_output=True,
                          text=True, env=env, timeout=300)


def test_offline_hub_model_is_a_clear_error_not_a_traceback(tmp_path):
    result = run_cli("--model", "bert-base-uncased", "--output-dir", str(tmp_path),
                     env_extra={"HF_HUB_CACHE": str(tmp_path / "empty-cache")})
    assert result.returncode == 2
    assert "error: could not get 'bert-base-uncased' from the Hugging Face hub" in result.stderr
    assert "Traceback" not in result.stderr


def test_cosine_range_without_low_scored_training_pairs_is_a_clear_error(tiny_model, tiny_data, tmp_path):
    result = run_cli(*args(tiny_model, tiny_data, tmp_path, "--sts-target", "cosine-range",
                           "--max-train-examples", "1"))
    assert result.returncode == 2 and "needs STS training pairs scored <= 0.25 and the 1 used have none" in result.stderr
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


def test_weighted_losses_weigh_each_task_and_their_mean_is_the_step_loss():
    losses = {"sst": torch.tensor(2.0), "para": torch.tensor(4.0)}
    assert [l.item() for l in multitask.weighted_losses(losses, {})] == [2.0, 4.0]
    assert sum(multitask.weighted_losses(losses, {})).item() / 2 == 3.0
    assert sum(multitask.weighted_losses(losses, {"sst": 3.0})).item() / 2 == (3 * 2 + 4) / 2


def test_a_zero_loss_weight_leaves_its_head_untouched(tiny_model, tiny_data, tmp_path):
    # With no weight decay, a task weighted 0 gives its head zero gradients and AdamW moves nothing, while the other
    # task's head trains. (All trained tasks weighted 0 train nothing: refused, see tests/test_bad_inputs.py.)
    argv = args(tiny_model, tiny_data, tmp_path, "--tasks", "sst,sts", "--epochs", "1", "--weight-decay", "0",
                "--loss-weights", "sts=0")
    start = multitask.MultitaskTrainer(cli.parse_config(multitask.MultitaskConfig, "", argv)).model.state_dict()
    multitask_classifier.main(argv)
    heads = load_file(tmp_path / "run" / "last" / "heads.safetensors")
    assert all(torch.equal(heads[name], start[name]) for name in heads if name.startswith("heads.sts."))
    assert not all(torch.equal(heads[name], start[name]) for name in heads if name.startswith("heads.sst."))


def test_layer_lr_decay_gives_lower_layers_smaller_rates(tiny_model, tiny_data, tmp_path):
    config = multitask.MultitaskConfig(model=str(tiny_model), data_dir=str(tiny_data), output_dir=str(tmp_path),
                                       device="cpu", lr=1e-3, head_lr=1e-2, layer_lr_decay=0.5)
    trainer = multitask.MultitaskTrainer(config)
    rate = {id(p): (group["lr"], group["weight_decay"]) for group in trainer.engine.optimizer.param_groups
            for p in group["params"]}
    expected = {"encoder.embeddings.word_embeddings.weight": 1e-3 * 0.5 ** 2,  # two layers below the top
                "encoder.encoder.layer.0.attention.self.query.weight": 1e-3 * 0.5,
                "encoder.encoder.layer.1.output.dense.weight": 1e-3,
                "encoder.pooler.dense.weight": 1e-3,
                "heads.sst.mlp.first.1.weight": 1e-2}
    parameters = dict(trainer.model.named_parameters())
    for name, lr in expected.items():
        assert rate[id(parameters[name])] == pytest.approx((lr, config.weight_decay)), name
    assert rate[id(parameters["encoder.encoder.layer.0.output.LayerNorm.bias"])] == pytest.approx((1e-3 * 0.5, 0.0))
    assert len(rate) == sum(p.requires_grad for p in parameters.values())


@pytest.mark.parametrize("schedule", ["mtdnn", "rr-epoch"])
def test_one_task_trains_with_the_default_task_order(tiny_model, tiny_data, tmp_path, schedule):
    metrics = multitask_classifier.main(args(tiny_model, tiny_data, tmp_path, "--tasks", "sst", "--epochs", "1",
                                             "--schedule", schedule))
    assert "sst" in metrics and "para" not in metrics and "sts" not in metrics


def test_task_order_must_match_the_trained_tasks(tmp_path):
    result = run_cli("--tasks", "sst,sts", "--task-order", "sst,para,sts", "--output-dir", str(tmp_path))
    assert result.returncode == 2 and "must name each task of --tasks 'sst,sts'" in result.stderr
    assert "Traceback" not in result.stderr
