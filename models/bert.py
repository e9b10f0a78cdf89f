"""Our BERT encoder (Devlin et al., 2019), written to load Hugging Face BERT checkpoints unchanged.

Module and parameter names mirror `transformers.BertModel` one-to-one (embeddings.word_embeddings,
encoder.layer.0.attention.self.query, ...), so a checkpoint's state dict loads without renaming.
"""
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from models.config import BertConfig

ACTIVATIONS = {
    "gelu": F.gelu,  # BERT's exact erf GELU
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


@dataclass
class BertOutput:
    last_hidden_state: torch.Tensor  # [batch, tokens, hidden]
    pooler_output: torch.Tensor  # [batch, hidden]: tanh(dense([CLS]))
    hidden_states: tuple[torch.Tensor, ...] | None = None  # layer 0 = embeddings, then each layer's output


class BertEmbeddings(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids, position_ids):
        embeddings = (self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
                      + self.token_type_embeddings(token_type_ids))
        return self.dropout(self.LayerNorm(embeddings))


class BertSelfAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, hidden, attend):
        batch, tokens, width = hidden.shape

        def split_heads(x):  # [B, T, H] -> [B, heads, T, H / heads]
            return x.view(batch, tokens, self.num_heads, width // self.num_heads).transpose(1, 2)

        # The fused kernel computes softmax(QK^T / sqrt(d) masked) V, with dropout on the probabilities.
        context = F.scaled_dot_product_attention(
            split_heads(self.query(hidden)), split_heads(self.key(hidden)), split_heads(self.value(hidden)),
            attn_mask=attend, dropout_p=self.dropout_p if self.training else 0.0)
        return context.transpose(1, 2).reshape(batch, tokens, width)


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

    def forward(self, hidden, attend):
        return self.output(self.self(hidden, attend), hidden)


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

    def forward(self, hidden, attend):
        hidden = self.attention(hidden, attend)
        return self.output(self.intermediate(hidden), hidden)


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))


class BertPooler(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, last_hidden_state):
        return torch.tanh(self.dense(last_hidden_state[:, 0]))


EmbeddingTransform = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class BertModel(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
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

        position_ids replaces 0..T-1 (ConSERT's token shuffle permutes them); embedding_transform(embeddings,
        attention_mask) edits the embedding layer's output before the first layer (ConSERT's cutoffs).
        """
        batch, tokens = input_ids.shape
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if position_ids is None:
            position_ids = torch.arange(tokens, device=input_ids.device).expand(batch, tokens)
        if tokens > self.config.max_position_embeddings:
            raise ValueError(f"{tokens} tokens exceed max_position_embeddings "
                             f"{self.config.max_position_embeddings}; truncate the input")

        hidden = self.embeddings(input_ids, token_type_ids, position_ids)
        if embedding_transform is not None:
            hidden = embedding_transform(hidden, attention_mask)
        # [B, 1, 1, T]: every query may attend to the real tokens of its sentence, never to padding.
        attend = attention_mask.bool()[:, None, None, :]
        all_hidden = [hidden]
        for layer in self.encoder.layer:
            hidden = layer(hidden, attend)
            all_hidden.append(hidden)
        return BertOutput(last_hidden_state=hidden, pooler_output=self.pooler(hidden),
                          hidden_states=tuple(all_hidden) if output_hidden_states else None)
