"""Run every fenced command of the README and of the pages that continue it (PAGES: the tutorial, the CPU guide's
benchmarks) in a fresh copy of the repository, in the order shown, at tiny sizes.

    .venv/bin/python tests/readme_commands.py                 # PAGES, in order
    .venv/bin/python tests/readme_commands.py docs/page.md    # another page, or several, in the order given

The copy: the files git tracks plus the untracked ones it does not ignore (so no runs/, predictions/ or .venv),
in a temporary folder; its .venv is a link to the environment running this script, where the copy's package is the
one imported (PYTHONPATH), by .venv/bin/minbert as by the scripts.
Tiny sizes: beside the copy lies a tiny shared/data, every file of ../shared/data sampled down to ROWS lines
(headers kept), where the commands' default --data-dir (../shared/data) finds it. The commands run as written:
a 3-epoch run stays 3 epochs, of ROWS examples a task. The exceptions, SMALLER, get flags appended to their command
(after the README's own, so they win), everything else as written: a benchmark whose sizes are not the data's
(benchmarks/encoder_speed.py times random batches of 32 x 128 tokens) smaller sizes, its repeats kept; search.py's
study 2 of its trials (each a tiny run as any other, 24 of them some 15 minutes); `minbert silver` a K of 2 (its 500
sentences of each class are more than the tiny bank holds).

What runs: each line of a ```bash block (with its `\\` continuations) as one command, through bash with
`set -euo pipefail`; lines that only set variables (`models=a,b`) are kept for the block's later commands.
A command that ends in `&` runs in the foreground, so that its exit code is seen (`wait` is then skipped).
Each ```python block runs with the copy's .venv/bin/python from a folder outside the copy (the package imports from
anywhere), where runs/ is a link to the copy's runs/ (the folders the README's commands wrote).
What does not run, and says why:
- a command whose trailing comment holds [gpu], on a machine without CUDA (with CUDA it runs, at tiny sizes);
- a command or block tagged [network]: the hub and PyPI are out of reach (HF_HUB_OFFLINE is set);
- a command tagged [manual]: it needs what no automatic run has (another machine, a person at a terminal);
- `bash setup.sh` (installs from PyPI; the copy's .venv is this environment) and `-m pytest` (this check is
  part of the test suite).
A command that a page before gave already (the same words, its comment aside: the tutorial's quick start is the
README's) ran there and is not run again; later commands use what it made. (A page may repeat its own commands.)
A command that closes with the next step to take (a line "fine-tune it: COMMAND") must be followed on the page by
that command (with the variables it sets, such as OMP_NUM_THREADS=1), which then runs: the hint works as printed,
in the page's flow.
Prints a line per command (ok and seconds, skipped and why, or FAILED with its output's tail); exit code 1
when any command failed.
"""
import argparse
import os
import random
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
# The pages whose commands run, in this order, in one copy: the README, then the tutorial that continues it from
# the same quick start, then the CPU guide's benchmarks.
PAGES = [ROOT / "README.md", ROOT / "docs" / "tutorial.md", ROOT / "docs" / "speed.md"]
ROWS = 40  # lines kept of each data file: every SST class (in train and dev), both Quora labels and a spread of
# STS scores from 0 to 5 turn up, and it is quick (at 32, SST train has no class 0)
# Flags appended to the commands of these scripts: sizes that are the benchmark's own, not the data's.
SMALLER = {"benchmarks/encoder_speed.py": "--batch-size 4 --tokens 16", "search": "--trials 2",
           "silver": "--per-class 2"}
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
HINT = re.compile(r"^fine-tune it[^:]*: (.+)$", re.MULTILINE)  # a command's closing hint: what to run next
ASSIGNMENTS = re.compile(r"^(export\s+)?[A-Za-z_]\w*=\S*(\s+[A-Za-z_]\w*=\S*)*$")


@dataclass
class Command:
    kind: str  # bash | python
    text: str
    setup: str = ""  # the block's variable assignments before it (bash)


@dataclass
class Result:
    command: Command
    status: str  # ok | skipped | FAILED
    detail: str = ""
    seconds: float = 0.0
    output: str = ""  # what it printed (stdout and stderr), when it ran


def commands(markdown: str) -> list[Command]:
    """The commands of the page's ```bash and ```python blocks, in order."""
    found = []
    for language, body in FENCE.findall(markdown):
        if language == "python":
            found.append(Command("python", body))
        elif language in ("bash", "sh", "shell"):
            setup = []
            for line in re.sub(r"\s*\\\n\s*", " ", body).splitlines():
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                if ASSIGNMENTS.match(line):
                    setup.append(line)
                    continue
                found.append(Command("bash", line, "\n".join(setup)))
    return found


def trailing_comment(line: str) -> str:
    """What follows a shell line's first unquoted `#` that starts a word: bash's comment."""
    quote = None
    for index, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[index + 1:]
    return ""


def tags(command: Command) -> set[str]:
    """The [tags] of a bash command's trailing comment, or of a python block's comment lines."""
    if command.kind == "python":
        comments = " ".join(line for line in command.text.splitlines() if line.lstrip().startswith("#"))
    else:
        comments = trailing_comment(command.text)
    return set(re.findall(r"\[(\w+)\]", comments))


def skip_reason(command: Command, cuda: bool) -> str | None:
    found, words = tags(command), command.text.split()
    if "network" in found:
        return "tagged [network]: the hub and PyPI are out of reach here"
    if "manual" in found:
        return "tagged [manual]: " + (trailing_comment(command.text).split("]:", 1)[-1].strip() or "run by hand")
    if "gpu" in found and not cuda:
        return "tagged [gpu], and this machine has no CUDA device"
    if command.kind == "python":
        return None
    if words[:2] == ["bash", "setup.sh"] or words[:1] == ["./setup.sh"]:
        return "installs packages from PyPI; the copy's .venv is the environment running this check"
    if "-m" in words and "pytest" in words:
        return "runs the test suite, which this check is part of"
    if words == ["wait"]:
        return "background commands ran in the foreground: nothing to wait for"
    return None


def make_copy(destination: Path) -> Path:
    """The repository's tracked and not-ignored untracked files, with .venv linked to this environment."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    repo = destination / "repo"
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is left out, as a commit would
            target = repo / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
            target.chmod(source.stat().st_mode)
    (repo / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return repo


def make_tiny_data(source: Path, destination: Path, rows: int = ROWS) -> None:
    """Every file of the data folder with at most `rows` lines drawn at random (order kept; .csv and .tsv keep
    their header line)."""
    rng = random.Random(0)
    for path in sorted(source.rglob("*")):
        if not path.is_file():
            continue
        target = destination / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix not in (".csv", ".tsv", ".txt"):
            target.write_bytes(path.read_bytes())
            continue
        lines = path.read_bytes().splitlines(keepends=True)
        header, body = (lines[:1], lines[1:]) if path.suffix in (".csv", ".tsv") else ([], lines)
        kept = sorted(rng.sample(range(len(body)), min(rows, len(body))))
        target.write_bytes(b"".join(header + [body[i] for i in kept]))


def smaller(text: str) -> str:
    """A bash command with the SMALLER flags of its script: a flag the command gives takes SMALLER's value (a flag
    given twice is refused), the others are appended before its trailing comment."""
    flags = [extra.split() for script, extra in SMALLER.items() if script in text.split()]
    if not flags:
        return text
    comment = trailing_comment(text)
    head = text[:len(text) - len(comment) - 1].rstrip() if comment else text.rstrip()
    for pairs in flags:
        for name, value in zip(pairs[::2], pairs[1::2]):
            head, given = re.subn(rf"(?<=\s){re.escape(name)}\s+\S+", f"{name} {value}", head)
            if not given:
                head = f"{head} {name} {value}"
    return head + (f"    #{comment}" if comment else "")


def invocation(command: Command, repo: Path, adjust=lambda text: text) -> tuple[list[str], Path, dict[str, str]]:
    """The arguments, folder and environment that run `command` in the copy `repo`: a python block from a folder
    outside the copy (made on first use) where runs/ is the copy's; a bash command in the copy, in the foreground
    (a trailing `&` dropped: its exit code is seen), its text passed through `adjust` (SMALLER's flags)."""
    folder = repo
    if command.kind == "python":
        argv = [str(repo / ".venv" / "bin" / "python"), "-c", command.text]
        folder = repo.parent / f"{repo.name}-elsewhere"
        if not folder.exists():
            folder.mkdir()
            (folder / "runs").symlink_to(repo / "runs", target_is_directory=True)
    else:
        text = adjust(re.sub(r"\s*&\s*(#.*)?$", "", command.text))
        argv = ["bash", "-c", f"set -euo pipefail\n{command.setup}\n{text}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(repo)}
    return argv, folder, env


def run(command: Command, repo: Path, timeout: int) -> Result:
    argv, folder, env = invocation(command, repo, smaller)
    started = time.time()
    try:
        done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Result(command, "FAILED", f"still running after {timeout} s", time.time() - started)
    seconds = time.time() - started
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        return Result(command, "FAILED", f"exit code {done.returncode}:\n{tail}", seconds)
    return Result(command, "ok", seconds=seconds, output=done.stdout + done.stderr)


def words(command: Command) -> list[str]:
    """The command's words, with the variables set before it (OMP_NUM_THREADS=1), without its comment."""
    return shlex.split(command.text.replace("\\\n", " "), comments=True)


def key(command: Command) -> tuple:
    """What makes two commands the same: a python block's text; a bash command's words (its comment aside) and the
    variables set before it."""
    if command.kind == "python":
        return (command.kind, command.text.strip())
    return (command.kind, command.setup, *shlex.split(command.text, comments=True))


def page_commands(pages: list[Path]) -> list[tuple[Path, Command, str | None]]:
    """Each page's commands in order, each with the name of the page before that gave it already (None when none
    did: a page may repeat its own commands)."""
    first_page, found = {}, []
    for page in pages:
        for command in commands(page.read_text(encoding="utf-8")):
            earlier = first_page.setdefault(key(command), page)
            found.append((page, command, earlier.name if earlier != page else None))
    return found


def run_page(pages: list[Path], timeout: int = 600, keep: bool = False, log=print) -> list[Result]:
    """Run the commands of each page in turn (later pages may use earlier pages' runs) in one fresh copy."""
    import torch  # here, not at the top: parsing a page needs no torch

    cuda = torch.cuda.is_available()
    workdir = Path(tempfile.mkdtemp(prefix="readme-commands-"))
    repo = make_copy(workdir)
    make_tiny_data(DATA, workdir / "shared" / "data")
    log(f"fresh copy: {repo}; data: {workdir / 'shared' / 'data'} ({ROWS} lines a file)")
    results, hint, last_page = [], None, None
    try:
        for page, command, given_on in page_commands(pages):
            hint = hint if page == last_page else None  # a next step is the same page's
            last_page = page
            reason = skip_reason(command, cuda) or (f"ran above, on {given_on}" if given_on else None)
            result = Result(command, "skipped", reason) if reason else run(command, repo, timeout)
            if hint is not None and shlex.split(hint) != words(command):
                result = Result(command, "FAILED", f"the command before printed the next step {hint}; the page's "
                                f"next command is not it", result.seconds)
            hint = next(iter(HINT.findall(result.output)), None)
            results.append(result)
            shown = smaller(command.text) if command.kind == "bash" else command.text
            first_line = shown.strip().splitlines()[0][:110]
            log(f"{result.status:7s} {result.seconds:6.1f} s  {first_line}"
                + (f"\n        {result.detail}" if result.detail else ""))
    finally:
        if keep:
            log(f"kept {workdir}")
        else:
            subprocess.run(["rm", "-rf", str(workdir)], check=False)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pages", nargs="*", type=Path, default=PAGES,
                        help="Markdown pages whose commands to run, in this order, in one copy (default: README.md, "
                             "docs/tutorial.md, docs/speed.md)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds a command may take before it fails")
    parser.add_argument("--keep", action="store_true", help="keep the copy (its runs, outputs) for a look")
    args = parser.parse_args(argv)
    results = run_page(args.pages, args.timeout, args.keep)
    failed = [r for r in results if r.status == "FAILED"]
    print(f"{len(results) - len(failed)} of {len(results)} commands ok or skipped; {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
