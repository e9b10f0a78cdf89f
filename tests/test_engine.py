"""The training engine both commands share: accumulation, resuming a killed run, the metrics log, TensorBoard."""
import gc
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import multitask_classifier
from minbert.common.errors import UsageError
from tests.conftest import assert_same_weights, checkpoint_weights, multitask_argv
from minbert.engine.lr_schedule import linear_warmup_decay
from minbert.models import AdamW
from minbert.training.multitask import MultitaskRun

ROOT = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("one_thread")


def multitask_args(model, data, out: Path, *extra) -> list[str]:
    return multitask_argv(model, data, out, "--epochs", "1", "--head-dropout", "0", *extra)


@pytest.fixture(scope="module")
def one_row_last(course_data, tmp_path_factory):
    """The course files with 33 STS training pairs: STS's last batch of 16 is one pair, so that one part of an
    accumulated step has SST and Quora rows but none of STS."""
    folder = Path(shutil.copytree(course_data, tmp_path_factory.mktemp("one-row-last") / "data"))
    lines = (folder / "sts-train.csv").read_text().splitlines()
    (folder / "sts-train.csv").write_text("\n".join(lines[:1 + 33]) + "\n")
    return folder


@pytest.mark.parametrize("schedule, data", [("mtdnn", "course_data"), ("avg", "course_data"),
                                            ("avg", "one_row_last")])
def test_grad_accum_2_with_batch_8_trains_like_batch_16(tiny_model_without_dropout, tmp_path, schedule, data,
                                                       request):
    """40 examples a task: batches of 16, 16 and 8; the last one's halves (4 + 4) still weigh as one batch. With 33
    STS pairs, the last step's second half has no STS row: STS counts in that step's mean over tasks still."""
    model, course_data = tiny_model_without_dropout, request.getfixturevalue(data)
    multitask_classifier.main(multitask_args(model, course_data, tmp_path / "accum", "--schedule", schedule,
                                             "--batch-size", "8", "--grad-accum", "2"))
    multitask_classifier.main(multitask_args(model, course_data, tmp_path / "big", "--schedule", schedule,
                                             "--batch-size", "16"))
    big = checkpoint_weights(tmp_path / "big/run/last")
    assert_same_weights(checkpoint_weights(tmp_path / "accum/run/last"), big, atol=1e-5, rtol=1e-4)
    # And not merely because nothing moved: batch 8 without accumulation takes other steps.
    multitask_classifier.main(multitask_args(model, course_data, tmp_path / "small", "--schedule", schedule,
                                             "--batch-size", "8"))
    small = checkpoint_weights(tmp_path / "small/run/last")
    assert not torch.allclose(small["encoder.layer.0.attention.self.query.weight"],
                              big["encoder.layer.0.attention.self.query.weight"], atol=1e-5)


def test_metrics_log_has_per_step_losses_and_the_learning_rate(tiny_model, course_data, tmp_path):
    multitask_classifier.main(multitask_args(tiny_model, course_data, tmp_path, "--batch-size", "8", "--epochs", "2",
                                             "--log-every", "3", "--warmup", "0.2", "--task-weights", "para=1"))
    lines = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    train = [line for line in lines if line["event"] == "train"]
    evals = [line for line in lines if line["event"] == "eval"]
    total = 2 * 3 * 5  # 2 epochs of mtdnn over 3 tasks of 5 batches
    assert [line["step"] for line in train] == list(range(3, total + 1, 3))
    assert [line["step"] for line in evals] == [15, 30]
    for line in train:
        assert set(line["loss"]) <= {"sst", "para", "sts"} and all(v > 0 for v in line["loss"].values())
        # The rate of the step just taken (the step before line["step"] counts from 0).
        assert line["lr"] == pytest.approx(1e-3 * linear_warmup_decay(line["step"] - 1, total, 0.2))
    assert train[0]["lr"] == pytest.approx(1e-3 * 3 / 6)  # warm-up: 6 steps, the third
    assert train[-1]["lr"] == pytest.approx(1e-3 * 1 / 24)  # decay: the last of 24 steps


def test_the_metrics_log_times_training_evaluation_and_the_finish_apart(tiny_model, course_data, tmp_path):
    """Training, each evaluation and the finish (the test predictions) are timed apart: together no more than the
    run's wall time; training time only grows."""
    multitask_classifier.main(multitask_args(tiny_model, course_data, tmp_path, "--batch-size", "8", "--epochs", "2",
                                             "--log-every", "3", "--eval-every", "7"))
    lines = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    evals = [line for line in lines if line["event"] == "eval"]
    finish = lines[-1]
    assert finish["event"] == "finish" and finish["step"] == evals[-1]["step"] and finish["finish_seconds"] > 0
    assert len(evals) > 2 and all(line["eval_seconds"] > 0 for line in evals)
    trained = [line["train_seconds"] for line in evals]
    assert 0 < trained[0] and trained == sorted(trained)
    # Rounding: "seconds" to 0.1 (off by up to 0.05), the parts to 0.01 (up to 0.005 each).
    slack = lambda parts: 0.05 + 0.005 * parts  # noqa: E731
    assert trained[-1] + sum(line["eval_seconds"] for line in evals) <= evals[-1]["seconds"] + slack(1 + len(evals))
    assert evals[-1]["seconds"] + finish["finish_seconds"] <= finish["seconds"] + 0.05 + slack(1)


def test_tensorboard_events_are_written_and_readable(tiny_model, course_data, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    multitask_classifier.main(multitask_args(tiny_model, course_data, tmp_path, "--batch-size", "8", "--log-every", "5",
                                             "--tensorboard", str(tmp_path / "tb")))
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/lr", "train/examples_per_s", "dev/sst", "dev/para", "dev/sts", "dev/overall"} <= tags
    assert {"train/loss/sst", "train/loss/para", "train/loss/sts"} & tags
    logged = {json.loads(line)["step"] for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()}
    assert {event.step for event in events.Scalars("train/lr")} <= logged


def test_report_to_mlflow_writes_what_mlflows_own_client_reads_back(tiny_model, course_data, tmp_path, monkeypatch):
    """--report-to tensorboard,mlflow, offline: an MLflow tracking store in a local SQLite file (what `mlflow ui`
    reads), read back with MLflow's client: one finished run named after the output folder, the run's flags as
    parameters, and every number of the metrics log at its step; TensorBoard's folder is OUTPUT_DIR/tensorboard."""
    from mlflow import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "tiny")
    multitask_classifier.main(multitask_args(tiny_model, course_data, tmp_path, "--log-every", "5",
                                             "--report-to", "tensorboard,mlflow"))
    client = MlflowClient()
    [run] = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert run.info.run_name == "run" and run.info.status == "FINISHED"
    assert run.data.params["lr"] == "0.001" and run.data.params["schedule"] == "mtdnn"
    lines = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    expected = {}  # name -> [(step, value)] as the metrics log has them
    for line in lines:
        for group, tag in (("loss", "train/loss"), ("dev", "dev")):
            for name, value in line.get(group, {}).items():
                expected.setdefault(f"{tag}/{name}", []).append((line["step"], value))
        if "lr" in line:
            expected.setdefault("train/lr", []).append((line["step"], line["lr"]))
    assert {"dev/overall", "train/loss/sst", "train/lr"} <= set(expected)
    for name, values in expected.items():
        history = client.get_metric_history(run.info.run_id, name)
        assert [(metric.step, metric.value) for metric in history] == values, name
    events = EventAccumulator(str(tmp_path / "run/tensorboard"))
    events.Reload()
    scalars = events.Scalars("dev/overall")  # stored as float32
    assert [event.step for event in scalars] == [step for step, _ in expected["dev/overall"]]
    assert [event.value for event in scalars] == pytest.approx([value for _, value in expected["dev/overall"]],
                                                               rel=2 ** -23)


def test_report_to_names_its_loggers(tiny_model, course_data, tmp_path, capsys):
    from minbert.common import cli

    with pytest.raises(SystemExit) as exit_:
        cli.run(lambda: multitask_classifier.main(multitask_args(tiny_model, course_data, tmp_path,
                                                                 "--report-to", "tensorboard,wandb")))
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "error: --report-to tensorboard,wandb: wandb is not one of tensorboard, mlflow"


KILLED_AT_STEP_3 = """
import os, signal, sys
sys.path.insert(0, {root!r})
from minbert.training import contrastive
import pretrain_contrastive
step = contrastive.StageRun.step
def dies(self, item, share):
    if self.pretraining.engine.state.step == 3:  # the checkpoint of step 2 is on disk, step 3 has run
        os.kill(os.getpid(), signal.SIGKILL)
    return step(self, item, share)
contrastive.StageRun.step = dies
pretrain_contrastive.main(sys.argv[1:])
"""


@pytest.mark.parametrize("method", ["simcse", "ct"])
def test_pretraining_killed_after_a_checkpoint_resumes_to_the_same_weights(tiny_model, tmp_path, minilm_dir, method):
    """4 steps of 16 sentences: killed as step 4 begins (step 2's checkpoint on disk, step 3's update not), the
    resumed run takes steps 3 and 4 again and ends on the uninterrupted run's weights (run here, on one thread)."""
    import pretrain_contrastive

    data = tmp_path / "sentences.txt"
    rng = random.Random(0)
    data.write_text("\n".join(" ".join(rng.choice("a cat dog sat on the mat red big".split())
                                       for _ in range(rng.randint(3, 8))) for _ in range(64)) + "\n")
    args = lambda out: ["--model", str(tiny_model), "--method", method, "--data", str(data),  # noqa: E731
                        "--batch-size", "16", "--lr", "1e-3", "--save-every", "2", "--epochs", "1",
                        "--output-dir", str(out), "--device", "cpu"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    pretrain_contrastive.main(args(tmp_path / "full"))
    killer = tmp_path / "killed.py"
    killer.write_text(KILLED_AT_STEP_3.format(root=str(ROOT)))
    died = subprocess.run([sys.executable, str(killer), *args(tmp_path / "resumed")], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert died.returncode == -9  # SIGKILL: as step 4 began
    assert (tmp_path / "resumed/last/training_state.pt").exists()
    resumed = subprocess.run([sys.executable, "pretrain_contrastive.py", *args(tmp_path / "resumed"), "--resume"],
                             cwd=ROOT, env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming at step 2" in resumed.stderr
    for folder in ["model1", "model2"] if method == "ct" else [""]:
        assert_same_weights(checkpoint_weights(tmp_path / "resumed" / folder),
                            checkpoint_weights(tmp_path / "full" / folder))
    assert not (tmp_path / "resumed/last").exists(), "a finished run leaves no resumable checkpoint behind"


def test_contrastive_grad_accum_is_refused_with_the_reason(tiny_model, tmp_path):
    result = subprocess.run([sys.executable, "pretrain_contrastive.py", "--model", str(tiny_model), "--grad-accum",
                             "2", "--output-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2 and "--grad-cache-chunk" in result.stderr


# ---- no silent wrong runs ----

def test_a_diverging_run_stops_at_once_naming_the_step_the_task_and_the_last_good_checkpoint(tiny_model, course_data,
                                                                                            tmp_path, capsys):
    from minbert.common import cli

    args = multitask_args(tiny_model, course_data, tmp_path, "--batch-size", "8", "--epochs", "3", "--lr", "1e8",
                          "--head-lr", "1e8", "--max-grad-norm", "0", "--log-every", "1", "--save-every", "1")
    with pytest.raises(SystemExit) as exit_:
        cli.run(lambda: multitask_classifier.main(args))
    assert exit_.value.code == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert "loss is not finite" in message and f"the last good checkpoint is {tmp_path / 'run' / 'last'}" in message
    step = int(message.split("step ")[1].split(":")[0])
    assert step < 3 * 15, "stopped at once, not at the end of the run"
    state = torch.load(tmp_path / "run/last/training_state.pt", weights_only=True)
    assert state["engine"]["step"] == step - 1  # the checkpoint before the step that diverged


def test_a_run_that_diverges_before_its_first_evaluation_saves_nothing_of_it(tiny_model, course_data, tmp_path,
                                                                            capsys):
    from minbert.common import cli

    # An update of 1e30 makes the second step's loss nan; the epoch's evaluation follows it.
    args = multitask_args(tiny_model, course_data, tmp_path, "--tasks", "sst", "--lr", "1e30", "--batch-size", "20")
    with pytest.raises(SystemExit) as exit_:
        cli.run(lambda: multitask_classifier.main(args))
    assert exit_.value.code == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert message.startswith("error: step 2: the sst loss is not finite (nan); the run stopped; no checkpoint was "
                              "saved")
    assert not (tmp_path / "run/best").exists() and not (tmp_path / "run/last").exists()
    assert not list((tmp_path / "predictions").glob("*")), "no leaderboard file of nan weights"


def test_weights_that_turn_nan_at_an_evaluation_keep_the_last_finite_checkpoint(tiny_model, course_data, tmp_path,
                                                                               monkeypatch, capsys):
    from minbert.common import cli
    from minbert.training.multitask import MultitaskRun

    def poisoned_after_step_3(self):
        if self.engine.state.step == 3:  # the loss of step 3 was finite; its update is not
            next(self.model.encoder.parameters()).data.fill_(float("nan"))

    monkeypatch.setattr(MultitaskRun, "after_update", poisoned_after_step_3)
    args = multitask_args(tiny_model, course_data, tmp_path, "--eval-every", "1")
    with pytest.raises(SystemExit) as exit_:
        cli.run(lambda: multitask_classifier.main(args))
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: step 3: the weights are not finite; the run stopped; the last good checkpoint is "
        f"{tmp_path / 'run' / 'last'} (a lower --lr, or --precision fp32, may help)")
    assert torch.load(tmp_path / "run/last/training_state.pt", weights_only=True)["engine"]["step"] == 2
    for folder in ("best", "last"):
        assert all(tensor.isfinite().all() for tensor in checkpoint_weights(tmp_path / "run" / folder).values())
    # The leaderboard files are a set written when the run ends: none of a run that did not, not even best/'s dev.
    assert not list((tmp_path / "predictions").glob("*-output.csv")), "the run did not end: no leaderboard files"


def test_resume_knows_the_run_whatever_the_spelling_of_its_paths(tiny_model, course_data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    relative = ["--model", str(tiny_model), "--data-dir", str(course_data), "--output-dir", "run", "--predictions-dir",
                "predictions", "--epochs", "1", "--batch-size", "16", "--device", "cpu"]
    multitask_classifier.main(relative)
    absolute = [str(tmp_path / "run") if arg == "run" else arg for arg in relative]
    absolute[absolute.index("--data-dir") + 1] = str(course_data) + "/"
    multitask_classifier.main(absolute + ["--resume"])  # the finished run: nothing left to train, no refusal


def test_leaderboard_files_no_command_recorded_are_never_replaced(tiny_model, course_data, tmp_path):
    """A para-dev-output.csv of the user's (no written-by.json lists it): refused before any training, --overwrite
    or not, the file as it was; moved out, the run writes its own set."""
    users = tmp_path / "predictions" / "para-dev-output.csv"
    users.parent.mkdir()
    users.write_text("id \t Predicted_Is_Paraphrase \n")
    args = multitask_args(tiny_model, course_data, tmp_path, "--tasks", "sst", "--batch-size", "16")
    for overwrite in ([], ["--overwrite"]):
        with pytest.raises(UsageError) as refused:
            multitask_classifier.main(args + overwrite)
        assert str(refused.value) == (
            f"--predictions-dir {tmp_path / 'predictions'} holds leaderboard files that no command recorded writing "
            f"(para-dev-output.csv): they may be yours, and no command replaces them, --overwrite or not; move them "
            f"out of {tmp_path / 'predictions'}, or choose another --predictions-dir")
        assert users.read_text() == "id \t Predicted_Is_Paraphrase \n"
        assert not (tmp_path / "run" / "last").exists(), "refused before any training"
    users.rename(tmp_path / "mine.csv")
    multitask_classifier.main(args)
    assert sorted(path.name for path in (tmp_path / "predictions").iterdir()) == [
        "sst-dev-output.csv", "sst-test-output.csv", "written-by.json"]


KILLED_IN_STAGE_2 = """
import os, signal, sys
sys.path.insert(0, {root!r})
from minbert.training import contrastive
import pretrain_contrastive
step = contrastive.StageRun.step
def dies(self, item, share):
    if self.stage.name == "unsup" and self.pretraining.engine.state.step == 2:  # unsup's step 2 saved
        os.kill(os.getpid(), signal.SIGKILL)
    return step(self, item, share)
contrastive.StageRun.step = dies
pretrain_contrastive.main(sys.argv[1:])
"""


def test_a_two_stage_run_resumed_in_its_second_stage_keeps_the_first_stages_lines_and_summary(tiny_model, tmp_path,
                                                                                              contrastive_data):
    """ConSERT sup-unsup, 3 steps a stage, last/ every 2: killed as unsup's step 3 begins, resumed from unsup's step
    2. Both stages' steps count from 1, so the metrics log's lines name their stage; the resumed run's log and its
    summary (metrics.json, the model card) hold the sup stage's as the uninterrupted run's do."""
    args = lambda out: ["--model", str(tiny_model), "--method", "consert", "--consert-stages", "sup-unsup",  # noqa
                        "--data", "sts", "--data-dir", str(contrastive_data), "--batch-size", "4", "--max-steps", "3",
                        "--save-every", "2", "--log-every", "1", "--output-dir", str(out), "--device", "cpu"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    assert subprocess.run([sys.executable, "pretrain_contrastive.py", *args(tmp_path / "full")], cwd=ROOT,
                          env=env, capture_output=True).returncode == 0
    killer = tmp_path / "killed.py"
    killer.write_text(KILLED_IN_STAGE_2.format(root=str(ROOT)))
    died = subprocess.run([sys.executable, str(killer), *args(tmp_path / "resumed")], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert died.returncode == -9
    resumed = subprocess.run([sys.executable, "pretrain_contrastive.py", *args(tmp_path / "resumed"), "--resume"],
                             cwd=ROOT, env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming at step 2 of 3" in resumed.stderr

    def lines(folder):
        return [(line["event"], line["stage"], line["step"], line["loss"])
                for line in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines())]

    full, again = lines(tmp_path / "full"), lines(tmp_path / "resumed")
    assert [line[:3] for line in full] == [("train", stage, step) for stage in ("sup", "unsup") for step in (1, 2, 3)]
    assert [line[:3] for line in again] == [line[:3] for line in full]
    for (*_, loss), (*_, expected) in zip(again, full):
        assert loss == pytest.approx(expected, rel=1e-5)
    summary = json.loads((tmp_path / "resumed/metrics.json").read_text())["stages"]
    expected = json.loads((tmp_path / "full/metrics.json").read_text())["stages"]
    assert list(summary) == list(expected) == ["sup", "unsup"]
    for name in expected:
        assert {k: v for k, v in summary[name].items() if k != "mean_loss"} == \
            {k: v for k, v in expected[name].items() if k != "mean_loss"}
        assert summary[name]["mean_loss"] == pytest.approx(expected[name]["mean_loss"], rel=1e-5)
    card = (tmp_path / "resumed/README.md").read_text()
    assert "| sup.steps | 3 |" in card and "| unsup.steps | 3 |" in card


def test_the_test_predictions_run_without_the_optimizers_state(tiny_model, course_data, tmp_path, monkeypatch):
    """AdamW's two moments of every weight (twice the model's size) are freed before the run's finish predicts the
    test sets: that memory is not added to the predictions' own."""
    optimizers_at_finish = []
    finish = MultitaskRun.finish

    def finish_after_a_look(self):
        gc.collect()
        optimizers_at_finish.extend(o for o in gc.get_objects() if type(o) is AdamW)
        return finish(self)

    monkeypatch.setattr(MultitaskRun, "finish", finish_after_a_look)
    multitask_classifier.main(multitask_args(tiny_model, course_data, tmp_path, "--batch-size", "8"))
    assert optimizers_at_finish == []
    assert (tmp_path / "run/best/outputs-sst-test.pt").is_file()  # and the finish predicted the test sets
