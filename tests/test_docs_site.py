"""The documentation site (mkdocs.yml, docs/) builds with `mkdocs build --strict`, whose settings turn a broken link
or anchor and a page outside the navigation into failures; its reference pages, committed so that they read on
GitHub too, are what docs/generate/reference.py generates from the code now; and the command reference lists every
flag that each command's --help prints."""
import contextlib
import html
import importlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from minbert.commands.main import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
BUILD_ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], cwd=config.parent, env=BUILD_ENV, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    result = build(ROOT / "mkdocs.yml", folder)
    assert result.returncode == 0, result.stderr[-5000:]
    return folder


def reference_generator():
    spec = importlib.util.spec_from_file_location("reference", ROOT / "docs" / "generate" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_pages_are_what_the_code_generates():
    stale = [str(path.relative_to(ROOT)) for path, text in reference_generator().pages().items()
             if not path.is_file() or path.read_text(encoding="utf-8") != text]
    assert not stale, f"{stale}: run .venv/bin/python docs/generate/reference.py"


def test_a_long_signature_is_a_parameter_a_line_and_fits_the_column():
    generator = reference_generator()

    def short(a: int, b: str = "x") -> bool: ...

    def long(first_parameter: int, second_parameter: str = "a default", third_parameter: float = 0.5,
             fourth_parameter: bool = False) -> Path: ...

    assert generator.signature("short", short) == "short(a: int, b: str = 'x') -> bool"
    lines = generator.signature("long", long).splitlines()
    assert lines[0] == "long(" and lines[-1] == ") -> Path" and len(lines) == 6
    assert all(len(line) <= generator.WIDTH for line in lines)
    page = (ROOT / "docs" / "reference" / "api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.DOTALL)
    assert blocks and all(len(line) <= generator.WIDTH for block in blocks for line in block.splitlines())
    assert re.search(r"^- \[MultitaskPredictor\]\(#multitaskpredictor\)\n    - \[from_run\]"
                     r"\(#multitaskpredictorfrom_run\)$", page, re.MULTILINE), "a nested table of contents"


def test_the_results_chart_draws_the_readmes_results_table():
    """docs/pictures/results/results.json is what the chart drew: the README's table now, each row's scores with
    their seed spread (a cell "0.5056 ± 0.0068"), none typed twice."""
    spec = importlib.util.spec_from_file_location("results_chart", ROOT / "docs" / "generate" / "results_chart.py")
    chart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(chart)
    table = chart.rows((ROOT / "README.md").read_text())
    drawn = json.loads((ROOT / "docs" / "pictures" / "results" / "results.json").read_text())
    assert drawn == json.loads(json.dumps(table)), "run .venv/bin/python docs/generate/results_chart.py"
    assert len(table) >= 5 and chart.score("**0.7726 ± 0.0054**") == (0.7726, 0.0054) and chart.score("-") is None
    spreads = [spread for scores in table.values() for value in scores.values() if value for _, spread in [value]]
    assert any(spreads) and not all(spreads)  # rows of several seeds have their spread, rows of one seed none


def test_every_picture_in_docs_is_on_a_page():
    pages = "".join(path.read_text() for path in (ROOT / "docs").rglob("*.md"))
    pictures = [path.relative_to(ROOT / "docs") for path in (ROOT / "docs" / "pictures").rglob("*.png")]
    assert pictures and [str(picture) for picture in pictures
                         if f"{picture.parent.name}/{picture.name}" not in pages] == []


def test_the_site_builds_strictly_with_every_page_of_docs_in_it(site):
    pages = [path.relative_to(ROOT / "docs").with_suffix("") for path in (ROOT / "docs").rglob("*.md")]
    assert len(pages) >= 20
    assert [page for page in pages if not (site / page / "index.html").is_file()
            and not (page.name == "index" and (site / page.parent / "index.html").is_file())] == []
    assert (site / "search" / "search_index.json").is_file()  # the search box's index
    home = (site / "index.html").read_text()
    assert 'href="tutorial/"' in home and "fonts.googleapis.com" not in home  # offline: the system's fonts


def test_the_sites_settings_fail_a_broken_link_an_unknown_anchor_and_a_page_outside_the_navigation(tmp_path):
    """A small site with the project's strict settings (validation, strict) and the three faults: the build fails
    naming each. (The project's own site then builds clean: test above.)"""
    settings = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\n[gone](gone.md) [anchor](other.md#nowhere)\n")
    (tmp_path / "docs" / "other.md").write_text("# Other\n")
    (tmp_path / "docs" / "orphan.md").write_text("# Orphan\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(yaml.safe_dump({"site_name": "faults", "strict": settings["strict"],
                                      "validation": settings["validation"],
                                      "nav": [{"Home": "index.md"}, {"Other": "other.md"}]}))
    result = build(config, tmp_path / "site")
    assert result.returncode != 0
    assert "'gone.md'" in result.stderr and "'#nowhere'" in result.stderr and "orphan.md" in result.stderr


def help_flags(argv: list[str], monkeypatch) -> set[str]:
    """The flags that `minbert ARGV --help` prints in its options, each spelling (--eval and --no-eval)."""
    monkeypatch.setenv("COLUMNS", "1000")  # one line a flag
    module, printed = importlib.import_module(COMMANDS[argv[0]][0]), io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.raises(SystemExit):
        module.main([*argv[1:], "--help"])
    options = printed.getvalue().partition("\noptions:\n")[2]
    return {flag for line in options.splitlines() if line.startswith("  -")
            for flag in re.findall(r"--[\w-]+", re.split(r"\s{2,}", line.strip())[0])}


def listed_flags(page: str) -> set[str]:
    """The flags a reference page lists: those of its flag tables' first column."""
    return {flag for cell in re.findall(r"<tr>\s*<td>(.*?)</td>", page, re.DOTALL)
            for flag in re.findall(r"--[\w-]+", html.unescape(re.sub(r"<[^>]+>", "", cell)))}


@pytest.mark.parametrize("subcommand", COMMANDS)
def test_every_flag_of_every_command_is_on_its_reference_page(site, subcommand, monkeypatch):
    page = (site / "reference" / subcommand / "index.html").read_text()
    sections = re.split(r"<h2 id=\"minbert-[\w-]+\">", page)  # a subcommand's own (analyze's five), after its flags
    subcommands = re.findall(r"<h2 id=\"minbert-[\w-]+\">minbert \S+ ([\w-]+)", page)
    flags = help_flags([subcommand], monkeypatch)
    assert "--help" in flags and flags <= listed_flags(sections[0]), flags - listed_flags(sections[0])
    assert subcommands == (list(importlib.import_module("minbert.commands.analyze").SUBCOMMANDS)
                           if subcommand == "analyze" else [])
    for name, section in zip(subcommands, sections[1:]):
        flags = help_flags([subcommand, name], monkeypatch)
        assert "--out" in flags and flags <= listed_flags(section), (name, flags - listed_flags(section))
