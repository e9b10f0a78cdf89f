"""Flags generated from a config dataclass: types, defaults in --help, usage errors, renamed flags; the lists of
tasks flags name."""
import logging
import shlex
import sys
from dataclasses import dataclass

import pytest

from minbert.common.cli import (CommandLine, build_parser, command_field, flag, parse_config, parse_task_order,
                                parse_task_weights, printed_command, shown_path, task_weights_text)


@dataclass
class ExampleConfig:
    batch_size: int = flag(32, "examples per batch")
    lr: float | None = flag(None, "peak learning rate (default per method: simcse 3e-5, ct 1e-5)")
    eval: bool = flag(False, "evaluate after training")
    out: str = flag("", "also write the results here (left out: printed only)")
    command: CommandLine = command_field()  # not a flag

    def __post_init__(self):
        if self.batch_size < 1:
            raise ValueError("--batch-size must be at least 1")


DESCRIPTION = "Example command.\n\n    python example.py --batch-size 64\n    python example.py --eval\n"


def test_help_keeps_the_example_lines_and_shows_defaults_except_none_and_empty():
    text = build_parser(ExampleConfig, DESCRIPTION).format_help()
    assert "    python example.py --batch-size 64\n    python example.py --eval\n" in text
    assert "(default: 32)" in text
    assert "(default: None)" not in text and "ct 1e-5)\n" in text
    assert "(default: )" not in text and "(left out: printed only)\n" in text


def test_flags_parse_into_the_config():
    config = parse_config(ExampleConfig, DESCRIPTION, ["--batch-size", "8", "--lr", "1e-4", "--eval"])
    assert config == ExampleConfig(batch_size=8, lr=1e-4, eval=True)
    assert parse_config(ExampleConfig, DESCRIPTION, []) == ExampleConfig()


def test_a_config_files_flags_are_spelled_out_in_the_command_with_values(tmp_path):
    file = tmp_path / "flags.yaml"
    file.write_text("batch-size: 8\nlr: 1e-4\neval: true\nout: x.json\n")
    config = parse_config(ExampleConfig, DESCRIPTION, ["--config", str(file), "--lr=2e-4", "--no-eval"],
                          program=["python", "example.py"])
    assert config.command.text == f"python example.py --config {file} --lr=2e-4 --no-eval"
    # The file's flags that the command line does not give again, then the command line's.
    assert config.command.with_values == "python example.py --batch-size 8 --out x.json --lr=2e-4 --no-eval"
    assert parse_config(ExampleConfig, DESCRIPTION, shlex.split(config.command.with_values)[2:]) == config
    plain = parse_config(ExampleConfig, DESCRIPTION, ["--eval"], program=["python", "example.py"])
    assert plain.command.text == plain.command.with_values == "python example.py --eval"


@dataclass
class RenamedConfig:
    steps: int = flag(10, "optimizer steps")
    eval: bool = flag(False, "evaluate after training")
    command: CommandLine = command_field()

    RENAMED_FLAGS = {"iterations": "steps", "validate": "eval"}  # --iterations is now --steps, --validate --eval


def test_a_renamed_flags_old_name_still_works_with_one_line_naming_the_new(caplog):
    with caplog.at_level(logging.WARNING):
        config = parse_config(RenamedConfig, "", ["--iterations", "3", "--validate"],
                              program=["python", "example.py"])
    assert (config.steps, config.eval) == (3, True)
    assert caplog.messages == ["--iterations: now --steps", "--validate: now --eval"]
    assert config.command.given == {"steps", "eval"}  # --resume takes neither from the run's flags
    assert config.command.text == "python example.py --iterations 3 --validate"  # what the user typed
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert parse_config(RenamedConfig, "", ["--steps", "3", "--no-eval"]) == RenamedConfig(steps=3, eval=False)
    assert caplog.messages == []
    text = build_parser(RenamedConfig, "").format_help()
    assert "--steps" in text and "iterations" not in text and "validate" not in text  # --help shows the new names


def test_a_config_file_with_a_renamed_flags_old_name_still_loads(tmp_path, caplog):
    file = tmp_path / "run_config.json"  # a run's run config, saved before the rename
    file.write_text('{"iterations": 4, "validate": true, "provenance": {}}')
    with caplog.at_level(logging.WARNING):
        config = parse_config(RenamedConfig, "", ["--config", str(file)], program=["python", "example.py"])
    assert (config.steps, config.eval) == (4, True)
    assert caplog.messages == [f"--config {file}: iterations: now steps", f"--config {file}: validate: now eval"]
    assert config.command.with_values == "python example.py --steps 4 --eval"
    assert parse_config(RenamedConfig, "", ["--config", str(file), "--steps", "5"]).steps == 5  # the command wins


def test_a_value_the_config_rejects_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_config(ExampleConfig, DESCRIPTION, ["--batch-size", "0"])
    assert exit_info.value.code == 2 and "--batch-size must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("script, argv", [("multitask_classifier.py", ["--no-such-flag"]),
                                          ("pretrain_contrastive.py", ["--method", "nonsense"]),
                                          ("ensemble.py", ["--rounds", "two"]),
                                          ("predict.py", []),
                                          ("predict.py", ["run", "--input", "file.txt"])])
def test_a_usage_error_is_one_line_and_help_still_has_the_whole_usage(capsys, script, argv):
    import importlib

    command = importlib.import_module(script.removesuffix(".py"))
    with pytest.raises(SystemExit) as exit_:
        command.main(argv)
    output = capsys.readouterr()
    assert exit_.value.code == 2 and output.out == ""
    assert len(output.err.splitlines()) == 1, output.err
    # named as the user knows it; its help as they run it: this interpreter and the script, never a bare python
    run_again = printed_command([shown_path(sys.executable), script])
    assert output.err.startswith(f"{script}: error: ") and output.err.endswith(f" (see {run_again} --help)\n")
    with pytest.raises(SystemExit) as exit_:
        command.main(["--help"])
    output = capsys.readouterr()
    assert exit_.value.code == 0 and output.out.startswith("usage: ") and len(output.out.splitlines()) > 20


@pytest.mark.parametrize("name, message", [("gpu", "--device gpu: not a device; use auto, cpu, cuda or cuda:N"),
                                           ("mps", "--device mps: not a device; use auto, cpu, cuda or cuda:N"),
                                           ("cuda:99", "--device cuda:99: ")])
def test_a_device_this_machine_does_not_have_is_a_usage_error(name, message):
    from minbert.common.cli import resolve_device
    from minbert.common.errors import UsageError

    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        resolve_device(name)
    assert resolve_device("cpu").type == "cpu"


# ---- lists of tasks that flags name ----

TASKS = ("sst", "para", "sts")


def test_parse_task_weights():
    assert parse_task_weights("para=2,sst=1", TASKS) == {"para": 2.0, "sst": 1.0}
    assert parse_task_weights(" sts = 0.5 ", TASKS) == {"sts": 0.5}


def test_task_weights_text_is_what_parse_task_weights_reads_back():
    assert task_weights_text({"para": 0.8, "sst": 2.0}) == "para=0.8,sst=2"
    weights = {"sts": 0.125, "para": 3.0}
    assert parse_task_weights(task_weights_text(weights), TASKS) == weights


@pytest.mark.parametrize("text, message", [
    ("para2", "task=weight"),
    ("para=", "task=weight"),
    ("=2", "task=weight"),
    ("nli=2", "unknown task 'nli'"),
    ("para=two", "not a number"),
    ("para=-1", ">= 0"),
    ("para=nan", ">= 0"),
    ("para=inf", ">= 0"),
    ("para=1,para=2", "given twice"),
    ("para=1,,sst=2", "empty entries"),
    ("", "empty entries"),
    ("sst=0,para=0,sts=0", "positive weight"),
])
def test_parse_task_weights_errors_name_the_problem(text, message):
    with pytest.raises(ValueError, match=message):
        parse_task_weights(text, TASKS)


def test_parse_task_order():
    assert parse_task_order("sst, para,sts", TASKS) == ("sst", "para", "sts")
    assert parse_task_order("sts,sst,sts", TASKS) == ("sts", "sst", "sts")
    with pytest.raises(ValueError, match="unknown task 'quora'"):
        parse_task_order("sst,quora", TASKS)
    with pytest.raises(ValueError, match="--tasks 'sst,x': unknown task 'x'"):
        parse_task_order("sst,x", TASKS, option="--tasks")


def test_a_config_files_yaml_list_is_a_comma_separated_flag(tmp_path):
    """`tasks: [sst, sts]`, as YAML writes a list, is --tasks sst,sts (not the task "['sst'"); the command line
    written out spells it so."""
    from minbert.training.multitask_config import MultitaskConfig

    file = tmp_path / "recipe.yaml"
    file.write_text("tasks: [sst, sts]\nepochs: 1\n")
    config = parse_config(MultitaskConfig, "", ["--config", str(file)], program=["minbert", "train"])
    assert config.task_list == ("sst", "sts")
    assert config.command.with_values == "minbert train --tasks sst,sts --epochs 1"


# Each subcommand with the words before its flags, and one of its flags: the flag with its last letter dropped is
# a misspelling, whose nearest flag is the flag itself (difflib's pick, compared with no hard-coded answer).
MISSPELLED = [("train", [], "--epochs"), ("pretrain", [], "--temperature"), ("predict", ["run"], "--output"),
              ("ensemble", [], "--method"), ("silver", [], "--teacher"), ("search", ["--space", "quick-start"], "--trials"),
              ("analyze", ["curves"], "--runs"), ("benchmark", [], "--model")]


@pytest.mark.parametrize("subcommand, before, option", MISSPELLED, ids=[case[0] for case in MISSPELLED])
def test_a_misspelled_flag_of_every_command_gets_the_nearest_one(capsys, subcommand, before, option):
    from minbert.commands import main

    assert set(main.COMMANDS) == {case[0] for case in MISSPELLED}, "a subcommand this test leaves out"
    with pytest.raises(SystemExit) as exit_:
        main.main([subcommand, *before, option[:-1], "1"])
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and len(error.splitlines()) == 1, error
    assert f"unrecognized arguments: {option[:-1]} 1; did you mean {option}? (see " in error


def test_a_misspelled_subcommand_gets_the_nearest_one(capsys):
    from minbert.commands import main

    with pytest.raises(SystemExit) as exit_:
        main.main(["trian"])
    assert exit_.value.code == 2
    assert "unknown subcommand 'trian' (did you mean train?); choose one of train, " in capsys.readouterr().err


def test_a_flag_far_from_every_flag_gets_no_guess(capsys):
    with pytest.raises(SystemExit):
        parse_config(ExampleConfig, DESCRIPTION, ["--zzzzzz"])
    error = capsys.readouterr().err
    assert "unrecognized arguments: --zzzzzz (see " in error and "did you mean" not in error
