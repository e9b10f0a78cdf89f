"""SimCSE contrastive loss (Gao et al. 2021; Chen's CS224N report eq. 1, Mohammed and Sabane's CS224N report section 3.1).

For N pairs (x_i, x_i^+) with representations h_i, h_i^+ and temperature tau:

    pairs:               l_i = -log( exp(sim(h_i, h_i^+) / tau) / sum_j exp(sim(h_i, h_j^+) / tau) )
    with hard negatives: l_i = -log( exp(sim(h_i, h_i^+) / tau)
                                     / sum_j [exp(sim(h_i, h_j^+) / tau) + exp(sim(h_i, h_j^-) / tau)] )

sim is cosine similarity, tau defaults to 0.05 (both reports), the loss is the mean of l_i. This is the
multiple negatives ranking loss with scale 1/tau (Chen's CS224N report section 3 notes the equivalence), so it reuses it.

- Unsupervised SimCSE: anchors and positives are two forward passes of the same sentences, differing only
  by dropout.
- Supervised NLI SimCSE: positives are entailments, hard_negatives the contradictions [N, H].
- Quora variant (Chen's CS224N report, section 4.1): `quora_simcse_loss` below.

Example:
    first_pass, second_pass = torch.randn(4, 8), torch.randn(4, 8)  # two dropout views of 4 sentences
    loss = simcse_loss(first_pass, second_pass)
"""

import torch

from minbert.losses.mnrl import multiple_negatives_ranking_loss


def simcse_loss(anchors: torch.Tensor, positives: torch.Tensor, hard_negatives: torch.Tensor | None = None,
                temperature: float = 0.05) -> torch.Tensor:
    """Mean InfoNCE over N anchors [N, H]; positives [N, H]; optional hard_negatives [N, H]."""
    return multiple_negatives_ranking_loss(anchors, positives, hard_negatives, scale=1.0 / temperature)


def quora_simcse_loss(first: torch.Tensor, second: torch.Tensor, is_paraphrase: torch.Tensor,
                      temperature: float = 0.05, use_negative_pairs: bool = True) -> torch.Tensor:
    """SimCSE on Quora question pairs (Chen's CS224N report, section 4.1 and Figure 1).

    first, second: [N, H] embeddings of the two questions of each pair; is_paraphrase: [N] bool/0-1 labels.

    Paraphrase pairs (label 1) are positives: their l_i (eq. 1, computed over the whole batch, so every
    other pair's second question is an in-batch negative) is minimised. Non-paraphrase pairs (label 0) "are
    taken as negative pairs, whose contrastive loss is maximized instead": their l_i enters with a minus sign.
    The result is the mean over all N pairs of (+l_i for paraphrases, -l_i for non-paraphrases); with cosine
    similarity each l_i is bounded (by log N + 2/tau), so maximising it cannot diverge. Taken literally, as
    here, -l_i also rewards sim(h_i, h_j^+) for j != i: a non-paraphrase question is pulled a little toward
    the other pairs' second questions while being pushed from its own partner.

    use_negative_pairs=False is the "Quora Only (No Negative Pairs)" ablation of Table 4: non-paraphrase
    pairs are dropped from the batch altogether (neither row nor column), i.e. plain SimCSE on paraphrases.
    """
    is_paraphrase = is_paraphrase.bool()
    if not use_negative_pairs:
        if not is_paraphrase.any():
            # A batch with no paraphrase has nothing to learn from; a zero that is still part of the graph
            # (instead of the NaN of an empty mean) lets the caller call backward() unconditionally.
            return 0.0 * first.sum()
        return simcse_loss(first[is_paraphrase], second[is_paraphrase], temperature=temperature)
    per_pair = multiple_negatives_ranking_loss(first, second, scale=1.0 / temperature, reduction="none")
    sign = torch.where(is_paraphrase, 1.0, -1.0).to(per_pair.dtype)
    return (sign * per_pair).mean()
