"""The one training loop that multi-task fine-tuning and contrastive pretraining share: Engine.fit(run).

A run says what it trains and what a step is; the engine says when things happen. A run (class Run) gives
    parameters()            what it trains, in its modules' order (and parameter_groups() for AdamW, if it has
                            several learning rates)
    plan()                  its epochs, each a list of items: one optimizer step an item
    step(item, share)       the forward passes of one share of the item's batch, and engine.backward(loss)
and may give evaluate() and score() (dev metrics, and the number that picks best/), save() (its files of a
checkpoint folder), after_update() (what follows each optimizer step), state_dict() / load_state_dict() (what
else --resume needs) and finish() (the end of the run, and its result). The engine owns the rest:

    device and precision      --device, --precision (bf16/fp16 autocast on GPUs, fp32 on CPU)
    seeding                   --seed; each process's random state is saved with every checkpoint
    schedule                  linear warm-up over --warmup of the steps, then linear decay to 0 (or the run's own)
    accumulation              each step's batch is shared out between the processes and --grad-accum parts
                              (Share); every process averages its gradients with the others', clips, steps AdamW
    evaluation                a run with evaluate(): at the end of each epoch and every --eval-every steps; a
                              better score saves OUTPUT_DIR/best/
    checkpoints and resume    OUTPUT_DIR/last/ (atomic) after each evaluation and every --save-every steps;
                              --resume continues from it with the same flags, to the same final weights
    metrics                   OUTPUT_DIR/metrics.jsonl: a "train" line every --log-every steps (each loss's
                              mean, the learning rate, examples a second), an "eval" line per evaluation (with
                              the wall seconds spent training so far and on this evaluation), a "finish" line
                              (a scored run: the seconds of run.finish(), the test predictions); the same scalars in
                              TensorBoard with --tensorboard DIR
    progress                  a start line (steps, epochs, device, precision, the run's data); a progress bar on
                              a terminal, else a line every 30 s (common/progress.py) and one every --log-every
    several processes         torchrun --nproc_per_node N ...: rank 0 evaluates and writes, every rank trains
"""
import dataclasses
import itertools
import logging
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from common import distributed
from common.cli import AT_LEAST_0, AT_LEAST_1, FRACTION, POSITIVE, SEED, Range, check_ranges, flag, resolve_device
from common.errors import CheckpointError, UsageError, UserError
from common.files import check_writable, load_or_fail
from common.progress import Progress, on_terminal
from common.provenance import check_data_unchanged, provenance
from common.run_folder import LAST, METRICS, STATE, RunFolder
from common.seeding import rng_state, seed_everything, set_rng_state
from data.batching import Share
from models import AdamW
from models.bert import ATTENTION, resolve_attention
from models.checkpoint import tensor_bytes
from models.compile import check_can_compile, compile_encoder
from tasks import BEST_METRICS, TASK_METRICS_HELP
from training.precision import PRECISIONS, Precision

log = logging.getLogger(__name__)
# A pair cross-encoded as [CLS] s1 [SEP] s2 [SEP] needs room for its three special tokens and some of each sentence.
MIN_LENGTH = Range(8)


@dataclass
class TrainingConfig:
    """The flags every trainer has. A command's config extends it (and may change a default)."""
    model: str = flag("bert-base-uncased", "starting weights: hub id, checkpoint folder, or all-MiniLM-L6-v2")
    epochs: int = flag(3, "training epochs", range=AT_LEAST_1)
    batch_size: int = flag(32, "examples per batch (per task, per process)", range=AT_LEAST_1)
    grad_accum: int = flag(1, "gradient accumulation: add up the gradients of this many batches before each "
                              "optimizer step (the same step as a batch this many times larger)", range=AT_LEAST_1)
    lr: float = flag(2e-5, "peak learning rate of the encoder", range=POSITIVE)
    weight_decay: float = flag(0.01, "AdamW decoupled weight decay (not on biases and LayerNorm)", range=AT_LEAST_0)
    warmup: float = flag(0.1, "fraction of steps of linear warm-up, before linear decay to 0", range=FRACTION)
    max_grad_norm: float = flag(1.0, "gradient clipping norm (0 = off)", range=AT_LEAST_0)
    max_length: int = flag(128, "tokens per input; longer ones are truncated (and counted)", range=MIN_LENGTH)
    seed: int = flag(11711, "random seed; the same seed gives the same run", range=SEED)
    output_dir: str = flag("runs/multitask", f"checkpoints and {METRICS} go here")
    resume: bool = flag(False, "continue the interrupted run in --output-dir from its last checkpoint")
    overwrite: bool = flag(False, "start a new run in an --output-dir that holds one, replacing the files this "
                                  "command writes there (nothing else in it is touched)")
    allow_changed_data: bool = flag(False, "--resume although a data file changed since the run started")
    save_every: int = flag(0, "also save the resumable checkpoint OUTPUT_DIR/last/ every N steps (0 = only when "
                              "the command saves anyway)", range=AT_LEAST_0)
    log_every: int = flag(50, f"write each task's mean training loss and the learning rate to {METRICS} "
                              "every N steps", range=AT_LEAST_0)
    max_steps: int = flag(0, "stop after this many optimizer steps (a contrastive run: each stage); the learning-rate "
                             "schedule spans them (0 = run all epochs)", range=AT_LEAST_0)
    tensorboard: str = flag("", "also write losses, learning rates, throughput, dev metrics and the run's flags "
                                "(hparams) to this TensorBoard folder")
    quiet: bool = flag(False, "print only warnings, errors and the summary at the end (no progress, no log lines)")
    device: str = flag("auto", "cpu, cuda, cuda:1, ... (auto: cuda when present; under torchrun each process "
                               "takes its own GPU)")
    precision: str = flag("auto", "auto: bf16 (or fp16) autocast on GPUs, fp32 on CPU; tf32: fp32 with TF32 matrix "
                                  "products on a GPU", choices=PRECISIONS)
    attention: str = flag("auto", "how the encoder runs a padded batch: padded, every sentence padded to the "
                                  "batch's longest, with an additive mask; packed, only the real tokens through "
                                  "every layer but attention, which runs padded; unpadded, only the real tokens, "
                                  "attention too (nested jagged tensors); auto: packed on a CPU, padded on a GPU "
                                  "(a batch without padding passes no mask either way)",
                          choices=ATTENTION)
    compile: bool = flag(False, "torch.compile the encoder's layers (dynamic shapes: compiled once, at the first "
                                "step)")
    dist_timeout: float = flag(1800.0, "torchrun: seconds a process waits for the others at a collective before "
                                       "the run fails. They wait while rank 0 evaluates and saves: for bert-base, "
                                       "seconds on a GPU; on one CPU thread about 8 minutes (the dev sets), 10 (the "
                                       "test predictions), 15 (--eval's STS benchmark)", range=POSITIVE)

    # What --resume may change without changing the run; --output-dir among them: a run folder moved or copied
    # resumes where it now is.
    RUNTIME_FIELDS = ("resume", "overwrite", "allow_changed_data", "device", "save_every", "log_every", "tensorboard",
                      "quiet", "dist_timeout", "output_dir")
    # What a run writes in --output-dir (a command adds its own): --overwrite removes these, and nothing else.
    OUTPUTS = (LAST, METRICS)
    # Flags that name what the run reads: --resume compares where they point, not how they are spelled, and
    # --overwrite refuses to remove them.
    SOURCES = ("model",)

    def __post_init__(self):
        check_ranges(self)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class EvaluationConfig:
    """The flags of a command whose runs are scored on dev data as they train (Run.evaluate)."""
    eval_every: int = flag(0, "also evaluate (and save) every N steps (0 = after each epoch only)", range=AT_LEAST_0)
    metric_for_best: str = flag("overall", "the dev metric that picks best/: overall, the mean of the trained tasks' "
                                           "scores on [0, 1] (with sst, para and sts the course's overall score); "
                                           f"mean, the plain mean of sst, para and sts; or one task's metric: {TASK_METRICS_HELP}",
                                choices=BEST_METRICS)
    patience: int = flag(0, "stop after this many evaluations in a row without a better --metric-for-best "
                            "(0 = never stop early)", range=AT_LEAST_0)


def linear_warmup_decay(step: int, total_steps: int, warmup: float) -> float:
    """Learning-rate multiplier: linear warm-up over the first `warmup` fraction of steps, then linear decay to 0."""
    warmup_steps = int(warmup * total_steps)
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


class LossTracker:
    """Each named loss summed on the device (no wait for the GPU in the step) over two windows: since the
    last log line, and since the trainer last took its period's means (an epoch)."""

    def __init__(self):
        self.window, self.period = {}, {}  # name -> [sum, count]

    def add(self, losses: dict[str, torch.Tensor]) -> None:
        """losses: this process's parts of the step's losses (under torchrun they sum to them over the processes)."""
        for name, loss in losses.items():
            for store in (self.window, self.period):
                total = store.setdefault(name, [0.0, 0])
                total[0] = total[0] + loss.detach().double()
                total[1] += 1

    @staticmethod
    def _means(store: dict, reset: bool) -> dict[str, float]:
        # torchrun: the whole steps' losses, every process's part summed (a collective: every process calls this).
        sums = distributed.sum_over_processes([total for total, _ in store.values()])
        means = {name: total / count for (name, (_, count)), total in zip(store.items(), sums)}
        if reset:
            store.clear()
        return means

    def window_means(self, reset: bool = True) -> dict[str, float]:
        return self._means(self.window, reset)

    def period_means(self, reset: bool = True) -> dict[str, float]:
        return self._means(self.period, reset)

    def state_dict(self) -> dict:
        """Both windows' sums over the whole steps (a collective: every process calls this): a resumed run's next
        log line and epoch means are those of the run uninterrupted."""
        state = {}
        for key, store in (("window", self.window), ("period", self.period)):
            sums = distributed.sum_over_processes([total for total, _ in store.values()])
            state[key] = {name: [total, count] for (name, (_, count)), total in zip(store.items(), sums)}
        return state

    def load_state_dict(self, state: dict) -> None:
        # torchrun: rank 0 holds the saved sums, the others start from 0, so that the sums over processes are them.
        # A state saved before the log window was saved has none: the window starts empty.
        self.window, self.period = ({name: [total if distributed.is_main() else 0.0, count]
                                     for name, (total, count) in state.get(key, {}).items()}
                                    for key in ("window", "period"))


class Run:
    """What a run tells the engine (see the module's docstring). parameters, plan and step are required."""
    name = "train"  # what the progress bar calls it
    lr: float  # the peak learning rate (parameter groups may scale it)
    head_lr: float | None = None  # the heads' peak learning rate, where they have their own (logged beside lr)
    adam_betas = (0.9, 0.999)
    # dev metrics of the model as it is (rank 0 only); None: the run is not scored while it trains
    evaluate: Callable[[], dict[str, float]] | None = None

    def parameters(self) -> list[torch.nn.Parameter]:
        """Everything trained, in the modules' order (the order clipping sums their norms in)."""
        raise NotImplementedError

    def parameter_groups(self) -> list[dict]:
        """AdamW's parameter groups."""
        return [{"params": self.parameters()}]

    def plan(self) -> list[list]:
        """The run's epochs, each a list of items, one an optimizer step."""
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


class Engine:
    """Used as a context: a command's work inside `with Engine(config) as engine:` owns --output-dir until it ends
    (rank 0 locks it), and a command that ends normally records that its run finished."""

    def __init__(self, config: TrainingConfig):
        """Set-up, before any model or data: the device, --output-dir claimed (half-written saves recovered),
        folders checked, seeds, and with --resume the interrupted run's training state."""
        self.config = config
        if config.quiet:  # before joining torchrun's group, which quiets its other processes further
            logging.getLogger().setLevel(logging.WARNING)
        self.device = distributed.setup(resolve_device(config.device), config.dist_timeout)
        self.precision = Precision(config.precision, self.device)
        self.folder = RunFolder(config.output_dir)
        self.is_main = distributed.is_main()
        resolve_attention(config.attention, self.device)  # FlagError: unpadded attention this device lacks
        if config.compile:
            check_can_compile(self.device)
        seed_everything(config.seed)
        self.step, self.stopped_early, self.saved_provenance = 0, False, {}
        distributed.on_main(self._claim)  # torchrun: rank 0's machine alone has the folder
        try:
            self.tensorboard = None
            if config.tensorboard and self.is_main:
                from torch.utils.tensorboard import SummaryWriter  # imported here: only runs that ask pay for it

                self.tensorboard = SummaryWriter(config.tensorboard)  # the flags go in with describe_run's values
            self.started = time.time()
            self.run_config = config.to_dict()
            # --resume: the folder the run continues from (its weights), and the state its next fit restores.
            # torchrun: rank 0 alone reads last/; the others get its training state by broadcast, and its weights
            # from the run (distributed.start_replicas). A run whose command ended has nothing left to do (the
            # command returns at once), once its flags and data are checked where it kept last/.
            self.resume_from = self.resume_state = self.finished = None
            if config.resume:
                self.finished = distributed.on_main(self.folder.finished)
                if not self.finished or distributed.on_main(self.folder.state_file.exists):
                    self.resume_from = distributed.on_main(self._check_resumable)
                if not self.finished:
                    self.resume_state = distributed.on_main(lambda: load_training_state(self.folder))
                else:
                    self.resume_from = None
                    stopped = " (stopped early by --patience)" if self.finished["stopped_early"] else ""
                    if self.is_main:
                        print(f"--resume: the run in {self.folder} finished at step {self.finished['step']}{stopped}; "
                              f"nothing to resume")
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, kind, error, trace) -> None:
        """The command's end: its run finished, unless it failed; the folder released (rank 0)."""
        if not self.is_main:
            return
        if kind is None and not self.finished:
            self.folder.mark_finished(self.run_config, self.step, self.stopped_early)
        self.folder.release()

    def _claim(self) -> None:
        """--output-dir claimed (locked; a run in it refused, or replaced with --overwrite unless that would remove
        what the run reads), saves that died half-way recovered; --tensorboard writable. Rank 0 only (torchrun)."""
        config = self.config
        self.folder.claim(config.OUTPUTS, config.resume, config.overwrite,
                          {f"--{name.replace('_', '-')}": getattr(config, name) for name in config.SOURCES})
        try:
            for name in ("tensorboard", "predictions_dir"):  # written files inside best/ or last/ would go at a save
                self.folder.check_outside_checkpoints(getattr(config, name, ""), f"--{name.replace('_', '-')}")
            if config.tensorboard:
                check_writable(config.tensorboard, "--tensorboard")
        except BaseException:
            self.folder.release()
            raise

    def describe_run(self, data_files: list[Path], **resolved) -> None:
        """OUTPUT_DIR's run config: every flag, the values chosen for flags left to a default (resolved), and what
        reproduces the run: the command, the git commit, library versions, a hash of each data file; a resumed run
        keeps what its start recorded and adds each --resume's."""
        record = provenance(getattr(self.config, "command", ""), data_files)
        if self.saved_provenance:
            record = {**self.saved_provenance, "resumed": [*self.saved_provenance.get("resumed", []), record]}
        self.run_config = {**self.config.to_dict(), "resolved": resolved, "provenance": record}
        if self.is_main:
            self.folder.write_config(self.run_config)
        if self.tensorboard is not None:  # a flag left to a default chosen later shows that value, not None
            write_hparams(self.tensorboard, self.config.to_dict() | {
                name: next(iter(value.values())) if isinstance(value, dict) and len(value) == 1 else value
                for name, value in resolved.items()})

    def _check_resumable(self) -> Path:
        """The interrupted run's last/ folder, after checking that the flags that shape the run are unchanged."""
        if not self.folder.state_file.exists():
            raise CheckpointError(f"--resume: no interrupted run in {self.folder} (no "
                                  f"{self.folder.state_file.relative_to(self.folder.path)})")
        # A flag added since the run started is absent from its run config: it ran with the default.
        defaults = {f.name: f.default for f in dataclasses.fields(self.config)}
        saved = defaults | self.folder.saved_config()
        check_data_unchanged(saved.get("provenance", {}), self.config.allow_changed_data)
        self.saved_provenance = saved.get("provenance", {})

        def same(name, value):  # runs/x, ./runs/x and /home/me/runs/x are one folder
            if name in self.config.SOURCES and value and saved.get(name):
                return Path(saved[name]).expanduser().resolve() == Path(value).expanduser().resolve()
            return saved.get(name) == value

        changed = [k for k, v in self.config.to_dict().items()
                   if k not in self.config.RUNTIME_FIELDS and not same(k, v)]
        if changed:
            raise CheckpointError(f"--resume: flags differ from the interrupted run's ({', '.join(changed)}); "
                                  f"resume with the same flags, or start a new --output-dir")
        return self.folder.last

    def check_max_length(self, encoder) -> None:
        positions = encoder.config.max_position_embeddings
        if self.config.max_length > positions:
            raise UsageError(f"--max-length {self.config.max_length}: this model has {positions} positions; use "
                             f"--max-length {positions} or less")

    def prepare_encoder(self, encoder) -> None:
        """--attention and --compile on an encoder already on the device (compiled in place: names unchanged)."""
        encoder.attention = self.config.attention
        if self.config.compile:
            compile_encoder(encoder)

    # ---- the loop ----

    def fit(self, run: Run):
        """Train `run` from the first step (or where --resume left it) to the end of its plan; returns run.finish()."""
        config = self.config
        epochs = run.plan()
        steps = [(epoch, item) for epoch, items in enumerate(epochs) for item in items]
        if config.max_steps:  # the schedule spans the steps kept; the last one ends the run as an epoch would
            steps = steps[:config.max_steps]
        epoch_ends = {min(end, len(steps)) for end in itertools.accumulate(len(items) for items in epochs)}
        self._prepare(run, len(steps))
        if self.resume_state:  # once: a later fit (the next stage of a run) starts afresh
            self._restore(self.resume_state, run)
            self.resume_state = None
        if self.is_main:
            log.info("%s: %d steps in %d epoch(s) on %s, %s; %s", run.name, len(steps), len(epoch_ends), self.device,
                     self.precision.name, run.describe())
        # Off a terminal, a line every 30 s whatever --log-every is; torchrun: rank 0 alone (the others log no INFO).
        progress = Progress(len(steps), run.name, unit="step", initial=self.step, leave=True)
        examples, window_started = 0, time.time()
        # Wall seconds of this process's training steps: evaluations and checkpoint saves left out.
        train_seconds, since = 0.0, self._clock()
        for epoch, item in steps[self.step:]:
            losses, step_examples = self._train_step(run, item)
            self.losses.add(losses)
            examples += step_examples
            progress.update()
            if config.log_every and self.step % config.log_every == 0:
                examples = distributed.sum_over_processes([examples])[0]  # torchrun: every process's rows
                line = self.log_train(examples / (time.time() - window_started))
                progress.set_postfix({name: f"{value:.3f}" for name, value in line["loss"].items()})
                examples, window_started = 0, time.time()
            run.after_update()
            epoch_end = self.step in epoch_ends
            evaluate = run.evaluate is not None and (
                epoch_end or (config.eval_every and self.step % config.eval_every == 0))
            if evaluate or (config.save_every and self.step % config.save_every == 0):
                train_seconds += self._clock() - since
                if evaluate:
                    self._evaluate(run, epoch + 1, epoch_end, train_seconds)
                self.save_last(run)
                since = self._clock()
            if evaluate and self._out_of_patience():
                self.stopped_early = True
                break
        progress.close()
        started = time.time()
        result = run.finish()
        if run.evaluate is not None:  # a scored run's finish predicts the test sets: their time apart
            self.write_record({"event": "finish", "step": self.step,
                               "finish_seconds": round(time.time() - started, 2),
                               "seconds": round(time.time() - self.started, 1)})
        return result

    def _clock(self) -> float:
        """time.time() once the device has done the work queued so far (a GPU runs behind the host)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.time()

    def _prepare(self, run: Run, total_steps: int) -> None:
        """A fresh optimizer and learning-rate schedule for `total_steps` steps."""
        self.parameters, self.total_steps, self.peak_lr = run.parameters(), total_steps, run.lr
        self.head_lr = run.head_lr
        self.lr_multiplier = lambda step: run.lr_multiplier(step, total_steps, self.config.warmup)
        self.optimizer = AdamW(run.parameter_groups(), lr=run.lr, betas=run.adam_betas,
                               weight_decay=self.config.weight_decay)
        self.gradients = distributed.GradientSync(self.parameters)
        self.last_part = True  # whether the backward passes now are the step's last accumulation part's
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self.lr_multiplier)
        self.step, self.losses = 0, LossTracker()
        self.best, self.last_record = -math.inf, {}
        self.best_step, self.since_best = 0, 0  # the evaluation that made best/, evaluations since then

    def _train_step(self, run: Run, item) -> tuple[dict[str, torch.Tensor], int]:
        """The item's batch in --grad-accum parts on this process, then one update."""
        world, accum = distributed.world_size(), self.config.grad_accum
        totals, examples = {}, 0
        for part in range(accum):
            self.last_part = part == accum - 1
            losses, part_examples = run.step(item, Share(distributed.rank() * accum + part, world * accum, world))
            for name, loss in losses.items():
                totals[name] = totals.get(name, 0.0) + loss
            examples += part_examples
        self.update()
        return totals, examples

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate a loss into .grad (scaled for fp16); a step may call this several times. Under torchrun
        the gradients of the step's last accumulation part are averaged while its pass runs (GradientSync); an
        earlier part's stay local until then."""
        self.gradients.backward(self.precision.scale(loss), overlap=self.last_part)

    def update(self, advance_schedule: bool = True) -> None:
        """Average the gradients over the processes, clip, update. advance_schedule=False: an extra update inside
        a step (contrastive fusion's sentiment update) that neither counts as a step nor moves the schedule."""
        self.gradients.average()
        self.precision.step(self.optimizer, self.parameters, self.config.max_grad_norm)
        self.optimizer.zero_grad(set_to_none=True)
        if advance_schedule:
            self.scheduler.step()
            self.step += 1

    def _evaluate(self, run: Run, epoch: int, epoch_end: bool, train_seconds: float) -> None:
        """Rank 0 scores the dev sets and saves best/ when the run's score improves. The record's training losses
        are the means over the epoch so far; train_seconds, the wall seconds of training steps so far."""
        # A collective (torchrun): every process calls it; every process starts the next epoch's means together.
        self.check_finite(self.losses.window_means(reset=False))
        self.check_finite_weights()
        train_loss = self.losses.period_means(reset=epoch_end)
        # Rank 0 alone scores; a non-finite dev metric stops every process (on_main raises it on each).
        distributed.on_main(lambda: self._score_dev(run, epoch, train_loss, train_seconds))

    def _score_dev(self, run: Run, epoch: int, train_loss: dict[str, float], train_seconds: float) -> None:
        started = time.time()
        metrics = run.evaluate()
        self.check_finite(metrics, "dev metric")
        record = {"event": "eval", "epoch": epoch, "step": self.step, "train_loss": train_loss,
                  "dev": metrics, "seconds": round(time.time() - self.started, 1),
                  "train_seconds": round(train_seconds, 2), "eval_seconds": round(time.time() - started, 2)}
        self.write_record(record)
        log.info("step %d dev: %s", self.step, "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
        self.last_record = record
        score = run.score(metrics)
        self.since_best += 1
        if score > self.best:
            self.best, self.best_step, self.since_best = score, self.step, 0
            # About the size of best/: the weights.
            with self.folder.save_checkpoint(True, self.run_config, expected=tensor_bytes(self.parameters)) as temp:
                run.save(temp, record, best=True)
            log.info("new best: %s %.4f at step %d, saved to %s", self._metric_name(), score, self.step,
                     self.folder.best)

    def _metric_name(self) -> str:
        return getattr(self.config, "metric_for_best", "score")

    def _out_of_patience(self) -> bool:
        """--patience: every process stops after that many evaluations without a better score (rank 0 knows)."""
        patience = getattr(self.config, "patience", 0)
        stop = distributed.broadcast_object(bool(patience) and self.is_main and self.since_best >= patience)
        if stop:
            log.warning("early stop at step %d: no better %s in %d evaluations (best %.4f at step %d)", self.step,
                        self._metric_name(), patience, self.best, self.best_step)
        return stop

    # ---- metrics ----

    def log_train(self, examples_per_second: float) -> dict:
        means = self.losses.window_means()
        self.check_finite(means)
        line = {"event": "train", "step": self.step, "loss": means,
                "lr": self.peak_lr * self.lr_multiplier(self.step - 1), "examples_per_s": round(examples_per_second, 1)}
        if self.head_lr is not None:
            line["head_lr"] = self.head_lr * self.lr_multiplier(self.step - 1)
        self.write_record(line)
        if not on_terminal():  # no progress bar: a log line instead
            log.info("step %d/%d  %s  lr %.3g", self.step, self.total_steps,
                     "  ".join(f"{k} {v:.4f}" for k, v in means.items()), line["lr"])
        return line

    def check_finite(self, values: dict[str, float], what: str = "loss") -> None:
        """Stop a run that diverged before anything of it is saved (best/, last/, a leaderboard file)."""
        bad = [name for name, value in values.items() if not math.isfinite(value)]
        if bad:
            self._diverged(f"the {', '.join(bad)} {what} is not finite ({values[bad[0]]})")

    def check_finite_weights(self) -> None:
        if not all(torch.isfinite(p).all() for p in self.parameters):
            self._diverged("the weights are not finite")

    def _diverged(self, what: str) -> None:
        """One line: the step, what is not finite, and the last good checkpoint."""
        saved = (f"the last good checkpoint is {self.folder.last}" if self.folder.state_file.exists()
                 else "no checkpoint was saved")
        # torchrun: the losses are every process's summed and the weights alike, so every process stops here.
        raise distributed.on_every_process(UserError(
            f"step {self.step}: {what}; the run stopped; {saved} (a lower --lr, or --precision fp32, may help)"))

    def write_record(self, record: dict) -> None:
        """A line of the metrics log, and its numbers in TensorBoard (rank 0 only)."""
        if not self.is_main:
            return
        self.folder.append_record(record)
        if self.tensorboard is not None:
            # One set of tags for every trainer: train/loss/<name>, train/epoch_loss/<name>, train/lr, train/head_lr,
            # train/examples_per_s, dev/<metric>.
            for group, prefix in (("loss", "train/loss"), ("train_loss", "train/epoch_loss"), ("dev", "dev")):
                for name, value in record.get(group, {}).items():
                    self.tensorboard.add_scalar(f"{prefix}/{name}", value, record["step"])
            for name in ("lr", "head_lr", "examples_per_s"):
                if name in record:
                    self.tensorboard.add_scalar(f"train/{name}", record[name], record["step"])
            self.tensorboard.flush()

    # ---- checkpoints ----

    def save_last(self, run: Run) -> Path:
        """OUTPUT_DIR/last/: the run's files, its run config and the training state, written atomically.
        Never of weights a non-finite loss has reached: the run stops instead, naming the last good checkpoint."""
        self.check_finite(self.losses.window_means(reset=False))
        self.check_finite_weights()
        rng = distributed.all_gather_objects(rng_state())  # every process's own random state
        losses = self.losses.state_dict()  # a collective: before rank 0 alone writes
        if self.is_main:
            # About the size of last/: the weights, and AdamW's two moments of each in the training state.
            with self.folder.save_checkpoint(False, self.run_config,
                                             expected=3 * tensor_bytes(self.parameters)) as temp:
                run.save(temp, self.last_record, best=False)
                torch.save({"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                            "scaler": self.precision.state_dict(), "step": self.step, "rng": rng,
                            "losses": losses, "best": self.best, "last_record": self.last_record,
                            "best_step": self.best_step, "since_best": self.since_best,
                            "run": run.state_dict()}, temp / STATE)
        distributed.barrier()
        return self.folder.last

    def _restore(self, state: dict, run: Run) -> None:
        """Continue from a training state of save_last (after _prepare, with the same parameters)."""
        if len(state["rng"]) != distributed.world_size():
            raise distributed.on_every_process(CheckpointError(
                f"--resume: this is {distributed.processes()}, but the run was trained by {len(state['rng'])}; "
                f"resume it with as many"))
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.precision.load_state_dict(state["scaler"])
        self.step = state["step"]
        self.losses.load_state_dict(state["losses"])
        self.best, self.last_record = state["best"], state["last_record"]
        self.best_step, self.since_best = state.get("best_step", 0), state.get("since_best", 0)
        run.load_state_dict(state["run"])
        if self.is_main:
            self.folder.keep_records_until(self.step)
        set_rng_state(state["rng"][distributed.rank()])
        log.info("resuming at step %d of %d", self.step, self.total_steps)


def load_training_state(folder: RunFolder) -> dict:
    # Tensors, numbers, strings and containers only: weights_only refuses anything executable.
    return load_or_fail(folder.state_file, lambda file: torch.load(file, map_location="cpu", weights_only=True),
                        "the training state")


def write_hparams(writer, flags: dict) -> None:
    """The run's flags in TensorBoard: as hparams (its HPARAMS tab, in this folder, not a sub-run) and as text."""
    from torch.utils.tensorboard.summary import hparams

    values = {name: value if isinstance(value, (bool, int, float, str)) else str(value)
              for name, value in flags.items()}
    for summary in hparams(values, {}):
        writer.file_writer.add_summary(summary)
    writer.add_text("flags", "\n".join(f"    --{name.replace('_', '-')} {value}" for name, value in flags.items()))
