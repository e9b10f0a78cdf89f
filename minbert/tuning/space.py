"""A search space: for each of multitask_classifier.py's flags it varies, a range, a list or a fixed value, read from
a YAML file and checked against the flags before any trial runs.

    lr: {low: 1e-5, high: 2e-4, log: true}     # a float range, sampled on a log scale
    max-length: {low: 64, high: 128, step: 32}  # an int range (the flag's type decides int or float)
    pooling: [mean, cls]                        # a list: one of these values
    smart: [false, true]
    epochs: 1                                   # a fixed value: every trial takes it

Every mistake is one line naming the file and the line: an unknown flag, a flag search.py sets itself, a value the
flag does not take (its type, its choices, its range, e.g. a warm-up of 1.5), a range whose low is not below its
high, a log range that reaches 0, an empty list.
"""
import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import yaml

from minbert.common.errors import UsageError

# What search.py sets in every trial: a space may not vary them.
OWNED = {"output_dir": "each trial's folder is made by search.py",
         "predictions_dir": "it is inside each trial's folder",
         "seed": "use --seeds", "metric_for_best": "use --objective", "resume": "use search.py --resume",
         "overwrite": "trials never replace a run", "config": "use search.py --config", "help": "not a flag value"}
RANGE_KEYS = {"low", "high", "log", "step"}


@dataclass(frozen=True)
class Param:
    """One flag of the space: a range (low, high, log, step), a list of choices, or a fixed value."""
    name: str          # the config field, e.g. "head_lr"
    kind: str          # "float", "int", "choice" or "fixed"
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple = ()
    value: object = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def suggest(self, trial):
        """This trial's value, drawn by Optuna (a fixed value is not a parameter of the study)."""
        if self.kind == "fixed":
            return self.value
        if self.kind == "choice":
            return trial.suggest_categorical(self.name, list(self.choices))
        suggest = trial.suggest_int if self.kind == "int" else trial.suggest_float
        return suggest(self.name, self.low, self.high, log=self.log, step=self.step)

    def contains(self, value) -> bool:
        if self.kind == "fixed":
            return value == self.value
        if self.kind == "choice":
            return value in self.choices
        return isinstance(value, (int, float)) and self.low <= value <= self.high

    def describe(self) -> str:
        if self.kind == "fixed":
            return f"{self.value}"
        if self.kind == "choice":
            return "one of " + ", ".join(map(str, self.choices))
        scale = ", log" if self.log else f", step {self.step}" if self.step else ""
        return f"{self.low} to {self.high}{scale}"


def read_space(path: str | Path, parser: argparse.ArgumentParser, check) -> list[Param]:
    """The space in a YAML file, each value converted as the command line converts it (parser: the trials' command's,
    multitask_classifier.py's) and checked by check(name, value) (a ValueError: the flag rejects the value; a range
    is checked at both its ends). UsageError "FILE:LINE: ..." for the first mistake."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        root = yaml.compose(text)
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"--space {path}: cannot read it ({error.__class__.__name__}: {error})") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = " ".join(str(getattr(error, "problem", None) or error).split())  # one line, whatever yaml says
        raise UsageError(f"{where}: not YAML ({problem})") from None
    if root is None or not isinstance(root, yaml.MappingNode) or not root.value:
        raise UsageError(f"{path}:1: a search space is a mapping of flag names to ranges, lists or values, "
                         f"e.g. `lr: {{low: 1e-5, high: 1e-4, log: true}}`")
    actions = {action.dest: action for action in parser._actions if action.option_strings}
    params, seen = [], {}
    for key_node, value_node in root.value:
        line = key_node.start_mark.line + 1
        where = f"{path}:{line}"
        key = str(yaml.safe_load(yaml.serialize(key_node)))
        name = key.removeprefix("--").replace("-", "_")
        if name in OWNED:
            raise UsageError(f"{where}: {key}: search.py sets it in every trial ({OWNED[name]})")
        if name not in actions:
            raise UsageError(f"{where}: {key}: not a flag of multitask_classifier.py (see its --help)")
        if name in seen:
            raise UsageError(f"{where}: {key} is given twice (first at line {seen[name]})")
        seen[name] = line
        if isinstance(value_node, yaml.ScalarNode) and value_node.tag == "tag:yaml.org,2002:null":  # `lr:`
            raise UsageError(f"{where}: {key}: no value; give a range, a list of values or one value")
        value = yaml.safe_load(yaml.serialize(value_node))
        try:
            params.append(_param(name, value, actions[name], check))
        except ValueError as error:
            raise UsageError(f"{where}: {key}: {error}") from None
    return params


def _param(name: str, value, action: argparse.Action, check) -> Param:
    """The Param of one line; ValueError for a value that the flag does not take."""
    convert = lambda item: _convert(item, action, check, name)  # noqa: E731
    if isinstance(value, list):
        if not value:
            raise ValueError("an empty list: give at least one value")
        choices = tuple(convert(item) for item in value)
        if len(set(choices)) != len(choices):
            raise ValueError(f"a value is listed twice in {value}")
        return Param(name, "choice", choices=choices)
    if isinstance(value, dict):
        unknown = set(map(str, value)) - RANGE_KEYS
        if unknown or not {"low", "high"} <= set(value):
            raise ValueError(f"a range is {{low: L, high: H}} with optional log: true or step: S, got {value}")
        kind = "int" if action.type is int else "float" if action.type is float else None
        if kind is None:
            raise ValueError("a range needs a numeric flag; give a list of values instead")
        low, high = convert(value["low"]), convert(value["high"])
        if not low < high:
            raise ValueError(f"low {low} must be below high {high}")
        log = value.get("log", False)
        if not isinstance(log, bool):
            raise ValueError(f"log must be true or false, got {log!r}")
        if log and low <= 0:
            raise ValueError(f"a log range must start above 0, got low {low}")
        step = value.get("step")
        if step is not None:
            step = _number(step, action.type, "step")
            if log or not step > 0:
                raise ValueError("step must be above 0, and a log range takes no step")
        elif kind == "int":
            step = 1
        return Param(name, kind, low=low, high=high, log=log, step=step)
    return Param(name, "fixed", value=convert(value))


def _number(value, kind: type, what: str):
    try:
        return kind(str(value)) if not isinstance(value, bool) else kind("x")
    except ValueError:
        raise ValueError(f"{what} {value!r} is not {'an integer' if kind is int else 'a number'}") from None


def _convert(value, action: argparse.Action, check, name: str):
    """A value as the command line would give it to the flag, checked against the flag's choices and range."""
    if isinstance(action, argparse.BooleanOptionalAction):
        if not isinstance(value, bool):
            raise ValueError(f"must be true or false, got {value!r}")
    elif value is None or isinstance(value, (dict, list)):
        raise ValueError(f"{value!r} is not a value of the flag")
    elif action.type in (int, float):
        value = _number(value, action.type, "value")
    else:
        value = (action.type or str)(str(value))
    if action.choices is not None and value not in action.choices:
        raise ValueError(f"{value!r} is not one of {', '.join(map(str, action.choices))}")
    check(name, value)
    return value


def as_dict(params: list[Param]) -> dict:
    """The space as plain data: what the study remembers, so that a worker with another space is refused."""
    return {param.name: {key: value for key, value in dataclasses.asdict(param).items() if key != "name"}
            for param in params}
