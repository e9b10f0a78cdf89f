"""Every fenced command of README.md, then of the tutorial and the CPU guide that continue it (readme_commands.PAGES),
runs in a fresh copy of the repository, in the order shown, at tiny sizes (tests/readme_commands.py); and that runner
reads pages as described in its docstring."""
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("readme_commands", ROOT / "tests" / "readme_commands.py")
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)

PAGE = '''
Text, and a block that is not a command:

```
task: sst  class: 1
```

```bash
bash setup.sh    # creates .venv [network]
models=a,b
.venv/bin/python tool.py --models $models \\
    --out "runs/#1"   # a comment, not a tag
.venv/bin/torchrun --nproc_per_node 4 tool.py  # [gpu]
.venv/bin/python tool.py --first &
.venv/bin/python -m pytest
wait
```

```python
print("from the repository root")
```
'''


def test_a_page_is_read_as_commands_with_their_tags_in_order():
    commands = runner.commands(PAGE)
    assert [(c.kind, c.text.split("#")[0].strip()) for c in commands] == [
        ("bash", "bash setup.sh"),
        ("bash", '.venv/bin/python tool.py --models $models --out "runs/'),
        ("bash", ".venv/bin/torchrun --nproc_per_node 4 tool.py"),
        ("bash", ".venv/bin/python tool.py --first &"),
        ("bash", ".venv/bin/python -m pytest"),
        ("bash", "wait"),
        ("python", 'print("from the repository root")')]
    assert commands[1].setup == "models=a,b"
    assert [runner.tags(c) for c in commands[:3]] == [{"network"}, set(), {"gpu"}]
    reasons = [runner.skip_reason(c, cuda=False) for c in commands]
    assert [reason is not None for reason in reasons] == [True, False, True, False, True, True, False]
    assert "network" in reasons[0] and "no CUDA" in reasons[2] and "test suite" in reasons[4]
    assert runner.skip_reason(commands[2], cuda=True) is None  # with a GPU it runs


def test_commands_run_in_the_copy_and_a_failure_is_seen(tmp_path):
    (tmp_path / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    # The python block runs outside the copy (no .venv there), where runs/ is the copy's.
    ok, background, failing, python = runner.commands(
        "```bash\nname=x\nmkdir -p runs && echo $name > runs/made.txt\nfalse &\nls missing-file\n```\n"
        "```python\nimport pathlib\nassert pathlib.Path('runs/made.txt').read_text() == 'x\\n'\n"
        "assert not pathlib.Path('.venv').exists()\n```\n")
    assert runner.run(ok, tmp_path, timeout=60).status == "ok"
    assert (tmp_path / "runs" / "made.txt").read_text() == "x\n"
    assert runner.run(background, tmp_path, timeout=60).status == "FAILED"  # run in the foreground: its exit is seen
    result = runner.run(failing, tmp_path, timeout=60)
    assert result.status == "FAILED" and "missing-file" in result.detail
    assert runner.run(python, tmp_path, timeout=60).status == "ok"


def test_a_printed_next_step_must_be_the_pages_next_command(tmp_path):
    """The same words, and the same variables set before them: OMP_NUM_THREADS=1 in the hint and on the page."""
    page = tmp_path / "page.md"
    page.write_text("```bash\necho \"fine-tune it: OMP_NUM_THREADS=1 echo 'the next step'\"\n"
                    "OMP_NUM_THREADS=1 echo 'the next step'    # as printed\n"
                    "echo \"fine-tune it: OMP_NUM_THREADS=1 echo 'the next step'\"\necho 'the next step'\n```\n")
    results = runner.run_page([page], timeout=60, log=lambda line: None)
    assert [result.status for result in results] == ["ok", "ok", "ok", "FAILED"]
    assert "printed the next step OMP_NUM_THREADS=1 echo 'the next step'" in results[3].detail


def test_a_command_a_page_before_gave_runs_once(tmp_path):
    """The tutorial repeats the README's quick start: it runs once, and the tutorial's next commands use its files."""
    first, second = tmp_path / "first.md", tmp_path / "second.md"
    first.write_text("```bash\nmkdir runs && echo made >> runs/log    # 1 s\n```\n")
    second.write_text("```bash\nmkdir runs && echo made >> runs/log    # another comment\ncat runs/log\n"
                      "echo made >> runs/log\n```\n")
    results = runner.run_page([first, second], timeout=60, log=lambda line: None)
    assert [result.status for result in results] == ["ok", "skipped", "ok", "ok"]
    assert results[1].detail == "ran above, on first.md" and results[2].output == "made\n"


def test_a_benchmark_with_sizes_of_its_own_gets_the_smaller_ones_after_its_flags_and_before_its_comment():
    command = ".venv/bin/python benchmarks/encoder_speed.py --repeats 7    # 1.3 min [gpu]"
    assert runner.smaller(command) == (".venv/bin/python benchmarks/encoder_speed.py --repeats 7 "
                                       f"{runner.SMALLER['benchmarks/encoder_speed.py']}    # 1.3 min [gpu]")
    assert runner.tags(runner.Command("bash", runner.smaller(command))) == {"gpu"}
    other = ".venv/bin/python benchmarks/token_budget_speed.py    # 7 min"
    assert runner.smaller(other) == other  # its sizes are the data's: as written


def test_the_tiny_data_keeps_headers_and_samples_every_file(data_dir, tmp_path):
    runner.make_tiny_data(data_dir, tmp_path, rows=5)
    for name in ("ids-sst-train.csv", "sts-eval/sts12.tsv", "unlabeled-sentences.txt"):
        source, tiny = (data_dir / name).read_text().splitlines(), (tmp_path / name).read_text().splitlines()
        assert len(tiny) == (6 if name.endswith(("csv", "tsv")) else 5)
        assert set(tiny) <= set(source)
        assert tiny[0] == source[0] or name.endswith("txt")


@pytest.mark.usefixtures("data_dir", "minilm_dir")
def test_every_command_of_the_readme_and_the_tutorial_runs_in_a_fresh_copy():
    result = subprocess.run([sys.executable, str(ROOT / "tests" / "readme_commands.py")], cwd=ROOT,
                            capture_output=True, text=True, timeout=1800)
    print(result.stdout)  # every command's status, and why a skipped one was skipped
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


def page_commands() -> list:
    return [command for _, command, _ in runner.page_commands(runner.PAGES)]


def test_every_timed_command_runs_on_the_threads_its_time_was_measured_with():
    """The times of the README and the pages after it are one CPU thread's: a command with a time either sets
    OMP_NUM_THREADS=1 or says with how many threads its time was measured (torch's default is a thread per core)."""
    timed = [command.text for command in page_commands()
             if command.kind == "bash" and re.search(r"#.*\b\d+(\.\d+)? (s|min|h)\b", command.text)]
    assert len(timed) >= 10
    assert [text for text in timed if not text.startswith("OMP_NUM_THREADS=1 ")
            and not re.search(r"#.*\d threads", text)] == []


def test_every_time_a_command_gives_is_the_one_its_measurement_in_the_docs_gives():
    """A time of the README or a page after it traces to docs/results.md's table of measurements: the same figure,
    in "Where the README's times come from"."""
    results = (ROOT / "docs" / "results.md").read_text()
    section = results[results.index("## Where the README's times come from"):]
    section = section[:section.index("\n## ", 4)]
    given = [match[0] for command in page_commands() if command.kind == "bash"
             for match in re.finditer(r"\b\d+(\.\d+)? (s|min|h)\b", runner.trailing_comment(command.text))]
    assert len(given) >= 10
    assert [time for time in given if f"| {time} |" not in section] == []
