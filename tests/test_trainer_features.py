"""The trainer's features both commands share: --patience, --metric-for-best, --max-steps, the "new best" line,
--config FILE (YAML, run_config.json), TensorBoard tags and hparams, the summary at the end."""
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import multitask_classifier
import pretrain_contrastive
from minbert.common import distributed
from minbert.common.errors import UsageError
from minbert.common.files import read_json
from tests.conftest import assert_same_weights, checkpoint_weights, multitask_argv
from minbert.training import multitask
from minbert.engine.config import TrainingConfig
from minbert.engine.engine import Engine
from minbert.engine.run import Run

pytestmark = pytest.mark.usefixtures("one_thread")


class ScriptedRun(Run):
    """Two steps an epoch, ten epochs; each evaluation's dev score comes from `scores`, in turn."""
    score_name = "x"

    def __init__(self, scores, patience=0):
        self.lr, self.scores, self.evaluated, self.saved, self.patience = 0.1, list(scores), 0, [], patience
        self.weight = torch.nn.Parameter(torch.ones(1))

    def parameters(self):
        return [self.weight]

    def plan(self):
        return [[0, 1] for _ in range(10)]

    def step(self, item, share):
        loss = (self.weight ** 2).sum()
        self.engine.backward(loss)
        return {"loss": loss.detach()}, 1

    def evaluate(self):
        self.evaluated += 1
        return {"x": self.scores[self.evaluated - 1], "y": -self.scores[self.evaluated - 1]}

    def score(self, metrics):
        return metrics["x"]

    def save(self, folder, record, best):
        (folder / "step").write_text(str(record["step"]))
        if best:
            self.saved.append(record["step"])


def fit(tmp_path, scores, patience=0, **flags):
    engine = Engine(TrainingConfig(output_dir=str(tmp_path / "run"), device="cpu", **flags))
    run = ScriptedRun(scores, patience)
    run.engine = engine
    engine.fit(run)
    return engine, run


def test_patience_stops_after_that_many_evaluations_without_a_better_score(tmp_path, caplog):
    # Best at evaluations 1, 2 and 4; with --patience 2, evaluations 5 (lower) and 6 (equal: not better) are not
    # better: the run stops after the 6th (step 12), although the 8th would have been better.
    scores = [0.5, 0.6, 0.55, 0.7, 0.69, 0.7, 0.1, 0.9, 0.95, 0.99]
    with caplog.at_level(logging.INFO):
        engine, run = fit(tmp_path, scores, patience=2)
    assert run.evaluated == 6 and engine.state.step == 12
    assert run.saved == [2, 4, 8]  # best/ replaced at evaluations 1, 2 and 4 (2 steps an epoch)
    assert (tmp_path / "run/best/step").read_text() == "8"
    assert f"new best: x 0.7000 at step 8, saved to {tmp_path / 'run' / 'best'}" in caplog.text
    assert "early stop at step 12" in caplog.text
    # --patience 0: every evaluation runs.
    engine, run = fit(tmp_path / "off", scores, patience=0)
    assert run.evaluated == 10 and run.saved == [2, 4, 8, 16, 18, 20]


def test_resume_of_a_run_stopped_early_says_it_finished_and_trains_no_more(tmp_path, capsys):
    scores = [0.5, 0.6, 0.55, 0.7, 0.69, 0.7, 0.1, 0.9, 0.95, 0.99]  # stops after evaluation 6 (step 12)
    with Engine(TrainingConfig(output_dir=str(tmp_path / "run"), device="cpu")) as engine:
        run = ScriptedRun(scores, patience=2)
        run.engine = engine
        engine.fit(run)
    log = (tmp_path / "run/metrics.jsonl").read_bytes()
    with Engine(TrainingConfig(output_dir=str(tmp_path / "run"), device="cpu", resume=True)) as engine:
        assert engine.finished == {"step": 12, "stopped_early": True}
        assert engine.resumed.state is None  # what a command fits: nothing
    assert capsys.readouterr().out.strip() == (f"--resume: the run in {tmp_path / 'run'} finished at step 12 "
                                               f"(stopped early by --patience); nothing to resume")
    assert (tmp_path / "run/metrics.jsonl").read_bytes() == log


class KilledAtStep(ScriptedRun):
    """A ScriptedRun whose process dies before step `at` (as a worker killed by torchrun's agent)."""

    def __init__(self, scores, at):
        super().__init__(scores)
        self.at = at

    def step(self, item, share):
        if self.engine.state.step + 1 == self.at:
            raise KeyboardInterrupt
        return super().step(item, share)


def attempt(tmp_path, monkeypatch, job: str, restart: int, run: ScriptedRun) -> Engine:
    """One attempt of a torchrun job (its environment as torchrun sets it, for one process): describe_run records
    the job in the run config, as the commands do, then the run trains."""
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", job)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", str(restart))
    with Engine(TrainingConfig(output_dir=str(tmp_path / "run"), device="cpu", save_every=2)) as engine:
        engine.describe_run([])
        run.engine = engine
        engine.fit(run)
    return engine


def test_a_restarted_torchrun_attempt_resumes_its_jobs_run_and_leaves_another_commands_alone(tmp_path, monkeypatch,
                                                                                            caplog):
    scores = [0.5] * 10
    with pytest.raises(KeyboardInterrupt):  # killed before step 5: last/ holds step 4
        attempt(tmp_path, monkeypatch, "job-a", 0, KilledAtStep(scores, 5))
    # Another job's restart into the folder: a run it did not begin, refused as any command without --resume.
    with pytest.raises(UsageError, match="already holds files"):
        attempt(tmp_path, monkeypatch, "job-b", 1, ScriptedRun(scores))
    # The job's own restart goes on from step 4, said in the log, to the uninterrupted run's end.
    with caplog.at_level(logging.INFO):
        engine = attempt(tmp_path, monkeypatch, "job-a", 1, ScriptedRun(scores))
    assert "torchrun restart 1: resuming the run in" in caplog.text and "resuming at step 4 of 20" in caplog.text
    assert engine.state.step == 20
    provenance = read_json(tmp_path / "run/run_config.json")["provenance"]
    assert provenance["torchrun_job"] == provenance["resumed"][0]["torchrun_job"] == distributed.job()
    # Killed after best/ and the metrics log, before last/ (removed here): the restart starts the run again over
    # what the attempt wrote.
    with pytest.raises(KeyboardInterrupt):
        attempt(tmp_path / "early", monkeypatch, "job-c", 0, KilledAtStep(scores, 3))
    shutil.rmtree(tmp_path / "early/run/last")
    with caplog.at_level(logging.INFO):
        engine = attempt(tmp_path / "early", monkeypatch, "job-c", 1, ScriptedRun(scores))
    assert "saved no checkpoint before its processes stopped; starting it again" in caplog.text
    log = [json.loads(line) for line in (tmp_path / "early/run/metrics.jsonl").read_text().splitlines()]
    assert engine.state.step == 20 and [line["step"] for line in log if line["event"] == "eval"] == list(range(2, 21, 2))


def test_resume_of_a_finished_run_exits_at_once_and_changes_nothing(tiny_model, course_data, tmp_path, capsys):
    args = tiny_args(tiny_model, course_data, tmp_path)
    multitask_classifier.main(args)
    run, predictions = tmp_path / "run", tmp_path / "predictions"
    before = {path: path.read_bytes() for folder in (run, predictions) for path in folder.rglob("*") if path.is_file()}
    capsys.readouterr()
    assert multitask_classifier.main(args + ["--resume"]) == {}
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"]  # the epoch's evaluation
    assert f"finished at step {last}; nothing to resume" in capsys.readouterr().out
    after = {path: path.read_bytes() for folder in (run, predictions) for path in folder.rglob("*") if path.is_file()}
    assert after == before


def test_max_steps_of_the_engine_stops_there_and_the_schedule_spans_those_steps(tmp_path):
    engine, run = fit(tmp_path, [0.1] * 10, max_steps=5, warmup=0.0)
    assert engine.state.step == 5 and engine.state.total_steps == 5
    assert run.evaluated == 3  # epochs end at steps 2 and 4, and the last step ends the run as an epoch would
    train = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    evals = [line["step"] for line in train if line["event"] == "eval"]
    assert evals == [2, 4, 5]


def tiny_args(model, data, out, *extra):
    return multitask_argv(model, data, out, "--epochs", "1", "--head-dropout", "0", *extra)


def test_max_steps_stops_a_multitask_run_after_n_steps(tiny_model, course_data, tmp_path):
    multitask_classifier.main(tiny_args(tiny_model, course_data, tmp_path, "--max-steps", "3", "--log-every", "1",
                                        "--warmup", "0"))
    lines = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines if line["event"] == "train"] == [1, 2, 3]
    assert [line["step"] for line in lines if line["event"] == "eval"] == [3]
    train = [line for line in lines if line["event"] == "train"]
    assert train[-1]["lr"] == pytest.approx(1e-3 / 3)  # the decay spans the 3 steps: the last at 1/3 of the peak
    assert (tmp_path / "run/best/metrics.json").exists()


ROOT = Path(__file__).resolve().parents[1]
ABSURD_EPOCHS = "99999999999999999999"  # 10^20: planned up front, no run would ever reach its first step


@pytest.mark.parametrize("script", ["multitask_classifier.py", "pretrain_contrastive.py"])
def test_an_absurd_epoch_count_costs_nothing_under_max_steps(tiny_model, contrastive_data, tmp_path, script):
    """Only the epochs --max-steps reaches are planned: the run takes its 2 steps and ends. Run apart, with a time
    limit: planned up front, 10^20 epochs never end."""
    limits = ["--epochs", ABSURD_EPOCHS, "--max-steps", "2", "--log-every", "1"]
    flags = (tiny_args(tiny_model, contrastive_data, tmp_path, *limits) if script == "multitask_classifier.py" else
             ["--model", str(tiny_model), "--data-dir", str(contrastive_data), "--output-dir", str(tmp_path / "run"),
              "--method", "simcse", "--data", "sts", "--device", "cpu", "--batch-size", "4", *limits])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, script, *flags], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines if line["event"] == "train"] == [1, 2]


def test_metric_for_best_picks_best_by_that_metric(tiny_model, course_data, tmp_path, capsys):
    multitask_classifier.main(tiny_args(tiny_model, course_data, tmp_path, "--epochs", "3", "--metric-for-best", "sts",
                                        "--lr", "3e-3"))
    evals = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()
             if json.loads(line)["event"] == "eval"]
    best = max(evals, key=lambda record: record["dev"]["sts"])  # the first of equal ones
    assert read_json(tmp_path / "run/best/metrics.json")["step"] == best["step"]
    assert f"best/ picked by sts (pearson): {best['dev']['sts']:.4f}" in capsys.readouterr().out


def test_metric_for_best_must_be_one_the_tasks_give(tiny_model, course_data, tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        multitask_classifier.main(tiny_args(tiny_model, course_data, tmp_path, "--tasks", "sst,para",
                                            "--metric-for-best", "sts"))
    assert stopped.value.code == 2 and "--metric-for-best sts" in capsys.readouterr().err


# ---- --config FILE ----

def yaml_of(flags: list[str]) -> str:
    """'--lr 1e-3 --quiet' as YAML lines (a flag without a value: true)."""
    lines, i = [], 0
    while i < len(flags):
        name = flags[i].removeprefix("--")
        if i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            lines.append(f"{name}: {flags[i + 1]}")
            i += 2
        else:
            lines.append(f"{name}: true")
            i += 1
    return "\n".join(lines) + "\n"


def test_a_run_resumed_from_a_yaml_config_equals_the_same_flags(tiny_model, course_data, tmp_path, monkeypatch):
    flags = tiny_args(tiny_model, course_data, tmp_path / "yaml", "--epochs", "2", "--save-every", "2",
                      "--task-weights", "para=0.8", "--lr", "5e-5")
    config = tmp_path / "run.yaml"
    config.write_text(yaml_of(flags))
    multitask_classifier.main(tiny_args(tiny_model, course_data, tmp_path / "flags", "--epochs", "2",
                                        "--task-weights", "para=0.8", "--lr", "5e-5"))
    step = multitask.MultitaskRun.step

    def dies(self, item, share):
        if self.engine.state.step == 3:  # the checkpoint of step 2 is on disk
            raise RuntimeError("killed")
        return step(self, item, share)

    monkeypatch.setattr(multitask.MultitaskRun, "step", dies)
    with pytest.raises(RuntimeError, match="killed"):
        multitask_classifier.main(["--config", str(config)])
    monkeypatch.setattr(multitask.MultitaskRun, "step", step)
    multitask_classifier.main(["--config", str(config), "--resume"])
    saved = read_json(tmp_path / "yaml/run/run_config.json")
    assert saved["lr"] == 5e-5 and saved["task_weights"] == "para=0.8" and saved["epochs"] == 2
    for folder in ("best", "last"):
        assert_same_weights(checkpoint_weights(tmp_path / "yaml/run" / folder),
                            checkpoint_weights(tmp_path / "flags/run" / folder))


def test_command_line_flags_win_over_the_config_file_and_the_recipe_parses(tmp_path):
    from minbert.common.cli import parse_config
    from minbert.training.multitask_config import MultitaskConfig

    recipe = Path(__file__).resolve().parents[1] / "minbert/recipes/mtdnn-minilm.yaml"
    config = parse_config(MultitaskConfig, "", ["--config", str(recipe), "--seed", "7", "--epochs=1"])
    assert (config.model, config.schedule, config.option, config.pair_encoding, config.sts_target,
            config.task_weights, config.lr) == ("all-MiniLM-L6-v2", "mtdnn", "finetune", "para=cross,sts=bi",
                                                "cosine-range", "para=0.8", 5e-5)
    assert (config.seed, config.epochs) == (7, 1)
    underscores = tmp_path / "u.yaml"
    underscores.write_text("max_steps: 4\n--head-lr: 0.01\nquiet: true\n")
    config = parse_config(MultitaskConfig, "", ["--config", str(underscores), "--no-quiet"])
    assert (config.max_steps, config.head_lr, config.quiet) == (4, 0.01, False)


def test_the_base_recipe_is_the_full_recipe_sized_for_a_base_model_on_a_cpu():
    """minbert/recipes/mtdnn-mpnet.yaml says so in its comment: only the model, the epochs, the sample and its
    folders differ from mtdnn-minilm.yaml."""
    from dataclasses import fields

    from minbert.common.cli import parse_config
    from minbert.training.multitask_config import MultitaskConfig

    full, base = (parse_config(MultitaskConfig, "", ["--config", name]) for name in ("mtdnn-minilm", "mtdnn-mpnet"))
    differ = {field.name for field in fields(MultitaskConfig) if getattr(full, field.name) != getattr(base, field.name)}
    differ.discard("command")  # the command line that parsed it, which names its file
    assert differ == {"model", "epochs", "max_train_examples", "output_dir", "predictions_dir"}
    assert (base.model, base.epochs, base.max_train_examples) == ("all-mpnet-base-v2", 1, 16384)


def test_the_gpu_base_recipe_is_the_full_recipe_with_the_base_model_in_bf16():
    """minbert/recipes/mtdnn-mpnet-gpu.yaml says so in its comment: against mtdnn-minilm.yaml only the model, the
    precision and the folders differ; against the CPU's base recipe, the epochs, the sample (none), the precision
    and the folders."""
    from dataclasses import fields

    from minbert.common.cli import parse_config
    from minbert.training.multitask_config import MultitaskConfig

    full, cpu, gpu = (parse_config(MultitaskConfig, "", ["--config", name])
                      for name in ("mtdnn-minilm", "mtdnn-mpnet", "mtdnn-mpnet-gpu"))

    def differ(a, b):
        return {field.name for field in fields(MultitaskConfig)
                if getattr(a, field.name) != getattr(b, field.name)} - {"command"}  # the file named
    folders = {"output_dir", "predictions_dir"}
    assert differ(full, gpu) == {"model", "precision", *folders}
    assert differ(cpu, gpu) == {"epochs", "max_train_examples", "precision", *folders}
    assert (gpu.model, gpu.epochs, gpu.max_train_examples, gpu.precision) == ("all-mpnet-base-v2", 3, 0, "bf16")
    assert (full.precision, gpu.output_dir.endswith("runs/mtdnn-mpnet-gpu")) == ("auto", True)


@pytest.mark.parametrize("text, message", [("lrr: 1\n", "unknown flag 'lrr'"), ("epochs: many\n", "epochs"),
                                           ("schedule: nope\n", "schedule"), ("- a\n", "not a mapping")])
def test_a_bad_config_file_is_one_line_naming_the_file_and_the_key(tmp_path, capsys, text, message):
    from minbert.common.cli import parse_config
    from minbert.training.multitask_config import MultitaskConfig

    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(SystemExit) as stopped:
        parse_config(MultitaskConfig, "", ["--config", str(bad)], program=["python", "multitask_classifier.py"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and str(bad) in err and message in err and len(err.strip().splitlines()) == 1


def test_run_config_json_is_a_config_file(tiny_model, course_data, tmp_path):
    multitask_classifier.main(tiny_args(tiny_model, course_data, tmp_path / "a", "--max-steps", "2", "--lr", "5e-4"))
    multitask_classifier.main(["--config", str(tmp_path / "a/run/run_config.json"), "--output-dir",
                               str(tmp_path / "b/run"), "--predictions-dir", str(tmp_path / "b/predictions")])
    a, b = read_json(tmp_path / "a/run/run_config.json"), read_json(tmp_path / "b/run/run_config.json")
    assert {k: v for k, v in a.items() if k not in ("output_dir", "predictions_dir", "provenance")} == \
           {k: v for k, v in b.items() if k not in ("output_dir", "predictions_dir", "provenance")}
    assert_same_weights(checkpoint_weights(tmp_path / "a/run/best"), checkpoint_weights(tmp_path / "b/run/best"))
    card = (tmp_path / "b/run/best/README.md").read_text()  # the command with the file's values, not the file
    assert "--config" not in card and " --max-steps 2 " in card and " --lr 0.0005 " in card


# ---- TensorBoard and the summary ----

def tensorboard_tags(folder: Path) -> tuple[set, set]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return set(events.Tags()["scalars"]), set(events.Tags()["tensors"])


def test_both_trainers_write_the_same_tensorboard_tags_and_the_flags(tiny_model, course_data, contrastive_data,
                                                                     tmp_path, capsys):
    multitask_classifier.main(tiny_args(tiny_model, course_data, tmp_path, "--log-every", "2",
                                        "--tensorboard", str(tmp_path / "tb-m")))
    result = pretrain_contrastive.main(["--model", str(tiny_model), "--method", "simcse", "--data", "sts",
                                        "--data-dir", str(contrastive_data), "--batch-size", "8", "--epochs", "1",
                                        "--log-every", "1", "--device", "cpu", "--output-dir", str(tmp_path / "c"),
                                        "--quiet", "--tensorboard", str(tmp_path / "tb-c")])
    out = capsys.readouterr().out
    assert "mean_loss" in out and str(tmp_path / "c" / "metrics.jsonl") in out  # the summary, under --quiet
    # mean_loss is what it says: the mean of the stage's step losses (a line a step in metrics.jsonl here).
    steps = [json.loads(line)["loss"]["loss"] for line in (tmp_path / "c" / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["event"] == "train"]
    assert len(steps) > 1 and result["stages"]["train"]["mean_loss"] == pytest.approx(sum(steps) / len(steps))
    multi, multi_text = tensorboard_tags(tmp_path / "tb-m")
    contrastive, contrastive_text = tensorboard_tags(tmp_path / "tb-c")
    assert {"train/loss/sst", "train/loss/para", "train/loss/sts", "train/lr", "train/head_lr", "train/examples_per_s",
            "dev/sst", "dev/overall", "train/epoch_loss/sst"} <= multi
    assert {"train/loss/loss", "train/lr", "train/examples_per_s"} <= contrastive
    # One naming scheme: every tag of either trainer is train/... or dev/..., the ones they share the same.
    assert all(tag.split("/")[0] in ("train", "dev") for tag in multi | contrastive)
    assert {"train/lr", "train/examples_per_s"} <= multi & contrastive
    for text in (multi_text, contrastive_text):
        assert "flags/text_summary" in text
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb-m"))
    events.Reload()
    flags = events.Tensors("flags/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "--lr 0.001" in flags and "--metric-for-best overall" in flags
    assert events.PluginTagToContent("hparams")  # the flags as hparams too
    events = EventAccumulator(str(tmp_path / "tb-c"))
    events.Reload()
    flags = events.Tensors("flags/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "--lr 3e-05" in flags  # not None: the lr SimCSE chose for its unlabeled data
