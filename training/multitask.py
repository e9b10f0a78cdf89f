"""Multi-task fine-tuning: one shared encoder, a head per task, a schedule that decides which task's batch comes next.

Flow: files -> TaskSplit (tokenised once) -> per-epoch plan of steps (training/schedules.py) -> batches grouped
by length -> MultitaskModel -> task losses -> average (or gradient surgery) -> the engine (AdamW, warm-up and
decay, checkpoints; training/engine.py) -> dev evaluation -> best checkpoint, predictions.
What is particular to a task (files, head, loss, metric) comes from the registry, tasks.py.
"""
import logging
import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch

from common import distributed
from common.cli import AT_LEAST_0, AT_LEAST_1, POSITIVE, Range, flag
from common.errors import CheckpointError
from common.files import (DEFAULT_DATA, atomic_directory, atomic_file, check_writable, read_json, recover_directory,
                          write_json)
from common.seeding import derived_seed
from common.tables import markdown_table
from data.batching import length_grouped_batches, split_evenly
from data.splits import PAIR_ENCODINGS, TaskSplit
from evaluation.evaluate import predict
from evaluation.predictions import SPLITS, prediction_path, write_predictions
from heads import PAIR_MLPS, SHARE_MODES
from heads.multitask import MultitaskModel
from heads.paraphrase import CrossEncodedPairHead
from models import POOLINGS, Tokenizer, from_pretrained
from models.checkpoint import load_heads, tensor_bytes, write_encoder_folder
from models.shareable import write_shareable_files
from tasks import REGISTRY, STS_TARGETS, TASK_NAMES, HeadOptions, selection_score, summary
from training.engine import Engine, TrainingConfig, linear_warmup_decay, load_training_state
from training.gradient_surgery import METHODS as SURGERY_METHODS
from training.gradient_surgery import surgery_backward
from training.schedules import (SCHEDULES, check_plan, count_batches, parse_task_order, parse_task_weights,
                                plan_epoch)
from training.smart import MovingAverage, smoothness_regularizer

log = logging.getLogger(__name__)


@dataclass
class MultitaskConfig(TrainingConfig):
    init: str = flag("", "a checkpoint of ours to start from (e.g. from pretrain_contrastive.py); "
                           "overrides --model; its heads are loaded too when it has matching ones")
    option: str = flag("finetune", "finetune: train encoder and heads; pretrain: heads on a frozen encoder",
                         choices=("finetune", "pretrain"))
    tasks: str = flag("sst,para,sts", f"tasks to train, comma-separated, from {', '.join(TASK_NAMES)}")
    schedule: str = flag("mtdnn", "how task batches are combined (see training/schedules.py)", choices=SCHEDULES)
    task_order: str = flag("", "task order of the rr-batch, rr-epoch and sequential schedules "
                                 "(empty: the order of --tasks)")
    task_weights: str = flag("", "mtdnn sampling weights, e.g. para=2 (tasks left out weigh 1)")
    loss_weights: str = flag("", "task loss multipliers, e.g. sst=2 (tasks left out weigh 1)")
    surgery: str = flag("pcgrad", "gradient surgery aggregator of --schedule pcgrad", choices=SURGERY_METHODS)
    pooling: str = flag("mean", "sentence embedding: [CLS] vector, mean of tokens, or pooler output",
                          choices=POOLINGS)
    pair_encoding: str = flag("bi", "bi: sentences embedded apart; cross: pair encoded together in both orders; "
                                    "per task: para=cross,sts=bi")
    share: str = flag("first-layer", "sharing between the pair tasks' MLPs (bi-encoding)", choices=SHARE_MODES)
    pair_mlp: str = flag("residual", "pair tasks' MLPs (bi-encoding): residual = x + MLP(x), starting as the "
                                     "identity; plain = Chen's 2-layer MLP", choices=PAIR_MLPS)
    common_layer: bool = flag(False, "a Linear+tanh layer shared by all heads (Mohammed and Sabane's CL)")
    cross_head: str = flag("dpha", "cross-encoded pair head (Mohammed and Sabane: ph, dph, dpha)",
                             choices=CrossEncodedPairHead.VARIANTS)
    sts_target: str = flag("score", "score: regress 0-5; cosine-range: gold mapped onto [M, 1] (Contrastive "
                                    "Tension, Carlsson et al.)", choices=STS_TARGETS)
    head_dropout: float = flag(0.3, "dropout before each head layer", range=Range(0, 1, high_open=True))
    layer_lr_decay: float = flag(1.0, "layer-wise LR decay: each encoder layer below the top one, and the "
                                      "embeddings below them, get this factor times the LR above (1 = off)",
                                 range=Range(0, 1, low_open=True))
    head_lr: float = flag(1e-3, "peak learning rate of the heads (new, randomly initialised layers)", range=POSITIVE)
    smart: bool = flag(False, "SMART regularization (Jiang et al., 2020): an adversarial perturbation of the input "
                              "embeddings and a Bregman proximal point term added to each task's loss")
    smart_weight: float = flag(1.0, "SMART's lambda_s, the weight of the adversarial smoothness term", range=AT_LEAST_0)
    smart_epsilon: float = flag(1e-5, "SMART's epsilon: the l_inf radius of the perturbation", range=POSITIVE)
    smart_noise: float = flag(1e-5, "SMART's sigma: the standard deviation of the perturbation's start",
                              range=AT_LEAST_0)
    smart_step_size: float = flag(1e-3, "SMART's eta: the step of the perturbation's gradient ascent", range=POSITIVE)
    smart_steps: int = flag(1, "SMART's T_x: gradient ascent steps of the perturbation", range=AT_LEAST_1)
    bregman_weight: float = flag(1.0, "SMART's mu: the weight of the Bregman proximal point term (0 = off)",
                                 range=AT_LEAST_0)
    bregman_momentum: float = flag(0.99, "SMART's beta: the momentum of the weights the Bregman term compares with",
                                   range=Range(0, 1, high_open=True))
    max_train_examples: int = flag(0, "use a random sample of at most this many training examples per task (0 = all)",
                                   range=AT_LEAST_0)
    max_eval_examples: int = flag(0, "use a random sample of at most this many dev/test examples per task (0 = all)",
                                  range=AT_LEAST_0)
    eval_every: int = flag(0, "also evaluate (and save) every N steps (0 = after each epoch only)", range=AT_LEAST_0)
    eval_batch_size: int = flag(128, "batch size for evaluation", range=AT_LEAST_1)
    data_dir: str = flag(str(DEFAULT_DATA), "folder with the course's data files")
    predictions_dir: str = flag("predictions", "leaderboard CSVs of the best checkpoint go here")

    RUNTIME_FIELDS = TrainingConfig.RUNTIME_FIELDS + ("predictions_dir", "eval_batch_size")
    OUTPUTS = TrainingConfig.OUTPUTS + ("best",)
    PATH_FIELDS = TrainingConfig.PATH_FIELDS + ("init", "data_dir", "predictions_dir")
    # What the heads' tensors mean: --init with heads needs the same values.
    HEAD_FIELDS = ("tasks", "pooling", "pair_encoding", "share", "pair_mlp", "common_layer", "cross_head",
                   "sts_target")

    def __post_init__(self):
        super().__post_init__()
        self.task_list = parse_task_order(self.tasks, TASK_NAMES, option="--tasks")
        if len(set(self.task_list)) < len(self.task_list):
            raise ValueError(f"--tasks {self.tasks!r}: a task is named twice")
        self.order = parse_task_order(self.task_order, TASK_NAMES) if self.task_order else self.task_list
        if set(self.order) != set(self.task_list):
            raise ValueError(f"--task-order {self.task_order!r} must name each task of --tasks {self.tasks!r}, "
                             f"and only those")
        self.weights = self._task_values(self.task_weights, "--task-weights") or None
        never = [task for task, weight in (self.weights or {}).items() if weight == 0]
        if never:
            raise ValueError(f"--task-weights {self.task_weights!r}: {', '.join(never)} would never be trained, yet "
                             f"scored and predicted; leave it out of --tasks instead")
        self.loss_scale = self._task_values(self.loss_weights, "--loss-weights")
        check_plan(self.schedule, self.task_list, self.epochs, self.order, self.weights)
        self.head_options = HeadOptions(parse_pair_encoding(self.pair_encoding), self.share, self.pair_mlp,
                                        self.cross_head, self.head_dropout, self.sts_target)
        for name in self.task_list:
            REGISTRY[name].check(self.head_options)

    def _task_values(self, text: str, option: str) -> dict[str, float]:
        """'para=2,sst=0.5' of --task-weights or --loss-weights, for trained tasks only."""
        values = parse_task_weights(text, TASK_NAMES, option=option, trained=self.task_list) if text else {}
        untrained = [task for task in values if task not in self.task_list]
        if untrained:
            raise ValueError(f"{option} {text!r}: {', '.join(untrained)} is not trained (--tasks {self.tasks})")
        return values


def as_flag(name: str, value) -> str:
    """The command-line spelling of a config value: --share none, --common-layer, --no-common-layer."""
    flag_name = name.replace("_", "-")
    return f"--{flag_name}" if value is True else f"--no-{flag_name}" if value is False else f"--{flag_name} {value}"


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


class TaskStream:
    """One task's training batches across an epoch: pass p of the data is a fresh length-grouped shuffle."""

    def __init__(self, split: TaskSplit, batch_size: int, seed: int, epoch: int, task_index: int):
        self.split, self.batch_size, self.lengths = split, batch_size, split.lengths()
        self.seed_words = [seed, epoch, task_index]
        self.batches, self.pass_index = [], -1

    def batch_indices(self, k: int) -> list[int]:
        per_pass = math.ceil(len(self.split) / self.batch_size)
        if k // per_pass != self.pass_index:
            self.pass_index = k // per_pass
            seed = derived_seed(*self.seed_words, self.pass_index)
            self.batches = length_grouped_batches(self.lengths, self.batch_size, torch.Generator().manual_seed(seed))
        return self.batches[k % per_pass]


def task_loss(model: MultitaskModel, task: str, batch: dict, smart: "Smart | None" = None) -> torch.Tensor:
    raw = model(task, batch["inputs"])
    loss = REGISTRY[task].loss(raw, batch["labels"])
    return loss if smart is None else loss + smart.regularizers(model, task, batch["inputs"], raw)


class Smart:
    """SMART's two terms for a task's batch (training/smart.py), with the flags' values."""

    def __init__(self, config: MultitaskConfig, model: MultitaskModel):
        self.config = config
        self.average = MovingAverage(model, config.bregman_momentum) if config.bregman_weight else None

    def regularizers(self, model: MultitaskModel, task: str, inputs: dict, raw: torch.Tensor) -> torch.Tensor:
        config, divergence = self.config, REGISTRY[task].divergence
        ids = inputs["input_ids"]
        shape = (*ids.shape, model.encoder.config.hidden_size)
        total = config.smart_weight * smoothness_regularizer(
            lambda nu: model(task, inputs, perturbation=nu), raw, shape, divergence, config.smart_epsilon,
            config.smart_noise, config.smart_step_size, config.smart_steps)
        if self.average is not None:
            total = total + config.bregman_weight * divergence(raw, self.average.outputs(task, inputs))
        return total


def weighted_losses(task_losses: dict[str, torch.Tensor], loss_scale: dict[str, float]) -> list[torch.Tensor]:
    """One step's task losses, each times its --loss-weights factor (tasks left out: 1)."""
    return [loss_scale.get(task, 1.0) * loss for task, loss in task_losses.items()]


def encoder_depth(name: str, num_layers: int) -> int:
    """How many layers below the top an encoder parameter sits: top layer and pooler 0, embeddings num_layers."""
    if name.startswith("embeddings."):
        return num_layers
    if name.startswith("encoder.layer."):
        return num_layers - 1 - int(name.split(".")[2])
    return 0


def build_model(config: MultitaskConfig, start: str | Path) -> MultitaskModel:
    """The encoder of `start` with fresh heads for config's tasks and head flags."""
    return MultitaskModel(from_pretrained(start), config.task_list, config.pooling, config.head_options,
                          config.common_layer)


class MultitaskTrainer:
    def __init__(self, config: MultitaskConfig):
        self.config = config
        self.engine = engine = Engine(config)
        self.output_dir = Path(config.output_dir)
        check_writable(config.predictions_dir, "--predictions-dir")
        if engine.is_main:
            recover_directory(self.output_dir / "best")
        resume_from = engine.check_resumable(config.RUNTIME_FIELDS) if config.resume else None
        start = resume_from or (Path(config.init) if config.init else config.model)
        self.model = build_model(config, start)  # before the tokenizer: a broken config.json is named as such
        engine.check_max_length(self.model.encoder)
        self.tokenizer = Tokenizer.from_pretrained(start)
        heads_loaded = bool(resume_from or config.init) and (Path(start) / "heads.safetensors").exists()
        if heads_loaded:
            if config.init:  # a resumed run's flags, head flags among them, were checked by check_resumable
                self._check_head_flags(Path(start))
            load_heads(self.model, start)
        if config.option == "pretrain":
            self.model.encoder.requires_grad_(False)
        self.model.to(engine.device)
        self.splits = self._load_data()
        if not heads_loaded:  # else what the heads measured came with them
            self._calibrate_heads()
        self.run_config = engine.describe_run([Path(config.data_dir) / file for name in config.task_list
                                               for file in REGISTRY[name].files])
        # Each step's batch of a task is shared out between the processes and the accumulation steps.
        self.parts = distributed.world_size() * config.grad_accum
        batch_counts = count_batches({t: len(self.splits[t]["train"]) for t in config.task_list},
                                     config.batch_size * self.parts)
        self.plans = [plan_epoch(config.schedule, batch_counts, epoch=epoch, num_epochs=config.epochs,
                                 task_order=config.order, task_weights=config.weights,
                                 generator=torch.Generator().manual_seed(config.seed * 1000 + epoch))
                      for epoch in range(config.epochs)]
        # The plan as one list of steps: (epoch, step within the epoch, the tasks whose batches it takes).
        self.steps = [(epoch, i, tasks) for epoch, plan in enumerate(self.plans) for i, tasks in enumerate(plan)]
        trained = [p for p in self.model.parameters() if p.requires_grad]
        engine.prepare(trained, self._parameter_groups(), config.lr, len(self.steps),
                       lambda step: linear_warmup_decay(step, len(self.steps), config.warmup))
        self.smart = Smart(config, self.model) if config.smart else None
        self.best, self.last_record, self.stream_epoch = -math.inf, {}, None
        if resume_from:
            state = load_training_state(resume_from)
            engine.restore(state)
            self.load_state_dict(state["trainer"])

    # ---- setup ----

    def _check_head_flags(self, checkpoint: Path):
        # Heads trained under other flags either fail to load (another shape) or, worse, load and silently
        # compute something else: plain and residual pair MLPs have the same tensors, and pooling or the STS
        # target change what the tensors mean. Runs from before --pair-mlp existed had plain MLPs.
        if not (checkpoint / "run_config.json").exists():
            return
        saved = {"pair_mlp": "plain", **read_json(checkpoint / "run_config.json")}
        ours = self.config.to_dict()

        def comparable(name, value):  # "para=cross" and "para=cross,sts=bi" are the same encodings
            return parse_pair_encoding(value) if name == "pair_encoding" else value

        differ = [name for name in MultitaskConfig.HEAD_FIELDS
                  if name in saved and comparable(name, saved[name]) != comparable(name, ours[name])]
        if differ:
            flags = " ".join(as_flag(name, saved[name]) for name in differ)
            raise CheckpointError(f"{checkpoint}: its heads were trained with {flags}; start with the same flags "
                                  f"to use them")

    def _load_data(self) -> dict[str, dict[str, TaskSplit]]:
        config, data = self.config, Path(self.config.data_dir)
        splits = {}
        for name in config.task_list:
            task = REGISTRY[name]
            train, dev, test = (data / file for file in task.files)
            common = dict(tokenizer=self.tokenizer, max_length=config.max_length,
                          encoding=config.head_options.encoding(task))
            splits[name] = {
                "train": task.load_split(train, max_examples=config.max_train_examples, **common),
                "dev": task.load_split(dev, max_examples=config.max_eval_examples, **common),
                "test": task.load_split(test, labeled=False, max_examples=config.max_eval_examples, **common),
            }
        return splits

    def _calibrate_heads(self):
        """Let each head measure what it needs on its training split (the cosine floor M of cosine-range STS)."""
        for name in self.config.task_list:
            task, split = REGISTRY[name], self.splits[name]["train"]
            if not task.needs_calibration(self.config.head_options):
                continue

            def embed(rows):
                inputs = split.batch(rows, self.tokenizer.pad_id)["inputs"]
                return self.model.embed({k: v.to(self.engine.device) for k, v in inputs.items()})

            with torch.no_grad():
                self.model.eval()
                task.calibrate(self.model.heads[name], split, embed)
                self.model.train()

    def _parameter_groups(self):
        # The pretrained encoder moves slowly (lr), the new heads fast (head_lr); no weight decay on
        # biases and LayerNorm weights, as in BERT's own fine-tuning recipe. --layer-lr-decay d < 1 moves
        # lower layers, which hold more general features, slower still: lr * d^depth (discriminative
        # fine-tuning, Howard & Ruder 2018; for BERT, Sun et al. 2019).
        num_layers = self.model.encoder.config.num_hidden_layers
        groups = defaultdict(list)
        for name, parameter in self.model.named_parameters():
            if not parameter.requires_grad:
                continue
            if name.startswith("encoder."):
                depth = encoder_depth(name.removeprefix("encoder."), num_layers)
                lr = self.config.lr * self.config.layer_lr_decay ** depth
            else:
                lr = self.config.head_lr
            groups[lr, parameter.dim() > 1].append(parameter)
        return [{"params": params, "lr": lr, **({} if decayed else {"weight_decay": 0.0})}
                for (lr, decayed), params in groups.items()]

    # ---- training (called by the engine) ----

    def train(self) -> dict:
        if self.engine.is_main:
            write_json(self.output_dir / "run_config.json", self.run_config)
        self.model.train()
        self.engine.run(self.steps, self, "multitask")
        return self.finish()

    def _streams(self, epoch: int, index: int):
        """This epoch's task streams, and how many batches of each task its steps before `index` took."""
        if self.stream_epoch != epoch:
            config = self.config
            self.streams = {t: TaskStream(self.splits[t]["train"], config.batch_size * self.parts, config.seed,
                                          epoch, i) for i, t in enumerate(config.task_list)}
            self.consumed = Counter(task for step in self.plans[epoch][:index] for task in step)
            self.stream_epoch = epoch
        return self.streams

    def train_step(self, item) -> tuple[dict[str, torch.Tensor], int]:
        """One optimizer step's gradients: each task of the step takes its next batch, this process's share of it,
        in --grad-accum parts. Each part's mean loss counts by its share of the batch's examples, so the step's
        gradient is the gradient of the mean loss over the whole batch, as one process with one batch gives."""
        epoch, index, tasks = item
        streams, config, engine = self._streams(epoch, index), self.config, self.engine
        world, rank, accum = distributed.world_size(), distributed.rank(), config.grad_accum
        parts = {}
        for task in tasks:
            rows = streams[task].batch_indices(self.consumed[task])
            self.consumed[task] += 1
            pieces = split_evenly(rows, self.parts)[rank * accum:(rank + 1) * accum]
            parts[task] = [(piece, len(piece) * world / len(rows)) for piece in pieces]
        reported, examples = {task: 0.0 for task in tasks}, 0
        for micro in range(accum):
            task_losses = {}
            for task in tasks:
                piece, share = parts[task][micro]
                if not piece:
                    continue
                batch = self.splits[task]["train"].batch(piece, self.tokenizer.pad_id)
                batch["inputs"] = {k: v.to(engine.device, non_blocking=True) for k, v in batch["inputs"].items()}
                batch["labels"] = batch["labels"].to(engine.device, non_blocking=True)
                with engine.precision.autocast():
                    task_losses[task] = share * task_loss(self.model, task, batch, self.smart)
                reported[task] = reported[task] + task_losses[task].detach() / world
                examples += len(piece)
            if task_losses:
                self._backward(task_losses)
        return reported, examples

    def _backward(self, task_losses: dict[str, torch.Tensor]) -> None:
        weighted = weighted_losses(task_losses, self.config.loss_scale)
        if self.config.schedule == "pcgrad" and len(task_losses) > 1:
            heads = self.model.head_parameters()
            surgery_backward([self.engine.precision.scale(loss) for loss in weighted], self.model.shared_parameters(),
                             [heads[t] for t in task_losses], self.config.surgery)
        else:
            self.engine.backward(sum(weighted) / len(weighted))

    def after_step(self, item) -> None:
        if self.smart and self.smart.average:
            self.smart.average.update(self.model)
        epoch, index, _ = item
        epoch_end = index + 1 == len(self.plans[epoch])
        if epoch_end or (self.config.eval_every and self.engine.step % self.config.eval_every == 0):
            self._evaluate_and_save(epoch + 1, epoch_end)

    def write_checkpoint(self, folder: Path) -> None:
        write_encoder_folder(folder, self.model.encoder, self.tokenizer, None, self.last_record,
                             extra_modules=self.model)
        self._write_shareable_files(folder, self.last_record.get("dev", {}))

    def state_dict(self) -> dict:
        average = self.smart.average.state_dict() if self.smart and self.smart.average else None
        return {"best": self.best, "last_record": self.last_record, "bregman_average": average}

    def load_state_dict(self, state: dict) -> None:
        self.best, self.last_record = state["best"], state["last_record"]
        if self.smart and self.smart.average:
            self.smart.average.load_state_dict(state["bregman_average"])

    # ---- evaluation ----

    def predict_all(self, split_name: str) -> dict[str, torch.Tensor]:
        """Soft outputs of every task on its dev or test split."""
        return {task: predict(self.model, splits[split_name], self.tokenizer.pad_id, self.config.eval_batch_size,
                              self.engine.precision.autocast)
                for task, splits in self.splits.items()}

    def write_outputs(self, split_name: str, outputs: dict[str, torch.Tensor]) -> None:
        """The leaderboard CSVs, and the soft outputs beside the best checkpoint (for ensemble.py)."""
        for name, task_outputs in outputs.items():
            split = self.splits[name][split_name]
            write_predictions(self.config.predictions_dir, name, split_name, split.ids,
                              REGISTRY[name].hard(task_outputs))
            with atomic_file(self.output_dir / "best" / f"outputs-{name}-{split_name}.pt") as temp:
                torch.save({"ids": split.ids, "outputs": task_outputs}, temp)

    def _evaluate_and_save(self, epoch: int, epoch_end: bool):
        """Rank 0 scores the dev sets and saves best/ when they improve; every rank then saves last/.
        The record's training losses are the means over the epoch so far."""
        record = None
        if self.engine.is_main:
            outputs = self.predict_all("dev")
            metrics = summary({name: REGISTRY[name].metric(outputs[name], self.splits[name]["dev"].labels)
                               for name in outputs})
            record = {"event": "eval", "epoch": epoch, "step": self.engine.step,
                      "train_loss": self.engine.losses.period_means(reset=epoch_end),
                      "dev": metrics, "seconds": round(time.time() - self.engine.started, 1)}
            self.engine.write_record(record)
            log.info("step %d dev: %s", self.engine.step, "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
            self.last_record = record
            if selection_score(metrics) > self.best:
                self.best = selection_score(metrics)
                self._save_best(record)
                self.write_outputs("dev", outputs)
        else:
            self.engine.losses.period_means(reset=epoch_end)  # every process starts the next epoch's means together
        self.engine.save_last(self)

    def _save_best(self, record: dict) -> None:
        """best/: the encoder folder (with what sentence-transformers reads and a model card) and the heads."""
        size = tensor_bytes(self.model.state_dict().values())
        with atomic_directory(self.output_dir / "best", expected=size) as temp:
            write_encoder_folder(temp, self.model.encoder, self.tokenizer, self.run_config, record,
                                 extra_modules=self.model)
            self._write_shareable_files(temp, record["dev"])

    def _write_shareable_files(self, folder: Path, metrics: dict) -> None:
        """What sentence-transformers reads, with the run's pooling, and the model card (models/shareable.py)."""
        config = self.config
        write_shareable_files(folder, pooling=config.pooling, max_length=config.max_length,
                              base_model=config.init or config.model, command=getattr(config, "command", ""),
                              metrics=metrics, data_files=[str(Path(config.data_dir) / REGISTRY[name].files[0])
                                                           for name in config.task_list])

    def finish(self) -> dict:
        """Reload the best checkpoint, write its test predictions (dev ones are written when it is saved)."""
        best = self.output_dir / "best"
        if self.engine.is_main:
            self.model.encoder = from_pretrained(best)
            load_heads(self.model, best)
            self.model.to(self.engine.device)
            self.write_outputs("test", self.predict_all("test"))
        distributed.barrier()
        metrics = read_json(best / "metrics.json")["dev"]
        if self.engine.is_main:
            self._summary(metrics)
        return metrics

    def _summary(self, metrics: dict) -> None:
        """The best dev metrics and every file the run wrote, printed whatever the log level."""
        config = self.config
        if config.max_eval_examples:
            log.warning("the leaderboard files hold predictions for a sample of at most %d dev and test examples a "
                        "task (--max-eval-examples): they are not a full submission", config.max_eval_examples)
        files = [self.output_dir / name for name in ("best", "last", "metrics.jsonl", "run_config.json")]
        files += [prediction_path(config.predictions_dir, name, split) for name in config.task_list
                  for split in SPLITS]
        others = sorted(set(Path(config.predictions_dir).glob("*-*-output.csv")) - set(files))
        if others:
            log.warning("%s also holds leaderboard files this run did not write (other tasks, or an earlier run): %s",
                        config.predictions_dir, ", ".join(path.name for path in others))
        print(markdown_table({"best dev": metrics}, list(metrics), label="", digits=4))
        print("written:\n" + "\n".join(f"  {path}" for path in files))
