"""Gradient caching (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited
Setup"): the gradients of a contrastive loss over a large batch, with the memory of one chunk.

A contrastive loss couples every example of the batch, so it cannot be split like a sum of per-example
losses. But it only touches the encoder through the embeddings, so the backward pass factorises:

1. embed every chunk without building a graph (no activations kept);
2. compute the loss on the concatenated embeddings, made leaf tensors, and backward to get d loss / d embedding;
3. re-embed each chunk with a graph and backward the cached d loss / d embedding slice into the parameters,
   freeing the chunk's activations before the next one.

Step 3 must reproduce step 1's embeddings exactly, so each chunk's torch RNG state (CPU and CUDA) is saved
before its first pass and restored for its second: dropout (and any torch-random augmentation in embed_fn)
draws the same masks twice. RNG outside torch (Python's random, NumPy) is not replayed; keep embed_fn free
of it.

Example (SimCSE on 4 chunks of 16 sentences, two dropout views each):
    chunks = batch.split(16)
    loss = grad_cache_backward(lambda ids: model(ids), [chunks, chunks], simcse_loss)
    optimizer.step()
"""

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

EmbedFn = Callable[[Any], torch.Tensor]


@dataclass
class _RngState:
    cpu: torch.Tensor
    cuda: list[torch.Tensor] | None

    @classmethod
    def capture(cls) -> "_RngState":
        # Only touch CUDA if it is already in use: querying it would otherwise initialise it.
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        return cls(torch.get_rng_state(), cuda)

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)


def grad_cache_backward(embed_fn: EmbedFn | Sequence[EmbedFn], chunk_groups: Sequence[Sequence[Any]],
                        loss_fn: Callable[..., torch.Tensor]) -> torch.Tensor:
    """Accumulate into .grad the parameter gradients of loss_fn(*group embeddings), chunk by chunk.

    chunk_groups: one list of input chunks per loss argument, e.g. [anchor_chunks, positive_chunks] for
        pairs or three lists for triplets. Group g's chunks are embedded and concatenated (dim 0) into the
        g-th argument of loss_fn.
    embed_fn: chunk -> embeddings [n, H]; either one callable for all groups or one per group (e.g. the two
        models of Contrastive Tension).
    loss_fn: the loss on the concatenated embeddings; parameters it uses itself (a projection head) get
        their gradients directly from its backward.
    Returns the detached loss. Gives the same gradients as embedding all chunks with a graph, in the same
    order, and calling loss_fn(...).backward().
    """
    embed_fns = [embed_fn] * len(chunk_groups) if callable(embed_fn) else list(embed_fn)

    # 1. Embed without a graph, remembering the RNG state each chunk started from.
    rng_states, chunk_sizes, embeddings = [], [], []
    for embed, chunks in zip(embed_fns, chunk_groups, strict=True):
        group_states, group_embeddings = [], []
        for chunk in chunks:
            group_states.append(_RngState.capture())
            with torch.no_grad():
                group_embeddings.append(embed(chunk))
        rng_states.append(group_states)
        chunk_sizes.append([len(e) for e in group_embeddings])
        embeddings.append(torch.cat(group_embeddings).requires_grad_())

    # 2. Loss on the full batch of embeddings; its gradient stops at the embedding leaves.
    loss = loss_fn(*embeddings)
    loss.backward()
    # Step 3 rewinds the RNG; resume afterwards from here so nothing random repeats in the next step.
    rng_after_loss = _RngState.capture()

    # 3. Replay each chunk with a graph and push the cached embedding gradient through it.
    for embed, chunks, group_states, sizes, group_embeddings in zip(embed_fns, chunk_groups, rng_states,
                                                                      chunk_sizes, embeddings):
        for chunk, state, gradient in zip(chunks, group_states, group_embeddings.grad.split(sizes)):
            state.restore()
            embed(chunk).backward(gradient)
    rng_after_loss.restore()
    return loss.detach()
