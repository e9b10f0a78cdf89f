"""training/consert.py: ConSERT's views; --consert-stages, and its old name --consert-schedule."""
import json
import logging

import pytest
import torch

import pretrain_contrastive
from minbert.common import cli
from minbert.common.run_folder import RunFolder
from minbert.data.contrastive import SentenceBatch
from minbert.models import from_pretrained
from minbert.training.consert import ConsertUnsupervised
from minbert.training.methods import ContrastiveConfig
from minbert.engine.resume import STATE_ENTRIES, find_resumption


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


@pytest.mark.usefixtures("one_thread")
def test_consert_schedule_is_the_old_name_of_consert_stages(tiny_model, contrastive_data, tmp_path, caplog):
    """The same 2-step run (sup-unsup: one step a stage) by either name, the old one with one line naming the new."""
    def run(flag):
        out = tmp_path / flag
        pretrain_contrastive.main(["--model", str(tiny_model), "--method", "consert", flag, "sup-unsup", "--data",
                                   "sts", "--data-dir", str(contrastive_data), "--batch-size", "4", "--max-steps",
                                   "1", "--device", "cpu", "--output-dir", str(out), "--quiet"])
        return out
    with caplog.at_level(logging.WARNING, logger="common.cli"):
        new = run("--consert-stages")
        assert caplog.messages == []
        old = run("--consert-schedule")
        assert caplog.messages == ["--consert-schedule: now --consert-stages"]
    assert list(json.loads((new / "metrics.json").read_text())["stages"]) == ["sup", "unsup"]  # not unsup alone
    weights = sorted(path.relative_to(new) for path in new.rglob("*.safetensors"))
    assert weights == sorted(path.relative_to(old) for path in old.rglob("*.safetensors")) and weights
    for path in weights:
        assert (new / path).read_bytes() == (old / path).read_bytes(), path
    assert json.loads((old / "run_config.json").read_text())["consert_stages"] == "sup-unsup"


def old_run_config(tiny_model, contrastive_data, out) -> dict:
    """The flags of a consert sup-unsup run as a run config saved before the rename records them."""
    config = cli.parse_config(ContrastiveConfig, "", ["--model", str(tiny_model), "--method", "consert",
                                                      "--consert-stages", "sup-unsup", "--data", "sts", "--data-dir",
                                                      str(contrastive_data), "--output-dir", str(out)])
    return {("consert_schedule" if name == "consert_stages" else name): value
            for name, value in config.to_dict().items()}


def test_a_run_config_saved_with_consert_schedule_is_a_config_file(tiny_model, contrastive_data, tmp_path):
    file = tmp_path / "run_config.json"
    file.write_text(json.dumps(old_run_config(tiny_model, contrastive_data, tmp_path / "run")))
    assert cli.parse_config(ContrastiveConfig, "", ["--config", str(file)]).consert_stages == "sup-unsup"


def test_resume_of_a_run_saved_with_consert_schedule_keeps_its_stages(tiny_model, contrastive_data, tmp_path):
    """An interrupted run whose last/ names the flag by its old name resumes with its own stages, not the
    default's (unsup)."""
    folder = RunFolder(tmp_path / "run")
    saved = old_run_config(tiny_model, contrastive_data, folder.path)
    folder.last.mkdir(parents=True)
    for where in (folder.path, folder.last):
        (where / "run_config.json").write_text(json.dumps(saved))
    torch.save({name: {} for name in STATE_ENTRIES}, folder.state_file)  # a whole state, of no evaluation yet
    command = cli.parse_config(ContrastiveConfig, "", ["--model", str(tiny_model), "--method", "consert", "--data",
                                                       "sts", "--data-dir", str(contrastive_data), "--output-dir",
                                                       str(folder.path), "--resume"])
    assert command.consert_stages == "unsup"  # the default, until --resume reads the run's
    assert find_resumption(folder, command).flags["consert_stages"] == "sup-unsup"


def test_a_two_stage_runs_numbers_carry_their_stage_in_tensorboard_and_mlflow(tiny_model, contrastive_data, tmp_path,
                                                                            monkeypatch):
    """--consert-stages sup-unsup with --report-to tensorboard,mlflow: every number of either logger is named after
    its stage (as metrics.jsonl's lines name it), so the two stages' step 1 and 2 never share a tag; the values at
    each stage's steps are the log's."""
    from mlflow import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "stages")
    out = tmp_path / "run"
    pretrain_contrastive.main(["--model", str(tiny_model), "--method", "consert", "--consert-stages", "sup-unsup",
                               "--data", "sts", "--data-dir", str(contrastive_data), "--batch-size", "4",
                               "--max-steps", "2", "--log-every", "1", "--device", "cpu", "--output-dir", str(out),
                               "--quiet", "--report-to", "tensorboard,mlflow"])
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    expected = {}  # tag -> [(step, value)], from the log
    for line in lines:
        for name, value in line.get("loss", {}).items():
            expected.setdefault(f"{line['stage']}/train/loss/{name}", []).append((line["step"], value))
    stages = {tag.split("/")[0] for tag in expected}
    assert len(stages) == 2, stages
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert all(tag.split("/")[0] in stages for tag in tags)
    for tag, values in expected.items():
        scalars = events.Scalars(tag)  # stored as float32
        assert [event.step for event in scalars] == [step for step, _ in values]
        assert [event.value for event in scalars] == pytest.approx([value for _, value in values], rel=2 ** -23)
    client = MlflowClient()
    [run] = client.search_runs([client.get_experiment_by_name("stages").experiment_id])
    assert set(run.data.metrics) == tags
    for tag, values in expected.items():
        assert [(metric.step, metric.value) for metric in client.get_metric_history(run.info.run_id, tag)] == values
