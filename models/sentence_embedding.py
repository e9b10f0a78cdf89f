"""Sentence embeddings from the encoder's output."""
import torch

from models.bert import BertModel, BertOutput
from models.tokenizer import Tokenizer, collate

POOLINGS = ("cls", "mean", "pooler")


def pool(output: BertOutput, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """[batch, hidden] sentence embeddings: the [CLS] vector, the mean over real tokens, or the pooler output."""
    if pooling == "cls":
        return output.last_hidden_state[:, 0]
    if pooling == "mean":
        return masked_mean(output.last_hidden_state, attention_mask)
    if pooling == "pooler":
        return output.pooler_output
    raise ValueError(f"pooling {pooling!r} is not one of {POOLINGS}")


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)


@torch.no_grad()
def embed_sentences(encoder: BertModel, tokenizer: Tokenizer, sentences: list[str], pooling: str = "mean",
                    batch_size: int = 64, max_length: int = 128) -> torch.Tensor:
    """[len(sentences), hidden] embeddings, computed in eval mode in batches of similar length."""
    device = next(encoder.parameters()).device
    was_training = encoder.training
    encoder.eval()
    encoded = tokenizer.encode(sentences, max_length=max_length)
    # Sorting by length keeps padding small; the result is put back in the caller's order.
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].input_ids))
    result = torch.empty(len(sentences), encoder.config.hidden_size)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        batch = {k: v.to(device) for k, v in collate([encoded[i] for i in rows], tokenizer.pad_id).items()}
        result[rows] = pool(encoder(**batch), batch["attention_mask"], pooling).float().cpu()
    encoder.train(was_training)
    return result
