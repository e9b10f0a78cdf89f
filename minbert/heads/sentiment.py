"""Sentiment head: SST-5 class logits from one pooled sentence embedding (Chen's CS224N report section 4.2)."""
import torch
from torch import nn

from minbert.heads import DEFAULT_DROPOUT, MLP


class SentimentHead(nn.Module):
    """2-layer MLP with dropout: [B, H] embedding -> [B, num_classes] logits."""

    def __init__(self, hidden_size: int, num_classes: int = 5, mlp_hidden: int | None = None,
                 dropout: float = DEFAULT_DROPOUT):
        super().__init__()
        self.mlp = MLP(hidden_size, mlp_hidden or hidden_size, num_classes, dropout)

    def forward(self, embedding: torch.Tensor) -> torch.Tensor:
        return self.mlp(embedding)
