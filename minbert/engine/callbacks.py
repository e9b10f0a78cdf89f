"""What the training loop (engine/engine.py) tells the code around it, and what that code may ask of it: the
loop's state (EngineState), its events (Callback) and the requests a callback makes (Control), named as in the
transformers Trainer (TrainerState, TrainerCallback, TrainerControl).

    class StopBelow(Callback):
        def on_evaluate(self, state, control, metrics, score):
            control.should_stop = score < 0.3       # the run ends as --patience ends it

    multitask_classifier.main([...], callbacks=[StopBelow()])

The events, in order: on_train_begin; then each step on_step_end, on_log for a line of the metrics log (the train
lines, each evaluation's and the finish line), on_evaluate after an evaluation, on_save after a checkpoint folder is
saved; on_train_end once the last step is done (before the run's finish: its test predictions). A multi-stage run
(ConSERT's stages) has them once a stage. Under torchrun the callbacks run on rank 0 only, and the control rank 0's
callbacks set is what every process does.

The callbacks that ship with the project are here too: the progress bar, best/ when the score improves, early
stopping (--patience) and the timed save of last/ (--save-every-minutes); the loggers (--report-to) are in
engine/reporting.py. So is a stop on a signal (Interruption), which the command holds on every process.
"""
import dataclasses
import logging
import math
import signal
import socket
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from minbert.common.errors import Interrupted, SignalStop
from minbert.common.progress import Progress, on_terminal

log = logging.getLogger(__name__)


@dataclass
class EngineState:
    """The loop's state, saved with last/ and restored by --resume as one (to_dict / from_dict)."""
    step: int = 0  # optimizer steps done
    total_steps: int = 0
    epoch: int = 0  # 1-based epoch of the last step
    stage: str = ""  # a multi-stage run's stage name ("" for one stage)
    best: float = -math.inf  # best score so far (run.score of the dev metrics)
    best_step: int = 0
    since_best: int = 0  # evaluations since best
    stopped_early: bool = False
    last_record: dict = field(default_factory=dict)  # the last "eval" line

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, saved: dict) -> "EngineState":
        """A saved state; a field it lacks (a state saved before the field existed) takes its default."""
        return cls(**{f.name: saved[f.name] for f in dataclasses.fields(cls) if f.name in saved})


@dataclass
class Control:
    """What a callback may ask of the loop; the engine resets it once it has acted."""
    should_evaluate: bool = False
    should_save: bool = False  # last/, the resumable checkpoint
    should_stop: bool = False  # the run ends as early stopping ends it: best/ kept, the run's finish runs
    should_interrupt: int = 0  # a signal's number: last/ saved, then the command stops (Interruption)


class Callback:
    """Every method optional (see the module's docstring for when each is called)."""

    def on_train_begin(self, state: EngineState, control: Control) -> None:
        pass

    def on_step_end(self, state: EngineState, control: Control, losses: dict[str, float]) -> None:
        pass

    def on_log(self, state: EngineState, control: Control, record: dict) -> None:
        pass

    def on_evaluate(self, state: EngineState, control: Control, metrics: dict[str, float], score: float) -> None:
        pass

    def on_save(self, state: EngineState, control: Control, folder: Path, best: bool) -> None:
        pass

    def on_train_end(self, state: EngineState, control: Control) -> None:
        pass


class ProgressBar(Callback):
    """A progress bar on a terminal; off one a line every 30 s (common/progress.py) and one per train line."""

    def __init__(self, desc: str):
        self.desc = desc

    def on_train_begin(self, state, control):
        self.bar = Progress(state.total_steps, self.desc, unit="step", initial=state.step, leave=True)

    def on_step_end(self, state, control, losses):
        self.bar.update()

    def on_log(self, state, control, record):
        if record["event"] != "train":
            return
        self.bar.set_postfix({name: f"{value:.3f}" for name, value in record["loss"].items()})
        if not on_terminal():  # no progress bar: a log line instead
            log.info("step %d/%d  %s  lr %.3g", state.step, state.total_steps,
                     "  ".join(f"{k} {v:.4f}" for k, v in record["loss"].items()), record["lr"])

    def on_train_end(self, state, control):
        self.bar.close()


class BestCheckpoint(Callback):
    """best/: saved (by save_best) whenever an evaluation's score beats every earlier one."""

    def __init__(self, save_best: Callable[[], Path], score_name: str):
        self.save_best, self.score_name = save_best, score_name

    def on_evaluate(self, state, control, metrics, score):
        state.since_best += 1
        if score > state.best:
            state.best, state.best_step, state.since_best = score, state.step, 0
            folder = self.save_best()
            log.info("new best: %s %.4f at step %d, saved to %s", self.score_name, score, state.step, folder)


class EarlyStopping(Callback):
    """--patience: stop after that many evaluations in a row without a better score."""

    def __init__(self, patience: int, score_name: str):
        self.patience, self.score_name = patience, score_name

    def on_evaluate(self, state, control, metrics, score):
        if self.patience and state.since_best >= self.patience:
            control.should_stop = True
            log.warning("early stop at step %d: no better %s in %d evaluations (best %.4f at step %d)", state.step,
                        self.score_name, self.patience, state.best, state.best_step)


class TimedSave(Callback):
    """--save-every-minutes: asks for a save of last/ once that many minutes have passed since the last one (or the
    start), so that a run stopped in its first minutes can still --resume; and never sooner than SAVE_SHARE of the
    time would go to saving: after a save of S seconds the next waits at least S / SAVE_SHARE."""

    SAVE_SHARE = 0.02

    def __init__(self, minutes: float):
        self.seconds, self.wait, self.asked = 60 * minutes, 60 * minutes, None

    def on_train_begin(self, state, control):
        self.last = time.monotonic()

    def on_step_end(self, state, control, losses):
        if self.seconds and time.monotonic() - self.last >= self.wait:
            control.should_save, self.asked = True, time.monotonic()

    def on_save(self, state, control, folder, best):
        if best:
            return
        self.last = time.monotonic()
        if self.asked is not None:  # a save this callback asked for: it took from the request to now
            self.wait = max(self.seconds, (self.last - self.asked) / self.SAVE_SHARE)
            self.asked = None


class Interruption:
    """Ctrl-C (SIGINT), SIGTERM (kill, a batch job's end, torchrun passing either on) and SIGUSR1 (SLURM's
    --signal=USR1@SECONDS before a time limit), from a command's set-up to its end (engine/command.py). Between the
    training loop's steps (deferred()) the step under way finishes, last/ is saved, and the command stops saying how
    to resume; the same signal again stops at once; another is held back (torchrun, given a second Ctrl-C, sends its
    processes SIGTERM after the first's SIGINT: they still save). Anywhere else (the set-up, the run's finish: its
    test predictions and leaderboard files) there is no step to finish, and a signal stops the command at once. A stop
    at once raises SignalStop where the command is, so that what it was writing is left whole or removed and its
    locks are released; the command then says where it stands. From then on (stopping) every signal is held back:
    nothing cuts that clean-up short. Under torchrun every process holds one: the signal any process received in the
    loop reaches the control they all agree on after each step (Engine._agreed_control), so that every process saves
    and stops after the same step.

    Python runs a handler once for every signal that arrived while the main thread was busy in C (a backward pass,
    seconds on a CPU): two Ctrl-C within it would be one call. So the signals are counted as they arrive, from the
    byte the interpreter writes for each into a wakeup socket (signal.set_wakeup_fd), and the handler acts on every
    one of them in order."""

    SIGNALS = ("SIGINT", "SIGTERM", "SIGUSR1")

    def __init__(self):
        self.received, self.previous = 0, {}
        self.arrivals = self.wakeup = None  # the two ends of the wakeup socket, while the context is open
        self.previous_wakeup = -1
        self.deferring = False  # in the training loop: a first signal waits for the end of the step under way
        self.stopping = False  # the command is stopping: every signal is held back

    def __enter__(self) -> "Interruption":
        if threading.current_thread() is threading.main_thread():  # Python's signal handlers live there only
            self.arrivals, self.wakeup = socket.socketpair()
            for end in (self.arrivals, self.wakeup):
                end.setblocking(False)
            self.previous_wakeup = signal.set_wakeup_fd(self.wakeup.fileno(), warn_on_full_buffer=False)
            for name in self.SIGNALS:
                if hasattr(signal, name):  # SIGUSR1: not on Windows
                    number = getattr(signal, name)
                    self.previous[number] = signal.signal(number, self.on_signal)
        return self

    def __exit__(self, *exc) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler)
        self.previous = {}
        if self.wakeup is not None:
            signal.set_wakeup_fd(self.previous_wakeup)
            self.arrivals.close()
            self.wakeup.close()
            self.arrivals = self.wakeup = None

    @contextmanager
    def deferred(self):
        """Around the training loop's steps: a first signal waits for the end of the step under way (the loop acts on
        it). One that came after the loop's last look (during its last save) stops the command as the loop ends."""
        self.deferring = True
        try:
            yield
        finally:
            self.deferring = False
        if self.received:
            self.stop(self.received)

    def stop(self, number: int) -> None:
        """Stop the command at once (SignalStop), holding back every signal from now on."""
        self.stopping = True
        raise SignalStop(number)

    def on_signal(self, number, frame) -> None:
        for arrived in self.arrived(number):
            if self.stopping or (self.received and arrived != self.received):
                continue  # held back
            if self.received or not self.deferring:  # the second, or one with no step to finish: at once
                self.stop(arrived)
            self.received = arrived
            log.warning("%s: finishing the step under way, then saving last/ (again to stop at once)",
                        signal.Signals(arrived).name)

    def arrived(self, number: int) -> list[int]:
        """The signals of SIGNALS that arrived since the handler last ran, in order (those the wakeup socket holds;
        none when an earlier call of the handler, for another signal, has read them all)."""
        if self.arrivals is None:
            return [number]
        try:
            numbers = self.arrivals.recv(4096)
        except BlockingIOError:
            return []
        handled = set(self.previous)
        return [arrived for arrived in numbers if arrived in handled]


@contextmanager
def stops_before_start(command: str):
    """Around what a trainer does before its run's set-up (loading the training code: seconds): a signal stops it
    with one line, nothing written yet, and `command` (the command as given), which starts it."""
    try:
        with Interruption():
            yield
    except SignalStop as stop:
        raise Interrupted(f"{signal.Signals(stop.signal_number).name}: stopped while starting, before it wrote "
                          f"anything; to start it: {command}", stop.signal_number) from None
