"""SentenceEncoder.from_pretrained(folder).encode(sentences) gives what SentenceTransformer(folder).encode gives on
the same folder (independent truth: sentence-transformers' own output): the packaged all-MiniLM-L6-v2, and the
folders our runs save with each pooling, normalised or not; sentence_convention reads the folder's settings."""
import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from sentence_transformers import SentenceTransformer

from minbert.common.errors import CheckpointError
from minbert.models import POOLINGS, SentenceEncoder
from minbert.models.shareable import Convention, sentence_convention, write_shareable_files

pytestmark = pytest.mark.usefixtures("one_thread")

# Mixed lengths (padded batches); the last is longer than 128 tokens, so each side's max_seq_length shows.
SENTENCES = ["Hi.", "A man is playing a guitar.", "Two dogs run on the beach at dawn, then rest.",
             " ".join(["The quick brown fox jumps over the lazy dog."] * 30)]


def theirs(folder) -> torch.Tensor:
    return SentenceTransformer(str(folder), device="cpu").encode(SENTENCES, convert_to_tensor=True).cpu()


def shared_folder(save_tiny_checkpoint, pooling: str, base_model: str):
    folder = save_tiny_checkpoint({"pooling": pooling})
    write_shareable_files(folder, pooling=pooling, max_length=16, base_model=base_model, command="python x.py",
                          metrics={}, data_files=[])
    return folder


def test_the_packaged_all_minilm_embeds_as_sentence_transformers(minilm_dir):
    model = SentenceEncoder.from_pretrained("all-MiniLM-L6-v2")
    assert (model.pooling, model.normalize, model.max_length) == ("mean", True, 256)
    embeddings = model.encode(SENTENCES)
    torch.testing.assert_close(embeddings, theirs(minilm_dir), atol=1e-6, rtol=0)
    torch.testing.assert_close(embeddings.norm(dim=-1), torch.ones(len(SENTENCES)))


@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("base_model", ["all-MiniLM-L6-v2", "bert-base-uncased"])
def test_a_saved_run_folder_embeds_as_sentence_transformers(save_tiny_checkpoint, pooling, base_model):
    folder = shared_folder(save_tiny_checkpoint, pooling, base_model)
    model = SentenceEncoder.from_pretrained(folder)
    normalize = base_model == "all-MiniLM-L6-v2"  # the base's Normalize carries over; bert-base has none
    assert (model.pooling, model.normalize) == (pooling, normalize)
    embeddings = model.encode(SENTENCES)
    torch.testing.assert_close(embeddings, theirs(folder), atol=1e-6, rtol=0)
    norms = embeddings.norm(dim=-1)
    assert torch.allclose(norms, torch.ones(len(SENTENCES)), atol=1e-5) == normalize, norms


def test_a_folder_without_sentence_transformers_files_is_mean_pooled_as_sentence_transformers_does(
        save_tiny_checkpoint):
    folder = save_tiny_checkpoint({"pooling": "cls"})  # run_config.json says cls; sentence-transformers ignores it
    assert sentence_convention(str(folder)) == Convention(pooling="mean")
    torch.testing.assert_close(SentenceEncoder.from_pretrained(folder).encode(SENTENCES), theirs(folder),
                               atol=1e-6, rtol=0)


def test_a_pooling_given_replaces_the_folders(save_tiny_checkpoint):
    folder = shared_folder(save_tiny_checkpoint, "mean", "all-MiniLM-L6-v2")
    cls = SentenceEncoder.from_pretrained(folder, pooling="cls")
    assert (cls.pooling, cls.normalize) == ("cls", True)
    mean = SentenceEncoder.from_pretrained(folder).encode(SENTENCES)
    assert (cls.encode(SENTENCES) - mean).abs().max() > 0.1


def test_poolings_minbert_does_not_compute_are_refused(save_tiny_checkpoint):
    # max pooling; and a Dense after [CLS] that is not the encoder's pooler
    folder = shared_folder(save_tiny_checkpoint, "cls", "bert-base-uncased")
    settings = json.loads((folder / "1_Pooling" / "config.json").read_text())
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        settings | {"pooling_mode_cls_token": False, "pooling_mode_max_tokens": True}))
    assert sentence_convention(str(folder)).pooling is None
    with pytest.raises(CheckpointError, match="pool in a way minBERT does not compute"):
        SentenceEncoder.from_pretrained(folder)
    assert SentenceEncoder.from_pretrained(folder, pooling="cls").pooling == "cls"

    pooler = shared_folder(save_tiny_checkpoint, "pooler", "bert-base-uncased")
    assert sentence_convention(str(pooler)).pooling == "pooler"
    dense = load_file(pooler / "2_Dense" / "model.safetensors")
    save_file({**dense, "linear.bias": dense["linear.bias"] + 1}, pooler / "2_Dense" / "model.safetensors")
    assert sentence_convention(str(pooler)).pooling is None
