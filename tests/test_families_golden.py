"""RoBERTa and MPNet through our one encoder, against transformers' RobertaModel and MPNetModel: the same outputs and
the same gradients to 1e-5 in fp32, in every attention layout; MPNet's relative position buckets; the real
all-mpnet-base-v2 where its packages are installed; and a saved MPNet folder read back by transformers and
sentence-transformers."""
import json

import pytest
import torch
import transformers
from safetensors.torch import load_file
from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

from minbert.common.errors import UsageError
from minbert.engine.run import check_max_length
from minbert.models import SentenceEncoder, Tokenizer, from_pretrained
from minbert.models.bert import relative_position_bucket
from minbert.models.checkpoint import save_checkpoint
from minbert.models.loading import normalise_names
from minbert.models.packaged import MPNET
from minbert.models.shareable import write_shareable_files
from tests.test_bert_golden import TOLERANCE, assert_same_outputs, real_sentences

PAIRS = [("the cat sat on the mat .", "a dog ran"), ("big red car", "the small house , a tree"),
         ("the dog", "a cat sat on a big red mat in the house ."), ("fast car", "slow car")]


def transformers_inputs(batch: dict, model_type: str) -> dict:
    """The batch as transformers' model of the family takes it: MPNetModel takes no token types."""
    return {k: v for k, v in batch.items() if model_type != "mpnet" or k != "token_type_ids"}


def pair_batch(folder):
    tokenizer = Tokenizer.from_pretrained(folder)
    return tokenizer([a for a, _ in PAIRS], [b for _, b in PAIRS])


def test_relative_position_buckets_are_mpnets():
    offsets = torch.arange(-300, 301)[None, :]  # keys 300 before the query to 300 after: every bucket, both halves
    ours = relative_position_bucket(offsets, num_buckets=32)
    assert torch.equal(ours, MPNetEncoder.relative_position_bucket(offsets, num_buckets=32))
    # Every bucket but one: offset 0 belongs to the first half, so the second half's "0 after" bucket stays unused.
    assert ours.unique().numel() == 31


def test_pairs_are_encoded_as_mpnet_encodes_them(tiny_mpnet):
    batch = pair_batch(tiny_mpnet)
    tokens = Tokenizer.from_pretrained(tiny_mpnet).backend.convert_ids_to_tokens(batch["input_ids"][3].tolist())
    assert tokens == ["<s>", "fast", "car", "</s>", "</s>", "slow", "car", "</s>"] + ["<pad>"] * (len(tokens) - 8)


@pytest.mark.parametrize("model_type", ["mpnet", "roberta"])
@pytest.mark.parametrize("attention", ["padded", "packed"])
def test_tiny_family_matches_transformers(make_tiny_family, model_type, attention, one_thread):
    folder = make_tiny_family(model_type)
    batch = pair_batch(folder)
    ours = from_pretrained(folder)
    ours.attention = attention
    reference = transformers.AutoModel.from_pretrained(folder)
    assert type(reference).__name__ == {"mpnet": "MPNetModel", "roberta": "RobertaModel"}[model_type]
    assert_same_outputs(ours, reference, batch, reference_inputs=transformers_inputs(batch, model_type))


@pytest.mark.parametrize("model_type", ["bert", "mpnet", "roberta"])
@pytest.mark.parametrize("attention", ["padded", "packed"])
@pytest.mark.parametrize("sentences", [["the cat sat on the mat ."], ["the big dog", "a red car"]],
                         ids=["one sentence", "equal lengths"])
def test_a_batch_without_padding_matches_transformers(make_tiny_model, make_tiny_family, model_type, attention,
                                                      sentences, one_thread):
    """No padding takes the encoder's other branch, which has no mask (and, for MPNet, must keep the relative
    position bias)."""
    folder = make_tiny_model() if model_type == "bert" else make_tiny_family(model_type)
    batch = Tokenizer.from_pretrained(folder)(sentences)
    ours = from_pretrained(folder)
    ours.attention = attention
    reference = transformers.AutoModel.from_pretrained(folder)
    assert_same_outputs(ours, reference, batch, reference_inputs=transformers_inputs(batch, model_type), padded=False)


@pytest.mark.parametrize("model_type", ["mpnet", "roberta"])
@pytest.mark.parametrize("attention", ["padded", "packed"])
def test_tiny_family_gradients_match_transformers(make_tiny_family, model_type, attention, one_thread):
    folder = make_tiny_family(model_type, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    batch = pair_batch(folder)
    real = batch["attention_mask"].bool()
    ours, reference = from_pretrained(folder).train(), transformers.AutoModel.from_pretrained(folder).train()
    ours.attention = attention
    torch.manual_seed(1)
    token_weights, pooler_weights = torch.randn(int(real.sum()), 32), torch.randn(len(PAIRS), 32)

    def gradients(model, inputs):
        model.zero_grad()
        output = model(**inputs)
        loss = (output.last_hidden_state[real] * token_weights).sum() + (output.pooler_output * pooler_weights).sum()
        loss.backward()
        return {name: parameter.grad for name, parameter in model.named_parameters() if parameter.grad is not None}

    mine = gradients(ours, batch)
    theirs, _ = normalise_names(gradients(reference, transformers_inputs(batch, model_type)), model_type)
    assert mine.keys() == theirs.keys()
    if model_type == "mpnet":
        assert "encoder.relative_attention_bias.weight" in mine
    for name in mine:
        scale = max(1.0, float(theirs[name].abs().max()))  # fp32: differences grow with the gradient's size
        assert (mine[name] - theirs[name]).abs().max() <= TOLERANCE * scale, name


@pytest.fixture(scope="module")
def mpnet_folder():
    folder = MPNET.folder()
    if folder is None:
        pytest.skip(f"all-mpnet-base-v2 is not installed: {MPNET.install()}")
    return folder


def rms(values: torch.Tensor) -> float:
    return float(values.pow(2).mean().sqrt())


def hidden_states(model, inputs, dtype):
    with torch.no_grad():
        return model.to(dtype)(**inputs, output_hidden_states=True).hidden_states


@pytest.mark.parametrize("attention", ["padded", "packed"])
def test_all_mpnet_base_v2_matches_transformers(mpnet_folder, data_dir, attention):
    """A real 12-layer model is less well conditioned than a tiny random one: in fp32 some of its tokens' hidden
    states stray up to ~6e-4 from the exact values on both sides, so fp32 against fp32 at 1e-5 is a test of the
    summation order, not of the model. The exact values come from float64 instead."""
    tokenizer = Tokenizer.from_pretrained("all-mpnet-base-v2")
    sentences = real_sentences(data_dir)
    batch = tokenizer(sentences, sentences[::-1])
    real = batch["attention_mask"].bool()
    ours, theirs = from_pretrained("all-mpnet-base-v2").eval(), transformers.MPNetModel.from_pretrained(mpnet_folder)
    ours.attention = attention
    theirs.eval()
    reference_inputs = transformers_inputs(batch, "mpnet")
    ours32, theirs32 = hidden_states(ours, batch, torch.float32), hidden_states(theirs, reference_inputs, torch.float32)
    ours64, exact = hidden_states(ours, batch, torch.float64), hidden_states(theirs, reference_inputs, torch.float64)
    assert len(ours64) == len(exact) == 13
    for layer in range(13):
        scale = float(exact[layer][real].abs().max())
        # Same arithmetic: float64 rounds 5e8 times finer than fp32, and the two sides agree to 1e-10 of the values'
        # size (~3e-13 measured at the worst layer); a wrong formula differs by 1e-3 or more.
        assert (ours64[layer][real] - exact[layer][real]).abs().max() <= 1e-10 * scale, f"float64, layer {layer}"
        # As accurate in fp32: our root-mean-square error against the exact values is within 2x of transformers'
        # own (0.64x to 1.04x measured). Over every value of the layer, not the largest error: that one is a single
        # ill-conditioned value's, whose rounding either side may happen to get closer.
        error, reference_error = (rms(side[layer][real].double() - exact[layer][real]) for side in (ours32, theirs32))
        assert error <= 2 * reference_error, f"fp32, layer {layer}: {error:.2e}, transformers' {reference_error:.2e}"


def test_a_saved_mpnet_folder_is_transformers_and_sentence_transformers_mpnet(tiny_mpnet, tmp_path, one_thread):
    from sentence_transformers import SentenceTransformer

    encoder, tokenizer = from_pretrained(tiny_mpnet), Tokenizer.from_pretrained(tiny_mpnet)
    folder = save_checkpoint(tmp_path / "saved", encoder, tokenizer, {"model": str(tiny_mpnet)})
    write_shareable_files(folder, pooling="mean", max_length=64, base_model=str(tiny_mpnet), command="test",
                          metrics={}, data_files=[])
    # transformers' own names, so that its MPNetModel loads every tensor.
    assert "encoder.layer.0.attention.attn.q.weight" in load_file(folder / "model.safetensors")
    reference, info = transformers.AutoModel.from_pretrained(folder, output_loading_info=True)
    assert type(reference).__name__ == "MPNetModel" and not info["missing_keys"] and not info["unexpected_keys"]
    batch = pair_batch(folder)
    assert_same_outputs(encoder, reference, batch,
                        reference_inputs=transformers_inputs(batch, "mpnet"))
    sentences = [a for a, _ in PAIRS]
    theirs = SentenceTransformer(str(folder), device="cpu").encode(sentences, convert_to_tensor=True)
    mine = SentenceEncoder.from_pretrained(folder).encode(sentences)
    assert (mine - theirs).abs().max() <= 1e-6


@pytest.mark.parametrize("model_type", ["mpnet", "roberta"])
def test_max_length_counts_the_positions_after_the_offset(make_tiny_family, model_type):
    """130 positions, counted from pad_token_id + 1 = 2: inputs of up to 128 tokens. --max-length 129 is refused up
    front, in one line; a sentence encoder asked for more is held to 128 and encodes a longer sentence."""
    folder = make_tiny_family(model_type)
    encoder = from_pretrained(folder)
    check_max_length(encoder, 128)
    with torch.no_grad():
        encoder(torch.full((1, 128), 5))  # the longest input runs
        with pytest.raises(ValueError, match="129 tokens exceed the 128 positions"):
            encoder(torch.full((1, 129), 5))
    with pytest.raises(UsageError, match=r"^--max-length 129: this model has 128 positions; use --max-length 128 or "
                                         r"less$"):
        check_max_length(encoder, 129)
    sentences = SentenceEncoder.from_pretrained(folder, max_length=1000)
    assert sentences.max_length == 128
    assert sentences.encode([" ".join(["the cat sat"] * 100)]).shape == (1, 32)


def test_a_saved_mpnet_folder_tells_sentence_transformers_the_length_it_takes(tiny_mpnet, tmp_path, one_thread):
    """130 positions from an offset of 2: sentence-transformers is told 128 tokens, and encodes a longer sentence
    (told 130, MPNetModel would index past its positions)."""
    from sentence_transformers import SentenceTransformer

    folder = save_checkpoint(tmp_path / "saved", from_pretrained(tiny_mpnet), Tokenizer.from_pretrained(tiny_mpnet),
                             {"model": str(tiny_mpnet)})
    write_shareable_files(folder, pooling="mean", max_length=64, base_model=str(tiny_mpnet), command="test",
                          metrics={}, data_files=[])
    assert json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"] == 128
    assert SentenceTransformer(str(folder), device="cpu").encode([" ".join(["the cat sat"] * 100)]).shape == (1, 32)
