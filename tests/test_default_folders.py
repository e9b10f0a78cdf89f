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
