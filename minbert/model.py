"""The multitask model: one shared encoder, pooled sentence embeddings, one head per task of the registry, and the
flags it is built from (saved with every checkpoint, so that a checkpoint and its run config rebuild it).

Training (training/multitask.py) and prediction (predict.py) both build it here; prediction needs nothing else.
"""
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from minbert.common.cli import Range, check_ranges, flag, flag_words, parse_task_order
from minbert.data.splits import PAIR_ENCODINGS, TaskSplit
from minbert.heads import PAIR_MLPS, SHARE_MODES, CommonLayer, pair_mlps
from minbert.heads.paraphrase import CrossEncodedPairHead
from minbert.models import POOLINGS, from_pretrained
from minbert.models.bert import BertModel
from minbert.models.sentence_embedding import pool
from minbert.tasks import COURSE_TASKS, RECIPE_PAIR_ENCODING, REGISTRY, SIMILARITY, STS_TARGETS, TASK_NAMES, HeadOptions


@dataclass
class ModelConfig:
    """The flags that decide what the model computes."""
    tasks: str = flag(",".join(COURSE_TASKS), f"tasks to train, comma-separated, from {', '.join(TASK_NAMES)}")
    pooling: str = flag("mean", "sentence embedding: cls, the [CLS] vector; mean, the mean of the tokens; pooler, "
                                "BERT's pooler output",
                          choices=POOLINGS)
    pair_encoding: str = flag(RECIPE_PAIR_ENCODING, "bi: sentences embedded apart; cross: pair encoded together "
                                                    "in both orders; or per task, as the default (tasks left out: bi)")
    share: str = flag("first-layer", "the bi-encoded pair tasks' MLPs: none, one each; first-layer, their first layer shared "
                                    "(Chen's report); all, one MLP for both", choices=SHARE_MODES)
    pair_mlp: str = flag("residual", "pair tasks' MLPs (bi-encoding): residual = x + MLP(x), starting as the "
                                     "identity; plain = Chen's 2-layer MLP", choices=PAIR_MLPS)
    common_layer: bool = flag(False, "a Linear+tanh layer shared by all heads (Mohammed and Sabane's CL)")
    cross_head: str = flag("dpha", "cross-encoded pair head (Mohammed and Sabane: ph, dph, dpha)",
                             choices=CrossEncodedPairHead.VARIANTS)
    sts_target: str = flag("auto", "score: regress 0-5; cosine-range: gold mapped onto [M, 1] (Contrastive "
                                   "Tension, Carlsson et al.); auto: cosine-range where STS is bi-encoded, else "
                                   "score", choices=STS_TARGETS)
    head_dropout: float = flag(0.3, "dropout before each head layer", range=Range(0, 1, high_open=True))

    # What the heads' tensors mean: heads trained under other values either fail to load (another shape) or,
    # worse, load and silently compute something else.
    HEAD_FIELDS = ("tasks", "pooling", "pair_encoding", "share", "pair_mlp", "common_layer", "cross_head",
                   "sts_target")

    def __post_init__(self):
        if hasattr(super(), "__post_init__"):  # in a command's config (MultitaskConfig): its other parts' checks too
            super().__post_init__()
        else:
            check_ranges(self)  # every flag's range, those of a subclass too
        self.task_list = parse_task_order(self.tasks, TASK_NAMES, option="--tasks")
        if len(set(self.task_list)) < len(self.task_list):
            raise ValueError(f"--tasks {self.tasks!r}: a task is named twice")
        encodings = parse_pair_encoding(self.pair_encoding)
        similarity = REGISTRY[SIMILARITY]
        self.sts_target = similarity.target(self.sts_target, encodings[similarity.name])  # saved resolved
        self.head_options = HeadOptions(encodings, self.share, self.pair_mlp, self.cross_head, self.head_dropout,
                                        self.sts_target)
        for name in self.task_list:
            REGISTRY[name].check(self.head_options)


def parse_pair_encoding(text: str) -> dict[str, str]:
    """'cross' -> every pair task cross-encoded; 'para=cross,sts=bi' -> per task (pair tasks left out: bi)."""
    pair_tasks = [name for name, task in REGISTRY.items() if task.pair]
    if text in PAIR_ENCODINGS:
        return dict.fromkeys(pair_tasks, text)
    encodings = dict.fromkeys(pair_tasks, "bi")
    for item in text.split(","):
        task, _, encoding = (part.strip() for part in item.partition("="))
        if task not in encodings or encoding not in PAIR_ENCODINGS:
            raise ValueError(f"--pair-encoding {text!r}: expected bi, cross, or task=bi|cross for "
                             f"{' and '.join(pair_tasks)}")
        encodings[task] = encoding
    return encodings


def as_flag(name: str, value) -> str:
    """The command-line spelling of a config value: --share none, --common-layer, --no-common-layer."""
    return " ".join(flag_words(name, value))


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


def build_model(config: ModelConfig, start: str | Path) -> MultitaskModel:
    """The encoder of `start` with fresh heads for config's tasks and head flags."""
    return MultitaskModel(from_pretrained(start), config.task_list, config.pooling, config.head_options,
                          config.common_layer)
