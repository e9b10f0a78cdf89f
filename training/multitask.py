"""Multi-task fine-tuning: one shared encoder, three heads, a schedule that decides which task's batch comes next.

Flow: files -> TaskSplit (tokenised once) -> per-epoch plan of steps (training/schedules.py) ->
batches grouped by length -> MultitaskModel -> task losses -> average (or gradient surgery) ->
AdamW with linear warm-up and decay -> dev evaluation -> best checkpoint, predictions.
"""
import dataclasses
import json
import logging
import math
import random
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from cli import flag
from data.batching import length_grouped_batches
from data.readers import DataError
from data.tasks import FILES, PAIR_ENCODINGS, TASKS, TaskSplit, load_split
from evaluation.evaluate import hard_predictions, predict, summary, task_metric
from evaluation.predictions import write_predictions
from heads import PAIR_MLPS, SHARE_MODES
from heads.multitask import MultitaskModel
from heads.paraphrase import CrossEncodedPairHead
from heads.similarity import lowest_bucket_mean_cosine
from models import AdamW, POOLINGS, Tokenizer, from_pretrained
from models.loading import CheckpointError
from training.checkpoint import (atomic_file, load_heads, load_training_state, read_json, save_checkpoint,
                                 write_json)
from training.gradient_surgery import METHODS as SURGERY_METHODS
from training.gradient_surgery import surgery_backward
from training.schedules import SCHEDULES, count_batches, parse_task_order, parse_task_weights, plan_epoch
from training.precision import PRECISIONS, Precision

log = logging.getLogger(__name__)
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@dataclass
class MultitaskConfig:
    model: str = flag("bert-base-uncased", "starting weights: hub id, checkpoint folder, or all-MiniLM-L6-v2")
    init: str = flag("", "a checkpoint of ours to start from (e.g. from pretrain_contrastive.py); "
                           "overrides --model; its heads are loaded too when it has matching ones")
    option: str = flag("finetune", "finetune: train encoder and heads; pretrain: heads on a frozen encoder",
                         choices=("finetune", "pretrain"))
    tasks: str = flag("sst,para,sts", "tasks to train, comma-separated")
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
    share: str = flag("first-layer", "sharing between the paraphrase and STS MLPs (bi-encoding)",
                        choices=SHARE_MODES)
    pair_mlp: str = flag("residual", "paraphrase and STS MLPs (bi-encoding): residual = x + MLP(x), starting as "
                                     "the identity; plain = seed 002's 2-layer MLP", choices=PAIR_MLPS)
    common_layer: bool = flag(False, "a Linear+tanh layer shared by all heads (seed 003 CL)")
    cross_head: str = flag("dpha", "cross-encoded pair head (seed 003)", choices=CrossEncodedPairHead.VARIANTS)
    sts_target: str = flag("score", "score: regress 0-5; cosine-range: gold mapped onto [M, 1] (seed 000)",
                             choices=("score", "cosine-range"))
    head_dropout: float = flag(0.3, "dropout before each head layer")
    epochs: int = flag(3, "training epochs")
    batch_size: int = flag(32, "examples per task batch")
    lr: float = flag(2e-5, "peak learning rate of the encoder")
    layer_lr_decay: float = flag(1.0, "layer-wise LR decay: each encoder layer below the top one, and the "
                                      "embeddings below them, get this factor times the LR above (1 = off)")
    head_lr: float = flag(1e-3, "peak learning rate of the heads (new, randomly initialised layers)")
    weight_decay: float = flag(0.01, "AdamW decoupled weight decay (not on biases and LayerNorm)")
    warmup: float = flag(0.1, "fraction of steps of linear warm-up")
    max_grad_norm: float = flag(1.0, "gradient clipping norm (0 = off)")
    max_length: int = flag(128, "tokens per input; longer ones are truncated (and counted)")
    max_train_examples: int = flag(0, "use a random sample of at most this many training examples per task (0 = all)")
    max_eval_examples: int = flag(0, "use a random sample of at most this many dev/test examples per task (0 = all)")
    eval_every: int = flag(0, "also evaluate (and save) every N steps (0 = after each epoch only)")
    eval_batch_size: int = flag(128, "batch size for evaluation")
    seed: int = flag(11711, "random seed; the same seed gives the same run")
    data_dir: str = flag(str(DEFAULT_DATA), "folder with the course's data files")
    output_dir: str = flag("runs/multitask", "checkpoints (best/, last/) and metrics.jsonl go here")
    predictions_dir: str = flag("predictions", "leaderboard CSVs of the best checkpoint go here")
    resume: bool = flag(False, "continue the interrupted run in --output-dir")
    device: str = flag("auto", "cpu, cuda, cuda:1, ... (auto: cuda when present)")
    precision: str = flag("auto", "auto: bf16 (or fp16) autocast on GPUs, fp32 on CPU", choices=PRECISIONS)

    def __post_init__(self):
        self.task_list = parse_task_order(self.tasks)
        self.order = parse_task_order(self.task_order) if self.task_order else self.task_list
        if set(self.order) != set(self.task_list):
            raise ValueError(f"--task-order {self.task_order!r} must name each task of --tasks {self.tasks!r}, "
                             f"and only those")
        self.weights = parse_task_weights(self.task_weights) if self.task_weights else None
        self.loss_scale = parse_task_weights(self.loss_weights, option="--loss-weights") if self.loss_weights else {}
        if not 0 < self.layer_lr_decay <= 1:
            raise ValueError(f"--layer-lr-decay must be in (0, 1], got {self.layer_lr_decay}")
        self.encodings = parse_pair_encoding(self.pair_encoding)
        if self.sts_target == "cosine-range" and self.encodings["sts"] != "bi":
            raise ValueError("--sts-target cosine-range is a cosine of two sentence embeddings: it needs sts=bi "
                             "in --pair-encoding")
        for name in ("epochs", "batch_size", "max_length", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    # What --resume may change without changing the run.
    RUNTIME_FIELDS = ("resume", "device", "predictions_dir", "eval_batch_size")
    # What the heads' tensors mean: --init with heads needs the same values.
    HEAD_FIELDS = ("pooling", "pair_encoding", "share", "pair_mlp", "common_layer", "cross_head", "sts_target")


def as_flag(name: str, value) -> str:
    """The command-line spelling of a config value: --share none, --common-layer, --no-common-layer."""
    flag_name = name.replace("_", "-")
    return f"--{flag_name}" if value is True else f"--no-{flag_name}" if value is False else f"--{flag_name} {value}"


def parse_pair_encoding(text: str) -> dict[str, str]:
    """'cross' -> {'para': 'cross', 'sts': 'cross'}; 'para=cross,sts=bi' -> per task (tasks left out: bi)."""
    if text in PAIR_ENCODINGS:
        return {"para": text, "sts": text}
    encodings = {"para": "bi", "sts": "bi"}
    for item in text.split(","):
        task, _, encoding = (part.strip() for part in item.partition("="))
        if task not in encodings or encoding not in PAIR_ENCODINGS:
            raise ValueError(f"--pair-encoding {text!r}: expected bi, cross, or task=bi|cross for para and sts")
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
            seed = int(np.random.SeedSequence(self.seed_words + [self.pass_index]).generate_state(1)[0])
            self.batches = length_grouped_batches(self.lengths, self.batch_size, torch.Generator().manual_seed(seed))
        return self.batches[k % per_pass]


def task_loss(model: MultitaskModel, task: str, batch: dict) -> torch.Tensor:
    outputs = model(task, batch["inputs"])
    labels = batch["labels"]
    if task == "sst":
        return F.cross_entropy(outputs.float(), labels)
    if task == "para":
        return F.binary_cross_entropy_with_logits(outputs.float(), labels)
    return F.mse_loss(outputs.float(), labels)


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


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class MultitaskTrainer:
    def __init__(self, config: MultitaskConfig):
        from cli import resolve_device

        self.config = config
        self.device = resolve_device(config.device)
        self.precision = Precision(config.precision, self.device)
        self.output_dir = Path(config.output_dir)
        seed_everything(config.seed)
        resume_from = self.output_dir / "last"
        if config.resume:
            self._check_resumable(resume_from)
        start = resume_from if config.resume else Path(config.init) if config.init else config.model
        self.tokenizer = Tokenizer.from_pretrained(start)
        self.model = MultitaskModel(from_pretrained(start), config.pooling, config.encodings["para"],
                                    config.encodings["sts"], config.share, config.common_layer, config.head_dropout,
                                    config.cross_head, config.pair_mlp)
        heads_loaded = bool(config.resume or config.init) and (Path(start) / "heads.safetensors").exists()
        if heads_loaded:
            if config.init:  # a resumed run's flags, head flags among them, are checked by _check_resumable
                self._check_head_flags(Path(start))
            load_heads(self.model, start)
        if config.option == "pretrain":
            self.model.encoder.requires_grad_(False)
        self.model.to(self.device)
        self.splits = self._load_data()
        if config.sts_target == "cosine-range" and "sts" in self.splits and not heads_loaded:  # else M came with them
            self._set_cosine_floor()
        self.optimizer = AdamW(self._parameter_groups(), lr=config.lr, weight_decay=config.weight_decay)
        self.batch_counts = count_batches({t: len(self.splits[t]["train"]) for t in config.task_list},
                                          config.batch_size)
        self.total_steps = sum(len(self.plan(epoch)) for epoch in range(config.epochs))
        warmup_steps = int(config.warmup * self.total_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: min(
            (step + 1) / max(1, warmup_steps), max(0.0, (self.total_steps - step) / max(1, self.total_steps - warmup_steps))))
        self.epoch, self.step_in_epoch, self.global_step, self.best = 0, 0, 0, -math.inf
        if config.resume:
            self._restore(load_training_state(resume_from))

    # ---- setup ----

    def _check_resumable(self, last: Path):
        if not (last / "training_state.pt").exists():
            raise CheckpointError(f"--resume: no interrupted run in {self.output_dir} (no last/training_state.pt)")
        # A flag added since the run started is absent from its run_config.json: it ran with the default.
        saved = {f.name: f.default for f in dataclasses.fields(MultitaskConfig)} | read_json(last / "run_config.json")
        changed = [k for k, v in self.config.to_dict().items()
                   if k not in MultitaskConfig.RUNTIME_FIELDS and saved[k] != v]
        if changed:
            raise CheckpointError(f"--resume: flags differ from the interrupted run's ({', '.join(changed)}); "
                                  f"resume with the same flags, or start a new --output-dir")

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
        for task in config.task_list:
            train, dev, test = (data / name for name in FILES[task])
            common = dict(tokenizer=self.tokenizer, max_length=config.max_length,
                          pair_encoding=config.encodings.get(task, "bi"))
            splits[task] = {
                "train": load_split(task, train, max_examples=config.max_train_examples, **common),
                "dev": load_split(task, dev, max_examples=config.max_eval_examples, **common),
                "test": load_split(task, test, labeled=False, max_examples=config.max_eval_examples, **common),
            }
        return splits

    def _set_cosine_floor(self):
        """Seed 000 section 5.2: M = the model's mean cosine over training pairs in the lowest label bucket."""
        train = self.splits["sts"]["train"]
        low = [i for i, gold in enumerate(train.labels.tolist()) if gold <= 0.25]
        if not low:
            raise DataError(f"--sts-target cosine-range needs STS training pairs scored <= 0.25 and the "
                            f"{len(train)} used have none (a larger --max-train-examples, or --sts-target score)")
        head = self.model.similarity
        with torch.no_grad():
            self.model.eval()
            inputs = {k: v.to(self.device) for k, v in train.batch(low, self.tokenizer.pad_id)["inputs"].items()}
            cosines = head.cosine(*self.model.embed(inputs).chunk(2)).cpu()
            self.model.train()
        head.set_cosine_floor(lowest_bucket_mean_cosine(cosines, train.labels[low]))
        log.info("cosine-range STS target: M = %.4f (mean cosine of %d pairs scored <= 0.25)",
                 head.cosine_floor.item(), len(low))

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

    def plan(self, epoch: int):
        generator = torch.Generator().manual_seed(self.config.seed * 1000 + epoch)
        return plan_epoch(self.config.schedule, self.batch_counts, epoch=epoch, num_epochs=self.config.epochs,
                          task_order=self.config.order, task_weights=self.config.weights, generator=generator)

    # ---- checkpoints ----

    def _training_state(self, rng: dict) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "scaler": self.precision.state_dict(), "epoch": self.epoch, "step_in_epoch": self.step_in_epoch,
                "global_step": self.global_step, "best": self.best, "rng": rng}

    def _restore(self, state: dict):
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.precision.load_state_dict(state["scaler"])
        self.epoch, self.step_in_epoch = state["epoch"], state["step_in_epoch"]
        self.global_step, self.best = state["global_step"], state["best"]
        set_rng_state(state["rng"])
        log.info("resuming at epoch %d, step %d of %d", self.epoch + 1, self.global_step, self.total_steps)

    def save(self, name: str, metrics: dict, rng: dict | None = None) -> Path:
        return save_checkpoint(self.output_dir / name, self.model.encoder, self.tokenizer, self.config.to_dict(),
                               metrics, extra_modules=self.model,
                               training_state=None if rng is None else self._training_state(rng))

    # ---- evaluation ----

    def predict_all(self, split_name: str) -> dict[str, torch.Tensor]:
        """Soft outputs of every task on its dev or test split."""
        return {task: predict(self.model, splits[split_name], self.tokenizer.pad_id, self.config.eval_batch_size,
                              self.precision.autocast)
                for task, splits in self.splits.items()}

    def write_outputs(self, split_name: str, outputs: dict[str, torch.Tensor]) -> None:
        """The leaderboard CSVs, and the soft outputs beside the best checkpoint (for ensemble.py)."""
        for task, task_outputs in outputs.items():
            split = self.splits[task][split_name]
            write_predictions(self.config.predictions_dir, task, split_name, split.ids,
                              hard_predictions(task, task_outputs))
            with atomic_file(self.output_dir / "best" / f"outputs-{task}-{split_name}.pt") as temp:
                torch.save({"ids": split.ids, "outputs": task_outputs}, temp)

    def _score(self, metrics: dict) -> float:
        if "overall" in metrics:
            return metrics["overall"]
        return sum((m + 1) / 2 if t == "sts" else m for t, m in metrics.items() if t in TASKS) / len(self.splits)

    def _evaluate_and_save(self, losses: dict, started: float, rng: dict):
        outputs = self.predict_all("dev")
        metrics = summary({task: task_metric(task, outputs[task], self.splits[task]["dev"].labels)
                           for task in outputs})
        # Mid-epoch (--eval-every) the epoch under way; at an epoch's end (epoch already counted) that epoch.
        epoch = self.epoch + 1 if self.step_in_epoch else self.epoch
        record = {"epoch": epoch, "step": self.global_step, "train_loss": losses,
                  "dev": metrics, "seconds": round(time.time() - started, 1)}
        with open(self.output_dir / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        log.info("step %d dev: %s", self.global_step, "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
        if self._score(metrics) > self.best:
            self.best = self._score(metrics)
            self.save("best", record)
            self.write_outputs("dev", outputs)
        self.save("last", record, rng=rng)

    # ---- training ----

    def train(self) -> dict:
        config = self.config
        self.output_dir.mkdir(parents=True, exist_ok=True)
        write_json(self.output_dir / "run_config.json", config.to_dict())
        self.model.train()
        started = time.time()
        progress = tqdm(total=self.total_steps, initial=self.global_step, desc="multitask", dynamic_ncols=True)
        while self.epoch < config.epochs:
            plan = self.plan(self.epoch)
            streams = {t: TaskStream(self.splits[t]["train"], config.batch_size, config.seed, self.epoch, i)
                       for i, t in enumerate(config.task_list)}
            consumed = defaultdict(int)  # batches of each task taken so far this epoch (replayed on resume)
            for step in plan[:self.step_in_epoch]:
                for task in step:
                    consumed[task] += 1
            losses = defaultdict(list)
            for step in plan[self.step_in_epoch:]:
                self._train_step(step, streams, consumed, losses)
                self.step_in_epoch += 1
                self.global_step += 1
                progress.update()
                progress.set_postfix({t: f"{np.mean(v[-50:]):.3f}" for t, v in losses.items()})
                if config.eval_every and self.global_step % config.eval_every == 0 and self.step_in_epoch < len(plan):
                    self._evaluate_and_save(self._mean_losses(losses), started, rng_state())
            self.epoch += 1
            self.step_in_epoch = 0
            self._evaluate_and_save(self._mean_losses(losses), started, rng_state())
        progress.close()
        return self.finish()

    @staticmethod
    def _mean_losses(losses):
        return {t: float(np.mean(v)) for t, v in losses.items() if v}

    def _train_step(self, step, streams, consumed, losses):
        task_losses = {}
        for task in step:
            rows = streams[task].batch_indices(consumed[task])
            consumed[task] += 1
            batch = self.splits[task]["train"].batch(rows, self.tokenizer.pad_id)
            batch["inputs"] = {k: v.to(self.device) for k, v in batch["inputs"].items()}
            batch["labels"] = batch["labels"].to(self.device)
            with self.precision.autocast():
                loss = task_loss(self.model, task, batch)
            task_losses[task] = loss
            losses[task].append(loss.item())
        weighted = weighted_losses(task_losses, self.config.loss_scale)
        if self.config.schedule == "pcgrad" and len(step) > 1:
            heads = self.model.head_parameters()
            surgery_backward([self.precision.scale(l) for l in weighted], self.model.shared_parameters(),
                             [heads[t] for t in step], self.config.surgery)
        else:
            self.precision.scale(sum(weighted) / len(weighted)).backward()
        self.precision.step(self.optimizer, self.model.parameters(), self.config.max_grad_norm)
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)

    def finish(self) -> dict:
        """Reload the best checkpoint, write its test predictions (dev ones are written when it is saved)."""
        best = self.output_dir / "best"
        self.model.encoder = from_pretrained(best)
        load_heads(self.model, best)
        self.model.to(self.device)
        self.write_outputs("test", self.predict_all("test"))
        metrics = read_json(best / "metrics.json")["dev"]
        log.info("best dev: %s; predictions in %s/", "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()),
                 self.config.predictions_dir)
        return metrics
