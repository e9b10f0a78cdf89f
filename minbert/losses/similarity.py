"""Cosine-similarity matrix shared by the in-batch contrastive losses (SimCSE, MNRL, NT-Xent, SG-BERT)."""

import torch
import torch.nn.functional as F


def cosine_similarity_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """sim[i, j] = cos(a_i, b_j) for a [N, H] and b [M, H]; returns [N, M].

    Example: cosine_similarity_matrix(torch.eye(2), torch.tensor([[1., 1.]])) is [[0.7071], [0.7071]].
    """
    # Normalising first turns the whole matrix into one matmul; eps keeps a zero vector from dividing by 0.
    return F.normalize(a, dim=-1, eps=1e-8) @ F.normalize(b, dim=-1, eps=1e-8).T
