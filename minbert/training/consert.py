"""ConSERT (Yan et al. 2021): NT-Xent over two views of each sentence augmented at the embedding
layer, and the paper's three ways of adding NLI supervision.

Views (--aug1, --aug2; section 3.2 and Implementation Details):
    none            the plain forward pass
    shuffle         shuffled position ids, token ids in place
    token-cutoff    zero 15% of the token embeddings
    feature-cutoff  zero 20% of the hidden dimensions
    dropout         zero 20% of the embedding elements
    adversarial     FGV: the gradient of the supervised loss w.r.t. the embedding layer's output, normalised per
                    token and scaled to --fgv-epsilon, added to that output; it needs the supervised loss, so
                    only the joint stage has it
The unsupervised stage turns BERT's own dropout off ("we remove the default dropout layer in BERT"), so the
augmentations are the only noise; the NLI stages keep it, as the reference code's supervised runs do.

Stages (section 3.3, --consert-stages): each choice a sequence of stages that the trainer runs one after the
other, every stage with a fresh optimizer and learning-rate schedule (the paper starts the unsupervised run from
the first's checkpoint):
    unsup        L_con on --data
    joint        L_joint = L_ce + alpha L_con on NLI
    sup-unsup    L_ce on NLI, then L_con on --data
    joint-unsup  L_joint on NLI, then L_con on --data
L_ce is SBERT's NLI classifier softmax(W [u, v, |u - v|] + b) on mean-pooled embeddings. Our NLI file holds
(premise, entailment, contradiction) triplets, so the classifier is 2-way (entailment vs contradiction) where the
paper's is 3-way. In the joint stage L_con is one NT-Xent over the two views of all the batch's sentences.
"""
import functools

import torch
import torch.nn.functional as F
from torch import nn

from minbert.data.contrastive import SentenceBatch, TripletBatch
from minbert.losses import embedding_dropout, feature_cutoff, nt_xent_loss, token_cutoff, token_shuffle
from minbert.models import BertModel, pool
from minbert.models.bert import BertSelfAttention
from minbert.training.objectives import Objective, View, projection_mlp

CUTOFFS = {"token-cutoff": (token_cutoff, 0.15), "feature-cutoff": (feature_cutoff, 0.2),
           "dropout": (embedding_dropout, 0.2)}


def augmented_embedding(encoder: BertModel, pooling: str, augmentation: str, inputs: dict,
                        perturbation: torch.Tensor | None = None) -> torch.Tensor:
    """Pooled embeddings [rows, H] of one augmented view (random choices from torch's global RNG)."""
    mask = inputs["attention_mask"]
    position_ids, transform = None, None
    if augmentation == "shuffle":
        position_ids = token_shuffle(mask)
    elif augmentation in CUTOFFS:
        cut, rate = CUTOFFS[augmentation]
        transform = functools.partial(cut, rate=rate)
    elif augmentation == "adversarial":
        transform = lambda embeddings, _mask: embeddings + perturbation  # noqa: E731
    return pool(encoder(**inputs, position_ids=position_ids, embedding_transform=transform), mask, pooling)


class ConsertUnsupervised(Objective):
    """L_con: NT-Xent (tau 0.1) between the --aug1 and --aug2 views of each sentence."""
    input_kind = "sentences"
    gathers_batch = True

    def __init__(self, encoder: BertModel, pooling: str = "mean", aug1: str = "shuffle", aug2: str = "feature-cutoff",
                 temperature: float = 0.1, projection: bool = False):
        super().__init__()
        if "adversarial" in (aug1, aug2):
            raise ValueError("the adversarial view needs a supervised loss: use --consert-stages joint")
        self.encoder, self.pooling, self.augmentations, self.temperature = encoder, pooling, (aug1, aug2), temperature
        self.projection = projection_mlp(encoder.config.hidden_size) if projection else nn.Identity()

    def train(self, mode: bool = True):
        super().train(mode)
        for module in self.encoder.modules():  # BERT's dropout off: the augmentations are the only noise
            if isinstance(module, (nn.Dropout, BertSelfAttention)):
                module.eval()
        return self

    def views(self, batch: SentenceBatch) -> list[View]:
        return [View(functools.partial(augmented_embedding, self.encoder, self.pooling, aug), batch.inputs)
                for aug in self.augmentations]

    def loss(self, batch, first, second):
        return nt_xent_loss(self.projection(first), self.projection(second), self.temperature)


class NliClassifier(nn.Module):
    """SBERT's softmax classifier on (u, v, |u - v|)."""

    def __init__(self, hidden_size: int, num_labels: int = 2):
        super().__init__()
        self.linear = nn.Linear(3 * hidden_size, num_labels)

    def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.linear(torch.cat([u, v, (u - v).abs()], dim=-1))


ENTAILMENT, CONTRADICTION = 1, 0


class ConsertSupervised(Objective):
    """L_ce on NLI (the sup stage), plus alpha L_con over two views of the same sentences (the joint stage).

    Not split into views and a loss: the adversarial view needs the gradient of L_ce, so this objective
    embeds and scores in one forward pass, and gradient caching does not apply.
    """
    input_kind = "triplets"
    supports_grad_cache = False

    def __init__(self, encoder: BertModel, pooling: str = "mean", contrastive: bool = True, aug1: str = "none",
                 aug2: str = "adversarial", alpha: float = 0.15, temperature: float = 0.1, fgv_epsilon: float = 1.0,
                 projection: bool = False):
        super().__init__()
        self.encoder, self.pooling, self.contrastive = encoder, pooling, contrastive
        self.augmentations, self.alpha, self.temperature = (aug1, aug2), alpha, temperature
        self.fgv_epsilon = fgv_epsilon
        self.classifier = NliClassifier(encoder.config.hidden_size)
        self.projection = projection_mlp(encoder.config.hidden_size) if projection else nn.Identity()

    def forward(self, batch: TripletBatch) -> torch.Tensor:
        groups = [batch.anchor, batch.positive, batch.negative]
        plain, layer0 = [], []  # each group's pooled embeddings, and its embedding-layer output (for FGV)
        for inputs in groups:
            keep = lambda embeddings, _mask: layer0.append(embeddings) or embeddings  # noqa: E731
            plain.append(pool(self.encoder(**inputs, embedding_transform=keep), inputs["attention_mask"], self.pooling))
        premise, entailment, contradiction = plain
        logits = self.classifier(torch.cat([premise, premise]), torch.cat([entailment, contradiction]))
        labels = torch.tensor([ENTAILMENT] * len(premise) + [CONTRADICTION] * len(premise), device=logits.device)
        supervised = F.cross_entropy(logits.float(), labels)
        if not self.contrastive:
            return supervised
        perturbations = self._fgv(supervised, layer0) if "adversarial" in self.augmentations else [None] * 3
        views = [torch.cat([plain[g] if aug == "none" else
                            augmented_embedding(self.encoder, self.pooling, aug, groups[g], perturbations[g])
                            for g in range(3)]) for aug in self.augmentations]
        return supervised + self.alpha * self.loss_fp32(batch, *views)

    def loss(self, batch, first, second):
        return nt_xent_loss(self.projection(first), self.projection(second), self.temperature)

    def _fgv(self, supervised: torch.Tensor, layer0: list[torch.Tensor]) -> list[torch.Tensor]:
        """Fast Gradient Value: the worst-case direction for L_ce, per token, of norm fgv_epsilon (held fixed)."""
        gradients = torch.autograd.grad(supervised, layer0, retain_graph=True)
        return [self.fgv_epsilon * g / (g.norm(dim=-1, keepdim=True) + 1e-10) for g in gradients]
