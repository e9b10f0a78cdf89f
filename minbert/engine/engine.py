"""The one training loop that multi-task fine-tuning and contrastive pretraining share: Engine.fit(run).

A run (engine/run.py) says what it trains and what a step is; the engine says when things happen, and owns the
rest, from the flags every trainer has (engine/config.py):

    device and precision      --device, --precision (bf16/fp16 autocast on GPUs, bf16 on CPUs that compute it)
    seeding                   --seed; each process's random state is saved with every checkpoint
    schedule                  linear warm-up over --warmup of the steps, then linear decay to 0 (or the run's own)
    accumulation              each step's batch is shared out between the processes and --grad-accum parts
                              (data.batching.Share); every process averages its gradients with the others', clips,
                              steps AdamW
    evaluation                a run with evaluate(): at the end of each epoch and every run.eval_every steps
    checkpoints and resume    OUTPUT_DIR/last/ (atomic) after each evaluation and every --save-every steps, with
                              the loop's state (EngineState); --resume continues from it with the run's own flags,
                              to the same final weights, and so does a torchrun attempt after a restart
                              (engine/resume.py)
    several processes         torchrun --nproc_per_node N ...: rank 0 evaluates and writes, every rank trains

The rest is callbacks of the loop's events (engine/callbacks.py), the project's and the user's: the progress
bar; best/ when the score improves and --patience; the metrics log OUTPUT_DIR/metrics.jsonl and TensorBoard
(engine/reporting.py): a "train" line every --log-every steps (each loss's mean, engine/loss_tracker.py; the
learning rate, examples a second), an "eval" line per evaluation (with the wall seconds spent training so far and
on this evaluation), a "finish" line (a scored run: the seconds of run.finish(), the test predictions).
"""
import itertools
import logging
import math
import signal
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from minbert.common import distributed
from minbert.common.allocator import give_back_free_memory
from minbert.common.errors import CheckpointError, Interrupted, UserError
from minbert.common.run_folder import STATE, run_id
from minbert.common.seeding import rng_state, set_rng_state
from minbert.data.batching import Share
from minbert.models import AdamW
from minbert.models.checkpoint import tensor_bytes
from minbert.engine.callbacks import (BestCheckpoint, Callback, Control, EarlyStopping, EngineState, ProgressBar,
                                      TimedSave)
from minbert.engine.command import Command
from minbert.engine.ddp import DataParallel
from minbert.engine.loss_tracker import LossTracker
from minbert.engine.resume import last_finite_checkpoint, resume_command
from minbert.engine.run import Run

log = logging.getLogger(__name__)


class Engine(Command):
    """The loop (a Command: used as a context, `with Engine(config) as engine:`)."""

    # ---- the loop ----

    def fit(self, run: Run):
        """Train `run` from the first step (or where --resume left it) to the end of its plan; returns run.finish()."""
        config, self.phase = self.config, "set-up"
        epochs = run.plan()
        steps = [(epoch, item) for epoch, items in enumerate(epochs) for item in items]
        if config.max_steps:  # the schedule spans the steps kept; the last one ends the run as an epoch would
            steps = steps[:config.max_steps]
        epoch_ends = {min(end, len(steps)) for end in itertools.accumulate(len(items) for items in epochs)}
        self._prepare(run, len(steps))
        if self.resumed.state:  # once: a later fit (the next stage of a run) starts afresh
            self._restore(self.resumed.state, run)
            self.resumed.state = None
        state = self.state
        if self.is_main:
            log.info("%s: %d steps in %d epoch(s) on %s, %s; %s", run.name, len(steps), len(epoch_ends), self.device,
                     self.precision.name, run.describe())
        callbacks = [ProgressBar(run.name), TimedSave(config.save_every_minutes)]
        if run.evaluate is not None:
            callbacks += [BestCheckpoint(lambda: self._save_best(run), run.score_name),
                          EarlyStopping(run.patience, run.score_name)]
        self.callbacks = callbacks + self.reporters + self.user_callbacks
        self.wants_losses = any(type(callback).on_step_end is not Callback.on_step_end
                                for callback in self.user_callbacks)
        self._event("on_train_begin")
        with self.interruption.deferred():  # a signal: the step under way finishes, last/ is saved, then the stop
            self._loop(run, steps[state.step:], epoch_ends)
            self.phase, self.finishing = "finish", run.finishing  # where a signal in the last save stops it
        self._event("on_train_end")
        self._release_training_state()
        started = time.time()
        result = run.finish()
        if run.evaluate is not None:  # a scored run's finish predicts the test sets: their time apart
            self._log({"event": "finish", "step": state.step, "finish_seconds": round(time.time() - started, 2),
                       "seconds": round(time.time() - self.started, 1)})
        return result

    def _loop(self, run: Run, steps: list, epoch_ends: set[int]) -> None:
        """The steps left, with their logs, evaluations and saves, until the last or a stop."""
        config, state = self.config, self.state
        if self.is_main:  # the run can train: what it replaces in --output-dir goes only now
            self.folder.start()
        examples, window_started = 0, time.time()
        # Wall seconds of this process's training steps: evaluations and checkpoint saves left out.
        train_seconds, since = 0.0, self._clock()
        for epoch, item in steps:
            self.phase = "step"
            losses, step_examples = self._train_step(run, item)
            self.losses.add(losses)
            state.epoch, examples = epoch + 1, examples + step_examples
            run.after_update()
            # Read from the device (a wait for the GPU) only for a callback of the user's that wants them.
            self._event("on_step_end", {name: float(loss) for name, loss in losses.items()} if self.wants_losses
                        else {})
            if config.log_every and state.step % config.log_every == 0:
                examples = distributed.sum_over_processes([examples])[0]  # torchrun: every process's rows
                self._log(self._train_line(examples / (time.time() - window_started)))
                examples, window_started = 0, time.time()
            control = self._agreed_control()
            epoch_end = state.step in epoch_ends
            evaluate = run.evaluate is not None and (
                epoch_end or (run.eval_every and state.step % run.eval_every == 0) or control.should_evaluate)
            if evaluate or control.should_save or (config.save_every and state.step % config.save_every == 0):
                train_seconds += self._clock() - since
                if evaluate:
                    with self._doing("evaluate"):
                        control = self._evaluate(run, epoch_end, train_seconds)
                self.save_last(run)
                since = self._clock()
            if control.should_interrupt:
                signal_name = signal.Signals(control.should_interrupt).name
                raise Interrupted(f"{signal_name}: stopped after step {state.step} of {state.total_steps}, saved in "
                                  f"{self.folder.last}; to go on: {resume_command(config)}", control.should_interrupt)
            if control.should_stop:
                state.stopped_early = True
                break
            self.control = Control()  # acted on

    @contextmanager
    def _doing(self, phase: str):
        """The command's phase (Command.phase) while the block runs; a block a stop leaves keeps it, for the stop
        line to name."""
        before, self.phase = self.phase, phase
        yield
        self.phase = before

    def _event(self, name: str, *values) -> None:
        """Each callback's method `name` (rank 0 only: torchrun's other processes follow rank 0's control)."""
        if self.is_main:
            for callback in self.callbacks:
                getattr(callback, name)(self.state, self.control, *values)

    def _log(self, record: dict) -> None:
        """A line of the metrics log, to every logger (on_log); a multi-stage run's lines name their stage."""
        self._event("on_log", {**record, "stage": self.state.stage} if self.state.stage else record)

    def _agreed_control(self) -> Control:
        """What the callbacks asked so far in this step: rank 0's, on every process; and a stop, with a save, for a
        signal any process received (Interruption: torchrun passes one on to each process, which may get it a step
        after another; a `kill` may reach one alone), so that every process stops after the same step."""
        asked = distributed.all_gather_objects((self.control if self.is_main else None, self.interruption.received))
        control, received = asked[0][0], next((number for _, number in asked if number), 0)
        if received and not control.should_interrupt:
            control.should_save, control.should_interrupt = True, received
        return control

    def _clock(self) -> float:
        """time.time() once the device has done the work queued so far (a GPU runs behind the host)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.time()

    def _prepare(self, run: Run, total_steps: int) -> None:
        """A fresh optimizer and learning-rate schedule for `total_steps` steps."""
        self.parameters, self.peak_lr, self.head_lr = run.parameters(), run.lr, run.head_lr
        self.lr_multiplier = lambda step: run.lr_multiplier(step, total_steps, self.config.warmup)
        # On CUDA the update runs as one fused kernel (the same AdamW, models/optimizer.py); on a CPU, the reference.
        self.optimizer = AdamW(run.parameter_groups(), lr=run.lr, betas=run.adam_betas,
                               weight_decay=self.config.weight_decay, fused=self.device.type == "cuda")
        # torchrun: run.module() wrapped in DistributedDataParallel, which averages the gradients.
        self.data_parallel = DataParallel(run.module(), self.parameters, run.passes_apart, self.config.ddp_bucket_mb,
                                          self.config.ddp_compress)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self.lr_multiplier)
        self.state, self.control = EngineState(total_steps=total_steps, stage=run.stage_name), Control()
        self.losses = LossTracker()

    def _release_training_state(self) -> None:
        """Free what only the steps use (AdamW's two moments of every weight, DistributedDataParallel's buckets)
        and give the heap's free pages back, so that the run's finish (its test predictions) does not add its
        memory to the training's. A later fit (a run's next stage) prepares its own."""
        self.optimizer = self.scheduler = self.data_parallel = None
        self.parameters = []
        give_back_free_memory()

    def _train_step(self, run: Run, item) -> tuple[dict[str, torch.Tensor], int]:
        """The item's batch in --grad-accum parts on this process, then one update."""
        world, accum = distributed.world_size(), self.config.grad_accum
        totals, examples = {}, 0
        for part in range(accum):
            # torchrun: an earlier part's gradients stay local; the last part's backward pass averages them all.
            with distributed.collective(), self.data_parallel.part(last=part == accum - 1):
                losses, part_examples = run.step(item, Share(distributed.rank() * accum + part, world * accum, world))
            for name, loss in losses.items():
                totals[name] = totals.get(name, 0.0) + loss
            examples += part_examples
        self.update()
        return totals, examples

    def forward(self, *args, **kwargs):
        """The run's forward entry point (run.module()), through DistributedDataParallel under torchrun."""
        return self.data_parallel.module(*args, **kwargs)

    def one_of_passes(self, last: bool):
        """Around one of a step part's forward-and-backward passes, where a run makes several (a multi-task step,
        a task at a time): under torchrun, every pass but the last keeps its gradients local, and the last one's
        backward pass averages them all (DDP counts the heads that the earlier passes used)."""
        return self.data_parallel.part(last=last)

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate a loss into .grad (scaled for fp16). Under torchrun, the backward pass of the step's last
        accumulation part averages the gradients over the processes (DistributedDataParallel)."""
        self.precision.scale(loss).backward()

    def update(self, advance_schedule: bool = True) -> None:
        """Average the gradients over the processes, clip, update. advance_schedule=False: an extra update inside
        a step (contrastive fusion's sentiment update) that neither counts as a step nor moves the schedule."""
        self.data_parallel.average()  # torchrun: where the run's passes ran apart from DDP (run.passes_apart)
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
        self._log(state.last_record)
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
        """One line: the step, what is not finite, and the last checkpoint whose weights are finite."""
        good = last_finite_checkpoint(self.folder)
        if good:
            saved = f"the last good checkpoint is {good}"
        elif self.folder.state_file.exists():
            saved = "no checkpoint of it holds finite weights"
        else:
            saved = "no checkpoint was saved"
        # torchrun: the losses are every process's summed and the weights alike, so every process stops here.
        raise distributed.on_every_process(UserError(
            f"step {self.state.step}: {what}; the run stopped; {saved} (a lower --lr, or --precision fp32, may help)"))

    # ---- checkpoints ----

    def _save_best(self, run: Run) -> Path:
        """OUTPUT_DIR/best/ (rank 0): the run's files, with the evaluation that made it best (About the size of
        best/: the weights)."""
        with self._doing("save best/"), self.folder.save_checkpoint(True, self.run_config,
                                                                    expected=tensor_bytes(self.parameters)) as temp:
            run.save(temp, self.state.last_record, best=True)
        self._event("on_save", self.folder.best, True)
        return self.folder.best

    def save_last(self, run: Run) -> Path:
        """OUTPUT_DIR/last/: the run's files, its run config and the training state, written atomically.
        Never of weights a non-finite loss has reached: the run stops instead, naming the last good checkpoint; nor
        where the run folder was, once it was moved or removed (every process stops)."""
        distributed.on_main(self.folder.check_in_place)
        self.check_finite(self.losses.window_means(reset=False))
        self.check_finite_weights()
        rng = distributed.all_gather_objects(rng_state())  # every process's own random state
        losses = self.losses.state_dict()  # a collective: before rank 0 alone writes
        started = time.time()
        if self.is_main:
            # About the size of last/: the weights, and AdamW's two moments of each in the training state.
            with self._doing("save last/"), self.folder.save_checkpoint(
                    False, self.run_config, expected=3 * tensor_bytes(self.parameters)) as temp:
                run.save(temp, self.state.last_record, best=False)
                torch.save({"engine": self.state.to_dict(), "optimizer": self.optimizer.state_dict(),
                            "scheduler": self.scheduler.state_dict(), "scaler": self.precision.state_dict(),
                            "rng": rng, "losses": losses, "run": run.state_dict(),
                            "run_id": run_id(self.run_config)}, temp / STATE)
            log.info("step %d: saved %s in %.1f s (--resume goes on from here)", self.state.step, self.folder.last,
                     time.time() - started)
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
            self.folder.keep_records_until(self.state.step, self.state.stage)
        set_rng_state(saved["rng"][distributed.rank()])
        log.info("resuming at step %d of %d", self.state.step, self.state.total_steps)

