"""Contrastive Tension (Carlsson et al. 2021, "Semantic Re-tuning with Contrastive Tension", eq. 1).

Two independently updated copies f1, f2 of the same pretrained encoder embed a sentence pair (s1, s2);
z = f1(s1)^T f2(s2) is the raw (unnormalised) dot product of their mean-pooled final-layer embeddings, and

    L(z, s1, s2) = -log sigmoid(z)          if s1 = s2   (positive pair)
                   -log (1 - sigmoid(z))    if s1 != s2  (negative pair)

i.e. binary cross entropy with logits z and label 1 / 0. (The seed's extracted text prints the second case
as "sigma(1 - z)"; we read it as 1 - sigma(z), the logistic loss the paper describes and that
sentence-transformers' ContrastiveTensionLoss implements with BCEWithLogitsLoss.)

Batches (section 3 and Appendix A.1): each randomly drawn sentence s gives K + 1 pairs, (s, s) and K pairs
(s, s_neg) with randomly drawn other sentences; f2 always embeds the negatives. With K = 7 and batch size 16
a batch holds 2 positive and 14 negative pairs; data/contrastive.py contrastive_tension_batch builds them, the
caller embeds sentences[first[m]] with f1 and sentences[second[m]] with f2 (mean pooling is the caller's job).

Example:
    first, second, labels = contrastive_tension_batch(sentences, batch_size=16)   # data.contrastive
    loss = contrastive_tension_loss(model1_embed(first), model2_embed(second), labels)
"""

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
