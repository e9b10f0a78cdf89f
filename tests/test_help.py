"""Every command's --help explains every flag: some help text, every choice named in it, no empty "(default: )"."""
import functools
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ["multitask_classifier.py", "pretrain_contrastive.py", "ensemble.py", "predict.py",
            "-m minbert benchmark", "analyze.py", "search.py",
            *sorted(f"benchmarks/{path.name}" for path in (ROOT / "benchmarks").glob("*.py"))]


@functools.cache
def help_output(command: str) -> subprocess.CompletedProcess:
    """`command --help`, run once a test session (its output is only read)."""
    # A wide terminal: argparse would otherwise wrap long lines, splitting words at hyphens.
    return subprocess.run([sys.executable, *command.split(), "--help"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "1000"}, timeout=120)


def help_outputs_at_once(commands: list[str]) -> None:
    """Each command's --help run beforehand, as many at a time as there are cores: each is a Python starting up
    (torch imported), which one core at a time leaves the other idle."""
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        list(pool.map(help_output, commands))


def help_entries(command: str) -> dict[str, tuple[str, str]]:
    """flag -> (its invocation, e.g. "--pooling {cls,mean}", its help text), from `command --help`."""
    result = help_output(command)
    assert result.returncode == 0, result.stderr
    entries, current = {}, None
    for line in result.stdout.partition("\noptions:\n")[2].splitlines():
        if line.startswith("  -"):
            invocation, text = (*re.split(r"\s{2,}", line.strip(), maxsplit=1), "")[:2]
            current = re.search(r"--[\w-]+", invocation).group()  # "-h, --help" -> --help
            entries[current] = (invocation, text)
        elif line.startswith("   ") and current:
            invocation, text = entries[current]
            entries[current] = (invocation, f"{text} {line.strip()}".strip())
        else:
            current = None
    return entries


def problems(invocation: str, text: str) -> list[str]:
    found = []
    if not text:
        found.append("no help")
    if "(default: )" in text:
        found.append("an empty default")
    choices = re.search(r"\{([^}]*)\}", invocation)
    for choice in choices.group(1).split(",") if choices else ():
        if not re.search(rf"(?<![\w-]){re.escape(choice)}(?![\w-])", text):
            found.append(f"choice {choice} not explained")
    return found


@pytest.fixture(scope="module", params=COMMANDS)
def command(request):
    help_outputs_at_once(COMMANDS)
    return request.param, help_entries(request.param)


def test_every_flag_is_explained(command):
    name, entries = command
    assert "--help" in entries, f"{name}: no options found in --help"
    unexplained = {flag: problems(*entry) for flag, entry in entries.items()
                   if flag != "--help" and problems(*entry)}
    assert not unexplained, f"{name} --help: {unexplained}"


def test_the_readme_recipe_is_what_the_defaults_run():
    """The fine-tuning guide's "The defaults are the recipe: `...`" (docs/training.md) names flags whose values the
    trainer runs without them, and --help states each of those defaults (or the "auto" that resolves to it)."""
    from minbert.common.cli import parse_config
    from minbert.training.multitask_config import MultitaskConfig

    recipe = re.search(r"The defaults are the recipe: `([^`]+)`", (ROOT / "docs" / "training.md").read_text()).group(1)
    flags = dict(zip(recipe.split()[::2], recipe.split()[1::2]))
    assert len(flags) >= 5 and all(name.startswith("--") for name in flags), recipe

    def resolved(*argv):
        config = parse_config(MultitaskConfig, "", list(argv)).to_dict()
        return {name: value for name, value in config.items() if name != "model"}

    assert resolved(*recipe.split()) == resolved(), "the guide's recipe differs from the defaults"
    entries = help_entries("multitask_classifier.py")
    for name, value in flags.items():
        stated = re.search(r"\(default: ([^)]*)\)", entries[name][1]).group(1)
        assert resolved(name, stated) == resolved(name, value), f"{name}: --help says {stated}, the guide {value}"


def docstring_examples(module) -> list[list[str]]:
    """The argv of each `minbert SUBCOMMAND ...` line of a command's docstring (continuations joined, comments off)."""
    text = re.sub(r"\\\n\s*", " ", module.__doc__)
    lines = [line.split("#")[0].split() for line in text.splitlines() if line.strip().startswith("minbert ")]
    return [words[2:] for words in lines]


@pytest.mark.parametrize("command, program, config", [
    ("multitask_classifier.py", "minbert.commands.train", "minbert.training.multitask_config.MultitaskConfig"),
    ("pretrain_contrastive.py", "minbert.commands.pretrain", "minbert.training.methods.ContrastiveConfig"),
    ("ensemble.py", "minbert.commands.ensemble", "minbert.commands.ensemble.EnsembleConfig"),
    ("-m minbert benchmark", "minbert.commands.benchmark", "minbert.commands.benchmark.StsBenchmarkConfig"),
    ("-m minbert silver", "minbert.commands.silver", "minbert.commands.silver.SilverConfig")])
def test_every_example_in_a_commands_help_is_accepted(command, program, config, monkeypatch):
    """Each example line of --help parses (its recipe too); --config's help names a packaged recipe that they use."""
    import importlib

    from minbert.common.cli import parse_config
    from minbert.common.files import RECIPES

    monkeypatch.chdir(ROOT)
    module_name, class_name = config.rsplit(".", 1)
    config_class = getattr(importlib.import_module(module_name), class_name)
    examples = docstring_examples(importlib.import_module(program))
    assert examples, f"{program}: no example in its docstring"
    for argv in examples:
        parse_config(config_class, "", argv)
    recipes = re.findall(r"\(e\.g\. ([\w-]+)", help_entries(command)["--config"][1])
    assert all((RECIPES / f"{recipe}.yaml").is_file() and f"--config {recipe}" in " ".join(map(" ".join, examples))
               for recipe in recipes)


@pytest.mark.parametrize("command", ["multitask_classifier.py", "pretrain_contrastive.py"])
def test_the_default_model_is_said_to_come_from_the_hub(command):
    invocation, text = help_entries(command)["--model"]
    assert "from the hub" in text and "all-MiniLM-L6-v2" in text and "offline" in text, text


def test_predicts_help_shows_the_readmes_data_path_and_import():
    """predict --help and the README's pages (the README and its tutorial, where predict is shown) show a user the
    same: the course's test file where the data lies (as their commands, run from the repository, read it) and the
    API imported from the package itself."""
    text = help_output("predict.py").stdout
    readme = (ROOT / "README.md").read_text() + (ROOT / "docs" / "tutorial.md").read_text()
    inputs = re.findall(r"--input (\S+ids-sst-test-student\.csv)", text)
    assert inputs and all(re.search(rf"--input\s+{re.escape(path)}", readme) for path in inputs), inputs
    assert (ROOT / inputs[0]).resolve() == (ROOT.parent / "shared" / "data" / "ids-sst-test-student.csv").resolve()
    imports = set(re.findall(r"from (minbert\S*) import MultitaskPredictor", text))
    assert imports and imports == set(re.findall(r"from (minbert\S*) import MultitaskPredictor", readme)), imports


def test_a_usage_line_names_the_command_as_a_user_knows_it():
    """Not the interpreter's path nor torchrun's flags: the console command and its subcommand, or the script."""
    from minbert.common.cli import usage_name

    assert usage_name(["/home/me/.venv/bin/python", "multitask_classifier.py"]) == "multitask_classifier.py"
    assert usage_name(["/home/me/.venv/bin/minbert", "train"]) == "minbert train"
    assert usage_name([".venv/bin/python", "-m", "minbert", "analyze", "layers"]) == "minbert analyze layers"
    assert usage_name([".venv/bin/torchrun", "--nproc-per-node", "2", "multitask_classifier.py"]) == \
        "multitask_classifier.py"
    assert usage_name(["/home/me/.venv/bin/python", "analyze.py", "spread"]) == "analyze.py spread"


@pytest.mark.parametrize("module", sorted(path.stem for path in (ROOT / "minbert" / "commands").glob("*.py")
                                          if path.stem not in ("__init__", "main")))
def test_no_example_in_a_commands_help_breaks_a_quoted_sentence_across_lines(module):
    """A user copies an example line of --help: a sentence in quotes split over two lines (predict's "What is / the
    best way") is two broken arguments, so each line holds whole quotes."""
    import importlib

    text = importlib.import_module(f"minbert.commands.{module}").__doc__ or ""
    broken = [line for line in text.splitlines() if line.count('"') % 2]
    assert not broken, broken
