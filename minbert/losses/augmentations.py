"""ConSERT's data augmentations at the embedding layer (Yan et al. 2021, "Data Augmentation
Strategies", Figure 3). Pure functions on tensors; the encoder applies them through its `position_ids` and
`embedding_transform(embeddings, attention_mask)` arguments.

- token_shuffle: shuffled position ids, token ids left in place (the transformer is a bag of words apart
  from the position encoding, so this shuffles the word order).
- token_cutoff: zero whole token embeddings (rows of the T x H matrix), rate 0.15 in the paper.
- feature_cutoff: zero whole hidden dimensions (columns), rate 0.2.
- embedding_dropout: zero individual elements, rate 0.2.

As in the ConSERT reference code, each sentence gets its own random choice, the number of rows / columns /
elements zeroed is floor(rate * count), counted over the sentence's real (non-padding) tokens for token
cutoff and dropout and over all H dimensions for feature cutoff, and nothing is rescaled (these are
augmentations, not regularisers; BERT's own dropout is switched off in ConSERT).

Example:
    position_ids = token_shuffle(attention_mask)                      # [B, T]
    out = bert(input_ids, attention_mask, position_ids=position_ids,
               embedding_transform=functools.partial(token_cutoff, rate=0.15))
"""

import torch


def token_shuffle(attention_mask: torch.Tensor, generator: torch.Generator | None = None,
                  keep_special_tokens: bool = False) -> torch.Tensor:
    """Position ids [B, T] that randomly permute each sentence's real token positions.

    Padding positions keep their own id. The ConSERT reference shuffles all real positions, [CLS] and [SEP]
    included (the default); keep_special_tokens=True keeps the first and last real token ([CLS], [SEP])
    in place.
    """
    batch, tokens = attention_mask.shape
    position_ids = torch.arange(tokens).repeat(batch, 1)
    for row in range(batch):
        movable = attention_mask[row].nonzero().squeeze(1).cpu()
        if keep_special_tokens:
            movable = movable[1:-1]
        order = torch.randperm(len(movable), generator=generator, device=_draw_device(generator, "cpu"))
        position_ids[row, movable] = movable[order.cpu()]
    return position_ids.to(attention_mask.device)


def token_cutoff(embeddings: torch.Tensor, attention_mask: torch.Tensor, rate: float,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """Zero floor(rate * real tokens) randomly chosen real token embeddings per sentence. embeddings [B, T, H],
    attention_mask [B, T] (1 = real token)."""
    real = attention_mask.bool()
    cut = _random_subset(real, _floor_fraction(real, rate), generator)  # [B, T]
    return embeddings.masked_fill(cut[:, :, None], 0.0)


def feature_cutoff(embeddings: torch.Tensor, attention_mask: torch.Tensor, rate: float,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """Zero floor(rate * H) randomly chosen hidden dimensions per sentence, at every token position."""
    batch, _, hidden = embeddings.shape
    every_dimension = torch.ones(batch, hidden, dtype=torch.bool, device=embeddings.device)
    cut = _random_subset(every_dimension, _floor_fraction(every_dimension, rate), generator)  # [B, H]
    return embeddings.masked_fill(cut[:, None, :], 0.0)


def embedding_dropout(embeddings: torch.Tensor, attention_mask: torch.Tensor, rate: float,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """Zero floor(rate * real tokens * H) randomly chosen elements of each sentence's real token embeddings."""
    batch, tokens, hidden = embeddings.shape
    real_elements = attention_mask.bool()[:, :, None].expand(batch, tokens, hidden).reshape(batch, -1)
    cut = _random_subset(real_elements, _floor_fraction(real_elements, rate), generator)  # [B, T * H]
    return embeddings.masked_fill(cut.view(batch, tokens, hidden), 0.0)


def _floor_fraction(candidates: torch.Tensor, rate: float) -> torch.Tensor:
    """floor(rate * number of candidates) per row, the ConSERT reference's int(n * rate)."""
    return (candidates.sum(dim=1) * rate).floor().long()


def _random_subset(candidates: torch.Tensor, counts: torch.Tensor,
                   generator: torch.Generator | None) -> torch.Tensor:
    """Bool mask [B, N] with counts[b] entries chosen uniformly at random among the True entries of row b."""
    scores = torch.rand(candidates.shape, generator=generator,
                        device=_draw_device(generator, candidates.device)).to(candidates.device)
    # Non-candidates get a score above every candidate's, so the counts[b] smallest scores are candidates.
    scores = scores.masked_fill(~candidates, 2.0)
    rank = scores.argsort(dim=1).argsort(dim=1)  # rank[b, n] = position of entry n in row b's sorted order
    return rank < counts[:, None]


def _draw_device(generator: torch.Generator | None, default: torch.device | str) -> torch.device | str:
    """Random numbers must be drawn on the generator's device; without one, on `default`."""
    return generator.device if generator is not None else default
