"""minbert benchmark scores a folder's embeddings as sentence-transformers computes them (unless told
otherwise), and adds the results to the folder's model card when --out writes into it."""
import json
import random

import pytest
import scipy.stats
import torch
from sentence_transformers import SentenceTransformer

from minbert.commands import benchmark
from minbert.evaluation.sts_benchmark import EVAL_SETS, pair_embeddings, read_sets
from minbert.models import SentenceEncoder
from minbert.models.shareable import write_shareable_files
from minbert.common.cli import last_wins
from tests.conftest import sentence

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def sts_data(tmp_path_factory):
    """sts-eval/*.tsv and sts-dev.csv of random sentences, scores 0-5 (some >= 4, for alignment)."""
    folder, rng = tmp_path_factory.mktemp("sts-data"), random.Random(0)

    def pair():
        return "\t".join(sentence(rng) for _ in range(2))

    (folder / "sts-eval").mkdir()
    for name in EVAL_SETS:
        rows = [f"{name}-part\t{pair()}\t{i / 2:.1f}" for i in range(11)]
        (folder / "sts-eval" / f"{name}.tsv").write_text("subset\tsentence1\tsentence2\tscore\n" + "\n".join(rows))
    rows = [f"{i}\tdev-{i}\t{pair()}\t{i / 2:.1f}" for i in range(11)]
    (folder / "sts-dev.csv").write_text("\tid\tsentence1\tsentence2\tsimilarity\n" + "\n".join(rows) + "\n")
    return folder


def run(model, sts_data, tmp_path, *flags) -> tuple[str, dict]:
    """The pooling the command used (from its --out file) and its results."""
    out = tmp_path / "out.json"
    results = benchmark.main(last_wins(["--model", str(model), "--data-dir", str(sts_data), "--device", "cpu",
                                            "--precision", "fp32", "--out", str(out), *flags]))
    return json.loads(out.read_text())["pooling"], results


def shared(save_tiny_checkpoint, pooling):
    """A folder as our runs save it: the checkpoint, its sentence-transformers files and its model card."""
    folder = save_tiny_checkpoint({"pooling": pooling})
    write_shareable_files(folder, pooling=pooling, max_length=16, base_model="all-MiniLM-L6-v2",
                          command="python pretrain_contrastive.py", metrics={"train": {"steps": 1}},
                          metrics_kind="training", data_files=[])
    return folder


def assert_scored_as_sentence_transformers_embeds(folder, data_dir, score: float, name="sts12") -> None:
    """Independent truth: SentenceTransformer(folder)'s embeddings of the set equal those the benchmark scores (to
    fp32 rounding: unit vectors of a few dozen dimensions, 1e-5), and the benchmark's score is scipy's Spearman x 100
    of their cosines. (Spearman itself is not compared across the two: a tiny random model's cosines all lie within
    2e-5 of each other, so rounding differences of 1e-7 between two implementations reorder them.)"""
    pairs = read_sets(data_dir)[name]
    first, second = pair_embeddings(SentenceEncoder.from_pretrained(str(folder)), pairs)
    model = SentenceTransformer(str(folder), device="cpu")
    for ours, texts in ((first, [p.sentence1 for p in pairs]), (second, [p.sentence2 for p in pairs])):
        theirs = torch.nn.functional.normalize(model.encode(texts, convert_to_tensor=True).cpu(), dim=-1)
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    cosines = (first * second).sum(-1).numpy()
    assert score == pytest.approx(100 * scipy.stats.spearmanr(cosines, [p.label for p in pairs]).statistic, abs=1e-4)


def test_a_folder_is_scored_as_sentence_transformers_embeds_it_unless_told(save_tiny_checkpoint, sts_data, tmp_path):
    folder = shared(save_tiny_checkpoint, "cls")
    pooling, results = run(folder, sts_data, tmp_path)
    assert pooling == "cls"
    assert_scored_as_sentence_transformers_embeds(folder, sts_data, results["sts12"])
    pooling, explicit = run(folder, sts_data, tmp_path, "--pooling", "mean")
    assert pooling == "mean" and explicit["mean"] != pytest.approx(results["mean"])
    plain = save_tiny_checkpoint({"pooling": "cls"})  # no sentence-transformers files: it mean-pools, as they do
    pooling, results = run(plain, sts_data, tmp_path)
    assert pooling == "mean"
    assert_scored_as_sentence_transformers_embeds(plain, sts_data, results["sts12"])


def test_out_in_the_folder_adds_the_results_to_its_model_card_once(save_tiny_checkpoint, sts_data, tmp_path):
    folder = shared(save_tiny_checkpoint, "mean")
    card = folder / "README.md"
    before = card.read_text()
    run(folder, sts_data, tmp_path)  # --out elsewhere: the card stays as it was
    assert card.read_text() == before
    for _ in range(2):  # a second run replaces the section
        results = benchmark.main(["--model", str(folder), "--data-dir", str(sts_data), "--device", "cpu",
                                  "--precision", "fp32", "--out", str(folder / "benchmark.json")])
    assert json.loads((folder / "benchmark.json").read_text())["model"] == folder.name  # no path of this machine
    text = card.read_text()
    assert text.count("## STS benchmark of the embeddings") == 1
    assert f"| sts-dev | {results['sts-dev']:.4f} |" in text and f"| mean | {results['mean']:.4f} |" in text
    section = text[text.index("## STS benchmark"):text.index("## Usage")]
    assert "before" not in section and "after" not in section, section  # its table has no such rows
    # The card is whole: what it said before is still there, and the new section comes before the usage.
    assert text.index("## Training statistics") < text.index("## STS benchmark") < text.index("## Usage")
    assert text.replace(text[text.index("## STS benchmark"):text.index("## Usage")], "") == before
