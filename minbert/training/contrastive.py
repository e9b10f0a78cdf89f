"""Contrastive pretraining of the encoder: each stage a run of the engine.

Flow: --data -> tokenised sets (data/contrastive.py) -> each epoch's plan of batches -> the method's objective
(its views of the batch, embedded by the encoder, and its loss; built by the method registry, training/methods.py)
-> backward, plain or with gradient caching -> the engine (AdamW, schedule, checkpoints; engine/engine.py) ->
the checkpoint that `multitask_classifier.py --init` starts from.
A run is one stage, except ConSERT's two-stage choices of --consert-stages (supervised NLI, then unsupervised --data).
"""
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from minbert import checkpoint
from minbert.common import cli, distributed
from minbert.common.errors import DataError
from minbert.common.files import atomic_files, without_local_paths, write_json
from minbert.common.run_folder import shareable_config
from minbert.common.tables import markdown_table
from minbert.data.batching import Share, split_rows
from minbert.data.contrastive import Dataset, SentenceBatch, SentenceSet, as_sentences
from minbert.evaluation.sts_benchmark import TABLE_COLUMNS, sts_benchmark
from minbert.models import SentenceEncoder, Tokenizer, from_pretrained
from minbert.models.checkpoint import tensor_bytes
from minbert.tasks import CONTRASTIVE_DATA
from minbert.engine.ddp import start_replicas
from minbert.engine.engine import Engine
from minbert.training.grad_cache import grad_cache_backward
from minbert.training.methods import METHODS, ContrastiveConfig
from minbert.training.objectives import Objective, SentimentFusion
from minbert.common.precision import Precision
from minbert.engine.run import Run, check_max_length, planned_epochs

log = logging.getLogger(__name__)


def backward(objective: Objective, batch, precision: Precision, grad_cache_chunk: int = 0, weight: float = 1.0,
             plain_backward: Callable[[torch.Tensor], None] | None = None,
             forward: Callable[[object], torch.Tensor] | None = None) -> torch.Tensor:
    """Backpropagate weight x the objective's loss on `batch` into .grad; returns the loss (detached, on the device).

    With grad_cache_chunk, every view is embedded grad_cache_chunk rows at a time (training/grad_cache.py): the
    gradients of the whole batch, in-batch negatives included, with the activation memory of one chunk.
    Without: forward(batch) computes the loss (the engine's, through DistributedDataParallel under torchrun; by
    default objective(batch)), and plain_backward(loss) backpropagates it (by default precision.scale(loss)
    .backward()).
    """
    def weighted(loss):  # weight 1 (a single process): the loss itself, untouched
        return loss if weight == 1.0 else weight * loss

    if not grad_cache_chunk:
        with precision.autocast():
            loss = (forward or objective)(batch)
        if plain_backward is None:
            precision.scale(weighted(loss)).backward()
        else:
            plain_backward(weighted(loss))
        return loss.detach()
    views, losses = objective.views(batch), []

    def scaled_loss(*embeddings):
        loss = objective.loss_fp32(batch, *embeddings)
        losses.append(loss.detach())
        return precision.scale(weighted(loss))

    with precision.autocast():
        # A batch without rows (a process's empty share, under torchrun) is one empty chunk.
        grad_cache_backward([v.embed for v in views],
                            [split_rows(v.inputs, grad_cache_chunk) or [v.inputs] for v in views], scaled_loss)
    return losses[0]


@dataclass
class Stage:
    name: str  # "train", or ConSERT's "sup" / "joint" / "unsup"
    objective: Objective
    datasets: list[Dataset]
    lr: float


class Pretraining:
    """The command's work: the encoder, its stages, --fusion's sentiment head, --eval, and the final save."""

    def __init__(self, config: ContrastiveConfig, engine: Engine):
        self.config, self.engine, self.method = config, engine, METHODS[config.method]
        # Before the tokenizer: a broken config.json is named as such.
        self.encoder = from_pretrained(config.model, config.allow_partial_load)
        check_max_length(self.encoder, config.max_length)
        # Before the objectives copy it (a momentum or second encoder).
        self.encoder.attention = config.attention
        self.encoder.encoder.gradient_checkpointing = config.gradient_checkpointing
        self.tokenizer = Tokenizer.from_pretrained(config.model)
        self.data_files = []
        self.stages = [self._stage(name) for name in self.method.stages(config)]
        engine.describe_run(self.data_files, lr={stage.name: stage.lr for stage in self.stages},
                            attention=engine.resolved_attention())
        self.fusion = None
        if config.fusion:
            if not any(isinstance(d, SentenceSet) and d.labels for stage in self.stages for d in stage.datasets):
                raise DataError(f"--fusion needs sentences with sentiment labels (--data sst or all3); --data "
                                f"{config.data} has none")
            self.fusion = SentimentFusion(self.stages[-1].objective.encoder, config.pooling).to(engine.device)
        for stage in self.stages:
            stage.objective.to(engine.device)
        engine.prepare_encoder(self.encoder)  # --compile: in place, so every objective holding it runs it compiled
        # torchrun: rank 0's weights, a random stream each.
        start_replicas([stage.objective for stage in self.stages] + ([self.fusion] if self.fusion else []), config.seed)
        self.results = {}  # the STS benchmark of --eval
        self.finished_stages = {}  # each finished stage's summary (StageRun.finish), by name

    def _stage(self, name: str) -> Stage:
        config = self.config
        objective = self.method.build(config, self.encoder, name)
        data = self.method.stage_data(config, name)
        self.data_files += [path for _, path in CONTRASTIVE_DATA.files(data, config.data_dir)]
        datasets = CONTRASTIVE_DATA.load(data, config.data_dir, self.tokenizer, config.max_length,
                                         config.max_train_examples)
        if objective.input_kind == "sentences":
            datasets = [as_sentences(d, self.tokenizer, config.max_length) for d in datasets]
        lr = config.lr if config.lr is not None else self.method.default_lr(datasets, name)
        return Stage(name, objective, datasets, lr)

    def run(self) -> dict:
        config, engine = self.config, self.engine
        resumed = engine.resumed.state["run"] if engine.resumed.state else None
        if resumed:
            self.results = resumed["results"]
            self.finished_stages = resumed.get("finished_stages", {})  # saved since stages' summaries are kept
        elif config.eval and distributed.is_main():
            self.results["before"] = self._benchmark(self.encoder)
        # A resumed run skips the stages it finished: their weights and summaries came with the training state.
        for index in range(resumed["stage"] if resumed else 0, len(self.stages)):
            self.finished_stages[self.stages[index].name] = engine.fit(StageRun(self, index))
        metrics = {"stages": self.finished_stages}
        encoders = self.stages[-1].objective.encoders_to_save()
        if config.eval and distributed.is_main():
            for name, encoder in encoders.items():
                self.results[f"after {name}".strip()] = self._benchmark(encoder)
            print(markdown_table(self.results, TABLE_COLUMNS))
            metrics["sts_benchmark"] = self.results
        if distributed.is_main():
            self._save_final(encoders, metrics)
            self._summary(metrics["stages"], encoders)
        distributed.barrier()
        return metrics

    def _summary(self, stages: dict, encoders: dict) -> None:
        """Each stage's steps, learning rate and final loss, and the folders written: printed, also with --quiet."""
        rows = {name: {**stage, "lr": f"{stage['lr']:g}"} for name, stage in stages.items()}
        print(markdown_table(rows, ["steps", "updates", "lr", "mean_loss"], label="stage", digits=4))
        folder = self.engine.folder
        files = [folder.path / name for name in encoders] + [folder.metrics_log, folder.config_file]
        print("written:\n" + "\n".join(f"  {path}" for path in files if path.exists()))
        for name in encoders:  # the tutorial's next step: the quick start from it, into a folder of its own
            given = Path(self.config.output_dir)
            out = free_folder(given.parent / "-".join(["from", given.name, *([name] if name else [])]))
            print(f"fine-tune it{f' ({name})' if name else ''}: " + cli.printed_command([
                *cli.program("multitask_classifier.py", "train"), "--config", "quick-start", "--init",
                str(given / name), "--pooling", self.config.pooling, "--output-dir", str(out)]))  # its predictions/ in it

    def _save_final(self, encoders: dict, metrics: dict) -> None:
        """The encoder folder(s), written into the output folder as one set (its other files stay); last/ goes: the
        run is complete."""
        config, output_dir = self.config, Path(self.config.output_dir)
        size = tensor_bytes(tensor for encoder in encoders.values() for tensor in encoder.state_dict().values())
        # The output folder is what the run shares: the run config written beside the weights, and the one the
        # command records in it when it ends, name no local path.
        self.engine.run_config = shareable_config(self.engine.run_config)
        with atomic_files(output_dir, expected=size) as temp:
            for name, encoder in encoders.items():
                (temp / name).mkdir(exist_ok=True)
                checkpoint.save(temp / name, encoder, self.tokenizer, metrics, run_config=self.engine.run_config,
                                pooling=config.pooling, max_length=config.max_length, base_model=config.model,
                                command=config.command.with_values,
                                metrics=metrics["sts_benchmark"] if config.eval else metrics["stages"],
                                metrics_kind="sts-benchmark" if config.eval else "training",
                                data_files=[str(path) for path in self.data_files])
            if config.eval:
                write_json(temp / "sts_benchmark.json", {"model": without_local_paths(config.model),
                                                         "method": config.method,
                                                         "pooling": config.pooling, "results": self.results})
        self.engine.folder.remove_resumable()
        log.info("saved %s", ", ".join(str(output_dir / name) for name in encoders))

    def _benchmark(self, encoder) -> dict:
        return sts_benchmark(SentenceEncoder(encoder, self.tokenizer, self.config.pooling,
                                             precision=self.engine.precision.name), self.config.data_dir,
                             self.config.eval_batch_size)


class StageModules(nn.Module):
    """A stage's forward pass (what DistributedDataParallel wraps under torchrun): forward(batch) is its
    objective's loss on a batch, forward(batch, fusion=True) --fusion's sentiment loss (they share the encoder)."""

    def __init__(self, objective: Objective, fusion: SentimentFusion | None):
        super().__init__()
        self.objective, self.fusion = objective, fusion

    def forward(self, batch, fusion: bool = False) -> torch.Tensor:
        return (self.fusion if fusion else self.objective)(batch)


class StageRun(Run):
    """One stage: its objective (and --fusion's sentiment head) trained on its data."""

    def __init__(self, pretraining: Pretraining, index: int):
        self.pretraining, self.index, self.stage = pretraining, index, pretraining.stages[index]
        config, objective = pretraining.config, self.stage.objective
        self.name, self.lr, self.adam_betas = f"{config.method} {self.stage.name}", self.stage.lr, objective.adam_betas
        self.stage_name = self.stage.name if len(pretraining.stages) > 1 else ""
        self.modules = [objective.train()] + ([pretraining.fusion.train()] if pretraining.fusion else [])
        self.chunk = config.grad_cache_chunk if objective.supports_grad_cache else 0
        self.fusion_updates = 0
        self.passes_apart = bool(self.chunk or pretraining.fusion)  # replays, an update inside a step (engine/ddp.py)

    def module(self) -> nn.Module:
        return StageModules(self.stage.objective, self.pretraining.fusion)

    def parameters(self):
        return list(dict.fromkeys(p for module in self.modules for p in module.parameters() if p.requires_grad))

    def plan(self) -> list[list]:
        """Every epoch's batches, the first --max-steps of them."""
        config, stage = self.pretraining.config, self.stage
        epochs = planned_epochs(config.epochs, config.max_steps, lambda epoch: stage.objective.plan_epoch(
            stage.datasets, config.batch_size, config.seed, epoch, distributed.world_size()))
        left, kept = config.max_steps or sum(map(len, epochs)), []
        for batches in epochs:
            kept.append(batches[:left])
            left -= len(kept[-1])
        return [batches for batches in kept if batches]

    def describe(self) -> str:
        datasets = " + ".join(f"{d.name} ({len(d):,})" for d in self.stage.datasets)
        return f"training data: {datasets}; lr {self.stage.lr:.2g}, batches of {self.pretraining.config.batch_size}"

    def lr_multiplier(self, step, total_steps, warmup):
        return self.stage.objective.lr_multiplier(step, total_steps, warmup)

    def step(self, planned, share: Share):
        engine, fusion, objective = self.pretraining.engine, self.pretraining.fusion, self.stage.objective
        pad_id = self.pretraining.tokenizer.pad_id
        # A loss of this process's rows alone weighs their share of the step's (1 in a single process); a process
        # without rows (torchrun) computes a stand-in row, weighed 0. A loss over every process's gathered rows is
        # the whole batch's already: a process without rows takes part with none (the stand-in cut to 0 rows).
        batch, weight = planned.build(pad_id, share)
        batch = batch.to(engine.device)
        own_rows = batch if weight else batch.head(0)
        if fusion and isinstance(batch, SentenceBatch) and batch.labels is not None:
            # Fusion: the sentiment step first, an update of its own, then the contrastive step on the same batch.
            backward(fusion, batch, engine.precision, weight=weight, plain_backward=engine.backward,
                     forward=lambda rows: engine.forward(rows, fusion=True))
            engine.update(advance_schedule=False)
            self.fusion_updates += 1
        if objective.gathers_batch:
            loss = backward(objective, own_rows, engine.precision, self.chunk, plain_backward=engine.backward,
                            forward=engine.forward)
        else:
            loss = backward(objective, batch, engine.precision, self.chunk, weight, engine.backward, engine.forward)
        reported = weight / share.world  # this process's part of the step's loss (they sum to it)
        return {"loss": loss if reported == 1.0 else loss * reported}, len(own_rows)

    def state_dict(self) -> dict:
        return {"stage": self.index, "results": self.pretraining.results,
                "finished_stages": self.pretraining.finished_stages,
                "modules": [module.state_dict() for module in self.modules]}

    def load_state_dict(self, state: dict) -> None:
        for module, saved in zip(self.modules, state["modules"]):
            module.load_state_dict(saved)

    def finish(self) -> dict:
        """The stage's steps, its updates (a resumed stage counts those before the interruption as one a step),
        learning rate and mean loss."""
        engine = self.pretraining.engine
        state = engine.state
        return {"steps": state.total_steps, "updates": state.step + self.fusion_updates, "lr": self.stage.lr,
                "mean_loss": engine.losses.period_means().get("loss")}


def free_folder(folder: Path) -> Path:
    """`folder`, or where it exists the first of folder-2, folder-3, ... that does not."""
    number = 2
    free = folder
    while free.exists():
        free, number = folder.with_name(f"{folder.name}-{number}"), number + 1
    return free
