"""training/methods.py, the contrastive method registry, through the config pretrain_contrastive.py builds from its
flags and the pretraining it sets up: each method's papers' defaults (and the --help that lists them), its flags
reaching its objective, the flags it refuses, its learning rates and its stages."""
import dataclasses
import re
from pathlib import Path

import pytest
from torch import nn

from minbert.common import cli
from minbert.data.contrastive import PairSet, SentenceSet, TripletSet
from minbert.heads import MLP
from minbert.training.contrastive import Pretraining
from minbert.engine.engine import Engine
from minbert.training.methods import METHODS, OWN_FLAGS, ContrastiveConfig
from minbert.common.cli import last_wins

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[1]


def parsed(*argv: str) -> ContrastiveConfig:
    return cli.parse_config(ContrastiveConfig, "", last_wins(["--device", "cpu", *argv]))


def pretraining(tiny_model, data, out, *argv: str) -> Pretraining:
    """What pretrain_contrastive.py sets up before it trains."""
    config = parsed("--model", str(tiny_model), "--data-dir", str(data), "--output-dir", str(out), *argv)
    return Pretraining(config, Engine(config))


# The papers' values, as pretrain_contrastive.py --help and the README state them.
PAPERS = {"simcse": dict(batch_size=64, max_length=32, pooling="cls", temperature=0.05, warmup=0.0),
          "mnrl": dict(batch_size=32, max_length=64, pooling="mean", temperature=None, warmup=0.1),
          "ct": dict(batch_size=16, max_length=75, pooling="mean", temperature=None, warmup=0.0),
          "sg": dict(batch_size=16, max_length=64, pooling="cls", temperature=0.01, warmup=0.0),
          "sg-opt": dict(batch_size=16, max_length=64, pooling="cls", temperature=0.01, warmup=0.0),
          "consert": dict(batch_size=96, max_length=64, pooling="mean", temperature=0.1, warmup=0.1)}


def listed_defaults(flag: str) -> dict[str, str]:
    """Each method's default as the flag's --help lists it: "(default per method: a, b 16; c 64)" -> a, b: 16; c: 64."""
    text = next(field.metadata["help"] for field in dataclasses.fields(ContrastiveConfig) if field.name == flag)
    listed = {}
    for group in re.search(r"\(default per method: ([^)]*?)(; ct has [^)]*)?\)", text).group(1).split("; "):
        *names, last = group.split(", ")
        last_name, value = last.split(" ")
        listed |= dict.fromkeys([*names, last_name], value)
    return listed


@pytest.mark.parametrize("flag", ["batch_size", "max_length", "pooling", "temperature", "warmup"])
def test_the_help_lists_each_methods_papers_default(flag):
    assert listed_defaults(flag) == {method: f"{value:g}" if isinstance(value, float) else str(value)
                                     for method, values in PAPERS.items() if (value := values[flag]) is not None}


def test_the_help_lists_each_methods_learning_rates_and_projection():
    helps = {field.name: field.metadata["help"] for field in cli.flag_fields(ContrastiveConfig)}
    assert ("(default per method and data: simcse 5e-5 NLI, 2e-5 Quora, 3e-5 sentences; mnrl 2e-5; ct 1e-5; "
            "sg, sg-opt 5e-5; consert 2e-5 NLI, 5e-7 unsup)") in helps["lr"]
    assert "auto: on for simcse, off for mnrl, consert; ct, sg, sg-opt score in their own way" in helps["projection"]


@pytest.mark.parametrize("method", METHODS)
def test_each_method_takes_its_papers_defaults_and_the_flags_given_instead(method):
    config = parsed("--method", method)
    assert {name: getattr(config, name) for name in PAPERS[method]} == PAPERS[method]
    assert config.output_dir == str(ROOT / "runs" / f"pretrain-{method}")  # the repository's, wherever it runs from
    assert parsed("--method", method, "--batch-size", "24", "--pooling", "pooler").batch_size == 24
    assert parsed("--method", method, "--pooling", "pooler").pooling == "pooler"


@pytest.mark.parametrize("method, argv, data, reached", [
    ("simcse", ["--temperature", "0.2", "--no-negatives"], "quora",
     lambda o: (o.temperature, o.use_negative_pairs, isinstance(o.projection, MLP)) == (0.2, False, True)),
    ("simcse", ["--projection", "off"], "nli", lambda o: isinstance(o.projection, nn.Identity)),
    ("mnrl", ["--scale", "7", "--projection", "on"], "nli",
     lambda o: (o.scale, isinstance(o.projection, MLP)) == (7.0, True)),
    ("ct", ["--negatives-per-positive", "3", "--batch-size", "8", "--pooling", "cls"], "unlabeled",
     lambda o: (o.negatives_per_positive, o.pooling) == (3, "cls")),
    ("sg", ["--sg-lambda", "0.5", "--temperature", "0.2"], "unlabeled",
     lambda o: (o.regulariser_weight, o.temperature, o.optimized) == (0.5, 0.2, False)),
    ("sg-opt", [], "unlabeled", lambda o: o.optimized),
    ("consert", ["--aug1", "none", "--aug2", "token-cutoff", "--temperature", "0.3"], "unlabeled",
     lambda o: (o.augmentations, o.temperature) == (("none", "token-cutoff"), 0.3)),
    ("consert", ["--consert-stages", "joint", "--alpha", "0.4", "--fgv-epsilon", "2", "--aug2", "adversarial"],
     "nli", lambda o: (o.contrastive, o.alpha, o.fgv_epsilon, o.augmentations) == (True, 0.4, 2.0,
                                                                                    ("shuffle", "adversarial"))),
])
def test_a_methods_flags_reach_the_objective_it_trains(tiny_model, contrastive_data, tmp_path, method, argv, data,
                                                      reached):
    objective = pretraining(tiny_model, contrastive_data, tmp_path, "--method", method, "--data", data,
                            *argv).stages[-1].objective
    assert reached(objective)


@pytest.mark.parametrize("flag", OWN_FLAGS)
def test_a_methods_own_flag_is_refused_by_every_other_method(flag, capsys):
    value = {"negatives": "--no-negatives", "aug1": "--aug1 none", "aug2": "--aug2 none",
             "consert_stages": "--consert-stages sup-unsup",
             "negatives_per_positive": "--negatives-per-positive 3"}.get(flag, f"--{flag.replace('_', '-')} 0.5")
    others = [name for name in METHODS if name not in OWN_FLAGS[flag]]
    assert others
    for method in others:
        with pytest.raises(SystemExit) as exit_info:
            parsed("--method", method, *value.split())
        assert exit_info.value.code == 2
        assert f"{value}: a flag of {', '.join(OWN_FLAGS[flag])}, not of {method}" in capsys.readouterr().err
    for method in OWN_FLAGS[flag]:  # and taken by its own
        if flag != "negatives_per_positive":  # ct's K must divide the batch: 16 = 4 x (3 + 1)
            parsed("--method", method, *value.split())
    parsed("--method", "ct", "--negatives-per-positive", "3")


def test_multitask_spellings_are_not_contrastive_flags(capsys):
    """ConSERT's stage order is --consert-stages: --schedule is multitask_classifier.py's task schedule."""
    with pytest.raises(SystemExit):
        parsed("--method", "consert", "--schedule", "joint")
    assert "unrecognized arguments: --schedule joint" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--method", "consert", "--aug2", "adversarial"], "the adversarial view needs the supervised loss"),
    (["--method", "consert", "--consert-stages", "sup-unsup", "--grad-cache-chunk", "4"], "cannot be cached"),
    (["--method", "ct", "--batch-size", "12"], "--batch-size 12 is not a multiple of K + 1 = 8"),
    (["--method", "ct", "--fusion"], "CT trains on its own pairs"),
    (["--method", "sg", "--projection", "on"], "sg defines its own scoring"),
    (["--grad-accum", "2"], "use --grad-cache-chunk for that"),
])
def test_what_a_method_cannot_do_is_a_usage_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parsed(*argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("method, data, extra, rates", [
    # SimCSE 5e-5 supervised (NLI), 3e-5 unsupervised; Chen's CS224N report 2e-5 with Quora.
    ("simcse", "nli", [], {"train": 5e-5}), ("simcse", "unlabeled", [], {"train": 3e-5}),
    ("simcse", "quora", [], {"train": 2e-5}),
    ("mnrl", "nli", [], {"train": 2e-5}), ("ct", "unlabeled", [], {"train": 1e-5}),
    ("sg", "unlabeled", [], {"train": 5e-5}),
    # ConSERT: 2e-5 for NLI, its paper's 5e-7 for unsupervised; each stage its own.
    ("consert", "sts", ["--consert-stages", "sup-unsup"], {"sup": 2e-5, "unsup": 5e-7}),
])
def test_the_default_learning_rate_is_the_methods_for_each_stage_and_data(tiny_model, contrastive_data, tmp_path,
                                                                          method, data, extra, rates):
    run = pretraining(tiny_model, contrastive_data, tmp_path / "default", "--method", method, "--data", data, *extra)
    assert {stage.name: stage.lr for stage in run.stages} == pytest.approx(rates)
    assert run.engine.run_config["resolved"]["lr"] == pytest.approx(rates)
    again = pretraining(tiny_model, contrastive_data, tmp_path / "given", "--method", method, "--data", data,
                        "--lr", "1e-3", *extra)
    assert {stage.lr for stage in again.stages} == {1e-3}


@pytest.mark.parametrize("schedule, data, kinds", [
    ("unsup", "sts", {"unsup": SentenceSet}),
    ("joint", "nli", {"joint": TripletSet}),
    ("sup-unsup", "quora", {"sup": TripletSet, "unsup": SentenceSet}),  # the sentences of the pairs
    ("joint-unsup", "nli", {"joint": TripletSet, "unsup": SentenceSet}),
])
def test_consert_stages_gives_its_stages_and_their_data(tiny_model, contrastive_data, tmp_path, schedule, data,
                                                          kinds):
    run = pretraining(tiny_model, contrastive_data, tmp_path, "--method", "consert", "--consert-stages",
                      schedule, "--data", data)
    assert {stage.name: type(stage.datasets[0]) for stage in run.stages} == kinds
    assert all(stage.objective.encoder is run.encoder for stage in run.stages)  # one encoder goes through them


def test_simcse_on_quora_keeps_the_pairs_and_their_labels(tiny_model, contrastive_data, tmp_path):
    stage = pretraining(tiny_model, contrastive_data, tmp_path, "--data", "quora").stages[0]
    assert isinstance(stage.datasets[0], PairSet) and set(stage.datasets[0].labels) == {0.0, 1.0}
