"""What every command shares: flags generated from a config dataclass, the device, logging, clean errors, and the
lists of tasks that flags name.

Each field of a command's config dataclass becomes a flag (`max_length` -> `--max-length`); its
`help` metadata is the flag's help and its default the flag's default, so configuration lives in
one place: the dataclass, which is also what is saved beside every checkpoint. A flag's range
(Range) is given to the parser (Parser.add_argument's range), which shows it in --help and checks every value
parsed against it, from the command line or a --config file; a config built in Python checks it too
(check_ranges). A renamed flag is one line of its config class, RENAMED_FLAGS = {"old_name": "new_name"}: its
old name still works, on the command line, in a --config file and in a saved run config, with a line naming the
new one.
"""
import argparse
import dataclasses
import inspect
import logging
import math
import os
import re
import shlex
import signal
import sys
import threading
import typing
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from minbert.common import distributed
from minbert.common.errors import Interrupted, SignalStop, UsageError, UserError, did_you_mean
from minbert.common.files import RECIPES, in_repository, packaged_recipes, recipe_file, unknown_recipe
from minbert.common.progress import log_to_stderr
from minbert.common.run_folder import RECORD_KEYS, RUN_CONFIG

if TYPE_CHECKING:  # loaded by resolve_device alone: a command's flags and --help need no torch
    import torch

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Range:
    """The values a numeric flag takes: low <= x (or low < x), x <= high (or x < high); None: unbounded."""
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def contains(self, value: float) -> bool:
        return ((self.low is None or value > self.low or (value == self.low and not self.low_open))
                and (self.high is None or value < self.high or (value == self.high and not self.high_open)))

    def __str__(self) -> str:
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {shown(self.low)}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {shown(self.high)}")
        return " and ".join(parts)


def shown(value: float) -> str:
    """A bound or value as a flag takes it: integers whole (4294967295, not 4.29497e+09), others as %g."""
    return str(value) if isinstance(value, int) else f"{value:g}"


AT_LEAST_1, AT_LEAST_0, POSITIVE = Range(1), Range(0), Range(0, low_open=True)
FRACTION = Range(0, 1)  # 0 <= x <= 1
SEED = Range(0, 2**32 - 1)  # what numpy's seed takes


def flag(default: Any, help: str, choices: tuple | None = None, range: Range | None = None, **extra) -> Any:
    """A config field that is also a command-line flag; range: the values it takes (checked, and shown in --help)."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices, "range": range, **extra})


@dataclasses.dataclass(frozen=True)
class CommandLine:
    """What a command was given: its command line (text), the same with a --config file's flags written out
    (with_values: what a model card shows, so that it says what ran, not which file), and the flags the user chose,
    on the command line or in the file (given; None: a config built in Python, whose every flag counts as given)."""
    text: str = ""
    with_values: str = ""
    given: frozenset[str] | None = None


def command_field() -> Any:
    """A config field that is not a flag: the CommandLine parse_config builds the config from."""
    return dataclasses.field(default_factory=CommandLine, compare=False, repr=False)


def flag_fields(config) -> list[dataclasses.Field]:
    """The fields of a config (class or object) that are flags."""
    return [field for field in dataclasses.fields(config) if "help" in field.metadata]


def renamed_flags(config_class: type) -> dict[str, str]:
    """The flags a config class renamed: old name -> new name (its RENAMED_FLAGS; none if it has none)."""
    return getattr(config_class, "RENAMED_FLAGS", {})


def with_new_names(config_class: type, values: dict) -> dict:
    """Flag values by name (a saved run config's) with each renamed flag under its new name."""
    renamed = renamed_flags(config_class)
    return {renamed.get(name, name): value for name, value in values.items()}


def out_of_range(option: str, value: float | None, allowed: Range | None) -> str:
    """What is wrong with the value of a flag (option: --lr) against its range, inf and nan among them (a rate of
    inf trains a model of nan); "" for nothing; None means "the default, chosen later"."""
    if allowed is None or value is None or (math.isfinite(value) and allowed.contains(value)):
        return ""
    finite = "" if math.isfinite(value) else "a finite number "
    return f"{option} must be {finite}{allowed}, got {shown(value)}"


def check_ranges(config) -> None:
    """ValueError (a usage error) for the first flag outside its range: a config built in Python (the parser checks
    those of the command line and of --config files)."""
    for field in dataclasses.fields(config):
        problem = out_of_range(f"--{field.name.replace('_', '-')}", getattr(config, field.name),
                               field.metadata.get("range"))
        if problem:
            raise ValueError(problem)


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and a pointer to --help, not the whole usage (some 40 lines, which
    bury the one that says what is wrong); --help still prints everything. program: the words that run the command
    (program()): its usage line names it as a user knows it (usage_name: minbert train, multitask_classifier.py), a
    refusal points to its --help as they run it."""

    def __init__(self, *args, program: Sequence[str] = (), **kwargs):
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})  # --se is not --seed: a flag is typed whole
        self.program = list(program)
        self.other_flags: list[str] = []  # flags a command parses apart (search.py's own), for did-you-mean
        if program:
            self.prog = usage_name(program)

    def add_argument(self, *args, range: Range | None = None, **kwargs):
        """argparse's, and range: the values a numeric flag takes, shown at the end of its help ([>= 1]) and checked
        in every parse (check_in_range), so that --help never shows a bound that nothing checks."""
        if range is not None and kwargs.get("help") not in (None, argparse.SUPPRESS):
            kwargs["help"] = f"{kwargs['help']} [{range}]"
        action = super().add_argument(*args, **kwargs)
        action.range = range
        return action

    def error(self, message: str):
        again = printed_command([*self.program, "--help"]) if self.program else f"{self.prog} --help"
        guess = self.guess(message)
        distributed.refuse(f"{self.prog}: error: {message}{f'; {guess}' if guess else ''} (see {again})")  # torchrun: once

    def guess(self, message: str) -> str:
        """For argparse's "unrecognized arguments" (--epoch 1) and "invalid choice" (a subcommand, --precision
        fp23): the nearest flag or choice, "did you mean --epochs?"; "" for other messages, or nothing near."""
        if message.startswith("unrecognized arguments: "):
            flags = [option for action in self._actions for option in action.option_strings] + self.other_flags
            typed = [word.split("=", 1)[0] for word in message.split()[2:] if word.startswith("--")]
            return next(filter(None, (did_you_mean(word, flags) for word in typed)), "")
        choice = re.search(r"invalid choice: '(.*?)' \(choose from (.*)\)$", message)
        return did_you_mean(choice[1], re.findall(r"'(.*?)'", choice[2])) if choice else ""

    def parse_known_args(self, args=None, namespace=None):
        self.check_given_once(sys.argv[1:] if args is None else list(args))
        parsed, rest = super().parse_known_args(args, namespace)
        self.check_in_range(parsed)
        return parsed, rest

    def check_in_range(self, parsed: argparse.Namespace) -> None:
        """Each value parsed (given, from a --config file, or the default) within its flag's range."""
        for action in self._actions:
            problem = out_of_range(action.option_strings[0] if action.option_strings else action.dest,
                                   getattr(parsed, action.dest, None), getattr(action, "range", None))
            if problem:
                self.error(problem)

    def check_given_once(self, argv: list[str]) -> None:
        """A flag given twice on the command line (--seed 1 --seed 5, --eval --no-eval, --config A --config B) is
        refused naming both, where argparse would silently keep the last."""
        options = {option: action for action in self._actions for option in action.option_strings}
        seen, words = {}, iter(enumerate(argv))
        for index, word in words:
            if word == "--":
                return
            option = word.split("=", 1)[0]
            action = options.get(option) if word.startswith("--") else None
            if action is None:
                continue
            values = 0 if "=" in word else action.nargs if isinstance(action.nargs, int) else int(action.nargs is None)
            shown = " ".join(argv[index:index + 1 + values])
            for _ in range(values):  # its values are not flags, whatever they look like
                next(words, None)
            if action.dest in seen:
                self.error(f"{option}: given twice on the command line ({seen[action.dest]}, then {shown}); give it "
                           f"once")
            seen[action.dest] = shown


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The command's docstring as written (its example lines stay lines), and each flag's default, except
    where the default is None (the help says what it defaults to, per method) or empty (the help says what
    leaving the flag out does): "(default: )" tells a user nothing."""

    def _get_help_string(self, action):
        return action.help if action.default in (None, "") else super()._get_help_string(action)


def build_parser(config_class: type, description: str, program: Sequence[str] = ()) -> argparse.ArgumentParser:
    parser = Parser(description=description, formatter_class=HelpFormatter, program=program)
    add_flags(parser, config_class)
    return parser


def add_flags(parser: argparse.ArgumentParser, config_class: type) -> None:
    """One flag per field of the config dataclass, and one left out of --help per old name of a renamed flag."""
    hints = typing.get_type_hints(config_class)
    old_names = {new: old for old, new in renamed_flags(config_class).items()}
    for field in flag_fields(config_class):
        kind = hints[field.name]
        if typing.get_origin(kind) in (typing.Union, getattr(__import__("types"), "UnionType", None)):
            kind = next(arg for arg in typing.get_args(kind) if arg is not type(None))  # Optional[X] -> X
        spellings = [(field.name, field.metadata["help"])]
        if field.name in old_names:
            spellings.append((old_names[field.name], argparse.SUPPRESS))
        for name, help in spellings:
            flag = "--" + name.replace("_", "-")
            if kind is bool:
                parser.add_argument(flag, dest=field.name, action=argparse.BooleanOptionalAction,
                                    default=field.default, help=help)
            else:
                parser.add_argument(flag, dest=field.name, type=kind, default=field.default,
                                    choices=field.metadata.get("choices"), help=help,
                                    range=field.metadata.get("range"))


def note_old_names(parser: argparse.ArgumentParser, config_class: type, argv: list[str]) -> None:
    """One line for each renamed flag that argv spells by its old name, naming the new one."""
    for old, new in renamed_flags(config_class).items():
        old_flag = "--" + old.replace("_", "-")
        if any(given(action, argv) for action in parser._actions if old_flag in action.option_strings):
            log.warning("%s: now --%s", old_flag, new.replace("_", "-"))


def program(script: str, subcommand: str) -> list[str]:
    """The words that run one of the toolkit's commands the way this process was started, for the command lines it
    prints and records: the console command as the user typed it (`.venv/bin/minbert train`), `python -m minbert
    train` with this interpreter, or this interpreter and the script at the repository's root (`.venv/bin/python
    multitask_classifier.py`). Never a bare `python`: the one on the path may not have the toolkit's packages.
    Under torchrun, its own words first, in place of the interpreter (`.venv/bin/torchrun --nproc-per-node 2
    multitask_classifier.py`)."""
    started = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    launcher = distributed.torchrun_words()
    launcher = [shown_path(launcher[0]), *launcher[1:]] if launcher else None
    if started.name == "minbert":
        return [*(launcher or []), sys.argv[0], subcommand]
    launcher = launcher or [shown_path(sys.executable)]
    if started.name == "__main__.py" and started.parent.name == "minbert":
        return [*launcher, "-m", "minbert", subcommand]
    return [*launcher, *script.split()]


# What the environment sets that shapes how a run runs, not what it computes: a command printed for the user to run
# next (to resume, or to fine-tune what was pretrained) sets what this one had, so that it runs as this one did (the
# README's times are one thread's, OMP_NUM_THREADS=1).
SHAPING_VARIABLES = ("OMP_NUM_THREADS",)


def printed_command(words: Sequence[str]) -> str:
    """A command line printed for the user to run: the words, shell-quoted, after the SHAPING_VARIABLES this process
    was given (`OMP_NUM_THREADS=1 .venv/bin/minbert train ... --resume`)."""
    settings = [f"{name}={shlex.quote(os.environ[name])}" for name in SHAPING_VARIABLES if name in os.environ]
    return " ".join([*settings, shlex.join(words)])


def as_given(command: CommandLine) -> str:
    """A command line as it was given, printed for the user to run again."""
    return printed_command(shlex.split(command.text)) if command.text else "the same command"


def usage_name(program: Sequence[str]) -> str:
    """The command as --help's usage line names it, from the words that run it (program()): `minbert train` (the
    console command, or python -m minbert), or the script (`multitask_classifier.py`); not the interpreter's path nor
    torchrun's flags, which would squeeze the usage into a narrow column."""
    words = list(program)
    console = [index for index, word in enumerate(words) if Path(word).name == "minbert"]
    if console:
        return " ".join(["minbert", *words[console[-1] + 1:]])
    scripts = [index for index, word in enumerate(words) if word.endswith(".py")]
    if scripts:  # the script and what follows it: a subcommand (analyze.py curves)
        return " ".join([Path(words[scripts[-1]]).name, *words[scripts[-1] + 1:]])
    return shlex.join(words)


def shown_path(path: str) -> str:
    """A path as a command line shows it: relative to the current folder when inside it, else as it is."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


def parse_config(config_class: type, description: str, argv: list[str] | None = None,
                 program: list[str] | None = None, recipe: str = "", other_flags: Sequence[str] = ()):
    """The config from the command line; a flag value the config rejects is a usage error (exit code 2).
    A config with a command field (command_field) gets its CommandLine. program: the words that run the command
    (program(); left out, a config built for Python code is named by the program running); recipe: the name of a
    packaged recipe of this command's, for --config's help; other_flags: the command's flags parsed before (search.py's
    own), which an unknown flag may be a misspelling of."""
    parser = build_parser(config_class, description, program or ())
    parser.other_flags = list(other_flags)
    program = program or [parser.prog]
    example = (f" or the name of a recipe that comes with the toolkit (e.g. {recipe}; all: {packaged_recipes()}), "
               f"or a run's {RUN_CONFIG}") if recipe else ""
    parser.add_argument("--config", metavar="FILE", help=f"a YAML file of flags{example}: its keys are flag names, "
                        "its values as on the command line; flags given on the command line win")
    argv = sys.argv[1:] if argv is None else argv
    config_file = parser.parse_known_args(argv)[0].config
    if config_file and unknown_recipe(config_file):
        parser.error(f"--config {config_file}: {unknown_recipe(config_file)}")
    config_file = config_file and recipe_file(config_file)
    file_values = config_file_values(parser, config_file, renamed_flags(config_class),
                                     command_line_only(config_class)) if config_file else {}
    if config_file and Path(config_file).parent == RECIPES:
        file_values = packaged_folders(config_class, file_values)
    parser.set_defaults(**file_values)
    args = vars(parser.parse_args(argv))
    args.pop("config")
    note_old_names(parser, config_class, argv)
    for name in in_output_dir(config_class):  # the file's relative folder, in the run's --output-dir (X/predictions)
        if name in file_values and file_values[name] and not Path(file_values[name]).expanduser().is_absolute() \
                and not any(given(action, argv) for action in parser._actions if action.dest == name):
            args[name] = file_values[name] = str(Path(args["output_dir"]) / file_values[name])
    if "command" in {field.name for field in dataclasses.fields(config_class)}:
        args["command"] = CommandLine(
            shlex.join([*program, *argv]),
            shlex.join([*program, *spelled_out(parser, file_values, argv)]),
            frozenset({action.dest for action in parser._actions if given(action, argv)} | set(file_values)))
    try:
        return config_class(**args)
    except ValueError as error:
        parser.error(str(error))


def in_output_dir(config_class: type) -> tuple[str, ...]:
    """The folders a --config file names relative to the run's --output-dir (its IN_OUTPUT_DIR: a recipe's
    predictions-dir), so that they follow the --output-dir given on the command line."""
    return getattr(config_class, "IN_OUTPUT_DIR", ())


def packaged_folders(config_class: type, values: dict) -> dict:
    """A packaged recipe's values with the folders it names (the quick start's runs/quick-start) as default folders
    are: the repository's, or the current folder's for an installed package (files.in_repository), wherever the
    command runs from; not those inside its output folder (in_output_dir), which follow --output-dir."""
    folders = {"output_dir", *getattr(config_class, "OUTPUT_FOLDERS", ())} - set(in_output_dir(config_class))
    return {name: in_repository(value) if name in folders and value else value for name, value in values.items()}


def given(action: argparse.Action, argv: list[str]) -> bool:
    """Whether argv gives the flag (in any of its spellings: --eval, --no-eval, --lr=1e-4)."""
    return any(word == option or word.startswith(option + "=") for word in argv for option in action.option_strings)


def flag_words(name: str, value) -> list[str]:
    """A config value as command-line words: ["--share", "none"], ["--common-layer"], ["--no-common-layer"]."""
    flag_name = "--" + name.replace("_", "-")
    return [flag_name] if value is True else [f"--no-{flag_name[2:]}"] if value is False else [flag_name, str(value)]


def as_flag(name: str, value) -> str:
    """The command-line spelling of a config value: --share none, --common-layer, --no-common-layer."""
    return " ".join(flag_words(name, value))


def last_wins(words: list[str]) -> list[str]:
    """Command-line words (flags and their values) with a flag given again replaced by its last (--x and --no-x
    are one flag): a command refuses a flag given twice, so flags put together from several places (a recipe's,
    then a trial's or a test's own) go through this, the later winning."""
    groups: dict[str, list[str]] = {}
    for word in words:
        if word.startswith("--"):
            name = word.split("=", 1)[0].removeprefix("--no-").removeprefix("--")
            groups.pop(name, None)
            groups[name] = [word]
        else:
            list(groups.values())[-1].append(word)
    return [word for group in groups.values() for word in group]


def spelled_out(parser: argparse.ArgumentParser, file_values: dict, argv: list[str]) -> list[str]:
    """argv with --config FILE replaced by the file's flags (those argv does not give again: argv wins)."""
    given_names = {action.dest for action in parser._actions if given(action, argv)}
    words = [word for name, value in file_values.items() if value is not None and name not in given_names
             for word in flag_words(name, value)]
    rest, skip = [], False
    for word in argv:
        if skip or word == "--config" or word.startswith("--config="):
            skip = word == "--config"
            continue
        rest.append(word)
    return words + rest


def command_line_only(config_class: type) -> tuple[str, ...]:
    """The flags of a config class that remove or continue files (--overwrite, --resume): typed on the command line
    each time, never recorded in a run config nor taken from a --config file (its COMMAND_LINE_ONLY)."""
    return getattr(config_class, "COMMAND_LINE_ONLY", ())


def config_file_values(parser: argparse.ArgumentParser, path: str, renamed: dict[str, str],
                       only_typed: tuple[str, ...] = ()) -> dict:
    """--config FILE: its flags as the parser's defaults, each value converted and checked as on the command line.
    Keys are flag names, with dashes or underscores (a leading -- is allowed), or a renamed flag's old name (renamed:
    old -> new; a line names the new one); what a run config records beside the flags (RECORD_KEYS) is ignored; any
    other key is a usage error naming the file and the key (exit code 2). only_typed: flags that remove or continue
    files, which a file never sets (a true one is refused; false, as older run configs record them, is ignored)."""
    import yaml  # JSON is YAML: a run's run config is a config file too

    class Loader(yaml.SafeLoader):
        """YAML that refuses a key given twice in a mapping (epochs twice, or max-length and max_length), naming
        both lines: yaml keeps the last silently."""

    def unique_keys(loader, node, deep=False):
        lines = {}
        for key_node, _ in node.value:
            key = str(loader.construct_object(key_node, deep=deep))
            name = key.removeprefix("--").replace("-", "_")
            if name in lines:
                parser.error(f"--config {path}: {key} is given twice (lines {lines[name]} and "
                             f"{key_node.start_mark.line + 1}); give it once")
            lines[name] = key_node.start_mark.line + 1
        return loader.construct_mapping(node, deep)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, unique_keys)
    try:
        data = Path(path).read_bytes()
        content = yaml.load(data.decode("utf-8"), Loader=Loader)  # noqa: S506 (a SafeLoader)
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        parser.error(f"--config {path}: line {line}: not UTF-8 text; save it as UTF-8 (e.g. iconv -f latin1 -t utf-8)")
    except (OSError, yaml.YAMLError) as error:
        parser.error(f"--config {path}: cannot read it ({error.__class__.__name__}: {str(error).splitlines()[0]})")
    if content is None:
        return {}
    if not isinstance(content, dict):
        parser.error(f"--config {path}: not a mapping of flag names to values")
    actions = {action.dest: action for action in parser._actions
               if action.option_strings and action.help != argparse.SUPPRESS}  # not the old names
    values = {}
    for key, value in content.items():
        name = str(key).removeprefix("--").replace("-", "_")
        if name in RECORD_KEYS:
            continue
        if name in renamed:
            log.warning("--config %s: %s: now %s", path, key, renamed[name])
            name = renamed[name]
        if name not in actions or name in ("help", "config"):
            parser.error(f"--config {path}: unknown flag {key!r}")
        action = actions[name]
        if name in only_typed:
            if value not in (None, False):
                parser.error(f"--config {path}: {key}: a file never sets it, since it removes or continues files; "
                             f"type --{name.replace('_', '-')} on the command line if you mean it")
            continue
        if value is None and action.default is not None:  # `epochs:` with nothing after it
            parser.error(f"--config {path}: {key} has no value; give one, or leave the key out for the default "
                         f"({action.default})")
        if value is None or isinstance(action, argparse.BooleanOptionalAction):
            if not (value is None or isinstance(value, bool)):
                parser.error(f"--config {path}: {key} must be true or false, got {value!r}")
            values[name] = value
            continue
        if isinstance(value, list) and action.type is str and not any(isinstance(v, (list, dict)) for v in value):
            value = ",".join(map(str, value))  # `tasks: [sst, sts]` is --tasks sst,sts
        elif isinstance(value, (list, dict)):
            parser.error(f"--config {path}: {key}: a YAML {'list' if isinstance(value, list) else 'mapping'} "
                         f"({value!r}); give one value, as on the command line")
        try:
            value = action.type(str(value)) if action.type else str(value)
        except ValueError:
            parser.error(f"--config {path}: {key}: invalid value {value!r}")
        if action.choices is not None and value not in action.choices:
            parser.error(f"--config {path}: {key}: {value!r} is not one of {', '.join(map(str, action.choices))}")
        problem = out_of_range(action.option_strings[0], value, getattr(action, "range", None))
        if problem:
            parser.error(f"--config {path}: {key}: {problem}")
        values[name] = value
    return values


def parse_subcommand(commands: dict[str, type], description: str, argv: list[str] | None, program: list[str]):
    """The config of the subcommand named first on the command line (`command SUBCOMMAND --flags`).

    Each config class's docstring is its subcommand's help: the first line in the list of subcommands,
    all of it (example lines kept) in `command SUBCOMMAND --help`.
    """
    parser = Parser(program=program, description=description, formatter_class=HelpFormatter)
    subcommands = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
    for name, config_class in commands.items():
        text = inspect.cleandoc(config_class.__doc__ or "")
        add_flags(subcommands.add_parser(name, help=text.splitlines()[0] if text else None, description=text,
                                         formatter_class=HelpFormatter, program=[*program, name]), config_class)
    argv = sys.argv[1:] if argv is None else argv
    args, unknown = parser.parse_known_args(argv)
    args = vars(args)
    name = args.pop("subcommand")
    if unknown:  # refused by the subcommand, whose flags the nearest is found among, and whose --help is pointed to
        subcommands.choices[name].error(f"unrecognized arguments: {' '.join(unknown)}")
    note_old_names(subcommands.choices[name], commands[name], argv)
    try:
        return commands[name](**args)
    except ValueError as error:
        subcommands.choices[name].error(str(error))


def resolve_device(name: str) -> "torch.device":
    """--device as a torch device this machine has: found before any work, not at the first tensor moved there."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {name}: not a device; use auto, cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: CUDA is not available on this machine; use --device cpu")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise UsageError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                         f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    return device


@contextmanager
def sigterm_stops():
    """Within the block SIGTERM (kill, a batch job's end) stops the command as Ctrl-C does: SignalStop, a
    KeyboardInterrupt that carries the signal's number, so that what the command holds is cleaned up alike and its
    stop line names the signal."""
    def stop(number, frame):
        raise SignalStop(number)

    if threading.current_thread() is not threading.main_thread():  # Python's signal handlers live there only
        yield
        return
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(main: Callable[[], Any]) -> None:
    """Run a command: user errors (bad files, missing checkpoints) become one clear line and exit code 2."""
    # Under torchrun every process would print the same lines: only rank 0 talks, unless something goes wrong.
    quiet = os.environ.get("RANK", "0") != "0"
    log_to_stderr(logging.WARNING if quiet else logging.INFO)
    try:
        main()
        distributed.exit_finished_process()  # torchrun: every process leaves the group, then exits; else nothing
    except UserError as error:
        distributed.refuse(f"error: {error}", error)  # torchrun: once, not by every process
    except distributed.ProcessStopped as error:
        print(f"torchrun: {error}", file=sys.stderr)
        distributed.exit_process(1)
    except Interrupted as stopped:
        if not quiet:  # every process stops alike (torchrun): rank 0 alone says so
            print(stopped, file=sys.stderr, flush=True)
        distributed.exit_process(128 + stopped.signal_number)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        distributed.exit_process(130)


# ---- lists of tasks that flags name (--tasks, --task-order, --task-weights, --loss-weights) ----

def _split_option(text: str, option: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise ValueError(f"{option} {text!r}: expected a comma-separated list without empty entries")
    return items


def parse_task_order(text: str, tasks: Sequence[str], option: str = "--task-order") -> tuple[str, ...]:
    """'sst,para,sts' -> ('sst', 'para', 'sts'), for the flag `option`; repeats are allowed (a --task-order may
    name a task twice: training/schedules.py)."""
    order = tuple(_split_option(text, option))
    unknown = [task for task in order if task not in tasks]
    if unknown:
        raise ValueError(f"{option} {text!r}: unknown task {unknown[0]!r}; known tasks: {', '.join(tasks)}")
    return order


def parse_task_weights(text: str, tasks: Sequence[str], option: str = "--task-weights",
                       trained: Sequence[str] | None = None) -> dict[str, float]:
    """'para=2,sst=0.5' -> {'para': 2.0, 'sst': 0.5}, for the flag `option`. Tasks left out weigh 1. trained: the
    tasks a run trains (default: all of `tasks`), of which at least one must weigh more than 0."""
    weights: dict[str, float] = {}
    for item in _split_option(text, option):
        task, equals, value = (part.strip() for part in item.partition("="))
        if not equals or not task or not value:
            raise ValueError(f"{option} {text!r}: {item!r} is not of the form task=weight")
        if task not in tasks:
            raise ValueError(f"{option} {text!r}: unknown task {task!r}; known tasks: {', '.join(tasks)}")
        if task in weights:
            raise ValueError(f"{option} {text!r}: task {task!r} is given twice")
        try:
            weight = float(value)
        except ValueError:
            raise ValueError(f"{option} {text!r}: weight {value!r} of {task!r} is not a number") from None
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"{option} {text!r}: weight of {task!r} must be a finite number >= 0, got {value}")
        weights[task] = weight
    if not any(weights.get(task, 1.0) for task in (tasks if trained is None else trained)):
        raise ValueError(f"{option} {text!r}: every trained task weighs 0, so nothing would be trained; at least one "
                         f"task needs a positive weight")
    return weights


def task_weights_text(weights: dict[str, float]) -> str:
    """{'para': 0.8} -> 'para=0.8': weights as --task-weights takes them (parse_task_weights reads them back)."""
    return ",".join(f"{task}={weight:g}" for task, weight in weights.items())
