"""One small strategy per contrastive method: which views of a batch to embed, and the loss on those embeddings.

The pretraining run (training/contrastive.py) knows nothing of methods. It asks an Objective for
    views(batch)             -> [View(embed, inputs), ...]: what to run through which encoder
    loss(batch, *embeddings) -> the method's loss on the embeddings ([rows, H], one tensor per view)
and backpropagates either in one go (objective(batch)) or chunk by chunk with gradient caching
(training/grad_cache.py), which needs exactly this split. An objective is an nn.Module: its parameters that
require gradients are what the optimizer trains; encoders_to_save() is what the checkpoint keeps. Heads
(projection MLPs, classifiers) help training only and are never saved.

    SimCSE              Gao et al. 2021 / Chen's CS224N report eq. 1: dropout views, NLI hard negatives, Quora negative pairs
    MultipleNegatives   Mohammed and Sabane's CS224N report section 3.2: multiple negatives ranking loss with a scale
    ContrastiveTension  Contrastive Tension (Carlsson et al.): two independently updated copies, logistic loss on dot products
    SelfGuided          SG-BERT (Kim et al.): BERT_F's max-pooled layers guide BERT_T's [CLS]; SG (L_base) or SG-OPT (L_opt)
    ConSERT             training/consert.py
    SentimentFusion     Chen's CS224N report Table 1: the cross-entropy step that precedes each SST batch's contrastive step
"""
import copy
import dataclasses
import functools
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from minbert.common import distributed
from minbert.data.contrastive import (
    Batch, Inputs, PairBatch, SentenceBatch, TripletBatch, plan_epoch, plan_tension_epoch)
from minbert.heads import MLP
from minbert.heads.sentiment import SentimentHead
from minbert.losses import (ProjectionHead, contrastive_tension_loss, l2_regulariser, multiple_negatives_ranking_loss,
                            quora_simcse_loss, sample_layer_views, self_guided_base_loss, self_guided_opt3_loss,
                            simcse_loss)
from minbert.models import BertModel, pool
from minbert.engine.ddp import gather_rows
from minbert.engine.lr_schedule import contrastive_tension_steps, linear_warmup_decay


@dataclass
class View:
    embed: Callable[[Inputs], torch.Tensor]  # padded inputs -> embeddings [rows, H]
    inputs: Inputs


def pooled(encoder: BertModel, pooling: str, inputs: Inputs) -> torch.Tensor:
    return pool(encoder(**inputs), inputs["attention_mask"], pooling)


def projection_mlp(hidden_size: int) -> nn.Module:
    """Chen's CS224N report (after SimCLR): a 2-layer MLP on the embeddings during contrastive training, thrown away
    after."""
    return MLP(hidden_size, hidden_size, hidden_size, dropout=0.0)


class Objective(nn.Module):
    """Every objective sets self.encoder: the encoder it trains (the one --fusion's sentiment head sits on)."""
    input_kind = "any"  # "any": --data's batches as they are; "sentences": single sentences only; "triplets": NLI
    supports_grad_cache = True
    adam_betas = (0.9, 0.999)
    # In-batch negatives: under torchrun the loss sees every process's embeddings (and labels) as one batch.
    gathers_batch = False

    def views(self, batch: Batch) -> list[View]:
        raise NotImplementedError

    def loss(self, batch: Batch, *embeddings: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.loss_fp32(batch, *(view.embed(view.inputs) for view in self.views(batch)))

    def loss_fp32(self, batch: Batch, *embeddings: torch.Tensor) -> torch.Tensor:
        if self.gathers_batch and distributed.world_size() > 1:
            embeddings = [gather_rows(e) for e in embeddings]
            if getattr(batch, "labels", None) is not None:
                batch = dataclasses.replace(batch, labels=gather_rows(batch.labels, differentiable=False))
        # Outside autocast: cosine / temperature logits need more precision than bf16 has.
        with torch.autocast(embeddings[0].device.type, enabled=False):
            return self.loss(batch, *(e.float() for e in embeddings))

    def plan_epoch(self, datasets, batch_size: int, seed: int, epoch: int, processes: int = 1):
        """The epoch's batches; batch_size is one process's (each planned batch is shared out between them)."""
        return plan_epoch(datasets, batch_size * processes, seed, epoch)

    def lr_multiplier(self, step: int, total_steps: int, warmup: float) -> float:
        return linear_warmup_decay(step, total_steps, warmup)

    def encoders_to_save(self) -> dict[str, BertModel]:
        """Checkpoint subfolder name ("" = the output folder itself) -> encoder."""
        return {"": self.encoder}


class InBatchNegatives(Objective):
    """SimCSE and MNRL share their views: two dropout passes of a sentence, a pair's two sentences, or a triplet."""
    gathers_batch = True

    def __init__(self, encoder: BertModel, pooling: str, projection: bool):
        super().__init__()
        self.encoder, self.pooling = encoder, pooling
        self.projection = projection_mlp(encoder.config.hidden_size) if projection else nn.Identity()

    def views(self, batch: Batch) -> list[View]:
        embed = functools.partial(pooled, self.encoder, self.pooling)
        match batch:
            case SentenceBatch():  # the same sentences twice: dropout alone makes the two views differ
                return [View(embed, batch.inputs), View(embed, batch.inputs)]
            case PairBatch():
                return [View(embed, batch.first), View(embed, batch.second)]
            case TripletBatch():
                return [View(embed, batch.anchor), View(embed, batch.positive), View(embed, batch.negative)]
        raise TypeError(f"unexpected batch {type(batch).__name__}")


class SimCSE(InBatchNegatives):
    """Unsupervised on sentences, supervised with hard negatives on NLI, Quora's negative pairs pushed apart."""

    def __init__(self, encoder: BertModel, pooling: str = "cls", projection: bool = True, temperature: float = 0.05,
                 use_negative_pairs: bool = True):
        super().__init__(encoder, pooling, projection)
        self.temperature, self.use_negative_pairs = temperature, use_negative_pairs

    def loss(self, batch, *embeddings):
        embeddings = [self.projection(e) for e in embeddings]
        if isinstance(batch, PairBatch):
            return quora_simcse_loss(*embeddings, batch.labels, self.temperature, self.use_negative_pairs)
        return simcse_loss(*embeddings, temperature=self.temperature)  # a third embedding = hard negatives


class MultipleNegatives(InBatchNegatives):
    """MNRL: every other positive in the batch (and every hard negative) is a negative; S = scale * cosine."""

    def __init__(self, encoder: BertModel, pooling: str = "mean", projection: bool = False, scale: float = 20.0):
        super().__init__(encoder, pooling, projection)
        self.scale = scale

    def loss(self, batch, *embeddings):
        embeddings = [self.projection(e) for e in embeddings]
        if isinstance(batch, PairBatch):
            # MNRL knows no negative pairs: it learns from the duplicates, the batch's other questions are negatives.
            duplicates = batch.labels.bool()
            if not duplicates.any():
                return 0.0 * sum(e.sum() for e in embeddings)  # nothing to learn, but still part of the graph
            embeddings = [e[duplicates] for e in embeddings]
        return multiple_negatives_ranking_loss(*embeddings, scale=self.scale)



class ContrastiveTension(Objective):
    """Two copies with identical initial weights, each updated on its own: model 1 embeds the anchors, model 2
    the anchor again (positive pair) or K other sentences (negative pairs); loss on raw dot products."""
    input_kind = "sentences"

    def __init__(self, encoder: BertModel, pooling: str = "mean", negatives_per_positive: int = 7):
        super().__init__()
        self.encoder, self.pooling, self.negatives_per_positive = encoder, pooling, negatives_per_positive
        self.model2 = copy.deepcopy(encoder)

    @property
    def model1(self) -> BertModel:
        return self.encoder

    def plan_epoch(self, datasets, batch_size, seed, epoch, processes=1):
        return plan_tension_epoch(datasets, batch_size, self.negatives_per_positive, seed, epoch, processes)

    def views(self, batch: PairBatch) -> list[View]:
        return [View(functools.partial(pooled, self.model1, self.pooling), batch.first),
                View(functools.partial(pooled, self.model2, self.pooling), batch.second)]

    def loss(self, batch, first, second):
        return contrastive_tension_loss(first, second, batch.labels)

    def lr_multiplier(self, step, total_steps, warmup):
        return contrastive_tension_steps(step)

    def encoders_to_save(self):
        return {"model1": self.model1, "model2": self.model2}


def max_pooled_layers(encoder: BertModel, inputs: Inputs) -> torch.Tensor:
    """h_{i,k}: every layer's output (k = 0: the embeddings) max-pooled over the real tokens; [b, l + 1, H]."""
    hidden_states = encoder(**inputs, output_hidden_states=True).hidden_states
    padding = ~inputs["attention_mask"].bool()[:, :, None]
    return torch.stack([layer.masked_fill(padding, float("-inf")).amax(dim=1) for layer in hidden_states], dim=1)


class SelfGuided(Objective):
    """BERT is cloned into a fixed BERT_F and a tuned BERT_T (layer 0 frozen, footnote 5); BERT_T's [CLS] vector
    c_i learns to match BERT_F's layer views h_{i,k} through the projection head f (2 x (Linear + GELU), 4096)."""
    input_kind = "sentences"
    adam_betas = (0.9, 0.9)  # SG-BERT (Kim et al.) Table 8

    def __init__(self, encoder: BertModel, optimized: bool, pooling: str = "cls", temperature: float = 0.01,
                 regulariser_weight: float = 0.1):
        super().__init__()
        self.encoder, self.optimized, self.pooling = encoder, optimized, pooling
        self.temperature, self.regulariser_weight = temperature, regulariser_weight
        self.fixed = copy.deepcopy(encoder).requires_grad_(False)
        encoder.embeddings.requires_grad_(False)  # BERT_T's layer 0 stays as it was, "for stable learning"
        self.head = ProjectionHead(encoder.config.hidden_size)

    @property
    def tuned(self) -> BertModel:  # the paper's name for the encoder being trained
        return self.encoder

    def train(self, mode: bool = True):
        super().train(mode)
        self.fixed.eval()  # BERT_F is a fixed function: its views carry no dropout noise
        return self

    def views(self, batch: SentenceBatch) -> list[View]:
        return [View(functools.partial(pooled, self.tuned, self.pooling), batch.inputs)]

    def loss(self, batch, cls):
        with torch.no_grad():
            layer_views = max_pooled_layers(self.fixed, batch.inputs)
        c = self.head(cls)
        if self.optimized:  # L_opt: every layer view of sentence i is a positive for c_i (opt3, the final SG-OPT)
            contrastive = self_guided_opt3_loss(c, self.head(layer_views), self.temperature)
        else:  # L_base: NT-Xent between c_i and one uniformly sampled layer view
            contrastive = self_guided_base_loss(c, self.head(sample_layer_views(layer_views)), self.temperature)
        return contrastive + l2_regulariser(self.tuned.parameters(), self.fixed.parameters(), self.regulariser_weight)


class SentimentFusion(nn.Module):
    """Chen's CS224N report's fusion training: an SST batch first takes a cross-entropy step on a sentiment head over
    the encoder's embeddings, then the method's contrastive step on the same sentences (the pretraining run does
    both)."""

    def __init__(self, encoder: BertModel, pooling: str):
        super().__init__()
        self.encoder, self.pooling = encoder, pooling
        self.head = SentimentHead(encoder.config.hidden_size)

    def forward(self, batch: SentenceBatch) -> torch.Tensor:
        return F.cross_entropy(self.head(pooled(self.encoder, self.pooling, batch.inputs)).float(), batch.labels)
