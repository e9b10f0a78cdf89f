"""Everything downstream of the encoder with an MPNet (all-mpnet-base-v2's family), on a tiny random one: the heads
under every schedule with a cross-encoded paraphrase head, every contrastive method, predict, ensemble, silver
data, the search and the analysis; and the bad inputs a base-size model brings."""
import json
import re
import subprocess
import sys

import pytest

import multitask_classifier
import pretrain_contrastive
from minbert.commands import analyze, ensemble, predict, search
from minbert.commands import silver as silver_command
from minbert.models import Tokenizer, from_pretrained
from minbert.training.methods import METHODS
from minbert.training.schedules import SCHEDULES
from tests.conftest import multitask_argv


@pytest.fixture(scope="module")
def mpnet_runs(tiny_mpnet, course_data, tmp_path_factory, one_thread):
    """Two finished tiny MPNet runs (seeds 1 and 2): MT-DNN, Quora cross-encoded (<s> A </s></s> B </s>)."""
    runs = []
    for seed in ("1", "2"):
        out = tmp_path_factory.mktemp(f"mpnet-run-{seed}")
        multitask_classifier.main(multitask_argv(tiny_mpnet, course_data, out, "--epochs", "1", "--quiet", "--seed",
                                                 seed, "--pair-encoding", "para=cross,sts=bi"))
        runs.append(out / "run")
    return runs


@pytest.fixture(scope="module")
def mpnet_run(mpnet_runs):
    return mpnet_runs[0]


def test_a_run_saves_an_mpnet(mpnet_run):
    saved = json.loads((mpnet_run / "best" / "config.json").read_text())
    assert saved["model_type"] == "mpnet" and saved["architectures"] == ["MPNetModel"]


@pytest.mark.parametrize("schedule", [s for s in SCHEDULES if s != "mtdnn"] + ["pcgrad"])
def test_every_schedule_trains_an_mpnet(tiny_mpnet, course_data, tmp_path, schedule, one_thread):
    flags = ["--schedule", "avg", "--combine", "pcgrad"] if schedule == "pcgrad" else ["--schedule", schedule]
    epochs = "3" if schedule == "sequential" else "1"  # sequential: an epoch a task at least
    metrics = multitask_classifier.main(multitask_argv(tiny_mpnet, course_data, tmp_path, *flags, "--epochs", epochs,
                                                       "--max-steps", "3", "--quiet", "--no-predict-test"))
    assert {"sst", "para", "sts", "overall"} <= set(metrics)


@pytest.mark.parametrize("method", METHODS)
def test_every_contrastive_method_pretrains_an_mpnet(tiny_mpnet, contrastive_data, tmp_path, method, one_thread):
    out = tmp_path / method
    pretrain_contrastive.main(["--model", str(tiny_mpnet), "--data-dir", str(contrastive_data), "--output-dir",
                               str(out), "--method", method, "--data", "sts", "--max-steps", "1", "--device", "cpu",
                               "--batch-size", "8", "--quiet"])  # Contrastive Tension: a multiple of K + 1
    encoder = out if (out / "config.json").is_file() else out / "model1"  # Contrastive Tension: two encoders
    assert from_pretrained(encoder).config.model_type == "mpnet"


def test_predict_ensemble_silver_and_analysis_take_an_mpnet_run(mpnet_runs, tiny_mpnet, course_data, tmp_path,
                                                                one_thread):
    mpnet_run = mpnet_runs[0]
    printed = predict.main([str(mpnet_run), "--sts", "the cat sat", "a cat sat", "--para", "a dog", "the dog",
                            "--device", "cpu"])
    assert [row["task"] for row in printed] == ["para", "sts"] and 0 <= printed[1]["similarity"] <= 5
    report = ensemble.main(["--members", ",".join(map(str, mpnet_runs)), "--data-dir", str(course_data),
                            "--predictions-dir", str(tmp_path / "ensemble"), "--out", str(tmp_path / "e.json")])
    assert len(report["members"]) == 2 and 0 <= report["ensemble"]["overall"] <= 1
    bank = tmp_path / "bank.txt"
    bank.write_text("the big dog ran\na small cat sat on the mat\nthe red car\nthe house\n")
    info = silver_command.main(["--teacher", str(mpnet_run), "--bank", str(bank), "--data-dir", str(course_data),
                                "--retriever", str(tiny_mpnet), "--out", str(tmp_path / "silver"), "--cache-dir",
                                str(tmp_path / "cache"), "--device", "cpu", "--neighbours", "2", "--per-class", "1",
                                "--pair-sentences", "20"])
    assert info
    written = analyze.main(["errors", "--run", str(mpnet_run), "--data-dir", str(course_data), "--out",
                            str(tmp_path / "errors")])
    assert any(path.suffix == ".png" for path in written)


def test_the_search_trains_an_mpnet(tiny_mpnet, course_data, tmp_path, one_thread):
    recipe, space = tmp_path / "recipe.yaml", tmp_path / "space.yaml"
    recipe.write_text(f"model: {tiny_mpnet}\ndata-dir: {course_data}\ndevice: cpu\nbatch-size: 8\nepochs: 1\n"
                      f"max-steps: 2\n")
    space.write_text("head-dropout: {low: 0.0, high: 0.3}\n")
    study = search.main(["--config", str(recipe), "--space", str(space), "--study-dir", str(tmp_path / "study"),
                         "--trials", "1", "--pruner", "none"])
    assert len(study.trials) == 1 and study.trials[0].value is not None


def test_a_tokenizer_that_is_not_its_models_is_one_line(tiny_mpnet, tiny_model, course_data, tmp_path):
    # MPNet's weights beside a BERT vocabulary: token ids beyond the model's embeddings, another padding id.
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for file in ("config.json", "model.safetensors"):
        (mixed / file).write_bytes((tiny_mpnet / file).read_bytes())
    Tokenizer.from_pretrained(tiny_model).backend.save_pretrained(mixed)
    result = subprocess.run([sys.executable, "multitask_classifier.py", *multitask_argv(mixed, course_data, tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    assert re.fullmatch(r"error: .*mixed: its tokenizer does not match its model \(the tokenizer has 30,522 tokens, "
                        r"the model's embeddings \d+; the tokenizer pads with id 0, the model with 1\); .*\n",
                        result.stderr.splitlines(keepends=True)[-1])


def test_resuming_a_run_with_another_model_is_one_line(tiny_model, tiny_mpnet, course_data, tmp_path, one_thread):
    argv = multitask_argv(tiny_model, course_data, tmp_path, "--epochs", "1", "--max-steps", "1", "--quiet")
    multitask_classifier.main(argv)
    result = subprocess.run([sys.executable, "multitask_classifier.py",
                             *multitask_argv(tiny_mpnet, course_data, tmp_path, "--epochs", "1", "--resume")],
                            capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    assert re.fullmatch(r"error: --resume: --model .*tiny-mpnet\d+ \(the run's: .*tiny-bert\d+\): the run continues "
                        r"with its own flags .*", result.stderr.splitlines()[-1])
