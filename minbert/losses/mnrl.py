"""Multiple negatives ranking loss (Henderson et al. 2017, "Efficient Natural Language Response Suggestion
for Smart Reply"; used for paraphrase pretraining in Mohammed and Sabane's CS224N report, section 3.2).

For a batch of K pairs (x_i, y_i), every other y_j in the batch is a negative for x_i:

    J = -1/K * sum_i log( exp(S(x_i, y_i)) / sum_j exp(S(x_i, y_j)) )

with S = scale * cosine similarity, as in sentence-transformers' MultipleNegativesRankingLoss. That is a
cross entropy over the rows of the [K, K] score matrix with the diagonal as the target class. Optional hard
negatives [K, H] (one per anchor) are appended as K extra candidate columns shared by every anchor.

Inputs: anchors [K, H], positives [K, H], hard_negatives [K, H] or None.

Example:
    anchors, positives = torch.randn(4, 8), torch.randn(4, 8)
    loss = multiple_negatives_ranking_loss(anchors, positives)            # scalar
    per_anchor = multiple_negatives_ranking_loss(anchors, positives, reduction="none")  # [4]
"""

import torch
import torch.nn.functional as F

from minbert.losses.similarity import cosine_similarity_matrix


def multiple_negatives_ranking_loss(anchors: torch.Tensor, positives: torch.Tensor,
                                    hard_negatives: torch.Tensor | None = None, scale: float = 20.0,
                                    reduction: str = "mean") -> torch.Tensor:
    """Cross entropy of each anchor against all positives (and hard negatives) in the batch.

    reduction="mean" gives the scalar loss, "none" the per-anchor losses [K] (used by the Quora SimCSE variant).
    """
    candidates = positives if hard_negatives is None else torch.cat([positives, hard_negatives])
    scores = scale * cosine_similarity_matrix(anchors, candidates)  # [K, K] or [K, 2K]
    # Anchor i's positive sits in column i; every other column is a negative.
    targets = torch.arange(len(anchors), device=anchors.device)
    return F.cross_entropy(scores, targets, reduction=reduction)
