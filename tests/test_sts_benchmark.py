"""python -m evaluation.sts_benchmark scores a checkpoint with the pooling it was trained with, unless told."""
import json
import random

import pytest

from evaluation import sts_benchmark
from models import Tokenizer, from_pretrained
from tests.conftest import sentence

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def sts_data(tmp_path_factory):
    """sts-eval/*.tsv and sts-dev.csv of random sentences, scores 0-5 (some >= 4, for alignment)."""
    folder, rng = tmp_path_factory.mktemp("sts-data"), random.Random(0)

    def pair():
        return "\t".join(sentence(rng) for _ in range(2))

    (folder / "sts-eval").mkdir()
    for name in sts_benchmark.EVAL_SETS:
        rows = [f"{name}-part\t{pair()}\t{i / 2:.1f}" for i in range(11)]
        (folder / "sts-eval" / f"{name}.tsv").write_text("subset\tsentence1\tsentence2\tscore\n" + "\n".join(rows))
    rows = [f"{i}\tdev-{i}\t{pair()}\t{i / 2:.1f}" for i in range(11)]
    (folder / "sts-dev.csv").write_text("\tid\tsentence1\tsentence2\tsimilarity\n" + "\n".join(rows) + "\n")
    return folder


def run(model, sts_data, tmp_path, *flags) -> tuple[str, dict]:
    """The pooling the command used (from its --out file) and its results."""
    out = tmp_path / "out.json"
    results = sts_benchmark.main(["--model", str(model), "--data-dir", str(sts_data), "--device", "cpu",
                                  "--out", str(out), *flags])
    return json.loads(out.read_text())["pooling"], results


def test_a_checkpoint_is_scored_with_its_own_pooling_unless_told(save_tiny_checkpoint, sts_data, tmp_path):
    folder = save_tiny_checkpoint({"pooling": "mean"})
    encoder, tokenizer = from_pretrained(folder), Tokenizer.from_pretrained(folder)
    pooling, results = run(folder, sts_data, tmp_path)
    assert pooling == "mean"
    assert results == pytest.approx(sts_benchmark.sts_benchmark(encoder, tokenizer, sts_data, "mean"))
    pooling, explicit = run(folder, sts_data, tmp_path, "--pooling", "cls")
    assert pooling == "cls"
    assert explicit == pytest.approx(sts_benchmark.sts_benchmark(encoder, tokenizer, sts_data, "cls"))
    assert explicit["mean"] != pytest.approx(results["mean"])  # the two poolings score differently
    (folder / "run_config.json").unlink()  # not one of ours (or an old one): cls, as before
    assert run(folder, sts_data, tmp_path)[0] == "cls"
