"""The reference pages that the code writes, committed so that they read on GitHub as on the site, and checked
against the code by tests/test_docs_site.py, so that they cannot drift from it. Run it after changing a command's
flags, a recipe or the API:

    .venv/bin/python docs/generate/reference.py

- docs/reference/NAME.md for each `minbert` subcommand (minbert/commands/main.py's COMMANDS): what `minbert NAME
  --help` says and a table of its flags, each with its default, read from the very parser that prints that --help;
- between the lines <!-- commands --> and <!-- /commands --> of commands.md: a table of the subcommands, each linked
  to its page;
- between <!-- api --> and <!-- /api --> of api.md: a section for each name minbert/__init__.py exports, its
  signature (a parameter a line where one line would not fit the page's column), its docstring and its public
  methods', under a nested table of contents;
- between <!-- recipes --> and <!-- /recipes --> of recipes.md: every file of minbert/recipes/, as it is.
"""
import argparse
import html
import importlib
import inspect
import re
import sys
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "minbert" / "recipes"
REFERENCE = ROOT / "docs" / "reference"
WIDTH = 88  # a signature longer than this is written a parameter a line: the page's code column holds about 90


class _HelpAsked(Exception):
    """Raised in place of printing --help: carries the parser that would have printed it."""

    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


def parser_of(subcommand: str) -> argparse.ArgumentParser:
    """The parser of `minbert SUBCOMMAND`. Each command builds its parser inside its main() (from its config's
    fields, plus --config and flags of its own), so its main is run with --help and the parser is taken where it
    would print: the reference lists exactly what --help lists."""
    from minbert.commands.main import COMMANDS

    def stop(parser, file=None):
        raise _HelpAsked(parser)

    module = importlib.import_module(COMMANDS[subcommand][0])
    with mock.patch.object(argparse.ArgumentParser, "print_help", stop):
        try:
            module.main(["--help"])
        except _HelpAsked as asked:
            return asked.parser
    raise RuntimeError(f"minbert {subcommand} --help printed no help")


def in_repository(text: str) -> str:
    """Paths as a checkout's commands take them (runs/multitask, ../shared/data), not as this machine spells them."""
    return text.replace(f"{ROOT}/", "").replace(f"{ROOT.parent}/", "../")


def markdown_text(text: str) -> str:
    """Help text as Markdown that shows it as written: `code` kept, and no other character taken as markup."""
    pieces = text.split("`")
    for index in range(0, len(pieces), 2):  # outside backticks
        escaped = html.escape(pieces[index], quote=False)
        pieces[index] = "".join(f"\\{char}" if char in "\\*_[]|" else char for char in escaped)
    return "`".join(pieces)


def flag_table(parser: argparse.ArgumentParser) -> str:
    """A table of the parser's arguments (positional ones first, as --help orders them): how each is written, then its
    help and default. argparse's own formatter spells each flag and expands %(default)s in its help."""
    formatter = argparse.HelpFormatter(parser.prog)
    rows = ["| flag | what it does |", "|---|---|"]
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        text = markdown_text(formatter._expand_help(action) if action.help else "")
        if action.default not in (None, "", argparse.SUPPRESS) and action.option_strings:
            text += f" *Default:* `{action.default}`"
        rows.append(f"| `{formatter._format_action_invocation(action)}` | {text} |")
    return '<div class="flags" markdown>\n\n' + "\n".join(rows) + "\n\n</div>\n"  # class: extra.css


def command_page(subcommand: str) -> str:
    from minbert.commands.main import COMMANDS

    _, script, what = COMMANDS[subcommand]
    parser = parser_of(subcommand)
    parser.prog = f"minbert {subcommand}"
    same = f" The script `{script}` at the repository's root is the same command, with the same flags." if script else ""
    sections = [f"# minbert {subcommand}\n\n{what[0].upper()}{what[1:]}.{same} Generated from the command's own "
                f"parser: `minbert {subcommand} --help` prints the same.\n",
                f"```text\n{parser.description.strip()}\n```\n", "## Flags\n", flag_table(parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                subparser.prog = f"minbert {subcommand} {name}"
                sections += [f"## minbert {subcommand} {name}\n", f"```text\n{subparser.description.strip()}\n```\n",
                             flag_table(subparser)]
    return in_repository("\n".join(sections)).rstrip() + "\n"


def command_table() -> str:
    from minbert.commands.main import COMMANDS

    rows = [f"| [minbert {name}]({name}.md) | {what} |" for name, (_, _, what) in COMMANDS.items()]
    return "\n".join(["| subcommand | what it does |", "|---|---|", *rows])


def short_types(text: str) -> str:
    """Annotations as a reader writes them: minbert.models.bert.BertModel -> BertModel, pathlib.Path -> Path."""
    return re.sub(r"\b(?:[a-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", text)


def signature(name: str, thing) -> str:
    """`name(parameters) -> returned` on one line, or a parameter a line where that would not fit WIDTH."""
    found = inspect.signature(thing)
    parameters = [short_types(str(parameter)) for parameter in found.parameters.values()
                  if parameter.name not in ("self", "cls")]
    annotation = found.return_annotation  # a string under `from __future__ import annotations`: as written
    returned = "" if annotation is inspect.Signature.empty else \
        f" -> {short_types(annotation if isinstance(annotation, str) else inspect.formatannotation(annotation))}"
    line = f"{name}({', '.join(parameters)}){returned}"
    if len(line) <= WIDTH:
        return line
    return f"{name}(\n" + "".join(f"    {parameter},\n" for parameter in parameters) + f"){returned}"


def public_methods(cls) -> list[tuple[str, object]]:
    """The methods, class methods and static methods a class defines itself, in source order, not _private ones."""
    methods = []
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        function = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
        if inspect.isfunction(function):
            methods.append((name, getattr(cls, name)))
    return methods


def slug(heading: str) -> str:
    """A heading's anchor, as both the site (Python-Markdown's toc) and GitHub make it: BertConfig.from_dict ->
    bertconfigfrom_dict."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def documented(heading: str, name: str, thing) -> str:
    """A heading, the signature in a code block, and the docstring as written (its example lines kept as code)."""
    text = inspect.cleandoc(thing.__doc__ or "")
    return f"{heading} {name}\n\n```python\n{signature(name, thing)}\n```\n\n" + (f"{text}\n" if text else "")


def api_sections() -> str:
    """The import of every name minbert/__init__.py exports (its _API: name -> the module defining it), a nested
    table of contents, then a section for each: a class with a subsection for each public method."""
    import minbert

    contents, sections = [], []
    for name, module in minbert._API.items():
        thing = getattr(importlib.import_module(module), name)
        contents.append(f"- [{name}](#{slug(name)})")
        sections.append(documented("##", name, thing))
        if inspect.isclass(thing):
            for method, function in public_methods(thing):
                contents.append(f"    - [{method}](#{slug(f'{name}.{method}')})")
                sections.append(documented("###", f"{name}.{method}", function))
    names = ", ".join(minbert._API)
    imports = f"from minbert import {names}" if len(names) + 20 <= WIDTH else \
        "from minbert import (\n" + "".join(f"    {name},\n" for name in minbert._API) + ")"
    return "\n".join([f"```python\n{imports}\n```\n", *contents, "", *sections])


def recipe_sections() -> str:
    """Every file of minbert/recipes/ (recipes, search spaces, the SLURM script), each under its path."""
    blocks = []
    for path in sorted(p for p in RECIPES.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        language = {".yaml": "yaml", ".sbatch": "bash"}.get(path.suffix, "text")
        anchor = str(path.relative_to(RECIPES).with_suffix("")).replace("/", "-")  # #quick-start, #search-quick-start
        blocks.append(f"## {path.relative_to(RECIPES)} {{#{anchor}}}\n\n`{path.relative_to(ROOT)}`\n\n"
                      f"```{language}\n{path.read_text(encoding='utf-8').rstrip()}\n```\n")
    return "\n".join(blocks)


# The generated part of each hand-written page: between <!-- NAME --> and <!-- /NAME -->.
SECTIONS = {"commands.md": ("commands", command_table), "api.md": ("api", api_sections),
            "recipes.md": ("recipes", recipe_sections)}


def with_section(page: str, marker: str, text: str) -> str:
    """The page with what lies between its lines <!-- marker --> and <!-- /marker --> replaced by text."""
    start, end = f"<!-- {marker} -->\n", f"<!-- /{marker} -->\n"
    before, _, rest = page.partition(start)
    _, found, after = rest.partition(end)
    if not found:
        raise ValueError(f"no lines {start.strip()} and {end.strip()}")
    return f"{before}{start}\n{text.strip()}\n\n{end}{after}"


def pages() -> dict[Path, str]:
    """Each generated page (docs/reference/...) and what it should hold now."""
    from minbert.commands.main import COMMANDS

    found = {REFERENCE / f"{name}.md": command_page(name) for name in COMMANDS}
    for file, (marker, make) in SECTIONS.items():
        found[REFERENCE / file] = with_section((REFERENCE / file).read_text(encoding="utf-8"), marker, make())
    return found


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    for path, text in pages().items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
