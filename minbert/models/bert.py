"""Our BERT encoder (Devlin et al., 2019), written to load Hugging Face BERT, RoBERTa and MPNet checkpoints.

Module and parameter names mirror `transformers.BertModel` one-to-one (embeddings.word_embeddings,
encoder.layer.0.attention.self.query, ...), so a BERT checkpoint's state dict loads without renaming; RoBERTa and
MPNet are the same layers under a few config fields (models/config.py), their names mapped by models/loading.py.

Attention never takes scaled_dot_product_attention's slow path (a boolean mask: measured on an H100 in bf16,
about 4 ms a call against 0.2 ms without). A batch without padding passes no mask. A padded batch runs
- padded: [batch, tokens, hidden] everywhere, with an additive mask in the compute dtype; or
- packed: its real tokens packed into [tokens, hidden] rows, one sentence after another, so that every Linear,
  LayerNorm, activation and dropout skips the padding; attention alone runs on a padded copy with the additive
  mask; the output is unpacked to [batch, tokens, hidden] (zeros at padding) for pooling and heads.
"""
import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from minbert.common.choices import ATTENTION
from minbert.common.errors import FlagError
from minbert.models.config import BertConfig

ACTIVATIONS = {
    "gelu": F.gelu,  # BERT's exact erf GELU
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


def resolve_attention(attention: str, device: torch.device | str) -> str:
    """"padded" or "packed": what `attention` (one of ATTENTION) means on `device`. "auto" is packed on the CPU
    (benchmarks/encoder_speed.py: the fastest there) and padded on a GPU until benchmarks/gpu_suite.sh has measured
    packed there. Raises FlagError for a name not in ATTENTION."""
    if attention not in ATTENTION:
        raise FlagError(f"attention {attention!r} is not one of {', '.join(ATTENTION)}")
    if attention == "auto":
        return "packed" if torch.device(device).type == "cpu" else "padded"
    return attention


def additive_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[batch, 1, 1, tokens], added to the attention scores: 0 for real keys, the dtype's lowest value for padding."""
    padding = ~attention_mask.bool()[:, None, None, :]
    return torch.zeros(padding.shape, dtype=dtype, device=attention_mask.device).masked_fill(
        padding, torch.finfo(dtype).min)


class Padded:
    """A batch as [batch, tokens, ...] rows. mask: its additive_mask, or None where nothing is padded."""

    def __init__(self, mask: torch.Tensor | None):
        self.mask = mask

    def pack(self, x):  # nothing to pack: every view of the batch is [batch, tokens, ...]
        return x

    unpack = sequences = rows = pack


class Packed:
    """A padded batch's real tokens packed into [tokens, ...] rows, one sentence after another (attention_mask
    [batch, tokens], 1 = real: any pattern, not only right padding); attention sees them unpacked again, as
    [batch, tokens, ...] with the additive mask."""

    def __init__(self, attention_mask: torch.Tensor, mask: torch.Tensor | None = None):
        self.shape = attention_mask.shape
        # Sized by the batch's real tokens: on a GPU, one wait for the device a forward pass (padded has none).
        self.indices = attention_mask.flatten().nonzero().squeeze(1)
        self.mask = mask

    def pack(self, x):  # [batch, tokens, ...] -> [real tokens, ...]
        return x.flatten(0, 1).index_select(0, self.indices)

    def unpack(self, x):  # [real tokens, ...] -> [batch, tokens, ...], zeros at padding
        padded = x.new_zeros(self.shape.numel(), *x.shape[1:])
        return padded.index_copy(0, self.indices, x).unflatten(0, self.shape)

    sequences, rows = unpack, pack  # attention's view of the rows, and back


Layout = Padded | Packed


@dataclass
class BertOutput:
    last_hidden_state: torch.Tensor  # [batch, tokens, hidden]
    pooler_output: torch.Tensor  # [batch, hidden]: tanh(dense([CLS]))
    hidden_states: tuple[torch.Tensor, ...] | None = None  # layer 0 = embeddings, then each layer's output


class BertEmbeddings(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        # RoBERTa and MPNet give padding the position pad_token_id, a row that stays as it is (no gradient).
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size,
                                                padding_idx=config.pad_token_id if config.positions_after_padding
                                                else None)
        self.token_type_embeddings = (nn.Embedding(config.type_vocab_size, config.hidden_size)
                                      if config.type_vocab_size else None)  # MPNet has no sentence A/B
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids, position_ids):
        embeddings = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        if self.token_type_embeddings is not None:
            embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(embeddings))


class BertSelfAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, hidden, layout: Layout):
        def split_heads(x):  # [..., T, H] -> [..., heads, T, H / heads]
            return layout.sequences(x.unflatten(-1, (self.num_heads, -1))).transpose(-3, -2)

        # The fused kernel computes softmax(QK^T / sqrt(d) + mask) V, with dropout on the probabilities.
        context = F.scaled_dot_product_attention(
            split_heads(self.query(hidden)), split_heads(self.key(hidden)), split_heads(self.value(hidden)),
            attn_mask=layout.mask, dropout_p=self.dropout_p if self.training else 0.0)
        return layout.rows(context.transpose(-3, -2)).flatten(-2)


class BertSelfOutput(nn.Module):
    """Projection, dropout, then the residual and post-LayerNorm of the original BERT."""

    def __init__(self, config: BertConfig, input_size: int):
        super().__init__()
        self.dense = nn.Linear(input_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x, residual):
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config, config.hidden_size)

    def forward(self, hidden, layout: Layout):
        return self.output(self.self(hidden, layout), hidden)


class BertIntermediate(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        if config.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act {config.hidden_act!r} is not one of {sorted(ACTIVATIONS)}")
        self.activation = ACTIVATIONS[config.hidden_act]

    def forward(self, x):
        return self.activation(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertSelfOutput(config, config.intermediate_size)

    def forward(self, hidden, layout: Layout):
        hidden = self.attention(hidden, layout)
        return self.output(self.intermediate(hidden), hidden)


def relative_position_bucket(relative_position: torch.Tensor, num_buckets: int, max_distance: int = 128):
    """The bucket of each key-minus-query offset, as T5 (Raffel et al., 2020) and MPNet number them: half the
    buckets for keys up to the query, half for keys after it; within each half, the first half of its buckets
    are one offset each, the rest cover offsets up to max_distance on a log scale, and farther offsets share
    the last."""
    half = num_buckets // 2
    distance = relative_position.abs()
    exact = half // 2
    logarithmic = exact + (torch.log(distance.float() / exact) / math.log(max_distance / exact)
                           * (half - exact)).long()
    bucket = torch.where(distance < exact, distance, logarithmic.clamp(max=half - 1))
    return bucket + (relative_position > 0).long() * half  # keys after the query: the second half


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))
        # MPNet: one learned bias a bucket and head, shared by every layer.
        self.relative_attention_bias = (nn.Embedding(config.relative_attention_num_buckets,
                                                     config.num_attention_heads)
                                        if config.relative_attention_num_buckets else None)
        # --gradient-checkpointing: each layer keeps only its input for the backward pass, which runs its forward
        # again (about a third more compute for a fraction of the activations' memory).
        self.gradient_checkpointing = False

    def position_bias(self, tokens: int, dtype: torch.dtype) -> torch.Tensor:
        """[1, heads, tokens, tokens]: the bias MPNet adds to the scores of a query (row) for a key (column)."""
        positions = torch.arange(tokens, device=self.relative_attention_bias.weight.device)
        buckets = relative_position_bucket(positions[None, :] - positions[:, None],
                                           self.relative_attention_bias.num_embeddings)
        return self.relative_attention_bias(buckets).permute(2, 0, 1).unsqueeze(0).to(dtype)

    def forward(self, hidden, layout: Layout) -> list[torch.Tensor]:
        """Every layer's output, the last one last (the module models.compile compiles)."""
        outputs = []
        for layer in self.layer:
            if self.gradient_checkpointing and torch.is_grad_enabled():
                # Non-reentrant: takes the layout as it is and works under DDP. The RNG state is replayed, so the
                # recomputed forward draws the same dropout masks and the gradients are those without it.
                hidden = checkpoint(layer, hidden, layout, use_reentrant=False, preserve_rng_state=True)
            else:
                hidden = layer(hidden, layout)
            outputs.append(hidden)
        return outputs


class BertPooler(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, last_hidden_state):
        return torch.tanh(self.dense(last_hidden_state[:, 0]))


EmbeddingTransform = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class BertModel(nn.Module):
    """Our BERT encoder: embeddings, then Transformer layers, then the pooler; the same outputs as
    transformers.BertModel to 1e-5 (tests/test_bert_golden.py)."""

    def __init__(self, config: BertConfig, attention: str = "auto"):
        """attention: how a padded batch runs, one of ATTENTION (see resolve_attention); settable later."""
        super().__init__()
        self.config = config
        self.attention = attention
        self.known_padding = None  # padding_known: whether the batches now run have padding, decided on the host
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config)
        self.apply(self._init_weights)

    def _init_weights(self, module):
        # BERT's initialisation; pretrained weights overwrite it when a checkpoint is loaded.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            nn.init.zeros_(module.weight[module.padding_idx])
        if isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                output_hidden_states: bool = False,
                embedding_transform: EmbeddingTransform | None = None) -> BertOutput:
        """input_ids, attention_mask (1 = real token, 0 = padding), token_type_ids: [batch, tokens].

        position_ids: each token's place in its sentence, 0 to T - 1 by default (RoBERTa and MPNet count the real
        tokens only, and add their offset); ConSERT's token shuffle permutes them; embedding_transform(embeddings,
        attention_mask) edits the embedding layer's output before the first layer (ConSERT's cutoffs).
        """
        batch, tokens = input_ids.shape
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if position_ids is None:
            position_ids = (attention_mask.cumsum(1) - 1 if self.config.positions_after_padding
                            else torch.arange(tokens, device=input_ids.device).expand(batch, tokens))
        first = self.config.first_position
        if tokens > self.config.longest_input:  # on the host: no wait for the device
            raise ValueError(f"{tokens} tokens exceed the {self.config.longest_input} positions of the encoder; "
                             f"truncate the input")
        if self.config.positions_after_padding:  # fairseq's numbering: pad_token_id + 1 onwards, padding at pad
            position_ids = torch.where(attention_mask.bool(), position_ids + first, self.config.pad_token_id)

        layout = self.layout(attention_mask)
        hidden = self.embeddings(*(layout.pack(ids) for ids in (input_ids, token_type_ids, position_ids)))
        if embedding_transform is not None:
            hidden = layout.pack(embedding_transform(layout.unpack(hidden), attention_mask))
        layers = self.encoder(hidden, layout)
        last_hidden_state = layout.unpack(layers[-1])
        return BertOutput(last_hidden_state=last_hidden_state, pooler_output=self.pooler(last_hidden_state),
                          hidden_states=tuple(layout.unpack(h) for h in [hidden, *layers])
                          if output_hidden_states else None)

    @contextmanager
    def padding_known(self, padded: bool):
        """Within: batches are known to be padded (or not), so layout() does not read the mask back from the device
        (a training step that never waits for the GPU)."""
        self.known_padding = padded
        try:
            yield self
        finally:
            self.known_padding = None

    @property
    def resolved_attention(self) -> str:
        """What self.attention runs as on the encoder's device: "padded" or "packed"."""
        return resolve_attention(self.attention, self.embeddings.word_embeddings.weight.device)

    def layout(self, attention_mask: torch.Tensor) -> Layout:
        device = self.embeddings.word_embeddings.weight.device
        attention = self.resolved_attention
        # The dtype attention computes in (bf16 under autocast), so the kernel need not convert the mask.
        dtype = (torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type)
                 else self.embeddings.word_embeddings.weight.dtype)
        # MPNet's relative position bias joins the mask: the one tensor attention adds to its scores.
        bias = (self.encoder.position_bias(attention_mask.shape[1], dtype)
                if self.encoder.relative_attention_bias is not None else None)
        # Unless known (padding_known): one read from the device a batch (as transformers does), which lets a batch
        # without padding skip the mask.
        if not self.known_padding if self.known_padding is not None else bool(attention_mask.all()):
            return Padded(bias)
        mask = additive_mask(attention_mask, dtype)
        if bias is not None:
            mask = mask + bias  # [batch, heads, tokens, tokens]
        return Packed(attention_mask, mask) if attention == "packed" else Padded(mask)
