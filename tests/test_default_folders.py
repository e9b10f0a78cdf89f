"""Where commands read and write, whatever folder they run from: by default in the repository (runs/, predictions/)
and beside it (../shared/data), as the README says; a path given on the command line is relative to the current
folder, as in any command."""
from pathlib import Path

import pytest

from minbert.commands import analyze  # noqa: F401 (the analysis subcommands' configs)
from minbert.analysis.curves import CurvesConfig
from minbert.analysis.embeddings import EmbeddingsConfig
from minbert.analysis.errors import ErrorsConfig
from minbert.analysis.layers import LayersConfig
from minbert.analysis.spread import SpreadConfig
from minbert.common import cli
from minbert.commands.ensemble import EnsembleConfig
from minbert.commands.search import SearchConfig
from minbert.training.methods import ContrastiveConfig
from minbert.training.multitask_config import MultitaskConfig

ROOT = Path(__file__).resolve().parents[1]
ARGV = {MultitaskConfig: ["--device", "cpu"], ContrastiveConfig: ["--device", "cpu"],
        EnsembleConfig: ["--members", "a"], SearchConfig: ["--space", "space.yaml"]}
# (config, flag, where its default points, from the repository's root)
DEFAULTS = [(MultitaskConfig, "output_dir", "runs/multitask"), (MultitaskConfig, "predictions_dir", "predictions"),
            (MultitaskConfig, "data_dir", "../shared/data"), (ContrastiveConfig, "output_dir", "runs/pretrain-simcse"),
            (ContrastiveConfig, "data_dir", "../shared/data"), (EnsembleConfig, "predictions_dir", "predictions"),
            (EnsembleConfig, "out", "predictions/ensemble.json"), (ErrorsConfig, "run", "runs/multitask"),
            (CurvesConfig, "runs", "runs/multitask"), (SearchConfig, "study_dir", "runs/search")]
DEFAULTS += [(config, "out", f"runs/analysis/{name}") for config, name in (
    (ErrorsConfig, "errors"), (CurvesConfig, "curves"), (LayersConfig, "layers"), (SpreadConfig, "spread"),
    (EmbeddingsConfig, "embeddings"))]


@pytest.mark.parametrize("config, name, where", DEFAULTS, ids=[f"{c.__name__}.{n}" for c, n, _ in DEFAULTS])
def test_a_default_is_the_repositorys_wherever_the_command_runs(tmp_path, monkeypatch, config, name, where):
    monkeypatch.chdir(tmp_path)  # another folder than the repository
    parsed = cli.parse_config(config, "", ARGV.get(config, []))
    assert Path(getattr(parsed, name)).resolve() == (ROOT / where).resolve()


@pytest.mark.parametrize("config, flag, name", [(MultitaskConfig, "--output-dir", "output_dir"),
                                                (MultitaskConfig, "--predictions-dir", "predictions_dir"),
                                                (ContrastiveConfig, "--output-dir", "output_dir"),
                                                (EnsembleConfig, "--out", "out")])
def test_a_path_given_is_relative_to_the_current_folder(tmp_path, monkeypatch, config, flag, name):
    monkeypatch.chdir(tmp_path)
    parsed = cli.parse_config(config, "", [flag, "mine", *ARGV[config]])
    assert Path(getattr(parsed, name)).resolve() == tmp_path / "mine"


def test_the_quick_start_writes_into_folders_of_its_own_the_repositorys_not_the_courses_commands(tmp_path,
                                                                                                 monkeypatch):
    """The README's flow, `minbert train --config quick-start` then the course's `multitask_classifier.py --schedule
    mtdnn --option finetune`, never finds the second's folders taken by the first: no folder of one is, holds or
    lies inside a folder of the other. The recipe's folders are default folders, the repository's."""
    monkeypatch.chdir(tmp_path)
    quick = cli.parse_config(MultitaskConfig, "", ["--config", "quick-start"])
    course = cli.parse_config(MultitaskConfig, "", ["--schedule", "mtdnn", "--option", "finetune"])
    assert Path(quick.output_dir) == ROOT / "runs" / "quick-start"
    assert Path(quick.predictions_dir) == ROOT / "runs" / "quick-start" / "predictions"
    for mine in (quick.output_dir, quick.predictions_dir):
        for theirs in (course.output_dir, course.predictions_dir):
            assert not (Path(mine).is_relative_to(theirs) or Path(theirs).is_relative_to(mine)), (mine, theirs)


@pytest.mark.parametrize("recipe", ["quick-start", "mtdnn-mpnet"])
def test_a_recipes_leaderboard_folder_follows_the_output_dir_given(tmp_path, monkeypatch, recipe):
    """`--config RECIPE --output-dir X`: the leaderboard files go to X/predictions, not to the recipe's own folder
    (a second run with another --output-dir would find the first's files there); a --predictions-dir given wins."""
    monkeypatch.chdir(tmp_path)
    moved = cli.parse_config(MultitaskConfig, "", ["--config", recipe, "--output-dir", "mine"])
    assert (moved.output_dir, moved.predictions_dir) == ("mine", str(Path("mine") / "predictions"))
    assert "--predictions-dir mine/predictions" in moved.command.with_values  # what its model card says ran
    given = cli.parse_config(MultitaskConfig, "", ["--config", recipe, "--output-dir", "mine", "--predictions-dir",
                                                   "elsewhere"])
    assert given.predictions_dir == "elsewhere"


def test_the_quick_start_with_an_output_dir_writes_its_leaderboard_files_there(tiny_model, course_data, tmp_path,
                                                                                monkeypatch, one_thread):
    """The quick start's recipe itself, made tiny (a tiny model and data, 2 steps), run with --output-dir X: its six
    leaderboard files are in X/predictions, and nothing is written in the recipe's own folder."""
    from minbert.commands import train

    monkeypatch.chdir(tmp_path)
    own = ROOT / "runs" / "quick-start"
    before = sorted(own.rglob("*")) if own.exists() else []
    train.main(["--config", "quick-start", "--model", str(tiny_model), "--data-dir", str(course_data),
                "--max-steps", "2", "--device", "cpu", "--precision", "fp32", "--output-dir", "X"])
    assert sorted(path.name for path in (tmp_path / "X" / "predictions").glob("*-output.csv")) == sorted(
        f"{task}-{split}-output.csv" for task in ("sst", "para", "sts") for split in ("dev", "test"))
    assert (sorted(own.rglob("*")) if own.exists() else []) == before
