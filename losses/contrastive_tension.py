"""Contrastive Tension (Carlsson et al. 2021, "Semantic Re-tuning with Contrastive Tension"; seed 000, eq. 1).

Two independently updated copies f1, f2 of the same pretrained encoder embed a sentence pair (s1, s2);
z = f1(s1)^T f2(s2) is the raw (unnormalised) dot product of their mean-pooled final-layer embeddings, and

    L(z, s1, s2) = -log sigmoid(z)          if s1 = s2   (positive pair)
                   -log (1 - sigmoid(z))    if s1 != s2  (negative pair)

i.e. binary cross entropy with logits z and label 1 / 0. (The seed's extracted text prints the second case
as "sigma(1 - z)"; we read it as 1 - sigma(z), the logistic loss the paper describes and that
sentence-transformers' ContrastiveTensionLoss implements with BCEWithLogitsLoss.)

Batches (section 3 and Appendix A.1): each randomly drawn sentence s gives K + 1 pairs, (s, s) and K pairs
(s, s_neg) with randomly drawn other sentences; f2 always embeds the negatives. With K = 7 and batch size 16
a batch holds 2 positive and 14 negative pairs. `contrastive_tension_batch` builds such index pairs, the caller
embeds sentences[first[m]] with f1 and sentences[second[m]] with f2 (mean pooling is the caller's job).

Example:
    first, second, labels = contrastive_tension_batch(sentences, batch_size=16)
    loss = contrastive_tension_loss(model1_embed(first), model2_embed(second), labels)
"""

from typing import Sequence

import torch
import torch.nn.functional as F


def contrastive_tension_loss(model1_embeddings: torch.Tensor, model2_embeddings: torch.Tensor,
                             labels: torch.Tensor) -> torch.Tensor:
    """Mean logistic loss on row-wise dot products. Embeddings [M, H]; labels [M], 1 = same sentence, 0 = not.

    The mean over the M pairs (sentence-transformers sums them instead) keeps the loss scale independent of
    the batch size; the paper's RMSProp normalises the gradient scale anyway.
    """
    dot_products = (model1_embeddings * model2_embeddings).sum(dim=-1)  # [M]
    return F.binary_cross_entropy_with_logits(dot_products, labels.to(dot_products.dtype))


def contrastive_tension_batch(sentences: Sequence[str], batch_size: int = 16, negatives_per_positive: int = 7,
                              generator: torch.Generator | None = None
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw batch_size / (K + 1) anchor sentences, each with one positive and K negative pairs.

    Returns (first_indices [M], second_indices [M], labels [M] float) with M = batch_size: pair m is
    (sentences[first[m]] for model 1, sentences[second[m]] for model 2), label 1.0 for the positive pair.
    Negatives are drawn uniformly (with replacement) among sentences whose text differs from the anchor's,
    so a duplicated sentence in the corpus is never labelled as a negative of itself.
    """
    group_size = negatives_per_positive + 1
    if batch_size % group_size != 0:
        raise ValueError(f"batch_size {batch_size} is not a multiple of K + 1 = {group_size}")
    first, second, labels = [], [], []
    for _ in range(batch_size // group_size):
        anchor = _random_index(len(sentences), generator)
        first += [anchor] * group_size
        second.append(anchor)
        second += [_random_different_sentence(sentences, anchor, generator)
                   for _ in range(negatives_per_positive)]
        labels += [1.0] + [0.0] * negatives_per_positive
    return torch.tensor(first), torch.tensor(second), torch.tensor(labels)


def _random_index(n: int, generator: torch.Generator | None) -> int:
    return int(torch.randint(n, (1,), generator=generator))


def _random_different_sentence(sentences: Sequence[str], anchor: int, generator: torch.Generator | None,
                               max_tries: int = 1000) -> int:
    # Rejection sampling: cheap on a real corpus, where almost every draw differs from the anchor.
    for _ in range(max_tries):
        candidate = _random_index(len(sentences), generator)
        if sentences[candidate] != sentences[anchor]:
            return candidate
    raise ValueError(f"no sentence different from {sentences[anchor]!r} found in {max_tries} draws")
