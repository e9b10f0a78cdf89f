"""checkpoint.py: a checkpoint records every head flag its heads were trained with, and loading refuses other head
flags or a checkpoint that records none (no default is guessed); loading runs the encoder as --attention and
--compile say, best/ reloaded for the test predictions too."""
import dataclasses
import json

import pytest
import torch

import multitask_classifier
from minbert.checkpoint import check_head_flags
from minbert.common import cli
from minbert.common.errors import CheckpointError
from minbert.model import ModelConfig
from tests.conftest import multitask_argv
from minbert.training.multitask import MultitaskRun

pytestmark = pytest.mark.usefixtures("one_thread")


def config(*argv: str) -> ModelConfig:
    return cli.parse_config(ModelConfig, "", list(argv))


def saved(folder, model_config: ModelConfig, leave_out: str = "") -> None:
    flags = {name: value for name, value in dataclasses.asdict(model_config).items() if name != leave_out}
    (folder / "run_config.json").write_text(json.dumps(flags))


def test_heads_of_other_head_flags_are_refused(tmp_path):
    saved(tmp_path, config("--pooling", "cls", "--pair-encoding", "para=cross,sts=bi", "--pair-mlp", "plain"))
    check_head_flags(config("--pooling", "cls", "--pair-encoding", "para=cross", "--pair-mlp", "plain"),
                     tmp_path)  # the same flags, spelled another way
    with pytest.raises(CheckpointError, match="its heads were trained with --pooling cls; start with the same flags"):
        check_head_flags(config("--pair-encoding", "para=cross", "--pair-mlp", "plain"), tmp_path)
    with pytest.raises(CheckpointError, match="--pair-mlp plain"):
        check_head_flags(config("--pooling", "cls", "--pair-encoding", "para=cross"), tmp_path)


@pytest.mark.parametrize("pair_mlp", ["plain", "residual"])
def test_a_checkpoint_that_records_no_head_flag_is_refused_whatever_the_flags(tmp_path, pair_mlp):
    """Saved before --pair-mlp existed: plain and residual MLPs have the same tensors, so no value may be assumed."""
    saved(tmp_path, config(), leave_out="pair_mlp")
    with pytest.raises(CheckpointError, match='run_config.json: records no --pair-mlp .*add "pair_mlp" with the value'):
        check_head_flags(config("--pair-mlp", pair_mlp), tmp_path)


def test_init_refuses_heads_trained_with_another_sts_target(tiny_model, course_data, tmp_path, capsys):
    """--sts-target says what the STS head's number means (a 0-5 score, or a cosine mapped onto [M, 1]): heads
    trained as one and continued as the other would score STS wrong without a word. STS bi-encoded, the default
    --sts-target auto is cosine-range: --init from heads trained with --sts-target score is refused, naming it,
    before any training; with --sts-target score given, the same heads are taken."""
    def run(out, *extra):
        return multitask_argv(tiny_model, course_data, tmp_path / out, "--tasks", "sts", "--max-steps", "1",
                              "--no-predict-test", "--quiet", *extra)

    multitask_classifier.main(run("score", "--sts-target", "score"))
    start = tmp_path / "score" / "run" / "best"
    with pytest.raises(SystemExit) as exit_:
        cli.run(lambda: multitask_classifier.main(run("cosine", "--init", str(start))))
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        f"error: {start}: its heads were trained with --sts-target score; start with the same flags to use them"
    assert not (tmp_path / "cosine" / "run" / "last").exists()
    multitask_classifier.main(run("again", "--init", str(start), "--sts-target", "score"))
    assert (tmp_path / "again" / "run" / "best" / "heads.safetensors").is_file()


def test_heads_without_a_run_config_are_refused(tmp_path):
    with pytest.raises(CheckpointError, match="heads without run_config.json, which says what they compute"):
        check_head_flags(config(), tmp_path)


def test_best_is_reloaded_with_the_runs_attention_and_compilation(tiny_model, course_data, tmp_path, monkeypatch):
    """The test predictions come from best/ run as the run's encoder ran (compiling itself stubbed: what is compiled
    is recorded)."""
    compiled = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda module, **options: compiled.append(module))
    monkeypatch.setattr("minbert.models.compile.check_can_compile", lambda device: None)
    monkeypatch.setattr("minbert.engine.command.check_can_compile", lambda device: None)
    predicted = []
    soft_outputs = MultitaskRun._soft_outputs

    def recorded(run, split_name):
        encoder = run.model.encoder
        predicted.append((split_name, encoder.attention, any(module is encoder.encoder for module in compiled)))
        return soft_outputs(run, split_name)

    monkeypatch.setattr(MultitaskRun, "_soft_outputs", recorded)
    multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--epochs", "1",
                                             "--attention", "padded", "--compile"))
    assert predicted == [("dev", "padded", True), ("test", "padded", True)]


def test_resume_refuses_a_run_that_records_no_head_flag(tiny_model, course_data, tmp_path, monkeypatch):
    """A run interrupted before --pair-mlp existed: its heads in last/ are not continued as residual ones."""
    step, steps = MultitaskRun.step, []

    def dies_at_step_3(run, *args):
        steps.append(1)
        if len(steps) == 3:
            raise KeyboardInterrupt
        return step(run, *args)

    monkeypatch.setattr(MultitaskRun, "step", dies_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--epochs", "1",
                                                 "--save-every", "2"))
    for run_config in (tmp_path / "run" / "run_config.json", tmp_path / "run" / "last" / "run_config.json"):
        flags = json.loads(run_config.read_text())
        del flags["pair_mlp"]
        run_config.write_text(json.dumps(flags))
    with pytest.raises(CheckpointError, match="last/run_config.json: records no --pair-mlp"):
        multitask_classifier.main(["--output-dir", str(tmp_path / "run"), "--resume"])
