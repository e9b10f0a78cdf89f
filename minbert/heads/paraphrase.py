"""Paraphrase heads: one logit per sentence pair (apply sigmoid for P(paraphrase)).

ParaphraseHead        bi-encoder: each sentence embedded on its own (Chen's CS224N report).
CrossEncodedPairHead  cross-encoder: the pair is encoded together, in both orders (Mohammed and Sabane's CS224N report).
"""
import torch
from torch import nn

from minbert.common.choices import CROSS_HEADS
from minbert.heads import DEFAULT_DROPOUT, MLP


class ParaphraseHead(nn.Module):
    """Bilinear score between the MLP-transformed embeddings: logit = f(u)^T W f(v) + b.

    The MLP is passed in (see heads.pair_mlps) so that it can be shared with the STS head.
    The score is not symmetric in (u, v); the data gives each pair in one arbitrary order.
    """

    def __init__(self, mlp: MLP):
        super().__init__()
        self.mlp = mlp
        self.bilinear = nn.Bilinear(mlp.out_features, mlp.out_features, 1)

    def forward(self, embedding1: torch.Tensor, embedding2: torch.Tensor) -> torch.Tensor:
        # Under bf16 autocast a plain MLP's output is bf16, and Bilinear, which autocast does not cover, refuses it
        # beside its fp32 weights: the score is computed in fp32 (a no-op without autocast).
        return self.bilinear(self.mlp(embedding1).float(), self.mlp(embedding2).float()).squeeze(-1)


class CrossEncodedPairHead(nn.Module):
    """Mohammed and Sabane's dense prediction heads on a pair encoded as "[CLS] s1 [SEP] s2" and "[CLS] s2 [SEP] s1".

    Each view of the pair gets its own Linear(H, 1) -> one logit per view; a final Linear turns
    those logits into the pair's logit. The views and the variants (Mohammed and Sabane's CS224N report names):
        "ph":   views e12, e21
        "dph":  views e12, e21 and their element-wise difference e12 - e21
        "dpha": as dph, with tanh on the per-view logits ("activation in between")
    Without the tanh (ph, dph) the whole head is linear in its inputs.
    """

    VARIANTS = CROSS_HEADS

    def __init__(self, hidden_size: int, variant: str = "dpha", dropout: float = DEFAULT_DROPOUT):
        super().__init__()
        if variant not in self.VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; expected one of {', '.join(self.VARIANTS)}")
        self.use_difference = variant != "ph"
        num_views = 3 if self.use_difference else 2
        self.dropout = nn.Dropout(dropout)
        self.view_layers = nn.ModuleList(nn.Linear(hidden_size, 1) for _ in range(num_views))
        self.activation = nn.Tanh() if variant == "dpha" else nn.Identity()
        self.combine = nn.Linear(num_views, 1)

    def forward(self, e12: torch.Tensor, e21: torch.Tensor) -> torch.Tensor:
        views = [e12, e21, e12 - e21] if self.use_difference else [e12, e21]
        view_logits = torch.cat([layer(self.dropout(view)) for layer, view in zip(self.view_layers, views)], dim=-1)
        return self.combine(self.activation(view_logits)).squeeze(-1)
