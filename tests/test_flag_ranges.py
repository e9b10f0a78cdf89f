"""Every numeric bound that a command's --help shows is checked, on every command, by what shows it: the parser.

The walk takes every command of `minbert` (and analyze's subcommands) as it builds its parser, finds each flag
that has a range, and gives it a value just outside each of its bounds: the command refuses it in one line naming
the flag, with exit code 2, before any work (no model, data or output folder is needed to get that far)."""
import argparse
import importlib

import pytest

from minbert.commands.main import COMMANDS
from minbert.common import cli
from minbert.common.cli import Range, shown


def parsers_of(command: str, monkeypatch) -> list[tuple[list[str], argparse.ArgumentParser]]:
    """(the words before a flag, the parser) of a minbert subcommand and of each of its own subcommands, caught as
    the command parses --help."""
    caught = []
    parse = cli.Parser.parse_known_args

    def catching(parser, args=None, namespace=None):
        caught.append(parser)
        return parse(parser, args, namespace)

    monkeypatch.setattr(cli.Parser, "parse_known_args", catching)
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(COMMANDS[command][0]).main(["--help"])
    monkeypatch.undo()
    assert exit_.value.code == 0 and caught, f"{command}: no parser parsed --help"
    found = [([], caught[0])]
    for action in caught[0]._actions:
        if isinstance(action, argparse._SubParsersAction):
            found += [([name], parser) for name, parser in action.choices.items()]
    return found


def outside(allowed: Range) -> list[float]:
    """A value just below its low bound and one just above its high bound (where it has them)."""
    values = []
    if allowed.low is not None:
        values.append(allowed.low if allowed.low_open else allowed.low - 1)
    if allowed.high is not None:
        values.append(allowed.high if allowed.high_open else allowed.high + 1)
    return values


def bounded_flags() -> list[tuple[str, list[str], str, Range]]:
    """(command, the words before the flag, the flag, its range) of every command's bounded flags."""
    monkeypatch = pytest.MonkeyPatch()
    found = []
    for command in COMMANDS:
        for words, parser in parsers_of(command, monkeypatch):
            positionals = ["x" for action in parser._actions if not action.option_strings
                           and not isinstance(action, argparse._SubParsersAction) and action.nargs is None]
            for action in parser._actions:
                if getattr(action, "range", None) is not None and action.help != argparse.SUPPRESS:
                    found.append((command, [*words, *positionals], action.option_strings[0], action.range))
    return found


BOUNDED = bounded_flags()


def test_the_walk_finds_the_bounded_flags_of_every_command():
    commands = {(command, *words[:1]) for command, words, _, _ in BOUNDED}
    for expected in [("train",), ("pretrain",), ("predict", "x"), ("ensemble",), ("silver",), ("search",),
                     ("benchmark",), ("analyze", "layers"), ("analyze", "spread"), ("analyze", "errors")]:
        assert expected in commands, expected
    flags = {(command, flag) for command, _, flag, _ in BOUNDED}
    assert {("benchmark", "--batch-size"), ("benchmark", "--max-length"), ("predict", "--batch-size"),
            ("train", "--lr"), ("search", "--trials")} <= flags


@pytest.mark.parametrize("command, words, flag, allowed", BOUNDED,
                         ids=[f"{command} {' '.join(words[:1])} {flag}".replace("  ", " ") for command, words, flag, _
                              in BOUNDED])
def test_a_value_outside_a_flags_range_is_one_line_and_exit_code_2(command, words, flag, allowed, capsys):
    main = importlib.import_module(COMMANDS[command][0]).main
    for value in outside(allowed):
        with pytest.raises(SystemExit) as exit_:
            main([*words, flag, shown(value)])
        assert exit_.value.code == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and f"error: {flag} must be {allowed}, got {shown(value)}" in lines[0], lines


def test_the_help_shows_each_range_that_is_checked():
    """Each bounded flag's help ends with its range, as it is checked: [>= 1], [> 0], [>= 0 and <= 1] ..."""
    for command in COMMANDS:
        for _, parser in parsers_of(command, pytest.MonkeyPatch()):
            for action in parser._actions:
                if getattr(action, "range", None) is not None and action.help != argparse.SUPPRESS:
                    assert action.help.endswith(f"[{action.range}]"), (command, action.option_strings)


def test_a_config_files_value_outside_its_range_is_refused_naming_the_file(tmp_path, capsys):
    from minbert.training.multitask_config import MultitaskConfig

    file = tmp_path / "recipe.yaml"
    file.write_text("epochs: 1\nlr: -0.5\n")
    with pytest.raises(SystemExit) as exit_:
        cli.parse_config(MultitaskConfig, "", ["--config", str(file)])
    assert exit_.value.code == 2
    assert f"error: --config {file}: lr: --lr must be > 0, got -0.5" in capsys.readouterr().err


# Bounds as the flags' meaning sets them, written here rather than read from the code (the walk above checks that
# the parser enforces whatever the code says; these check that the code says the right thing).
MEANT = [
    # SMART's beta: the Bregman term's weights move by 1 - beta a step; beta 1 never moves them, beta 0 copies them.
    ("--bregman-momentum", "1", "--bregman-momentum must be >= 0 and < 1, got 1"),
    ("--bregman-momentum", "1.5", "--bregman-momentum must be >= 0 and < 1, got 1.5"),
    ("--bregman-momentum", "-0.1", "--bregman-momentum must be >= 0 and < 1, got -0.1"),
    ("--bregman-momentum", "0.999", None),
    ("--bregman-momentum", "0", None),
]


@pytest.mark.parametrize("flag, value, refusal", MEANT, ids=[f"{flag} {value}" for flag, value, _ in MEANT])
def test_a_flags_bound_is_the_one_its_meaning_sets(flag, value, refusal, capsys):
    from minbert.training.multitask_config import MultitaskConfig

    if refusal is None:
        config = cli.parse_config(MultitaskConfig, "", [flag, value])
        assert getattr(config, flag.removeprefix("--").replace("-", "_")) == float(value)
        return
    with pytest.raises(SystemExit) as exit_:
        cli.parse_config(MultitaskConfig, "", [flag, value])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"error: {refusal}" in lines[0], lines
