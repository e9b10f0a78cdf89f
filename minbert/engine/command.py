"""A command's hold on its run: the device and the flags it trains with, --output-dir claimed (rank 0 locks it;
half-written saves recovered), --resume (the run's own flags and training state, engine/resume.py), the run
config with what reproduces the run, the loggers of --report-to, the signals that stop it (engine/callbacks.py's
Interruption: a stop at once ends with one line saying where the run stands), and, when the command ends normally,
the record that its run finished. The training loop (engine/engine.py) is built on it."""
import logging
import signal
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from minbert.common import distributed
from minbert.common.cli import as_given, resolve_device
from minbert.common.errors import Interrupted, SignalStop
from minbert.common.outputs import check_place
from minbert.common.provenance import provenance
from minbert.common.run_folder import WROTE, RunFolder, run_id
from minbert.common.seeding import seed_everything
from minbert.models.bert import resolve_attention
from minbert.models.compile import check_can_compile, compile_encoder
from minbert.engine.callbacks import Callback, Control, EngineState, Interruption
from minbert.engine.config import TrainingConfig
from minbert.common.precision import Precision
from minbert.engine.reporting import mlflow_store, reporters
from minbert.engine.resume import (Resumption, find_resumption, flags_after_restart, goes_on, kept, start_again,
                                   with_values)

log = logging.getLogger(__name__)


class Command:
    """Used as a context: a command's work inside `with Engine(config) as engine:` owns --output-dir until it ends
    (rank 0 locks it), and a command that ends normally records that its run finished."""

    def __init__(self, config: TrainingConfig, callbacks: Sequence[Callback] = ()):
        """Set-up, before any model or data: the device, --output-dir claimed (half-written saves recovered),
        folders checked, seeds, and with --resume the interrupted run's flags and training state (self.config:
        the flags the run trains with). callbacks: the user's (engine/callbacks.py), after the project's own."""
        if config.quiet:  # before joining torchrun's group, which quiets its other processes further
            logging.getLogger().setLevel(logging.WARNING)
        self.device = distributed.setup(resolve_device(config.device), config.dist_timeout)
        self.folder = RunFolder(config.output_dir)
        self.is_main = distributed.is_main()
        self.state, self.control = EngineState(), Control()
        self.user_callbacks, self.callbacks, self.reporters = list(callbacks), [], []
        # What the command is doing, which a signal's stop line names (Engine sets it as the loop goes): "set-up",
        # "step", "evaluate", "save last/", "save best/", "finish" (the run's finish, described by finishing).
        self.phase, self.finishing, self.claimed, self.finished = "set-up", "", False, None
        # From here to its end a signal stops the command with a line saying where it stands (__exit__).
        self.interruption = Interruption().__enter__()
        try:
            self._use_flags(config)
            if distributed.restarts() and not config.resume:  # torchrun --max-restarts
                changes = distributed.on_main(lambda: flags_after_restart(self.folder))
                if changes:
                    self._use_flags(with_values(config, **changes))
            distributed.on_main(self._claim)  # torchrun: rank 0's machine alone has the folder
            self.claimed = True
            self.started = time.time()
            # --resume: rank 0 alone reads last/; the others get its flags and training state by broadcast, and
            # its weights from the run (engine.ddp.start_replicas).
            self.resumed = Resumption()
            if self.config.resume:
                self.resumed = distributed.on_main(lambda: find_resumption(self.folder, self.config))
            if self.resumed.flags:
                self._use_flags(with_values(self.config, **self.resumed.flags))
            self.finished = self.resumed.finished
            if self.finished and self.is_main:
                stopped = " (stopped early by --patience)" if self.finished["stopped_early"] else ""
                print(f"--resume: the run in {self.folder} finished at step {self.finished['step']}{stopped}; "
                      f"nothing to resume")
            self.run_config = self.config.recorded()
            if self.is_main:
                log.info("precision %s", self.precision.describe())
                self.reporters = reporters(self.config.report_to, self.config.tensorboard, self.folder)
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise

    def _use_flags(self, config: TrainingConfig) -> None:
        """The flags the run trains with: its precision, attention and compilation checked on this device, its seed."""
        self.config = config
        self.precision = Precision(config.precision, self.device)
        resolve_attention(config.attention, self.device)  # FlagError: a layout that does not exist
        if config.compile:
            check_can_compile(self.device)
        seed_everything(config.seed)

    def __enter__(self) -> "Command":
        return self

    def __exit__(self, kind, error, trace) -> None:
        """The command's end: its run finished, unless it failed; the folder released (rank 0). A signal that
        stopped it at once (SignalStop) becomes one line: where it stopped, what it kept, what goes on."""
        self.interruption.stopping = True  # no signal cuts the clean-up short
        try:
            if self.is_main:
                for reporter in self.reporters:
                    reporter.close(failed=kind is not None)
                if kind is None and not self.finished:
                    self.folder.mark_finished(self.run_config, self.state.step, self.state.stopped_early)
                self.folder.release()
        finally:
            self.interruption.__exit__()
        if isinstance(error, SignalStop):
            raise Interrupted(self._stop_line(error.signal_number) if self.is_main else "",
                              error.signal_number) from None

    def _stop_line(self, number: int) -> str:
        """Where a command that a signal stopped at once stands: what it was doing, what it kept, and the command
        that goes on, or starts it again."""
        state, config = self.state, self.config
        steps = f"{state.total_steps}" + (f" of stage {state.stage}" if state.stage else "")
        doing = {"set-up": "while setting up",
                 "step": f"in step {state.step + 1} of {steps}",
                 "evaluate": f"while evaluating after step {state.step} of {steps}",
                 "save last/": f"while saving last/ after step {state.step} of {steps}",
                 "save best/": f"while saving best/ after step {state.step} of {steps}",
                 "finish": f"after step {state.step} of {steps}, {self.finishing}"}[self.phase]
        line = f"{signal.Signals(number).name}: stopped {doing}; "
        if not self.claimed or (self.folder.waiting and not config.resume):  # what is in --output-dir is untouched
            return line + f"--output-dir {self.folder} is as it was; to start the run: {as_given(config.command)}"
        return line + f"{kept(self.folder, state)}; {goes_on(config, self.folder)}"

    def _claim(self) -> None:
        """--output-dir claimed (locked; a run in it refused, or replaced with --overwrite unless that would remove
        what the run reads), saves that died half-way recovered. Rank 0 only (torchrun)."""
        config = self.config
        # Before anything is removed: every output outside the places of other commands' files.
        check_place(config.output_dir, "--output-dir", itself=config.FOLDER_KINDS)
        for flag, path in config.as_flags(config.OUTPUT_FOLDERS).items():
            if path or flag != "--tensorboard":  # --tensorboard '': no folder of its own; any other '' is refused
                check_place(path, flag, own_run=config.output_dir)
        store = mlflow_store(config.report_to)
        if store:
            check_place(store, "MLflow's tracking store ($MLFLOW_TRACKING_URI)")
        self.folder.claim(config.OUTPUTS, config.resume, config.overwrite, config.as_flags(config.SOURCES),
                          start_again(config, self.folder), goes_on=lambda folder: goes_on(config, folder))
        try:
            for flag, path in config.as_flags(config.OUTPUT_FOLDERS).items():  # their files would go at a save
                self.folder.check_outside_checkpoints(path, flag)
        except BaseException:
            self.folder.release()
            raise

    def describe_run(self, data_files: list[Path], **resolved) -> None:
        """OUTPUT_DIR's run config: every flag, the values chosen for flags left to a default (resolved), and what
        reproduces the run: the command, the git commit, library versions, a hash of each data file; a resumed run
        keeps what its start recorded and adds each --resume's."""
        record, job = provenance(self.config.command.text, data_files), distributed.job()
        if job:  # what a restarted attempt of the job recognises (torchrun --max-restarts)
            record["torchrun_job"] = job
        if self.resumed.provenance:
            record = {**self.resumed.provenance, "resumed": [*self.resumed.provenance.get("resumed", []), record]}
        else:  # what its training states carry, told apart from another run's (engine/resume.py)
            record["run_id"] = run_id(self.run_config) or uuid.uuid4().hex  # one id, however often described
        resolved = {"precision": self.precision.name, "precision_reason": self.precision.reason, **resolved}
        # What the run writes in its folder, recorded before it writes it: all that --overwrite may remove later.
        wrote = self.folder.manifest(self.config.OUTPUTS, [file for reporter in self.reporters
                                                           for file in reporter.files()], self.config.resume)
        self.run_config = {**self.config.recorded(), "resolved": resolved, "provenance": record, WROTE: wrote}
        if self.is_main:
            self.folder.write_config(self.run_config)
        # A flag left to a default chosen later shows that value, not None.
        flags = self.config.to_dict() | {name: next(iter(value.values())) if isinstance(value, dict) and
                                         len(value) == 1 else value for name, value in resolved.items()}
        for reporter in self.reporters:
            reporter.log_config(flags)

    def resolved_attention(self) -> str:
        """What --attention runs as on this device (the run config records it)."""
        return resolve_attention(self.config.attention, self.device)

    def prepare_encoder(self, encoder) -> None:
        """--attention and --compile on an encoder already on the device (compiled in place: names unchanged)."""
        encoder.attention = self.config.attention
        if self.config.compile:
            compile_encoder(encoder)
