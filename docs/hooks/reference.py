"""MkDocs hook (mkdocs.yml, `hooks:`): the site's pages that the code writes at build time, so that nothing is
written twice and nothing drifts from the code.

- reference/NAME.md for each `minbert` subcommand (minbert/commands/main.py's COMMANDS): what `minbert NAME --help`
  says and a table of its flags, each with its default, read from the very parser that prints that --help;
- the line <!-- commands --> of a page: a table of the subcommands, each linked to its page;
- the line <!-- api --> of a page: a mkdocstrings section for each name minbert/__init__.py exports;
- the line <!-- recipes --> of a page: every file of minbert/recipes/, as it is.
"""
import argparse
import html
import importlib
from pathlib import Path
from unittest import mock

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "minbert" / "recipes"


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
    return in_repository("\n".join(sections))


def command_table() -> str:
    from minbert.commands.main import COMMANDS

    rows = [f"| [minbert {name}]({name}.md) | {what} |" for name, (_, _, what) in COMMANDS.items()]
    return "\n".join(["| subcommand | what it does |", "|---|---|", *rows])


def api_sections() -> str:
    """The import of every name minbert/__init__.py exports (its _API: name -> the module defining it), then
    `::: module.Name` for each."""
    import minbert

    imports = f"```python\nfrom minbert import {', '.join(minbert._API)}\n```\n"
    return imports + "\n".join(f"## {name}\n\n::: {module}.{name}\n" for name, module in minbert._API.items())


def recipe_sections() -> str:
    """Every file of minbert/recipes/ (recipes, search spaces, the SLURM script), each under its path."""
    blocks = []
    for path in sorted(p for p in RECIPES.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        language = {".yaml": "yaml", ".sbatch": "bash"}.get(path.suffix, "text")
        anchor = str(path.relative_to(RECIPES).with_suffix("")).replace("/", "-")  # #quick-start, #search-quick-start
        blocks.append(f"## {path.relative_to(RECIPES)} {{#{anchor}}}\n\n`{path.relative_to(ROOT)}`\n\n"
                      f"```{language}\n{path.read_text(encoding='utf-8').rstrip()}\n```\n")
    return "\n".join(blocks)


def on_files(files, config):
    from minbert.commands.main import COMMANDS

    for subcommand in COMMANDS:
        files.append(File.generated(config, f"reference/{subcommand}.md", content=command_page(subcommand)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    if "<!-- commands -->" in markdown:
        markdown = markdown.replace("<!-- commands -->", command_table())
    if "<!-- api -->" in markdown:
        markdown = markdown.replace("<!-- api -->", api_sections())
    if "<!-- recipes -->" in markdown:
        markdown = markdown.replace("<!-- recipes -->", recipe_sections())
    return markdown
