"""What a run tells the engine (engine/engine.py), which decides when each happens. A run (class Run) gives

    parameters()            what it trains, in its modules' order (and parameter_groups() for AdamW, if it has
                            several learning rates)
    plan()                  its epochs, each a list of items: one optimizer step an item
    step(item, share)       the forward passes of one share of the item's batch (data.batching.Share: the rows a
                            process computes in an accumulation step, and their loss's weight), through
                            engine.forward, and engine.backward(loss)
    module()                the nn.Module whose forward engine.forward runs: under torchrun, wrapped in
                            DistributedDataParallel (engine/ddp.py)

and may give evaluate() and score() (dev metrics, and the number that picks best/, with score_name, eval_every and
patience), save() (its files of a checkpoint folder), after_update() (what follows each optimizer step),
state_dict() / load_state_dict() (what else --resume needs) and finish() (the end of the run, and its result).

What a run uses of the engine: its device and precision; backward(loss), one_of_passes(last) around each of
several forward-and-backward passes of a step, and for an extra update within a step, update(advance_schedule=
False); state, the loop's EngineState (to read), and losses (the loss means so far); folder, the run folder; and
at set-up describe_run (the run config), prepare_encoder (--attention, --compile) and resumed (what --resume
continues from: its weights, and the training state fit restores). The rest of the engine is the loop's own.
"""
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from minbert.common.errors import UsageError
from minbert.data.batching import Share
from minbert.engine.lr_schedule import linear_warmup_decay


def check_max_length(encoder, max_length: int) -> None:
    """--max-length: at most the encoder's positions (RoBERTa's and MPNet's counted from their offset)."""
    positions = encoder.config.longest_input
    if max_length > positions:
        raise UsageError(f"--max-length {max_length}: this model has {positions} positions; use --max-length "
                         f"{positions} or less")


class Run:
    """What a run tells the engine (see the module's docstring). parameters, plan and step are required."""
    name = "train"  # what the progress bar calls it
    stage_name = ""  # a multi-stage run's stage: its metrics lines carry it
    lr: float  # the peak learning rate (parameter groups may scale it)
    head_lr: float | None = None  # the heads' peak learning rate, where they have their own (logged beside lr)
    adam_betas = (0.9, 0.999)
    # dev metrics of the model as it is (rank 0 only); None: the run is not scored while it trains
    evaluate: Callable[[], dict[str, float]] | None = None
    # With evaluate: what the log calls score()'s number; every how many steps the run is also evaluated (0: at
    # the end of each epoch only); after how many evaluations in a row without a better score it stops (0: never).
    score_name = "score"
    eval_every = 0
    patience = 0
    # Whether its steps make backward passes of their own (PCGrad, gradient caching) or an update inside a step
    # (--fusion): under torchrun their gradients are averaged at each update, not by DDP (engine/ddp.py).
    passes_apart = False
    # What its finish does, as the line of a signal that stops the command there says it.
    finishing = "while finishing the run"

    def parameters(self) -> list[torch.nn.Parameter]:
        """Everything trained, in the modules' order (the order clipping sums their norms in)."""
        raise NotImplementedError

    def parameter_groups(self) -> list[dict]:
        """AdamW's parameter groups."""
        return [{"params": self.parameters()}]

    def module(self) -> nn.Module | None:
        """What engine.forward runs (None: a run for one process, without engine.forward)."""
        return None

    def plan(self) -> list[list]:
        """The run's epochs, each a list of items, one an optimizer step: those --max-steps reaches (planned_epochs)."""
        raise NotImplementedError

    def step(self, item, share: Share) -> tuple[dict[str, torch.Tensor], int]:
        """Forward passes and engine.backward for `share` of the item's batch: (losses to log by name, examples)."""
        raise NotImplementedError

    def describe(self) -> str:
        """What the start line says of the run's data (examples, batch size)."""
        return ""

    def lr_multiplier(self, step: int, total_steps: int, warmup: float) -> float:
        return linear_warmup_decay(step, total_steps, warmup)

    def score(self, metrics: dict[str, float]) -> float:
        """With evaluate: the number that picks best/ (higher is better)."""
        raise NotImplementedError

    def after_update(self) -> None:
        """After each optimizer step."""

    def save(self, folder: Path, record: dict, best: bool) -> None:
        """The run's files of a checkpoint folder: last/ (best=False) or best/ (record: the evaluation that made
        it best). What --resume needs beyond them goes in state_dict."""

    def state_dict(self) -> dict:
        """What --resume needs beyond the checkpoint's files and the optimizer."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what state_dict gave."""

    def finish(self):
        """After the last step, on every process: the run's result (what Engine.fit returns)."""


def planned_epochs(epochs: int, max_steps: int, plan_epoch: Callable[[int], list]) -> list[list]:
    """plan_epoch(0), plan_epoch(1), ...: `epochs` epochs, or fewer where the ones planned hold --max-steps steps
    (0: no limit) already, so that an --epochs far beyond what --max-steps reaches costs nothing."""
    planned, steps = [], 0
    for epoch in range(epochs):
        if max_steps and steps >= max_steps:
            break
        planned.append(plan_epoch(epoch))
        steps += len(planned[-1])
    return planned
