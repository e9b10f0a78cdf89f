"""The one training loop that multi-task fine-tuning and contrastive pretraining share: Engine.fit(run).

A run (training/run.py) says what it trains and what a step is; the engine says when things happen, and owns the
rest, from the flags every trainer has (training/config.py):

    device and precision      --device, --precision (bf16/fp16 autocast on GPUs, fp32 on CPU)
    seeding                   --seed; each process's random state is saved with every checkpoint
    schedule                  linear warm-up over --warmup of the steps, then linear decay to 0 (or the run's own)
    accumulation              each step's batch is shared out between the processes and --grad-accum parts
                              (data.batching.Share); every process averages its gradients with the others', clips,
                              steps AdamW
    evaluation                a run with evaluate(): at the end of each epoch and every run.eval_every steps
    checkpoints and resume    OUTPUT_DIR/last/ (atomic) after each evaluation and every --save-every steps, with
                              the loop's state (EngineState); --resume continues from it with the run's own flags,
                              to the same final weights, and so does a torchrun attempt after a restart
                              (training/resume.py)
    several processes         torchrun --nproc_per_node N ...: rank 0 evaluates and writes, every rank trains

The rest is callbacks of the loop's events (training/callbacks.py), the project's and the user's: the progress
bar; best/ when the score improves and --patience; the metrics log OUTPUT_DIR/metrics.jsonl and TensorBoard
(training/reporting.py): a "train" line every --log-every steps (each loss's mean, training/loss_tracker.py; the
learning rate, examples a second), an "eval" line per evaluation (with the wall seconds spent training so far and
on this evaluation), a "finish" line (a scored run: the seconds of run.finish(), the test predictions).
"""
import itertools
import logging
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from common import distributed
from common.cli import resolve_device
from common.errors import CheckpointError, UsageError, UserError
from common.files import check_writable
from common.provenance import provenance
from common.run_folder import STATE, RunFolder
from common.seeding import rng_state, seed_everything, set_rng_state
from data.batching import Share
from models import AdamW
from models.bert import resolve_attention
from models.checkpoint import tensor_bytes
from models.compile import check_can_compile, compile_encoder
from training.config import TrainingConfig
from training.loss_tracker import LossTracker
from training.precision import Precision
from training.resume import check_resumable, flags_after_restart, load_training_state, with_values
from training.run import Run
from training.callbacks import BestCheckpoint, Callback, Control, EarlyStopping, EngineState, ProgressBar
from training.reporting import MetricsLog, TensorBoard

log = logging.getLogger(__name__)


class Engine:
    """Used as a context: a command's work inside `with Engine(config) as engine:` owns --output-dir until it ends
    (rank 0 locks it), and a command that ends normally records that its run finished."""

    def __init__(self, config: TrainingConfig, callbacks: Sequence[Callback] = ()):
        """Set-up, before any model or data: the device, --output-dir claimed (half-written saves recovered),
        folders checked, seeds, and with --resume the interrupted run's flags and training state (self.config:
        the flags the run trains with). callbacks: the user's (training/callbacks.py), after the project's own."""
        if config.quiet:  # before joining torchrun's group, which quiets its other processes further
            logging.getLogger().setLevel(logging.WARNING)
        self.device = distributed.setup(resolve_device(config.device), config.dist_timeout)
        self.folder = RunFolder(config.output_dir)
        self.is_main = distributed.is_main()
        self._use_flags(config)
        self.state, self.control, self.saved_provenance = EngineState(), Control(), {}
        self.user_callbacks, self.callbacks, self.reporters = list(callbacks), [], []
        if distributed.restarts() and not config.resume:  # torchrun --max-restarts
            changes = distributed.on_main(lambda: flags_after_restart(self.folder))
            if changes:
                self._use_flags(with_values(config, **changes))
        distributed.on_main(self._claim)  # torchrun: rank 0's machine alone has the folder
        try:
            self.started = time.time()
            # --resume: the folder the run continues from (its weights), the flags it was started with, and the
            # state its next fit restores. torchrun: rank 0 alone reads last/; the others get its flags and training
            # state by broadcast, and its weights from the run (distributed.start_replicas). A run whose command
            # ended has nothing left to do (the command returns at once), once its flags and data are checked where
            # it kept last/.
            self.resume_from = self.resume_state = self.finished = None
            if self.config.resume:
                self.finished = distributed.on_main(self.folder.finished)
                if not self.finished or distributed.on_main(self.folder.state_file.exists):
                    self.resume_from, saved, self.saved_provenance = distributed.on_main(
                        lambda: check_resumable(self.folder, self.config))
                    if saved:
                        self._use_flags(with_values(self.config, **saved))
                if not self.finished:
                    self.resume_state = distributed.on_main(lambda: load_training_state(self.folder))
                else:
                    self.resume_from = None
                    stopped = " (stopped early by --patience)" if self.finished["stopped_early"] else ""
                    if self.is_main:
                        print(f"--resume: the run in {self.folder} finished at step {self.finished['step']}{stopped}; "
                              f"nothing to resume")
            self.run_config = self.config.to_dict()
            if self.is_main:
                self.reporters = [MetricsLog(self.folder)] + (
                    [TensorBoard(self.config.tensorboard)] if self.config.tensorboard else [])
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise

    def _use_flags(self, config: TrainingConfig) -> None:
        """The flags the run trains with: its precision, attention and compilation checked on this device, its seed."""
        self.config = config
        self.precision = Precision(config.precision, self.device)
        resolve_attention(config.attention, self.device)  # FlagError: unpadded attention this device lacks
        if config.compile:
            check_can_compile(self.device)
        seed_everything(config.seed)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, kind, error, trace) -> None:
        """The command's end: its run finished, unless it failed; the folder released (rank 0)."""
        if not self.is_main:
            return
        for reporter in self.reporters:
            reporter.close()
        if kind is None and not self.finished:
            self.folder.mark_finished(self.run_config, self.state.step, self.state.stopped_early)
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
        record, job = provenance(getattr(self.config, "command", ""), data_files), distributed.job()
        if job:  # what a restarted attempt of the job recognises (torchrun --max-restarts)
            record["torchrun_job"] = job
        if self.saved_provenance:
            record = {**self.saved_provenance, "resumed": [*self.saved_provenance.get("resumed", []), record]}
        self.run_config = {**self.config.to_dict(), "resolved": resolved, "provenance": record}
        if self.is_main:
            self.folder.write_config(self.run_config)
        # A flag left to a default chosen later shows that value, not None.
        flags = self.config.to_dict() | {name: next(iter(value.values())) if isinstance(value, dict) and
                                         len(value) == 1 else value for name, value in resolved.items()}
        for reporter in self.reporters:
            reporter.log_config(flags)

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
        state = self.state
        if self.is_main:
            log.info("%s: %d steps in %d epoch(s) on %s, %s; %s", run.name, len(steps), len(epoch_ends), self.device,
                     self.precision.name, run.describe())
        callbacks = [ProgressBar(run.name)]
        if run.evaluate is not None:
            callbacks += [BestCheckpoint(lambda: self._save_best(run), run.score_name),
                          EarlyStopping(run.patience, run.score_name)]
        self.callbacks = callbacks + self.reporters + self.user_callbacks
        wants_losses = any(type(callback).on_step_end is not Callback.on_step_end for callback in self.user_callbacks)
        self._event("on_train_begin")
        examples, window_started = 0, time.time()
        # Wall seconds of this process's training steps: evaluations and checkpoint saves left out.
        train_seconds, since = 0.0, self._clock()
        for epoch, item in steps[state.step:]:
            losses, step_examples = self._train_step(run, item)
            self.losses.add(losses)
            state.epoch, examples = epoch + 1, examples + step_examples
            run.after_update()
            # Read from the device (a wait for the GPU) only for a callback of the user's that wants them.
            self._event("on_step_end", {name: float(loss) for name, loss in losses.items()} if wants_losses else {})
            if config.log_every and state.step % config.log_every == 0:
                examples = distributed.sum_over_processes([examples])[0]  # torchrun: every process's rows
                self._event("on_log", self._train_line(examples / (time.time() - window_started)))
                examples, window_started = 0, time.time()
            control = self._agreed_control()
            epoch_end = state.step in epoch_ends
            evaluate = run.evaluate is not None and (
                epoch_end or (run.eval_every and state.step % run.eval_every == 0) or control.should_evaluate)
            if evaluate or control.should_save or (config.save_every and state.step % config.save_every == 0):
                train_seconds += self._clock() - since
                if evaluate:
                    control = self._evaluate(run, epoch_end, train_seconds)
                self.save_last(run)
                since = self._clock()
            if control.should_stop:
                state.stopped_early = True
                break
            self.control = Control()  # acted on
        self._event("on_train_end")
        started = time.time()
        result = run.finish()
        if run.evaluate is not None:  # a scored run's finish predicts the test sets: their time apart
            self._event("on_log", {"event": "finish", "step": state.step,
                                   "finish_seconds": round(time.time() - started, 2),
                                   "seconds": round(time.time() - self.started, 1)})
        return result

    def _event(self, name: str, *values) -> None:
        """Each callback's method `name` (rank 0 only: torchrun's other processes follow rank 0's control)."""
        if self.is_main:
            for callback in self.callbacks:
                getattr(callback, name)(self.state, self.control, *values)

    def _agreed_control(self) -> Control:
        """What the callbacks asked so far in this step: rank 0's, on every process."""
        return distributed.broadcast_object(self.control)

    def _clock(self) -> float:
        """time.time() once the device has done the work queued so far (a GPU runs behind the host)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.time()

    def _prepare(self, run: Run, total_steps: int) -> None:
        """A fresh optimizer and learning-rate schedule for `total_steps` steps."""
        self.parameters, self.peak_lr, self.head_lr = run.parameters(), run.lr, run.head_lr
        self.lr_multiplier = lambda step: run.lr_multiplier(step, total_steps, self.config.warmup)
        self.optimizer = AdamW(run.parameter_groups(), lr=run.lr, betas=run.adam_betas,
                               weight_decay=self.config.weight_decay)
        self.gradients = distributed.GradientSync(self.parameters)
        self.last_part = True  # whether the backward passes now are the step's last accumulation part's
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self.lr_multiplier)
        self.state, self.control, self.losses = EngineState(total_steps=total_steps, stage=run.stage_name), Control(), \
            LossTracker()

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
            self.state.step += 1

    def _evaluate(self, run: Run, epoch_end: bool, train_seconds: float) -> Control:
        """Rank 0 scores the dev sets; the callbacks judge the score (best/, --patience). The record's training
        losses are the means over the epoch so far; train_seconds, the wall seconds of training steps so far."""
        # A collective (torchrun): every process calls it; every process starts the next epoch's means together.
        self.check_finite(self.losses.window_means(reset=False))
        self.check_finite_weights()
        train_loss = self.losses.period_means(reset=epoch_end)
        # Rank 0 alone scores; a non-finite dev metric stops every process (on_main raises it on each).
        distributed.on_main(lambda: self._score_dev(run, train_loss, train_seconds))
        return self._agreed_control()

    def _score_dev(self, run: Run, train_loss: dict[str, float], train_seconds: float) -> None:
        started, state = time.time(), self.state
        metrics = run.evaluate()
        self.check_finite(metrics, "dev metric")
        state.last_record = {"event": "eval", "epoch": state.epoch, "step": state.step, "train_loss": train_loss,
                             "dev": metrics, "seconds": round(time.time() - self.started, 1),
                             "train_seconds": round(train_seconds, 2), "eval_seconds": round(time.time() - started, 2)}
        self._event("on_log", state.last_record)
        log.info("step %d dev: %s", state.step, "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
        self._event("on_evaluate", metrics, run.score(metrics))

    # ---- metrics ----

    def _train_line(self, examples_per_second: float) -> dict:
        """The metrics log's train line: each loss's mean since the last, the learning rate (a collective)."""
        means = self.losses.window_means()
        self.check_finite(means)
        line = {"event": "train", "step": self.state.step, "loss": means,
                "lr": self.peak_lr * self.lr_multiplier(self.state.step - 1),
                "examples_per_s": round(examples_per_second, 1)}
        if self.head_lr is not None:
            line["head_lr"] = self.head_lr * self.lr_multiplier(self.state.step - 1)
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
            f"step {self.state.step}: {what}; the run stopped; {saved} (a lower --lr, or --precision fp32, may help)"))

    # ---- checkpoints ----

    def _save_best(self, run: Run) -> Path:
        """OUTPUT_DIR/best/ (rank 0): the run's files, with the evaluation that made it best (About the size of
        best/: the weights)."""
        with self.folder.save_checkpoint(True, self.run_config, expected=tensor_bytes(self.parameters)) as temp:
            run.save(temp, self.state.last_record, best=True)
        self._event("on_save", self.folder.best, True)
        return self.folder.best

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
                run.save(temp, self.state.last_record, best=False)
                torch.save({"engine": self.state.to_dict(), "optimizer": self.optimizer.state_dict(),
                            "scheduler": self.scheduler.state_dict(), "scaler": self.precision.state_dict(),
                            "rng": rng, "losses": losses, "run": run.state_dict()}, temp / STATE)
            self._event("on_save", self.folder.last, False)
        distributed.barrier()
        return self.folder.last

    def _restore(self, saved: dict, run: Run) -> None:
        """Continue from a training state of save_last (after _prepare, with the same parameters). A state saved
        before the engine's state was one object holds its fields at the top level."""
        if len(saved["rng"]) != distributed.world_size():
            raise distributed.on_every_process(CheckpointError(
                f"--resume: this is {distributed.processes()}, but the run was trained by {len(saved['rng'])}; "
                f"resume it with as many"))
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        self.precision.load_state_dict(saved["scaler"])
        self.state = EngineState.from_dict({**saved.get("engine", saved), "total_steps": self.state.total_steps,
                                            "stage": self.state.stage})
        self.losses.load_state_dict(saved["losses"])
        run.load_state_dict(saved["run"])
        if self.is_main:
            self.folder.keep_records_until(self.state.step)
        set_rng_state(saved["rng"][distributed.rank()])
        log.info("resuming at step %d of %d", self.state.step, self.state.total_steps)

