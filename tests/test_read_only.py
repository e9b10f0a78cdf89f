"""Outputs on a read-only file system: every command's output flags (a trainer's --output-dir and --predictions-dir,
predict's --output, ensemble's --out and --predictions-dir, search's --study-dir and its journal) refused in one
line with exit code 2, no traceback, before anything is written anywhere.

The folder is made read-only for real: the commands run, one after another in one process (as `minbert` runs
them: minbert.commands.main), in a mount namespace of their own (unshare) in which the folder is bound onto itself
read-only, as root or, where the kernel lets users, as a user mapped to root. Where neither works (a container
without the right), the tests skip, saying so; tests/test_bad_inputs.py's cases of a read-only file system fake the
error where the commands write, so that the behaviour is tested everywhere.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import multitask_classifier
from tests.conftest import contents, multitask_argv

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
# Bind $1 onto itself read-only, then run the rest of the arguments (the mount is the namespace's alone).
READ_ONLY = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
# Each command line of argv[1] (JSON) run as `minbert` runs it: its exit code and what it wrote to stderr (a
# traceback included), printed as JSON.
COMMANDS = """
import contextlib, io, json, sys, traceback
from minbert.commands.main import main

results = []
for argv in json.loads(sys.argv[1]):
    stderr, code = io.StringIO(), 0
    with contextlib.redirect_stderr(stderr):
        try:
            main(argv)
        except SystemExit as exit_:
            code = exit_.code
        except BaseException:
            code = 1
            traceback.print_exc()
    results.append({"code": code, "stderr": stderr.getvalue()})
print(json.dumps(results))
"""


def read_only_wrapper(folder: Path) -> tuple[list[str] | None, str]:
    """The command prefix that runs a command with `folder` read-only, or None and why none works here."""
    why = "no unshare command"
    for prefix in (["unshare", "--mount"], ["unshare", "--map-root-user", "--mount"]):
        wrapper = [*prefix, "sh", "-c", READ_ONLY, "sh", str(folder)]
        try:
            probe = subprocess.run([*wrapper, "touch", str(folder / ".probe")], capture_output=True, text=True)
        except FileNotFoundError:
            break
        if probe.returncode != 0 and "Read-only file system" in probe.stderr:
            return wrapper, ""
        why = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else f"exit code {probe.returncode}"
    return None, why


def case_argv(case: str, places: dict, tiny_model: Path, course_data: Path) -> list[str]:
    ro, writable, root = places["ro"], places["writable"], places["root"]

    def train(*flags):
        return ["train", *multitask_argv(tiny_model, course_data, writable, "--epochs", "1", "--max-steps", "1",
                                         *flags)]

    search = ["search", "--config", str(root / "recipe.yaml"), "--space", str(root / "space.yaml"), "--trials", "1"]
    return {
        "train --output-dir": train("--output-dir", str(ro / "new-run")),
        "train --output-dir, over a run with --overwrite": train("--output-dir", str(ro / "run"),
                                                                 "--overwrite"),
        "train --output-dir, its run with --resume": train("--output-dir", str(ro / "run"), "--resume"),
        "train --predictions-dir": train("--predictions-dir", str(ro / "predictions-2")),
        "predict --output": ["predict", str(ro / "run"), "--sst", "a film", "--output", str(ro / "out.tsv")],
        "ensemble --out": ["ensemble", "--members", str(ro / "run"), "--data-dir", str(course_data), "--out",
                           str(ro / "ensemble.json"), "--predictions-dir", str(writable / "ensemble")],
        "ensemble --predictions-dir": ["ensemble", "--members", str(ro / "run"), "--data-dir", str(course_data),
                                       "--out", str(writable / "ensemble.json"), "--predictions-dir",
                                       str(ro / "ensemble")],
        "search --study-dir": [*search, "--study-dir", str(ro / "study")],
        "search --storage JOURNAL": [*search, "--study-dir", str(writable / "study"), "--storage",
                                     str(ro / "study.journal")],
    }[case]


CASES = ["train --output-dir", "train --output-dir, over a run with --overwrite",
         "train --output-dir, its run with --resume", "train --predictions-dir", "predict --output", "ensemble --out",
         "ensemble --predictions-dir", "search --study-dir", "search --storage JOURNAL"]


@pytest.fixture(scope="module")
def read_only(tiny_model, course_data, tmp_path_factory):
    """A folder that the commands see read-only (holding a finished run, ro/run), a writable one beside it, what
    each had before, and what each case's command gave (its exit code and stderr), all run in one process."""
    root = tmp_path_factory.mktemp("read-only")
    ro, writable = root / "ro", root / "writable"
    ro.mkdir()
    writable.mkdir()
    wrapper, why = read_only_wrapper(ro)
    if wrapper is None:
        pytest.skip(f"no read-only folder can be made here: neither root nor a user namespace may mount ({why})")
    multitask_classifier.main(multitask_argv(tiny_model, course_data, ro, "--epochs", "1", "--max-steps", "2"))
    (root / "recipe.yaml").write_text(f"model: {tiny_model}\ndata-dir: {course_data}\ndevice: cpu\n"
                                      f"batch-size: 8\nepochs: 1\n")
    (root / "space.yaml").write_text("lr: [1.0e-3]\n")
    places = {"ro": ro, "writable": writable, "root": root}
    before = contents(ro), contents(writable)
    argvs = [case_argv(case, places, tiny_model, course_data) for case in CASES]
    done = subprocess.run([*wrapper, sys.executable, "-c", COMMANDS, json.dumps(argvs)], cwd=root, env=ENV,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {**places, "before": before, "results": dict(zip(CASES, json.loads(done.stdout.splitlines()[-1])))}


@pytest.mark.parametrize("case", CASES)
def test_an_output_on_a_read_only_file_system_is_one_line_and_nothing_is_written(read_only, case):
    result = read_only["results"][case]
    assert result["code"] == 2, result["stderr"]
    assert "Traceback" not in result["stderr"]
    last = result["stderr"].strip().splitlines()[-1]
    assert last.startswith("error: --") and "Read-only file system" in last, last


def test_the_refused_commands_wrote_nothing_anywhere(read_only):
    assert (contents(read_only["ro"]), contents(read_only["writable"])) == read_only["before"]
    assert not any(path.is_dir() for path in read_only["writable"].iterdir()), "no folder left behind"
