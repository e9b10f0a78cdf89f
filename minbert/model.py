"""The multitask model: one shared encoder, pooled sentence embeddings, one head per task of the registry, built from
its flags (model_config.ModelConfig, saved with every checkpoint, so that a checkpoint and its run config rebuild
it).

Training (training/multitask.py) and prediction (predict.py) both build it here; prediction needs nothing else.
"""
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from minbert.data.splits import TaskSplit
from minbert.heads import CommonLayer, pair_mlps
from minbert.model_config import ModelConfig
from minbert.models import from_pretrained
from minbert.models.bert import BertModel
from minbert.models.sentence_embedding import pool
from minbert.task_info import COURSE_TASKS
from minbert.tasks import REGISTRY, HeadOptions


class MultitaskModel(nn.Module):
    """model(task, inputs) -> the task head's raw outputs for a batch of data.splits.TaskSplit.batch:
    class logits [B, classes], a paraphrase logit [B], a similarity score [B] (tasks.py turns them into
    soft outputs and predictions)."""

    def __init__(self, encoder: BertModel, tasks: Sequence[str] = COURSE_TASKS, pooling: str = "mean",
                 options: HeadOptions = HeadOptions(), common_layer: bool = False):
        super().__init__()
        hidden = encoder.config.hidden_size
        self.encoder, self.pooling, self.options = encoder, pooling, options
        self.tasks = [REGISTRY[name] for name in tasks]
        self.common = CommonLayer(hidden) if common_layer else None
        pair_tasks = [task for task in self.tasks if task.pair]
        # The bi-encoded pair tasks' MLPs can share layers (--share) only when every pair task embeds its sentences
        # apart. They are made together, before the first pair head, one per pair task (a cross-encoded task does
        # not use its own): the order in which weights are drawn, and so every documented result, stays as it was.
        all_bi = all(options.encoding(task) == "bi" for task in pair_tasks)
        mlps, heads = {}, {}
        for task in self.tasks:
            if task.pair and not mlps:
                made = pair_mlps(options.share if all_bi else "none", hidden, len(pair_tasks),
                                 dropout=options.dropout, kind=options.pair_mlp)
                mlps = dict(zip((t.name for t in pair_tasks), made))
            heads[task.name] = task.head(hidden, options, mlps.get(task.name))
        self.heads = nn.ModuleDict(heads)

    def embed(self, inputs: dict[str, torch.Tensor], perturbation: torch.Tensor | None = None) -> torch.Tensor:
        """Pooled embeddings; perturbation [rows, tokens, hidden] is added to the embedding layer's output (SMART)."""
        transform = None if perturbation is None else lambda embeddings, _mask: embeddings + perturbation
        embedding = pool(self.encoder(**inputs, embedding_transform=transform), inputs["attention_mask"], self.pooling)
        return embedding if self.common is None else self.common(embedding)

    def forward(self, task: str, inputs: dict[str, torch.Tensor],
                perturbation: torch.Tensor | None = None) -> torch.Tensor:
        embeddings = self.embed(inputs, perturbation)
        if REGISTRY[task].pair:
            return self.heads[task](*embeddings.chunk(2))  # the two views of each pair (see TaskSplit.batch)
        return self.heads[task](embeddings)

    @torch.no_grad()
    def calibrate(self, train_splits: dict[str, TaskSplit], pad_id: int) -> None:
        """Let each head measure what it needs on its task's training split (the cosine floor M of cosine-range
        STS), with the encoder as it is (in eval mode: no dropout)."""
        device = next(self.parameters()).device
        for task in self.tasks:
            if not task.needs_calibration(self.options):
                continue
            split = train_splits[task.name]

            def embed(rows):
                inputs = split.batch(rows, pad_id)["inputs"]
                return self.embed({k: v.to(device) for k, v in inputs.items()})

            self.eval()
            task.calibrate(self.heads[task.name], split, embed)
            self.train()

    def head_parameters(self) -> dict[str, list[nn.Parameter]]:
        """Each task's own head parameters (shared pair-MLP layers appear under every task that uses them)."""
        return {name: list(head.parameters()) for name, head in self.heads.items()}

    def shared_parameters(self) -> list[nn.Parameter]:
        """What every task uses: the encoder and the optional common layer."""
        return list(self.encoder.parameters()) + (list(self.common.parameters()) if self.common else [])

    def parameter_groups(self, lr: float, head_lr: float, layer_lr_decay: float) -> list[dict]:
        """AdamW's groups of the trained parameters. The pretrained encoder moves slowly (lr), the new heads fast
        (head_lr); no weight decay on biases and LayerNorm weights, as in BERT's own fine-tuning recipe.
        layer_lr_decay d < 1 moves lower layers, which hold more general features, slower still: lr * d^depth
        (discriminative fine-tuning, Howard & Ruder 2018; for BERT, Sun et al. 2019)."""
        num_layers = self.encoder.config.num_hidden_layers
        groups = defaultdict(list)
        for name, parameter in self.named_parameters():
            if not parameter.requires_grad:
                continue
            if name.startswith("encoder."):
                rate = lr * layer_lr_decay ** encoder_depth(name.removeprefix("encoder."), num_layers)
            else:
                rate = head_lr
            groups[rate, parameter.dim() > 1].append(parameter)
        return [{"params": params, "lr": rate, **({} if decayed else {"weight_decay": 0.0})}
                for (rate, decayed), params in groups.items()]


def encoder_depth(name: str, num_layers: int) -> int:
    """How many layers below the top an encoder parameter sits: top layer and pooler 0, embeddings num_layers."""
    if name.startswith("embeddings."):
        return num_layers
    if name.startswith("encoder.layer."):
        return num_layers - 1 - int(name.split(".")[2])
    return 0


def build_model(config: ModelConfig, start: str | Path, partial: bool = False) -> MultitaskModel:
    """The encoder of `start` with fresh heads for config's tasks and head flags; partial: --allow-partial-load."""
    return MultitaskModel(from_pretrained(start, partial), config.task_list, config.pooling, config.head_options,
                          config.common_layer)
