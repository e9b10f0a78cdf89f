"""The one rule of outputs (common.outputs.check_place), run over every command's output flags: none writes inside a
checkpoint folder (best/, last/, an encoder's), another run's folder or a study folder, and none is a named pipe (nor
a device or a socket), refused before the work starts. The list below is checked against every command's flags, so
that a new output flag cannot skip the rule: it fails here until it is listed, and once listed it is run."""
import os
import random
import stat
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minbert.analysis import curves, embeddings, errors, layers, spread  # noqa: E402
from minbert.commands import analyze, benchmark, ensemble, predict, pretrain, search, train  # noqa: E402
from minbert.common import cli  # noqa: E402
from minbert.common.cli import flag_fields  # noqa: E402
from minbert.training.methods import ContrastiveConfig  # noqa: E402
from minbert.training.multitask_config import MultitaskConfig  # noqa: E402
from tests.conftest import write_course_files  # noqa: E402

CONFIGS = {"train": MultitaskConfig, "pretrain": ContrastiveConfig, "ensemble": ensemble.EnsembleConfig,
           "search": search.SearchConfig, "benchmark": benchmark.StsBenchmarkConfig,
           **{f"analyze {name}": config for name, config in (("layers", layers.LayersConfig),
              ("spread", spread.SpreadConfig), ("embeddings", embeddings.EmbeddingsConfig),
              ("errors", errors.ErrorsConfig), ("curves", curves.CurvesConfig))}}
INPUTS = {"data_dir", "init", "runs", "run", "members", "models", "model"}  # flags of folders a command reads
# (command, flag) -> the command line, with PLACE the output inside another run's checkpoint folder. MLflow's store is
# an output too, named by $MLFLOW_TRACKING_URI: ("train", "mlflow").
TRAIN = ["--model", "MODEL", "--data-dir", "DATA", "--output-dir", "OUT/run", "--epochs", "1", "--device", "cpu"]
OUTPUTS = {
    ("train", "output_dir"): [*TRAIN, "--output-dir", "PLACE"],
    ("train", "predictions_dir"): [*TRAIN, "--predictions-dir", "PLACE"],
    ("train", "tensorboard"): [*TRAIN, "--tensorboard", "PLACE"],
    ("train", "mlflow"): [*TRAIN, "--report-to", "mlflow"],
    ("pretrain", "output_dir"): ["--model", "MODEL", "--output-dir", "PLACE"],
    ("pretrain", "tensorboard"): ["--model", "MODEL", "--output-dir", "OUT/p", "--tensorboard", "PLACE"],
    ("ensemble", "predictions_dir"): ["--members", "RUN", "--data-dir", "DATA", "--out", "OUT/e.json",
                                      "--predictions-dir", "PLACE"],
    ("ensemble", "out"): ["--members", "RUN", "--data-dir", "DATA", "--out", "PLACE/e.json", "--predictions-dir",
                          "OUT/p"],
    ("search", "study_dir"): ["--config", "RECIPE", "--space", "SPACE", "--trials", "1", "--study-dir", "PLACE"],
    ("search", "storage"): ["--config", "RECIPE", "--space", "SPACE", "--trials", "1", "--study-dir", "OUT/s",
                            "--storage", "PLACE/study.journal"],
    ("predict", "output"): ["RUN", "--sst", "a film", "--output", "PLACE/out.tsv"],
    ("benchmark", "out"): ["--model", "MODEL", "--data-dir", "DATA", "--out", "PLACE/b.json"],
    **{(f"analyze {name}", "out"): [name, "--models", "MODEL", "--out", "PLACE"]
       for name in ("layers", "spread", "embeddings")},
    ("analyze errors", "out"): ["errors", "--run", "RUN", "--data-dir", "DATA", "--out", "PLACE"],
    ("analyze curves", "out"): ["curves", "--runs", "RUN", "--out", "PLACE"],
}
MAINS = {"train": train.main, "pretrain": pretrain.main, "ensemble": ensemble.main, "search": search.main,
         "predict": predict.main, "benchmark": benchmark.main}


def looks_like_output(name: str) -> bool:
    return name in ("out", "output", "storage", "tensorboard") or name.endswith(("_dir", "_out", "_file"))


def test_every_output_flag_of_every_command_is_listed():
    found = {(command, field.name) for command, config in CONFIGS.items() for field in flag_fields(config)
             if looks_like_output(field.name) and field.name not in INPUTS}
    found |= {("predict", action.dest) for action in predict_parser_actions() if looks_like_output(action.dest)}
    assert found == set(OUTPUTS) - {("train", "mlflow")}


def predict_parser_actions():
    """predict.py's flags (argparse, not a config class), as its parser has them."""
    actions = []

    class Spy(cli.Parser):
        def parse_args(self, args=None, namespace=None):
            actions.extend(self._actions)
            raise SystemExit(0)

    original = cli.Parser
    cli.Parser = Spy
    try:
        with pytest.raises(SystemExit):
            predict.parse_args(["x"])
    finally:
        cli.Parser = original
    return actions


@pytest.fixture(scope="module")
def places(tiny_model, tmp_path_factory) -> dict[str, str]:
    """A finished tiny run (RUN), its data, a recipe and a space for the search."""
    root = tmp_path_factory.mktemp("places")
    (root / "data").mkdir()
    data = write_course_files(root / "data", random.Random(0), train_rows=16)
    run = root / "run"
    train.main([word.replace("MODEL", str(tiny_model)).replace("DATA", str(data)).replace("OUT/run", str(run))
                for word in TRAIN] + ["--batch-size", "8", "--predictions-dir", str(root / "predictions")])
    (root / "recipe.yaml").write_text(f"model: {tiny_model}\ndata-dir: {data}\ndevice: cpu\nepochs: 1\n")
    (root / "space.yaml").write_text("lr: [1.0e-3]\n")
    return {"MODEL": str(tiny_model), "DATA": str(data), "RUN": str(run), "RECIPE": str(root / "recipe.yaml"),
            "SPACE": str(root / "space.yaml")}


def refusal(command: str, words: list[str], places: dict[str, str], out: Path, capsys) -> str:
    """The one line (exit code 2) of a command line of OUTPUTS, its OUT and places put in."""
    words = words[:1] + cli.last_wins(words[1:]) if not words[0].startswith("--") else cli.last_wins(words)
    argv = [word.replace("OUT", str(out)) for word in words]
    for name, value in places.items():
        argv = [word.replace(name, value) if word in (name, f"{name}/") or word.startswith(name) else word
                for word in argv]
    main = MAINS.get(command) or analyze.main
    with pytest.raises(SystemExit) as exit_:
        cli.run(lambda: main(argv))
    assert exit_.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("command, flag", sorted(OUTPUTS), ids=[" ".join(key) for key in sorted(OUTPUTS)])
@pytest.mark.parametrize("inside", ["best", "run"])
def test_no_output_goes_inside_another_runs_folder_or_checkpoint(places, tmp_path, monkeypatch, capsys, command,
                                                                   flag, inside):
    run = Path(places["RUN"])
    place = run / "best" / "x" if inside == "best" else run / "x"
    if (command, flag) == ("train", "mlflow"):
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{place}/mlflow.db")
    before = sorted(str(path) for path in run.rglob("*"))
    last = refusal(command, [word.replace("PLACE", str(place)) for word in OUTPUTS[command, flag]], places, tmp_path,
                   capsys)
    kind = "a checkpoint folder" if inside == "best" else "a run folder"
    assert f"inside {run / 'best' if inside == 'best' else run}, {kind}, whose files its own commands write" in last
    assert sorted(str(path) for path in run.rglob("*")) == before, "the run's folder as it was"


@pytest.mark.parametrize("command, flag", sorted(OUTPUTS), ids=[" ".join(key) for key in sorted(OUTPUTS)])
def test_no_output_is_a_named_pipe_and_each_is_refused_before_the_work(places, tmp_path, monkeypatch, capsys, command,
                                                                        flag):
    """Every output flag given a named pipe: one line naming it, before the command's work (for the benchmark, the
    model would load and the tiny data's missing STS sets be named), and the pipe is still a pipe."""
    pipe = tmp_path / "a-pipe"
    os.mkfifo(pipe)
    if (command, flag) == ("train", "mlflow"):
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{pipe}")
    words = [str(pipe) if "PLACE" in word else word for word in OUTPUTS[command, flag]]
    last = refusal(command, words, places, tmp_path, capsys)
    assert last.startswith("error: ") and last.endswith(f" {pipe}: a named pipe, not a regular file or folder; give "
                                                        f"the path of a file or folder to write")
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)


def test_the_benchmark_file_may_go_in_the_models_own_folder(places, tmp_path, capsys):
    """The one exception: `minbert benchmark --out MODEL/b.json`, which the model's card reads, is not refused by the
    rule (these tiny course files have no STS benchmark sets: the command goes on until it looks for them)."""
    model = Path(shutil.copytree(places["RUN"], tmp_path / "run")) / "best"
    with pytest.raises(SystemExit) as exit_:
        cli.run(lambda: benchmark.main(["--model", str(model), "--data-dir", places["DATA"], "--out",
                                        str(model / "b.json"), "--device", "cpu"]))
    assert exit_.value.code == 2
    assert "sts-eval/sts12.tsv: file not found" in capsys.readouterr().err
