"""NT-Xent, the normalized temperature-scaled cross entropy of SimCLR (Chen et al. 2020), as used by ConSERT
(Yan et al. 2021, "General Framework").

N sentences give 2N views r_1..r_2N (two augmentations each). Each view must find its counterpart j among
the other 2N - 1 views (the 2(N - 1) views of other sentences are the negatives):

    L_{i,j} = -log( exp(sim(r_i, r_j) / tau) / sum_{k != i} exp(sim(r_i, r_k) / tau) )

averaged over all 2N views; sim is cosine similarity, tau = 0.1 in ConSERT. (ConSERT's released code sums
the two directions instead of averaging, i.e. twice this value; we follow the paper's text.)
SG-BERT's L^base (SG-BERT (Kim et al.), section 3.1) is the same loss with c_i and h_i as the two views.

Inputs: view_a [N, H], view_b [N, H] where row i of both comes from sentence i.

Example:
    shuffled, cut = torch.randn(4, 8), torch.randn(4, 8)  # pooled outputs of two augmented passes
    loss = nt_xent_loss(shuffled, cut)
"""

import torch
import torch.nn.functional as F

from minbert.losses.similarity import cosine_similarity_matrix


def nt_xent_loss(view_a: torch.Tensor, view_b: torch.Tensor, temperature: float = 0.1) -> torch.Tensor:
    """Mean over the 2N views of the SimCLR loss; view_a, view_b: [N, H]."""
    n = len(view_a)
    views = torch.cat([view_a, view_b])  # [2N, H]; view i's counterpart is i + N (mod 2N)
    logits = cosine_similarity_matrix(views, views) / temperature
    # A view is not its own negative: exp(-inf) = 0 removes the k = i term from the denominator.
    self_mask = torch.eye(2 * n, dtype=torch.bool, device=views.device)
    logits = logits.masked_fill(self_mask, float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(n)]).to(views.device)
    return F.cross_entropy(logits, targets)
