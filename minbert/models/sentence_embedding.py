"""Sentence embeddings from the encoder's output: the last layer's (embed_sentences) or every layer's."""
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import torch

from minbert.common.choices import POOLINGS, TOKEN_POOLINGS
from minbert.common.ordering import sorted_batches
from minbert.common.progress import Progress
from minbert.models.bert import BertModel, BertOutput
from minbert.models.tokenizer import Tokenizer, collate



def pool(output: BertOutput, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """[batch, hidden] sentence embeddings: the [CLS] vector, the mean or max over real tokens, or the pooler output."""
    if pooling == "pooler":
        return output.pooler_output
    return pool_tokens(output.last_hidden_state, attention_mask, pooling)


def pool_tokens(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """[batch, hidden] from one layer's token vectors [batch, tokens, hidden]."""
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "mean":
        return masked_mean(hidden, attention_mask)
    if pooling == "max":
        return masked_max(hidden, attention_mask)
    raise ValueError(f"pooling {pooling!r} is not one of {(*POOLINGS, 'max')}")


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)


def masked_max(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Each feature's maximum over the real tokens; padding never wins."""
    padding = ~attention_mask.bool().unsqueeze(-1)
    return hidden.masked_fill(padding, torch.finfo(hidden.dtype).min).max(1).values


@contextmanager
def _eval_mode(encoder: BertModel):
    was_training = encoder.training
    encoder.eval()
    try:
        yield
    finally:
        encoder.train(was_training)


def _length_sorted_batches(encoder: BertModel, tokenizer: Tokenizer, sentences: list[str], batch_size: int,
                           max_length: int, desc: str) -> Iterator[tuple[list[int], dict[str, torch.Tensor]]]:
    """(rows, padded batch on the encoder's device); the caller puts each batch's results back at `rows`. desc: what
    to call the work in a progress bar ("" for none)."""
    device = next(encoder.parameters()).device
    encoded = tokenizer.encode(sentences, max_length=max_length)
    tokens = [len(e.input_ids) for e in encoded]
    # The longest batch comes first (common/ordering.py says why), so the time left is estimated from tokens.
    with Progress(len(sentences) if desc else 0, desc, "sentence", shown=bool(desc), effort=sum(tokens)) as bar:
        for rows in sorted_batches(tokens, batch_size):
            yield rows, {k: v.to(device) for k, v in collate([encoded[i] for i in rows], tokenizer.pad_id).items()}
            bar.update(len(rows), sum(tokens[i] for i in rows))


@torch.no_grad()
def embed_sentences(encoder: BertModel, tokenizer: Tokenizer, sentences: list[str], pooling: str = "mean",
                    batch_size: int = 64, max_length: int = 128, progress: str = "", autocast=None) -> torch.Tensor:
    """[len(sentences), hidden] embeddings, computed in eval mode in batches of similar length; progress: what
    to call the work in a progress bar (common/progress.py; "" for none); autocast: the encoder's passes run
    within it (common/precision.py's Precision.autocast), the pooling in fp32."""
    result = torch.empty(len(sentences), encoder.config.hidden_size)
    with _eval_mode(encoder):
        for rows, batch in _length_sorted_batches(encoder, tokenizer, sentences, batch_size, max_length, progress):
            with autocast() if autocast else nullcontext():
                output = encoder(**batch)
            # Pooled in fp32 (the encoder's outputs are bf16 under autocast): sums and means in fp32.
            output = BertOutput(output.last_hidden_state.float(), output.pooler_output.float())
            result[rows] = pool(output, batch["attention_mask"], pooling).cpu()
    return result


@torch.no_grad()
def embed_sentences_every_layer(encoder: BertModel, tokenizer: Tokenizer, sentences: list[str],
                                poolings: tuple[str, ...] = TOKEN_POOLINGS, batch_size: int = 64,
                                max_length: int = 128, progress: str = "", autocast=None) -> dict[str, torch.Tensor]:
    """pooling -> [layers + 1, len(sentences), hidden]: every layer's sentence embeddings, 0 = the embedding
    layer's output, from one encoder pass per batch (within autocast, as embed_sentences); progress: as
    embed_sentences's."""
    for pooling in poolings:
        if pooling not in TOKEN_POOLINGS:
            raise ValueError(f"pooling {pooling!r} is not one of {TOKEN_POOLINGS} (the pooler has no per-layer form)")
    shape = (encoder.config.num_hidden_layers + 1, len(sentences), encoder.config.hidden_size)
    result = {pooling: torch.empty(shape) for pooling in poolings}
    with _eval_mode(encoder):
        for rows, batch in _length_sorted_batches(encoder, tokenizer, sentences, batch_size, max_length, progress):
            with autocast() if autocast else nullcontext():
                layers = encoder(**batch, output_hidden_states=True).hidden_states
            for pooling in poolings:
                pooled = [pool_tokens(hidden.float(), batch["attention_mask"], pooling) for hidden in layers]
                result[pooling][:, rows] = torch.stack(pooled).cpu()
    return result
