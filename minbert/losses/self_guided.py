"""Self-guided contrastive learning, SG-BERT (Kim et al. 2021, sections 3.1 and 3.2).

BERT is cloned into a fixed BERT_F and a tuned BERT_T. For sentence i, c_i is BERT_T's last-layer [CLS]
vector and h_{i,k} (k = 0..l, 0 = the embedding layer) is the max-pooled layer k of BERT_F. Both go through
the same projection head f (`ProjectionHead`) before any loss; every function here takes the projected
vectors. With phi(u, v) = exp(cos(u, v) / tau), tau = 0.01 (Table 8), b sentences:

- L^base (`self_guided_base_loss`): h_i = one uniformly sampled layer per sentence (`sample_layer_views`);
  NT-Xent over the 2b vectors {c_i} U {h_i}, each matched with its partner, averaged over the 2b terms.
- L^opt1 (`self_guided_opt1_loss`): only c_i is an anchor, L_i = -log phi(c_i, h_i) / Z_i with
  Z_i = sum_{j != i} phi(c_i, c_j) + sum_j phi(c_i, h_j).
- L^opt2 (`self_guided_opt2_loss`): denominator sum_j phi(c_i, h_j) only.
- L^opt3 (`self_guided_opt3_loss`, the final SG-OPT): each of the l + 1 views of sentence i is a positive,
  L_{i,k} = -log phi(c_i, h_{i,k}) / (phi(c_i, h_{i,k}) + sum_{m != i} sum_n phi(c_i, h_{m,n})),
  averaged over the b(l + 1) terms.

The paper adds lambda * L^reg (`l2_regulariser`, lambda = 0.1) to L^base and L^opt; the caller sums them.
The paper gives opt1 and opt2 no normalisation; we average over the b anchors, as its reference code does.

Example:
    head = ProjectionHead(hidden_size=768)
    c = head(cls_of_tuned_bert)                       # [b, 768] -> [b, 4096]
    views = head(max_pooled_layers_of_fixed_bert)     # [b, l + 1, 768] -> [b, l + 1, 4096]
    loss = self_guided_opt3_loss(c, views) + l2_regulariser(tuned.parameters(), fixed.parameters())
"""

from typing import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from minbert.losses.consert import nt_xent_loss
from minbert.losses.similarity import cosine_similarity_matrix

SG_TEMPERATURE = 0.01
SG_REGULARISER_WEIGHT = 0.1


class ProjectionHead(nn.Module):
    """f: two linear layers, each followed by GELU, hidden size 4096 (SG-BERT (Kim et al.) footnote 4; the reference
    code also outputs 4096 dimensions). Applied to c_i and to every h_{i,k}; thrown away after training."""

    def __init__(self, hidden_size: int, projection_size: int = 4096):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(hidden_size, projection_size), nn.GELU(),
                                 nn.Linear(projection_size, projection_size), nn.GELU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def sample_layer_views(layer_views: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """The uniform sampler sigma: one layer per sentence. layer_views [b, l + 1, H] -> h [b, H]."""
    b, num_layers, _ = layer_views.shape
    layers = torch.randint(num_layers, (b,), generator=generator).to(layer_views.device)
    return layer_views[torch.arange(b, device=layer_views.device), layers]


def self_guided_base_loss(c: torch.Tensor, h: torch.Tensor,
                          temperature: float = SG_TEMPERATURE) -> torch.Tensor:
    """L^base without L^reg: NT-Xent with c [b, H] and sampled views h [b, H] as the two views."""
    return nt_xent_loss(c, h, temperature)


def self_guided_opt1_loss(c: torch.Tensor, h: torch.Tensor,
                          temperature: float = SG_TEMPERATURE) -> torch.Tensor:
    """Mean over i of L_i^opt1; c, h: [b, H] (h sampled as for L^base)."""
    c_to_c = cosine_similarity_matrix(c, c) / temperature
    # c_i is not its own negative; exp(-inf) = 0 drops the j = i term of the first sum.
    c_to_c = c_to_c.masked_fill(torch.eye(len(c), dtype=torch.bool, device=c.device), float("-inf"))
    c_to_h = cosine_similarity_matrix(c, h) / temperature
    logits = torch.cat([c_to_h, c_to_c], dim=1)  # positive phi(c_i, h_i) is column i
    return F.cross_entropy(logits, torch.arange(len(c), device=c.device))


def self_guided_opt2_loss(c: torch.Tensor, h: torch.Tensor,
                          temperature: float = SG_TEMPERATURE) -> torch.Tensor:
    """Mean over i of L_i^opt2; c, h: [b, H]."""
    logits = cosine_similarity_matrix(c, h) / temperature
    return F.cross_entropy(logits, torch.arange(len(c), device=c.device))


def self_guided_opt3_loss(c: torch.Tensor, layer_views: torch.Tensor,
                          temperature: float = SG_TEMPERATURE) -> torch.Tensor:
    """L^opt without L^reg: mean over i, k of L_{i,k}^opt3; c [b, H], layer_views [b, l + 1, H]."""
    b, num_layers, _ = layer_views.shape
    # sims[i, m, n] = cos(c_i, h_{m,n}) / tau
    sims = cosine_similarity_matrix(c, layer_views.flatten(0, 1)).view(b, b, num_layers) / temperature
    own_sentence = torch.eye(b, dtype=torch.bool, device=c.device)
    positives = sims[own_sentence]  # [b, l + 1]: cos(c_i, h_{i,k}) / tau
    # log sum over the other sentences' views (same for every k of anchor i).
    negatives = sims.masked_fill(own_sentence[:, :, None], float("-inf")).flatten(1).logsumexp(dim=1)  # [b]
    # -log(e^p / (e^p + e^neg)) = logaddexp(p, neg) - p
    return (torch.logaddexp(positives, negatives[:, None]) - positives).mean()


def l2_regulariser(tuned_parameters: Iterable[torch.Tensor], fixed_parameters: Iterable[torch.Tensor],
                   weight: float = SG_REGULARISER_WEIGHT) -> torch.Tensor:
    """lambda * L^reg = lambda * ||BERT_F - BERT_T||_2^2, summed over all matching parameter tensors.

    The two iterables must list corresponding tensors in the same order (e.g. two .parameters() calls on
    copies of one model). BERT_F is fixed, so no gradient flows into it.
    """
    squared_distances = [(tuned - fixed.detach()).pow(2).sum()
                         for tuned, fixed in zip(tuned_parameters, fixed_parameters, strict=True)]
    return weight * torch.stack(squared_distances).sum()
