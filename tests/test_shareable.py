"""write_shareable_files: SentenceTransformer(folder) and transformers compute our embeddings, with the base model's
Normalize and max_seq_length; the model card."""
import json
import re

import pytest
import torch
import transformers
from sentence_transformers import SentenceTransformer

from minbert import checkpoint
from minbert.models import POOLINGS, Tokenizer, embed_sentences, from_pretrained
from minbert.models.checkpoint import save_checkpoint
from minbert.models.shareable import (
    FOLDER_PLACEHOLDER,
    KNOWN_CONVENTIONS,
    Convention,
    sentence_convention,
    describe_base_model,
    front_matter,
    write_shareable_files,
)
from minbert.tasks import metric_names

MAX_LENGTH = 16  # the training crop; the folders' max_seq_length is the encoder's (128 positions here)
POSITIONS = 128
# Mixed lengths, so every batch is padded; the third is longer than MAX_LENGTH tokens (not than POSITIONS).
SENTENCES = ["Hi.", "A man is playing a guitar.",
             "The quick brown fox jumps over the lazy dog near the river bank at dawn, twice, then once more.",
             "Two dogs run on the beach."]
METRICS = {"sst": 0.4886, "para": 0.8436, "sts": 0.8778, "overall": 0.7571, "mean": 0.7367}
COMMAND = "python multitask_classifier.py --model all-MiniLM-L6-v2 --pooling cls --max-length 16"


pytestmark = pytest.mark.usefixtures("one_thread")


def share(folder, pooling, base_model="all-MiniLM-L6-v2", **card):
    card = {"command": COMMAND, "metrics": METRICS, "data_files": ["data/ids-sst-train.csv", "data/sts-train.csv"],
            "metric_names": metric_names(), **card}
    write_shareable_files(folder, pooling=pooling, max_length=MAX_LENGTH, base_model=base_model, **card)
    return folder


def ours(folder, pooling, sentences=SENTENCES, max_length=POSITIONS, normalize=False):
    embeddings = embed_sentences(from_pretrained(folder), Tokenizer.from_pretrained(folder), sentences, pooling,
                                 max_length=max_length)
    return torch.nn.functional.normalize(embeddings, dim=-1) if normalize else embeddings


def sentence_transformers_embeddings(folder):
    return SentenceTransformer(str(folder), device="cpu").encode(SENTENCES, convert_to_tensor=True)


def assert_equal_embeddings(actual, expected):
    torch.testing.assert_close(torch.as_tensor(actual).cpu(), expected, atol=1e-5, rtol=0)


# A base with a Normalize module (all-MiniLM-L6-v2) and one without (a bare transformers folder).
BASES = {"normalizing": "all-MiniLM-L6-v2", "plain": None}


@pytest.fixture(params=list(BASES))
def base(request, tiny_model):
    """(base model, whether its sentence-transformers users get length-1 embeddings)."""
    return BASES[request.param] or str(tiny_model), request.param == "normalizing"


@pytest.mark.parametrize("pooling", POOLINGS)
def test_sentence_transformers_computes_our_embeddings(save_tiny_checkpoint, pooling, base):
    base_model, normalize = base
    folder = share(save_tiny_checkpoint({"pooling": pooling}), pooling, base_model)
    assert len(Tokenizer.from_pretrained(folder).encode(SENTENCES[2:3], max_length=64)[0].input_ids) > MAX_LENGTH
    theirs = sentence_transformers_embeddings(folder)
    assert_equal_embeddings(theirs, ours(folder, pooling, normalize=normalize))
    norms = theirs.norm(dim=-1).cpu()
    assert torch.allclose(norms, torch.ones(len(SENTENCES)), atol=1e-5) == normalize, norms


def test_a_fine_tuned_all_minilm_embeds_as_the_published_all_minilm(minilm_dir, tmp_path):
    # Independent truth: all-MiniLM-L6-v2 saved by us untrained, with a 16-token training crop, must give in
    # sentence-transformers exactly what the published folder gives: mean pooling, length 1, 256 tokens.
    long_sentence = " ".join(["The quick brown fox jumps over the lazy dog."] * 40)  # ~400 tokens
    sentences = SENTENCES + [long_sentence]
    folder = save_checkpoint(tmp_path / "minilm", from_pretrained(minilm_dir), Tokenizer.from_pretrained(minilm_dir),
                             {})
    share(folder, "mean", base_model="all-MiniLM-L6-v2")
    published, shared = (SentenceTransformer(str(f), device="cpu") for f in (minilm_dir, folder))
    assert shared.max_seq_length == published.max_seq_length == 256
    expected = published.encode(sentences, convert_to_tensor=True)
    torch.testing.assert_close(shared.encode(sentences, convert_to_tensor=True), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(expected.norm(dim=-1), torch.ones(len(sentences)))


def test_max_seq_length_is_the_encoders_not_the_training_crop(save_tiny_checkpoint, tiny_model):
    # The base's own value where it has one, capped by the encoder's positions; else the positions.
    for base_model in ("all-MiniLM-L6-v2", str(tiny_model), "bert-base-uncased"):
        folder = share(save_tiny_checkpoint({}), "mean", base_model)
        assert json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"] == POSITIONS
        assert SentenceTransformer(str(folder), device="cpu").max_seq_length == POSITIONS
        assert f"Inputs longer than {POSITIONS} tokens are truncated" in (folder / "README.md").read_text()


def test_the_sentence_convention_comes_from_its_folder_its_hub_id_and_carries_down_a_chain(
        save_tiny_checkpoint, tiny_model, minilm_dir, monkeypatch):
    assert sentence_convention("all-MiniLM-L6-v2") == Convention(normalize=True, max_seq_length=256)
    assert sentence_convention(str(minilm_dir)) == Convention(normalize=True, max_seq_length=256)
    assert sentence_convention(str(tiny_model)) == sentence_convention("bert-base-uncased") == Convention()
    # A run started from one of our folders inherits the Normalize its own base gave it.
    first = share(save_tiny_checkpoint({}), "cls", "all-MiniLM-L6-v2")
    assert sentence_convention(str(first)) == Convention(normalize=True, max_seq_length=POSITIONS, pooling="cls")
    # Without the package, the hub id's known convention: the published folder's, as the package ships it.
    monkeypatch.setattr("minbert.models.shareable.packaged_folder", lambda name: None)
    assert sentence_convention("sentence-transformers/all-MiniLM-L6-v2") == sentence_convention("all-MiniLM-L6-v2") \
        == KNOWN_CONVENTIONS["sentence-transformers/all-minilm-l6-v2"] == Convention(True, 256)


def test_without_the_files_sentence_transformers_mean_pools_a_cls_checkpoint(save_tiny_checkpoint):
    # What the test above guards against: with no modules.json, SentenceTransformer loads anyway and
    # mean-pools (these sentences untruncated), so a [CLS]-trained encoder's embeddings come out different.
    folder = save_tiny_checkpoint({"pooling": "cls"})
    plain = sentence_transformers_embeddings(folder)
    assert_equal_embeddings(plain, ours(folder, "mean", max_length=64))
    assert (plain.cpu() - ours(folder, "cls", max_length=64)).abs().max() > 0.1


@pytest.mark.parametrize("pooling", POOLINGS)
def test_the_cards_three_snippets_compute_our_embeddings(save_tiny_checkpoint, pooling, base):
    base_model, normalize = base
    folder = share(save_tiny_checkpoint({"pooling": pooling}), pooling, base_model)
    snippets = re.findall(r"```python\n(.*?)```", (folder / "README.md").read_text(), re.DOTALL)
    assert [("SentenceEncoder" in s, "AutoModel" in s, "SentenceTransformer" in s) for s in snippets] == [
        (True, False, False), (False, True, False), (False, False, True)]
    for code in snippets:
        namespace = {}
        exec(code.replace(FOLDER_PLACEHOLDER, str(folder)), namespace)
        assert_equal_embeddings(namespace["embeddings"],
                                ours(folder, pooling, namespace["sentences"], normalize=normalize))


def test_config_names_bert_and_transformers_loads_every_tensor(save_tiny_checkpoint):
    folder = share(save_tiny_checkpoint({}), "mean")
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["BertModel"] and config["model_type"] == "bert"
    _, info = transformers.BertModel.from_pretrained(folder, output_loading_info=True)
    assert not any(info.values()), info


def test_card_holds_base_model_license_data_command_and_named_metrics(save_tiny_checkpoint, minilm_dir):
    folder = share(save_tiny_checkpoint({}), "cls", base_model=str(minilm_dir))
    card = (folder / "README.md").read_text()
    meta = front_matter(folder / "README.md")
    assert meta["license"] == "apache-2.0"  # read from the base folder's own card
    assert meta["library_name"] == "sentence-transformers" and "base_model" not in meta  # a path is no hub id
    assert "## Dev metrics of the task heads" in card and "sample" not in card
    # Which numbers are the heads' and which the embeddings': these are the heads', STS's too.
    assert checkpoint.HEADS in card and "not the cosine of this folder's embeddings" in card
    for row in ("| SST-5 accuracy (`sst`) | 0.4886 |", "| Quora accuracy (`para`) | 0.8436 |",
                "| STS Pearson r (`sts`) | 0.8778 |",
                "| course overall score: mean(SST acc, Quora acc, (STS r + 1) / 2) (`overall`) | 0.7571 |",
                "| plain mean of SST acc, Quora acc and STS r (`mean`) | 0.7367 |"):
        assert row in card
    assert f"```bash\n{COMMAND}\n```" in card
    assert "- `ids-sst-train.csv`\n- `sts-train.csv`" in card


def test_card_names_no_local_path_and_says_when_dev_scores_are_a_sample(save_tiny_checkpoint, tiny_model, tmp_path):
    data = tmp_path / "my data"
    command = (f"python multitask_classifier.py --model {tiny_model} --data-dir '{data}' "
               f"--output-dir={tmp_path}/run --max-eval-examples 16 --lr 5e-05")
    folder = share(save_tiny_checkpoint({}), "mean", str(tiny_model), command=command, eval_sample=16,
                   data_files=[str(data / "ids-sst-train.csv"), str(data / "sts-train.csv")])
    card = (folder / "README.md").read_text()
    for local in (str(tmp_path), str(tiny_model), "/tmp/", str(tmp_path.parent)):
        assert local not in card
    assert (f"--model {tiny_model.name} --data-dir 'my data' --output-dir=run --max-eval-examples 16 --lr 5e-05"
            in card)
    assert f"trained from the local checkpoint `{tiny_model.name}`" in card
    assert "- `ids-sst-train.csv`\n- `sts-train.csv`" in card
    assert "Scored on a random sample of at most 16 examples of each dev set (`--max-eval-examples 16`)" in card


def test_contrastive_card_shows_training_statistics_as_such_and_exact_numbers(save_tiny_checkpoint):
    statistics = {"train": {"steps": 4, "updates": 4, "lr": 5e-05, "mean_loss": 0.000125}}
    folder = share(save_tiny_checkpoint({}), "cls", metrics=statistics, metrics_kind="training")
    card = (folder / "README.md").read_text()
    assert "## Training statistics\n\nNot scores." in card and "Dev metrics" not in card
    for row in ("| train.steps | 4 |", "| train.lr | 5e-05 |", "| train.mean_loss | 0.000125 |"):
        assert row in card
    assert "0.0001 |" not in card
    benchmark = {"before": {"sts12": 73.94, "sts-dev": 74.53}, "after": {"sts12": 73.41, "sts-dev": 77.26}}
    card = (share(save_tiny_checkpoint({}), "cls", metrics=benchmark, metrics_kind="sts-benchmark")
            / "README.md").read_text()
    assert "## STS benchmark of the embeddings\n\nSpearman x 100" in card and "Dev metrics" not in card
    assert "| before.sts12 | 73.9400 |" in card and "| after.sts-dev | 77.2600 |" in card
    assert "the rows `before.*` are the base model's, the rows `after.*` the trained encoder's" in card


def test_base_model_and_license_of_hub_ids_packaged_names_and_our_own_checkpoints(save_tiny_checkpoint):
    assert describe_base_model("all-MiniLM-L6-v2") == ("sentence-transformers/all-MiniLM-L6-v2", "apache-2.0")
    assert describe_base_model("bert-base-uncased") == ("bert-base-uncased", "apache-2.0")
    assert describe_base_model("someone/their-bert") == ("someone/their-bert", "unknown")
    # A run started from one of our checkpoints names that checkpoint's base model, and inherits its license.
    pretrained = share(save_tiny_checkpoint({}), "mean", base_model="all-MiniLM-L6-v2")
    assert describe_base_model(str(pretrained)) == ("sentence-transformers/all-MiniLM-L6-v2", "apache-2.0")
    unknown = share(save_tiny_checkpoint({}), "mean", base_model="someone/their-bert")
    assert "license: unknown, see the base model." in (unknown / "README.md").read_text()


def test_bad_pooling_kind_and_a_folder_without_a_checkpoint_are_refused(tmp_path):
    with pytest.raises(ValueError, match="pooling 'max' is not one of"):
        share(tmp_path, "max")
    with pytest.raises(ValueError, match="metrics_kind 'test' is not one of"):
        share(tmp_path, "cls", metrics_kind="test")
    with pytest.raises(Exception, match="no config.json; write the checkpoint with save_checkpoint first"):
        share(tmp_path, "cls")
