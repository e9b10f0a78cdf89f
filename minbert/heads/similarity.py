"""STS heads: a similarity score in [0, 5] per sentence pair.

SimilarityHead maps the cosine of the two MLP-transformed embeddings linearly onto the gold scale:
the cosine `floor` M maps to 0 and cosine 1 maps to 5. Two target modes share this one mapping:
    plain (M = -1, the default): the whole cosine range [-1, 1] covers [0, 5].
    cosine-range (Contrastive Tension (Carlsson et al.) section 5.2): gold scores are mapped onto [M, 1], with M the model's
        mean cosine over the training pairs in the lowest label bucket (gold in [0, 0.25]), so the
        regression target asks the embedding space to move as little as possible.
forward() gives the score unclamped: cosines below M map below 0. Training compares that score with the
gold score, which is the squared error of the raw cosine against gold_to_cosine(gold) times the constant
(5 / (1 - M))^2, so every pair has a gradient, whatever its cosine, and the loss keeps the scale of a 0-5
score. Predictions clamp to [0, 5] (tasks.Similarity.soft).
"""
import torch
import torch.nn.functional as F
from torch import nn

from minbert.heads import MLP
from minbert.heads.paraphrase import CrossEncodedPairHead

MAX_SCORE = 5.0
LOWEST_BUCKET_WIDTH = MAX_SCORE / 20  # Contrastive Tension (Carlsson et al.) splits [0, 5] into 20 buckets
# The highest M the cosine-range mode takes. As M nears 1 the whole 0-5 scale maps onto a sliver of cosines and
# the loss's scale (5 / (1 - M))^2 grows without bound (at M = 1 it divides by zero): an encoder whose unrelated
# sentences are all but parallel (a random one, say) gets M = 0.99 and a warning instead.
MAX_COSINE_FLOOR = 0.99


def lowest_bucket_mean_cosine(cosines: torch.Tensor, gold: torch.Tensor,
                              bucket_width: float = LOWEST_BUCKET_WIDTH) -> float:
    """M for the cosine-range mode: the mean cosine of the pairs whose gold score is <= bucket_width. Cosines are
    clamped to [-1, 1] first: rounding gives parallel fp32 vectors a cosine a few ulps above 1."""
    in_bucket = gold <= bucket_width
    if not in_bucket.any():
        raise ValueError(f"no pair has a gold score <= {bucket_width}; cannot measure the lowest bucket")
    return cosines[in_bucket].float().clamp(-1.0, 1.0).mean().item()


class SimilarityHead(nn.Module):
    """score = 5 * (cos(f(u), f(v)) - M) / (1 - M), unclamped (see the module's docstring).

    The MLP f is passed in (see heads.pair_mlps) so that it can be shared with the paraphrase head.
    M is a buffer, so it travels with the checkpoint and predictions after reloading use the same map.
    """

    def __init__(self, mlp: MLP, cosine_floor: float = -1.0):
        super().__init__()
        self.mlp = mlp
        self.register_buffer("cosine_floor", torch.tensor(0.0))
        self.set_cosine_floor(cosine_floor)

    def set_cosine_floor(self, floor: float) -> None:
        """Set M, e.g. to lowest_bucket_mean_cosine(...) for the cosine-range target."""
        if not -1.0 <= floor < 1.0:
            raise ValueError(f"the cosine floor must lie in [-1, 1), got {floor}")
        self.cosine_floor.fill_(floor)

    def cosine(self, embedding1: torch.Tensor, embedding2: torch.Tensor) -> torch.Tensor:
        return F.cosine_similarity(self.mlp(embedding1), self.mlp(embedding2), dim=-1)

    def gold_to_cosine(self, gold: torch.Tensor) -> torch.Tensor:
        """Regression target for the raw cosine: gold 0 -> M, gold 5 -> 1."""
        return self.cosine_floor + (1 - self.cosine_floor) * gold / MAX_SCORE

    def cosine_to_gold(self, cosine: torch.Tensor) -> torch.Tensor:
        """Inverse of gold_to_cosine: M -> 0, 1 -> 5; cosines below M give scores below 0."""
        return MAX_SCORE * (cosine - self.cosine_floor) / (1 - self.cosine_floor)

    def forward(self, embedding1: torch.Tensor, embedding2: torch.Tensor) -> torch.Tensor:
        return self.cosine_to_gold(self.cosine(embedding1, embedding2))


class CrossEncodedSimilarityHead(CrossEncodedPairHead):
    """Mohammed and Sabane's PH / DPH / DPHA for STS: the pair head's logit squashed onto [0, 5] by 5 * sigmoid."""

    def forward(self, e12: torch.Tensor, e21: torch.Tensor) -> torch.Tensor:
        return MAX_SCORE * torch.sigmoid(super().forward(e12, e21))
