"""Building blocks shared by every task head.

The heads themselves live in their own modules (import them from there):
    heads.sentiment.SentimentHead           SST-5 logits from one sentence embedding
    heads.paraphrase.ParaphraseHead         bilinear paraphrase logit from two embeddings
    heads.paraphrase.CrossEncodedPairHead   Mohammed and Sabane's CS224N report PH / DPH / DPHA on a cross-encoded pair
    heads.similarity.SimilarityHead         cosine STS score in [0, 5]
    heads.similarity.CrossEncodedSimilarityHead

Every head takes pooled sentence embeddings [B, H]; the encoder and the pooling live elsewhere.
"""
import torch
from torch import nn

from minbert.common.choices import PAIR_MLPS, SHARE_MODES

# Chen's CS224N report section 5.3: "dropout probability of 0.3 at each linear layer".
DEFAULT_DROPOUT = 0.3


class MLP(nn.Module):
    """Two linear layers, dropout before each (Chen's CS224N report) and a ReLU between them.

    The first layer is its own submodule so that two MLPs can hold the very same layer object
    (share_first_with=...): autograd then sums both tasks' gradients into one set of weights.

    residual=True gives x + MLP(x) with the second layer starting at zero: the MLP starts as the
    identity, so a cosine or bilinear head on top starts from the pretrained encoder's own geometry
    instead of a random projection of it, which a sentence-embedding model like all-MiniLM-L6-v2
    has to win back first.
    """

    def __init__(self, in_features: int, hidden_features: int, out_features: int,
                 dropout: float = DEFAULT_DROPOUT, share_first_with: "MLP | None" = None, residual: bool = False):
        super().__init__()
        if residual and in_features != out_features:
            raise ValueError(f"a residual MLP maps features onto themselves; got {in_features}->{out_features}")
        if share_first_with is None:
            self.first = nn.Sequential(nn.Dropout(dropout), nn.Linear(in_features, hidden_features), nn.ReLU())
        else:
            shared_linear = share_first_with.first[1]
            if (shared_linear.in_features, shared_linear.out_features) != (in_features, hidden_features):
                raise ValueError(f"cannot share a {shared_linear.in_features}->{shared_linear.out_features} "
                                 f"first layer with an MLP that needs {in_features}->{hidden_features}")
            self.first = share_first_with.first
        self.second = nn.Sequential(nn.Dropout(dropout), nn.Linear(hidden_features, out_features))
        self.out_features, self.residual = out_features, residual
        if residual:
            nn.init.zeros_(self.second[1].weight)
            nn.init.zeros_(self.second[1].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        transformed = self.second(self.first(x))
        return x + transformed if self.residual else transformed


def pair_mlps(share: str, hidden_size: int, count: int = 2, mlp_hidden: int | None = None,
              dropout: float = DEFAULT_DROPOUT, kind: str = "plain") -> list[MLP]:
    """`count` embedding transforms for the pair tasks, H -> mlp_hidden -> H, shared as `share` says.

    Sharing is by object identity, never by copying weights, so a shared layer has exactly one
    set of parameters and receives the gradients of every task that uses it.
    """
    if share not in SHARE_MODES:
        raise ValueError(f"unknown share mode {share!r}; expected one of {', '.join(SHARE_MODES)}")
    if kind not in PAIR_MLPS:
        raise ValueError(f"unknown pair MLP {kind!r}; expected one of {', '.join(PAIR_MLPS)}")
    mlp_hidden, residual = mlp_hidden or hidden_size, kind == "residual"
    first = MLP(hidden_size, mlp_hidden, hidden_size, dropout, residual=residual)
    if share == "all":
        return [first] * count
    share_first_with = first if share == "first-layer" else None
    return [first] + [MLP(hidden_size, mlp_hidden, hidden_size, dropout, share_first_with, residual)
                      for _ in range(count - 1)]


class CommonLayer(nn.Module):
    """Mohammed and Sabane's CS224N report's "CL": one Linear + tanh applied to the embedding before all three heads.

    No dropout: Mohammed and Sabane's CS224N report found the model could not learn with dropout (p=0.5) in this layer.
    """

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)

    def forward(self, embedding: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(embedding))
