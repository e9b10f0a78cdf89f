"""Flags generated from a config dataclass: types, defaults in --help, usage errors."""
from dataclasses import dataclass

import pytest

from common.cli import build_parser, flag, parse_config


@dataclass
class ExampleConfig:
    batch_size: int = flag(32, "examples per batch")
    lr: float | None = flag(None, "peak learning rate (default per method: simcse 3e-5, ct 1e-5)")
    eval: bool = flag(False, "evaluate after training")
    out: str = flag("", "also write the results here (left out: printed only)")

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


def test_a_value_the_config_rejects_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_config(ExampleConfig, DESCRIPTION, ["--batch-size", "0"])
    assert exit_info.value.code == 2 and "--batch-size must be at least 1" in capsys.readouterr().err
