"""How a multi-task run's steps meet a GPU, decided once at the start: few batch shapes (--length-buckets) and the
encoder's passes replayed as CUDA graphs (--cuda-graphs). Each decision is said in one line and recorded in the run
config (resolved); on a CPU, by default, neither is on and nothing changes.

A GPU pays a set-up for each new shape (the attention kernels' plans, a compiled graph, a captured CUDA graph), and
a bert-base step waits on its ~1,000 kernel launches more than on its math (issue 71: 6% of an H200's peak). Buckets
make the shapes few; a CUDA graph replays a shape's launches as one.
"""
import logging
from dataclasses import dataclass

import torch

from minbert.common import distributed
from minbert.data.batching import Buckets
from minbert.models.bert import resolve_attention
from minbert.training.multitask_config import MultitaskConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepShapes:
    train: Buckets | None  # the training batches' shapes (None: each batch as long as its longest input)
    eval: Buckets | None  # evaluation's
    silver: Buckets | None  # --silver batches': their lengths (their rows vary with the token budget and ratio)
    cuda_graphs: bool
    why: str  # why CUDA graphs are on or off

    def record(self) -> dict:
        """What the run config records (resolved)."""
        return {"length_buckets": "on" if self.train else "off", "cuda_graphs": "on" if self.cuda_graphs else "off",
                "cuda_graphs_reason": self.why}


def step_shapes(config: MultitaskConfig, device: torch.device) -> StepShapes:
    """The run's batch shapes and whether its encoder runs as CUDA graphs, with the reason, said in one line."""
    buckets = config.length_buckets == "on" or (config.length_buckets == "auto" and device.type == "cuda")
    graphs, why = cuda_graphs(config, device, buckets)
    # Padding rows are left out of a task's loss; SMART's perturbed passes and batches by token budget see every
    # row they are given, so their rows stay as they are.
    rows = 0 if config.smart or config.max_tokens else config.batch_size
    eval_rows = 0 if config.max_tokens else config.eval_batch_size
    shapes = StepShapes(*(Buckets(config.max_length, n) if buckets else None for n in (rows, eval_rows, 0)),
                        graphs, why)
    if distributed.is_main():
        log.info("length buckets %s; CUDA graphs %s: %s", "on" if buckets else "off", "on" if graphs else "off", why)
    return shapes


def cuda_graphs(config: MultitaskConfig, device: torch.device, buckets: bool) -> tuple[bool, str]:
    """(whether the encoder's passes are captured as CUDA graphs, why). --cuda-graphs on or auto captures them
    where the run can be captured; a setting that cannot trains eagerly, and the reason names it."""
    if config.cuda_graphs == "off":
        return False, "--cuda-graphs off"
    blocked = uncapturable(config, device, buckets)
    if blocked:
        return False, f"{blocked}: trained without CUDA graphs"
    return True, "the encoder's forward and backward passes replayed as a CUDA graph a batch shape"


def uncapturable(config: MultitaskConfig, device: torch.device, buckets: bool) -> str:
    """What in this run a CUDA graph cannot capture ('' where nothing): a graph replays fixed kernels on fixed
    shapes, and no reads back to the host."""
    if device.type != "cuda":
        return f"CUDA graphs need a CUDA device, not {device.type}"
    if not buckets:
        return "--length-buckets off: every batch length would be a graph of its own"
    reasons = [
        (config.combine != "mean", f"--combine {config.combine}'s per-task passes, combined on the host"),
        (config.smart, "--smart's perturbation steps"),
        (config.max_tokens, "--max-tokens: batches whose rows change every step"),
        (config.silver, "--silver: silver batches of their own sizes"),
        (resolve_attention(config.attention, device) == "packed",
         "packed attention: rows as many as each batch's real tokens"),
        (config.gradient_checkpointing, "--gradient-checkpointing's recomputed layers"),
        (distributed.world_size() > 1, "torchrun: DistributedDataParallel's gradient hooks"),
    ]
    return next((reason for applies, reason in reasons if applies), "")
