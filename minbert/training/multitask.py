"""Multi-task fine-tuning as a run of the engine: one shared encoder, a head per task, a schedule that decides
which task's batch comes next.

Flow: files -> TaskSplit (tokenised once) -> per-epoch plan of steps (training/schedules.py) -> batches grouped
by length -> MultitaskModel (model.py) -> task losses -> average (or gradient surgery, --combine) -> the engine
(AdamW, warm-up and decay, accumulation, evaluation, checkpoints; engine/engine.py) -> best checkpoint (written
and reloaded by checkpoint.py), predictions.
What is particular to a task (files, head, loss, metric) comes from the registry, tasks.py.
"""
import logging
from pathlib import Path

import torch
from torch import nn

from minbert import checkpoint
from minbert.common import distributed
from minbert.common.errors import UsageError
from minbert.common.files import read_json, same_place
from minbert.common.outputs import LeaderboardFolder
from minbert.common.run_folder import RunFolder, read_config
from minbert.common.tables import markdown_table
from minbert.data.batching import Buckets, Share, check_token_budget, to_device
from minbert.data.silver import file_name as silver_file
from minbert.data.splits import TaskSplit, TaskStream
from minbert.evaluation.inference import soft_outputs
from minbert.evaluation.outputs import leaderboard_files, write_outputs
from minbert.evaluation.predictions import SPLITS
from minbert.model import MultitaskModel
from minbert.models import Tokenizer
from minbert.tasks import REGISTRY, metric_names, summary
from minbert.engine.ddp import average_tensors, start_replicas
from minbert.engine.engine import Engine
from minbert.training.gradient_surgery import surgery_backward
from minbert.training.multitask_config import MultitaskConfig, best_metric, describe_best_metric
from minbert.engine.run import Run, check_max_length, planned_epochs
from minbert.training.schedules import numbered, plan_epoch
from minbert.training.smart import Smart
from minbert.training.step_shapes import step_shapes

log = logging.getLogger(__name__)


def task_loss(model: MultitaskModel, task: str, batch: dict, smart: Smart | None = None) -> torch.Tensor:
    # The padding rows of --length-buckets, past the batch's "rows" (TaskSplit.batch), weigh nothing.
    raw = model(task, batch["inputs"])[:batch.get("rows")]
    loss = REGISTRY[task].loss(raw, batch["labels"])
    return loss if smart is None else loss + smart.regularizers(model, task, batch["inputs"], raw)


class TaskLosses(nn.Module):
    """A step's forward pass (what DistributedDataParallel wraps under torchrun): each task's loss on its batch, for
    one task of the step or, for PCGrad and UPGrad, all of them."""

    def __init__(self, model: MultitaskModel, smart: Smart | None):
        super().__init__()
        self.model, self.smart = model, smart

    def forward(self, batches: dict[str, dict]) -> dict[str, torch.Tensor]:
        losses = {}
        for task, batch in batches.items():
            # Whether the batch is padded, known on the host: the encoder need not read its mask back from the device.
            with self.model.encoder.padding_known(batch["padded"]):
                losses[task] = task_loss(self.model, task, batch, self.smart)
            if "silver" in batch:  # --silver: the task's silver examples, against the teacher's soft labels
                silver = batch["silver"]
                with self.model.encoder.padding_known(silver["padded"]):
                    losses[silver_key(task)] = REGISTRY[task].soft_loss(
                        self.model(task, silver["inputs"])[:silver["rows"]], silver["labels"])
        return losses


def silver_key(task: str) -> str:
    """The name of a task's silver loss among a step's losses."""
    return f"{task} silver"


def weighted_losses(task_losses: dict[str, torch.Tensor], loss_scale: dict[str, float]) -> list[torch.Tensor]:
    """One step's task losses, each times its --loss-weights factor (tasks left out: 1)."""
    return [loss_scale.get(task, 1.0) * loss for task, loss in task_losses.items()]


def check_own_predictions(config: MultitaskConfig, folder: RunFolder) -> None:
    """--resume of a copied run (cp -r RUN COPY) refused while it would write the --predictions-dir of the run it
    was copied from (which it takes from the run config it copied): the two runs would write over each other's
    leaderboard files. The advice gives the copy a folder of its own, which --resume takes."""
    original = folder.copied_from() if config.resume else None
    theirs = read_config(original).get("predictions_dir") if original else None
    if isinstance(theirs, str) and theirs and same_place(theirs, config.predictions_dir):
        raise UsageError(f"--resume: {folder} is a copy of the run in {original}, and would write its "
                         f"--predictions-dir {config.predictions_dir}; give the copy its own: --output-dir {folder} "
                         f"--resume --predictions-dir {folder.path / 'predictions'}")


class MultitaskRun(Run):
    name = "multitask"
    finishing = "while writing its final predictions (the leaderboard files)"

    def __init__(self, config: MultitaskConfig, engine: Engine):
        self.config, self.engine, self.lr, self.head_lr = config, engine, config.lr, config.head_lr
        self.score_name, self.eval_every, self.patience = config.metric_for_best, config.eval_every, config.patience
        # The leaderboard folder, held as long as the run folder (torchrun: rank 0's machine alone has it).
        self.leaderboard = LeaderboardFolder(config.predictions_dir, "--predictions-dir",
                                             f"the run in {engine.folder.path.expanduser().resolve()}")
        distributed.on_main(lambda: check_own_predictions(config, engine.folder))
        distributed.on_main(lambda: engine.folder.hold(self.leaderboard.claim(
            config.overwrite, own_run=engine.folder.path, resume=config.resume)))
        # torchrun: rank 0 alone reads last/; the others start from --init or --model and receive its weights
        # (start_replicas) and its training state (the engine's).
        resume_from = engine.resumed.weights if distributed.is_main() else None
        if config.init and not resume_from:  # a run folder, or a CT output: the checkpoint inside is named
            RunFolder(config.init).check_is_checkpoint("--init")
        start = resume_from or config.init or config.model
        ours = bool(resume_from or config.init)  # a checkpoint of ours, its heads loaded where it has them
        self.shapes = step_shapes(config, engine.device)
        # Before the tokenizer: a broken config.json is named as such.
        self.model = self._load(start, heads=ours)
        check_max_length(self.model.encoder, config.max_length)
        self.tokenizer = Tokenizer.from_pretrained(start)
        heads_loaded = ours and checkpoint.has_heads(start)
        if config.option == "pretrain":
            self.model.encoder.requires_grad_(False)
        self.splits = {name: REGISTRY[name].load_splits(
            config.data_dir, self.tokenizer, config.max_length, config.head_options.encoding(REGISTRY[name]),
            config.max_train_examples, config.max_eval_examples) for name in config.task_list}
        self.silver = {name: REGISTRY[name].load_silver(
            Path(config.silver) / silver_file(name), self.tokenizer, config.max_length,
            config.head_options.encoding(REGISTRY[name])) for name in config.silver_task_list}
        if config.max_tokens:  # FlagError: a budget that the longest input allowed would not fit in
            check_token_budget(config.max_tokens, max(config.max_length * len(self.splits[t]["train"].views)
                                                      for t in config.task_list))
        def calibrate():
            if not heads_loaded:  # else what the heads measured came with them
                self.model.calibrate(self._splits("train"), self.tokenizer.pad_id)

        # torchrun: rank 0 alone decides (it alone reads last/) and measures, on its own weights, the ones
        # start_replicas hands to every process with the heads' buffers (what they measured).
        distributed.on_main(calibrate)
        start_replicas([self.model], config.seed)  # torchrun: rank 0's weights, a random stream each
        engine.describe_run([Path(config.data_dir) / file for name in config.task_list
                             for file in REGISTRY[name].files]
                            + [Path(config.silver) / silver_file(name) for name in config.silver_task_list],
                            attention=engine.resolved_attention(), **self.shapes.record())
        self.smart = Smart(config, self.model) if config.smart else None
        self.passes_apart = config.combine != "mean"  # PCGrad's, UPGrad's per-task passes (engine/ddp.py)
        self.dev_outputs, self.stream_epoch = {}, None  # the last evaluation's; the epoch of self.streams
        self.model.train()

    def _load(self, folder, heads: bool = True) -> MultitaskModel:
        model = checkpoint.load(folder, self.config, heads=heads, device=self.engine.device,
                                attention=self.config.attention, compile=self.config.compile,
                                static_shapes=self.shapes.train is not None, cuda_graphs=self.shapes.cuda_graphs,
                                partial=self.config.allow_partial_load)
        model.encoder.encoder.gradient_checkpointing = self.config.gradient_checkpointing
        return model

    # ---- what the engine trains ----

    def parameters(self):
        return [p for p in self.model.parameters() if p.requires_grad]

    def parameter_groups(self):
        return self.model.parameter_groups(self.config.lr, self.config.head_lr, self.config.layer_lr_decay)

    def plan(self) -> list[list]:
        """Each epoch's steps as (epoch, ((task, k), ...)): a step takes batch k of the epoch of each of its tasks.
        A step's batch is shared out between the processes and the accumulation parts, so it is that much larger."""
        config = self.config

        def epoch_plan(epoch: int) -> list:
            # A token budget's batches per pass vary with the shuffle: counted each epoch.
            batch_counts = {t: len(self._stream(t, i, epoch).pass_batches(0)) for i, t in enumerate(config.task_list)}
            return [(epoch, batches) for batches in numbered(plan_epoch(
                config.schedule, batch_counts, epoch=epoch, num_epochs=config.epochs, task_order=config.order,
                task_weights=config.weights, generator=torch.Generator().manual_seed(config.seed * 1000 + epoch)))]

        return planned_epochs(config.epochs, config.max_steps, epoch_plan)

    def _shares(self) -> int:
        """The parts a step's batch is shared out into: --grad-accum of them on each process."""
        return distributed.world_size() * self.config.grad_accum

    def batch_size(self) -> int:
        return self.config.batch_size * self._shares()

    def max_tokens(self) -> int:
        """A step's token budget (0: none), shared out as its batch is."""
        return self.config.max_tokens * self._shares()

    def describe(self) -> str:
        sizes = ", ".join(f"{task} {len(splits['train']):,}" for task, splits in self.splits.items())
        batch = f"up to {self.max_tokens():,} tokens" if self.config.max_tokens else f"{self.batch_size()} examples"
        if self.silver:
            batch += ("; silver examples: " + ", ".join(f"{task} {len(split):,}" for task, split in self.silver.items())
                      + f", {self.config.silver_ratio:g} a gold example in a batch, loss weighted "
                        f"{self.config.silver_weight:g}")
        return f"training examples: {sizes}; batches of {batch}"

    def _stream(self, task: str, task_index: int, epoch: int) -> TaskStream:
        return TaskStream(self.splits[task]["train"], self.batch_size(), self.config.seed, epoch, task_index,
                          max_tokens=self.max_tokens())

    def _streams(self, epoch: int) -> dict[str, TaskStream]:
        if self.stream_epoch != epoch:
            self.streams = {t: self._stream(t, i, epoch) for i, t in enumerate(self.config.task_list)}
            self.silver_streams = {t: self._silver_stream(t, i, epoch) for i, t in enumerate(self.config.task_list)
                                   if t in self.silver}
            self.stream_epoch = epoch
        return self.streams

    def _silver_stream(self, task: str, task_index: int, epoch: int) -> TaskStream:
        """A task's silver batches: --silver-ratio times the gold batch (or its token budget, raised to the longest
        silver example where that is more), its own shuffle; the gold batch k of an epoch takes silver batch k."""
        ratio, split = self.config.silver_ratio, self.silver[task]
        budget = max(round(self.max_tokens() * ratio), max(split.token_lengths())) if self.max_tokens() else 0
        return TaskStream(split, max(1, round(self.batch_size() * ratio)), self.config.seed, epoch,
                          len(REGISTRY) + task_index, max_tokens=budget)

    def _batch(self, split: TaskSplit, rows: list[int], buckets: Buckets | None) -> dict:
        """The rows of a split as a batch on the device, of one of `buckets`' shapes."""
        batch = split.batch(rows, self.tokenizer.pad_id, buckets)
        batch["inputs"] = {name: to_device(v, self.engine.device) for name, v in batch["inputs"].items()}
        batch["labels"] = to_device(batch["labels"], self.engine.device)
        return batch

    def module(self) -> nn.Module:
        return TaskLosses(self.model, self.smart)

    def step(self, item, share: Share):
        """Each task of the step: this share of its batch, its mean loss weighted by the share. Each task's loss is
        backpropagated as soon as it is computed, so that its activations are freed before the next task's forward
        pass (the step's peak memory is one task's, not the sum of its tasks'); the gradients add up to those of the
        mean over the step's tasks. PCGrad and UPGrad (--combine) need every task's loss at once: one pass."""
        epoch, batches = item
        streams = self._streams(epoch)
        weights, task_batches, examples, silver_weights = {}, {}, 0, {}
        for task, k in batches:
            rows, weights[task] = share.of(streams[task].batch_indices(k))
            if not rows:  # a single process's part without rows: nothing to compute
                continue
            batch = self._batch(self.splits[task]["train"], rows, self.shapes.train)
            silver_rows, silver_weight = share.of(self.silver_streams[task].batch_indices(k)) if task in self.silver \
                else ([], 0.0)
            if silver_rows:  # --silver: this share of the task's silver batch k, weighted by its share
                batch["silver"] = self._batch(self.silver[task], silver_rows, self.shapes.silver)
                silver_weights[task] = silver_weight
            task_batches[task] = batch
            examples += len(rows) if weights[task] else 0  # a stand-in row (torchrun) is no example
        if not task_batches:
            return {}, examples
        passes = [task_batches] if self.passes_apart else [{task: batch} for task, batch in task_batches.items()]
        task_losses = {}
        for index, tasks in enumerate(passes):
            with self.engine.one_of_passes(last=index == len(passes) - 1):
                losses = self._weighted_losses(tasks, weights, silver_weights)
                self._backward(losses, len(batches))
            task_losses.update(losses)
        return {task: loss.detach() / share.world for task, loss in task_losses.items()}, examples

    def _weighted_losses(self, task_batches: dict[str, dict], weights: dict[str, float],
                         silver_weights: dict[str, float]) -> dict[str, torch.Tensor]:
        """Each task's loss on its batch, weighted by the share of the batch."""
        with self.engine.precision.autocast():
            losses = self.engine.forward(task_batches)
            task_losses = {task: weights[task] * losses[task] for task in task_batches}
            for task in silver_weights.keys() & task_batches.keys():  # --silver: its silver loss joins its gold one
                silver = self.config.silver_weight * silver_weights[task] * losses[silver_key(task)]
                task_losses[task] = task_losses[task] + silver
        return task_losses

    def _backward(self, task_losses: dict[str, torch.Tensor], step_tasks: int) -> None:
        """The backward pass of these tasks' share of the mean over the step's tasks: a task without rows in this
        part of the step counts in the mean still, as it does in the whole batch that the parts add up to."""
        weighted = weighted_losses(task_losses, self.config.loss_scale)
        if self.config.combine != "mean" and len(task_losses) > 1:
            heads = self.model.head_parameters()
            # torchrun: each task's gradient of the shared weights is averaged over the processes before the
            # surgery combines them (one all_reduce), so it is the whole batch's; the combined gradient is then the
            # same on every process, and the update's all_reduce (engine/ddp.py) averages the heads'.
            surgery_backward([self.engine.precision.scale(loss) for loss in weighted], self.model.shared_parameters(),
                             [heads[t] for t in task_losses], self.config.combine, average=average_tensors)
        else:
            self.engine.backward(sum(weighted) / step_tasks)

    def after_update(self) -> None:
        if self.smart:
            self.smart.update(self.model)

    # ---- evaluation and what is saved ----

    def evaluate(self) -> dict[str, float]:
        self.dev_outputs = self._soft_outputs("dev")
        return summary({name: REGISTRY[name].metric(outputs, self.splits[name]["dev"].labels)
                        for name, outputs in self.dev_outputs.items()})

    def score(self, metrics: dict[str, float]) -> float:
        return best_metric(metrics, self.config.metric_for_best)

    def _splits(self, split_name: str) -> dict[str, TaskSplit]:
        return {task: splits[split_name] for task, splits in self.splits.items()}

    def _soft_outputs(self, split_name: str) -> dict[str, torch.Tensor]:
        config = self.config
        max_tokens = max(config.max_tokens, config.max_tokens * config.eval_batch_size // config.batch_size)
        return {task: soft_outputs(self.model, split, self.tokenizer.pad_id, config.eval_batch_size,
                                   self.engine.precision.autocast, max_tokens=max_tokens, buckets=self.shapes.eval)
                for task, split in self._splits(split_name).items()}

    def save(self, folder: Path, record: dict, best: bool) -> None:
        """The encoder folder (with what sentence-transformers reads and a model card) and the heads; best/ also
        gets the dev outputs of the evaluation that made it best (the leaderboard's dev files, once the run ends)."""
        config = self.config
        checkpoint.save(folder, self.model.encoder, self.tokenizer, record, model=self.model,
                        pooling=config.pooling, max_length=config.max_length, base_model=config.init or config.model,
                        command=config.command.with_values, eval_sample=config.max_eval_examples,
                        metrics=record.get("dev", {}), metric_names=metric_names(),
                        data_files=[str(Path(config.data_dir) / REGISTRY[name].files[0]) for name in config.task_list])
        if best:
            write_outputs(folder, "dev", self._splits("dev"), self.dev_outputs)

    def state_dict(self) -> dict:
        return {"bregman_average": self.smart.state_dict() if self.smart else None}

    def load_state_dict(self, state: dict) -> None:
        if self.smart:
            self.smart.load_state_dict(state["bregman_average"])

    def finish(self) -> dict:
        """Reload the best checkpoint, save its test outputs beside its dev ones, and write the leaderboard files of
        both, every task's, as one set (--no-predict-test: the dev ones only)."""
        best = self.engine.folder.best
        if distributed.is_main():
            if self.config.predict_test:
                self.model = None  # the trained weights' memory back before best/'s are loaded
                self.model = self._load(best)
                write_outputs(best, "test", self._splits("test"), self._soft_outputs("test"))
            splits = SPLITS if self.config.predict_test else ("dev",)
            self.leaderboard_files = self.leaderboard.write(leaderboard_files(best, self.config.task_list, splits))
        metrics = distributed.on_main(lambda: read_json(best / "metrics.json"))["dev"]  # torchrun: rank 0's file
        if distributed.is_main():
            self._summary(metrics)
        return metrics

    def _summary(self, metrics: dict) -> None:
        """The best dev metrics and every file the run wrote, printed whatever the log level."""
        config = self.config
        if config.max_eval_examples:
            log.warning("the leaderboard files hold predictions for a sample of at most %d dev and test examples a "
                        "task (--max-eval-examples): they are not a full submission", config.max_eval_examples)
        folder = self.engine.folder
        files = [folder.best, folder.last, folder.metrics_log, folder.config_file, *self.leaderboard_files]
        print(markdown_table({"best dev": metrics}, list(metrics), label="", digits=4))
        print(f"best/ picked by {describe_best_metric(config.metric_for_best, config.task_list)}: "
              f"{best_metric(metrics, config.metric_for_best):.4f}")
        print("written:\n" + "\n".join(f"  {path}" for path in files))
