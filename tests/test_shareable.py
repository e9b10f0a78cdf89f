"""write_shareable_files: SentenceTransformer(folder) and transformers compute our embeddings; the model card."""
import json
import re

import pytest
import torch
import transformers
from sentence_transformers import SentenceTransformer

from models import POOLINGS, Tokenizer, embed_sentences, from_pretrained
from models.shareable import FOLDER_PLACEHOLDER, describe_base_model, front_matter, write_shareable_files

MAX_LENGTH = 16
# Mixed lengths, so every batch is padded; the third is longer than MAX_LENGTH tokens and gets truncated.
SENTENCES = ["Hi.", "A man is playing a guitar.",
             "The quick brown fox jumps over the lazy dog near the river bank at dawn, twice, then once more.",
             "Two dogs run on the beach."]
METRICS = {"epoch": 3, "dev": {"sst": 0.4886, "para": 0.8436, "sts": 0.8778, "overall": 0.7571}}
COMMAND = "python multitask_classifier.py --model all-MiniLM-L6-v2 --pooling cls --max-length 16"


pytestmark = pytest.mark.usefixtures("one_thread")


def share(folder, pooling, base_model="all-MiniLM-L6-v2"):
    write_shareable_files(folder, pooling=pooling, max_length=MAX_LENGTH, base_model=base_model, command=COMMAND,
                          metrics=METRICS, data_files=["data/ids-sst-train.csv", "data/sts-train.csv"])
    return folder


def ours(folder, pooling, sentences=SENTENCES, max_length=MAX_LENGTH):
    return embed_sentences(from_pretrained(folder), Tokenizer.from_pretrained(folder), sentences, pooling,
                           max_length=max_length)


def sentence_transformers_embeddings(folder):
    return SentenceTransformer(str(folder), device="cpu").encode(SENTENCES, convert_to_tensor=True)


def assert_equal_embeddings(actual, expected):
    torch.testing.assert_close(torch.as_tensor(actual).cpu(), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("pooling", POOLINGS)
def test_sentence_transformers_computes_our_embeddings(save_tiny_checkpoint, pooling):
    folder = share(save_tiny_checkpoint({"pooling": pooling}), pooling)
    assert len(Tokenizer.from_pretrained(folder).encode(SENTENCES[2:3], max_length=64)[0].input_ids) > MAX_LENGTH
    assert_equal_embeddings(sentence_transformers_embeddings(folder), ours(folder, pooling))


def test_without_the_files_sentence_transformers_mean_pools_a_cls_checkpoint(save_tiny_checkpoint):
    # What the test above guards against: with no modules.json, SentenceTransformer loads anyway and
    # mean-pools (these sentences untruncated), so a [CLS]-trained encoder's embeddings come out different.
    folder = save_tiny_checkpoint({"pooling": "cls"})
    plain = sentence_transformers_embeddings(folder)
    assert_equal_embeddings(plain, ours(folder, "mean", max_length=64))
    assert (plain.cpu() - ours(folder, "cls", max_length=64)).abs().max() > 0.1


@pytest.mark.parametrize("pooling", POOLINGS)
def test_the_cards_three_snippets_compute_our_embeddings(save_tiny_checkpoint, pooling):
    folder = share(save_tiny_checkpoint({"pooling": pooling}), pooling)
    snippets = re.findall(r"```python\n(.*?)```", (folder / "README.md").read_text(), re.DOTALL)
    assert [("embed_sentences" in s, "BertModel" in s, "SentenceTransformer" in s) for s in snippets] == [
        (True, False, False), (False, True, False), (False, False, True)]
    for code in snippets:
        namespace = {}
        exec(code.replace(FOLDER_PLACEHOLDER, str(folder)), namespace)
        assert_equal_embeddings(namespace["embeddings"], ours(folder, pooling, namespace["sentences"]))


def test_config_names_bert_and_transformers_loads_every_tensor(save_tiny_checkpoint):
    folder = share(save_tiny_checkpoint({}), "mean")
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["BertModel"] and config["model_type"] == "bert"
    _, info = transformers.BertModel.from_pretrained(folder, output_loading_info=True)
    assert not any(info.values()), info


def test_card_holds_base_model_license_data_command_and_metrics(save_tiny_checkpoint, minilm_dir):
    folder = share(save_tiny_checkpoint({}), "cls", base_model=str(minilm_dir))
    card = (folder / "README.md").read_text()
    meta = front_matter(folder / "README.md")
    assert meta["license"] == "apache-2.0"  # read from the base folder's own card
    assert meta["library_name"] == "sentence-transformers" and "base_model" not in meta  # a path is no hub id
    for row in ("| epoch | 3 |", "| dev.sst | 0.4886 |", "| dev.para | 0.8436 |", "| dev.sts | 0.8778 |",
                "| dev.overall | 0.7571 |"):
        assert row in card
    assert f"```bash\n{COMMAND}\n```" in card
    assert "- `data/ids-sst-train.csv`\n- `data/sts-train.csv`" in card


def test_base_model_and_license_of_hub_ids_packaged_names_and_our_own_checkpoints(save_tiny_checkpoint):
    assert describe_base_model("all-MiniLM-L6-v2") == ("sentence-transformers/all-MiniLM-L6-v2", "apache-2.0")
    assert describe_base_model("bert-base-uncased") == ("bert-base-uncased", "apache-2.0")
    assert describe_base_model("someone/their-bert") == ("someone/their-bert", "unknown")
    # A run started from one of our checkpoints names that checkpoint's base model, and inherits its license.
    pretrained = share(save_tiny_checkpoint({}), "mean", base_model="all-MiniLM-L6-v2")
    assert describe_base_model(str(pretrained)) == ("sentence-transformers/all-MiniLM-L6-v2", "apache-2.0")
    unknown = share(save_tiny_checkpoint({}), "mean", base_model="someone/their-bert")
    assert "license: unknown, see the base model." in (unknown / "README.md").read_text()


def test_bad_pooling_and_a_folder_without_a_checkpoint_are_refused(tmp_path):
    with pytest.raises(ValueError, match="pooling 'max' is not one of"):
        share(tmp_path, "max")
    with pytest.raises(Exception, match="no config.json; write the checkpoint with save_checkpoint first"):
        share(tmp_path, "cls")
