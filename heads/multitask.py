"""The multitask model: one shared encoder, pooled sentence embeddings, one head per task of the registry."""
from collections.abc import Sequence

import torch
from torch import nn

from heads import CommonLayer, pair_mlps
from models.bert import BertModel
from models.sentence_embedding import pool
from tasks import COURSE_TASKS, REGISTRY, HeadOptions


class MultitaskModel(nn.Module):
    """model(task, inputs) -> the task head's raw outputs for a batch of data.splits.TaskSplit.batch:
    class logits [B, classes], a paraphrase logit [B], a similarity score [B] (tasks.py turns them into
    soft outputs and predictions)."""

    def __init__(self, encoder: BertModel, tasks: Sequence[str] = COURSE_TASKS, pooling: str = "mean",
                 options: HeadOptions = HeadOptions(),
                 common_layer: bool = False):
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

    def head_parameters(self) -> dict[str, list[nn.Parameter]]:
        """Each task's own head parameters (shared pair-MLP layers appear under every task that uses them)."""
        return {name: list(head.parameters()) for name, head in self.heads.items()}

    def shared_parameters(self) -> list[nn.Parameter]:
        """What every task uses: the encoder and the optional common layer."""
        return list(self.encoder.parameters()) + (list(self.common.parameters()) if self.common else [])
