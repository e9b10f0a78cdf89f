"""The packed encoder (real tokens packed, attention on a padded copy) against the padded one, in fp32 on the CPU:
every layer's hidden states, the pooler, a head on top and every gradient agree to 1e-5."""
import pytest
import torch
from torch import nn

from minbert.common.errors import FlagError, UsageError
from minbert.models import BertConfig, BertModel
from minbert.models.bert import Packed, Padded, resolve_attention
from minbert.models.sentence_embedding import masked_mean

TOLERANCE = 1e-5
CLS, SEP = 1, 2


def tiny_encoder() -> BertModel:
    torch.manual_seed(0)
    encoder = BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                                   intermediate_size=64, max_position_embeddings=32))
    # BERT's initialisation zeroes biases and sets LayerNorm to the identity: random ones let a mistake show.
    with torch.no_grad():
        for parameter in encoder.parameters():
            if parameter.dim() == 1:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    return encoder.eval()  # no dropout: both paths must compute the same function


def padded_batch(rows: list[list[int]], types: list[list[int]] | None = None) -> dict[str, torch.Tensor]:
    """A right-padded batch of token id lists (0 = padding)."""
    width = max(map(len, rows))
    types = types or [[0] * len(row) for row in rows]
    return {"input_ids": torch.tensor([row + [0] * (width - len(row)) for row in rows]),
            "attention_mask": torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows]),
            "token_type_ids": torch.tensor([kind + [0] * (width - len(kind)) for kind in types])}


def random_ids(length: int, generator: torch.Generator) -> list[int]:
    return torch.randint(3, 50, (length,), generator=generator).tolist()


def mixed_lengths() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    # A one-token sentence, the longest, and lengths in between.
    return padded_batch([random_ids(n, generator) for n in (7, 1, 4, 12, 2)])


def cross_encoded_pairs() -> dict[str, torch.Tensor]:
    """[CLS] a [SEP] b [SEP], token types 0 for the first sentence and 1 for the second."""
    generator = torch.Generator().manual_seed(2)
    rows, types = [], []
    for first, second in ((3, 5), (1, 1), (6, 2)):
        rows.append([CLS, *random_ids(first, generator), SEP, *random_ids(second, generator), SEP])
        types.append([0] * (first + 2) + [1] * (second + 1))
    return padded_batch(rows, types)


def no_padding() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    return padded_batch([random_ids(6, generator) for _ in range(3)])


BATCHES = {"mixed lengths": mixed_lengths, "cross-encoded pairs": cross_encoded_pairs, "no padding": no_padding}


def run(encoder: BertModel, attention: str, batch: dict[str, torch.Tensor], head: nn.Module):
    """(outputs, head outputs, every parameter's gradient) of one forward and backward pass."""
    encoder.attention = attention
    encoder.zero_grad(), head.zero_grad()
    output = encoder(**batch, output_hidden_states=True)
    logits = head(masked_mean(output.last_hidden_state, batch["attention_mask"]))
    # A loss touching the head's outputs and the pooler, with weights that differ per element.
    weights = torch.linspace(-1, 1, logits.numel()).view_as(logits)
    (logits * weights).sum().add(output.pooler_output.pow(2).sum()).backward()
    gradients = {name: p.grad.clone() for name, p in [*encoder.named_parameters(), *head.named_parameters()]
                 if p.grad is not None}
    return output, logits.detach(), gradients


@pytest.mark.parametrize("name", BATCHES)
def test_packed_equals_padded_everywhere(name):
    encoder, batch = tiny_encoder(), BATCHES[name]()
    head = nn.Linear(32, 3)
    padded, padded_logits, padded_gradients = run(encoder, "padded", batch, head)
    packed, packed_logits, packed_gradients = run(encoder, "packed", batch, head)

    real = batch["attention_mask"].bool()
    assert len(packed.hidden_states) == encoder.config.num_hidden_layers + 1
    for layer, (a, b) in enumerate(zip(padded.hidden_states, packed.hidden_states)):
        assert (a[real] - b[real]).abs().max() <= TOLERANCE, f"hidden state {layer}"
    assert (padded.pooler_output - packed.pooler_output).abs().max() <= TOLERANCE
    assert (padded_logits - packed_logits).abs().max() <= TOLERANCE
    assert padded_gradients.keys() == packed_gradients.keys()
    assert len(padded_gradients) == len(list(encoder.parameters())) + len(list(head.parameters()))
    for parameter, gradient in padded_gradients.items():
        assert (gradient - packed_gradients[parameter]).abs().max() <= TOLERANCE, parameter
    # The packed rows return zeros at padding (the padded path computes values nobody reads).
    assert not packed.last_hidden_state[~real].any()


def test_a_padded_batch_really_runs_packed_and_one_without_padding_passes_no_mask():
    encoder, mask = tiny_encoder(), mixed_lengths()["attention_mask"]
    encoder.attention = "packed"
    layout = encoder.layout(mask)
    assert isinstance(layout, Packed)
    assert layout.indices.tolist() == [i * 12 + t for i, n in enumerate((7, 1, 4, 12, 2)) for t in range(n)]
    assert layout.mask.shape == (5, 1, 1, 12)
    for attention in ("padded", "packed"):
        encoder.attention = attention
        assert encoder.layout(no_padding()["attention_mask"]).mask is None


def test_the_padded_mask_is_additive_in_the_compute_dtype():
    encoder, mask = tiny_encoder(), mixed_lengths()["attention_mask"]
    encoder.attention = "padded"
    layout = encoder.layout(mask)
    assert isinstance(layout, Padded) and layout.mask.dtype == torch.float32
    assert layout.mask.shape == (5, 1, 1, 12)
    assert (layout.mask[:, 0, 0][mask.bool()] == 0).all()
    assert (layout.mask[:, 0, 0][~mask.bool()] == torch.finfo(torch.float32).min).all()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert encoder.layout(mask).mask.dtype == torch.bfloat16


def test_the_comparison_sees_attention_leaking_across_sentences():
    """The exactness test can fail: attending to padding (no mask at all) moves the hidden states well past it."""
    encoder, batch = tiny_encoder(), mixed_lengths()
    encoder.attention = "padded"
    masked = encoder(**batch).last_hidden_state
    unmasked = encoder(**{**batch, "attention_mask": torch.ones_like(batch["attention_mask"])}).last_hidden_state
    real = batch["attention_mask"].bool()
    assert (masked[real] - unmasked[real]).abs().max() > 100 * TOLERANCE


def test_an_embedding_transform_sees_the_padded_shape_in_both_paths():
    """SMART's perturbation and ConSERT's cutoffs edit [batch, tokens, hidden] embeddings, packed too."""
    encoder, batch = tiny_encoder(), mixed_lengths()
    perturbation = torch.randn(*batch["input_ids"].shape, 32, generator=torch.Generator().manual_seed(4))
    results = {}
    for attention in ("padded", "packed"):
        encoder.attention = attention
        delta = perturbation.clone().requires_grad_()
        output = encoder(**batch, embedding_transform=lambda embeddings, _mask: embeddings + delta)
        masked_mean(output.last_hidden_state, batch["attention_mask"]).sum().backward()
        results[attention] = output.last_hidden_state, delta.grad
    real = batch["attention_mask"].bool()
    (padded, padded_grad), (packed, packed_grad) = results["padded"], results["packed"]
    assert (padded[real] - packed[real]).abs().max() <= TOLERANCE
    assert (padded_grad - packed_grad).abs().max() <= TOLERANCE


def test_attention_choices_by_device():
    # Packed on the CPU (the fastest there: benchmarks/encoder_speed.py); padded on a GPU until measured there.
    assert resolve_attention("auto", "cpu") == "packed" and resolve_attention("auto", "cuda") == "padded"
    assert resolve_attention("padded", "meta") == "padded"
    # Unpadded attention (nested jagged tensors) is gone: the slowest layout on a GPU (issue 71).
    for gone in ("sparse", "unpadded"):
        with pytest.raises(FlagError, match=f"'{gone}' is not one of auto, padded, packed$"):
            resolve_attention(gone, "cpu")
    assert issubclass(FlagError, UsageError) and issubclass(FlagError, ValueError)  # exit code 2 either way
