"""Continuing a run: --resume (the run's own flags, checked against the command's, and its training state) and a
torchrun attempt after a restart (--max-restarts), which continues its job's run by itself."""
import dataclasses
from dataclasses import dataclass, field
import logging
import shlex
from pathlib import Path

import torch

from minbert.common import distributed
from minbert.common.cli import flag_fields, printed_command, with_new_names
from minbert.common.errors import CheckpointError
from minbert.common.files import absolute, load_or_fail, same_place
from minbert.common.provenance import check_data_unchanged
from minbert.common.run_folder import RUN_CONFIG, RunFolder, read_config, run_id
from minbert.models.loading import not_finite_weights
from minbert.engine.config import TrainingConfig

log = logging.getLogger(__name__)


def check_resumable(folder: RunFolder, config: TrainingConfig) -> tuple[Path, dict, dict]:
    """The interrupted run's last/ folder, the flags it was trained with that the command leaves out (the command's
    own flags must not change the run: one that does is refused, naming it), and the provenance it recorded."""
    if folder.stopped_unsaved():
        raise CheckpointError(f"--resume: the run in {folder} stopped before it saved a checkpoint to resume from; "
                              f"start it again: {start_again(config, folder)}")
    if not folder.state_file.exists():
        raise CheckpointError(f"--resume: no interrupted run in {folder} (no "
                              f"{folder.state_file.relative_to(folder.path)})")
    folder.records()  # before anything is written: a line of metrics.jsonl that is not the run's is refused
    # A flag added since the run started is absent from its run config: it ran with the default.
    defaults = {f.name: f.default for f in flag_fields(config)}
    saved = defaults | with_new_names(type(config), folder.saved_config())  # renamed flags: new names
    if saved.get("attention") == "unpadded":
        # A layout since removed (slower than packed on every device): packed computes the same numbers, to fp32
        # rounding, so the run goes on as it would have.
        log.info("--resume: the run's --attention unpadded no longer exists; it goes on packed, which computes the "
                 "same numbers")
        saved["attention"] = "packed"
    check_data_unchanged(saved.get("provenance", {}), config.allow_changed_data)
    # Flags built from a config object, not a command line (a library caller): all of them given.
    given = set(defaults) if config.command.given is None else config.command.given
    taken = {name: saved[name] for name in defaults if name not in given and name not in config.COMMAND_FIELDS}

    def same(name, value):  # runs/x, ./runs/x and /home/me/runs/x are one folder
        if name in config.SOURCES and value and saved.get(name):
            return same_place(saved[name], value)
        return saved.get(name) == value

    changed = [f"--{name.replace('_', '-')} {value} (the run's: {saved.get(name)})"
               for name, value in config.to_dict().items()
               if name not in taken and name not in config.RUNTIME_FIELDS and not same(name, value)]
    if changed:
        raise CheckpointError(f"--resume: {'; '.join(changed)}: the run continues with its own flags (from "
                              f"{folder.last / RUN_CONFIG}); leave these out, or start a new --output-dir")
    return folder.last, taken, saved.get("provenance", {})


def start_again(config: TrainingConfig, folder: RunFolder) -> str:
    """The command that starts the run in --output-dir over: the command the run started with (recorded in its run
    config; else the command as given), in this folder, with --overwrite, not --resume. A run's own flags, never a
    default model: `--resume` alone names none. Its paths are relative to the folder it started in: from another,
    the command goes there first (cd), and names the run folder by its absolute path."""
    text = folder.started_with() or config.command.text
    if not text:  # a config built in Python
        return "the same command with --overwrite"
    words = [word for word in _without_output_dir(shlex.split(text)) if word not in ("--resume", "--overwrite")]
    command = printed_command([*words, "--output-dir", absolute(folder.path), "--overwrite"])
    started_in = folder.started_in() if folder.started_with() else ""
    return f"cd {shlex.quote(started_in)} && {command}" if started_in and not same_place(started_in, ".") else command


def resume_command(config: TrainingConfig, folder: RunFolder | None = None) -> str:
    """The command that continues the run in --output-dir, or in `folder` where the run folder was moved: the command
    as given, with --resume, not --overwrite (and the folder's --output-dir)."""
    if not config.command.text:  # a config built in Python
        return "the same command with --resume"
    words = [word for word in shlex.split(config.command.text) if word not in ("--resume", "--overwrite")]
    if folder is not None and not same_place(folder.path, config.output_dir):
        words = [*_without_output_dir(words), "--output-dir", absolute(folder.path)]
    return printed_command([*words, "--resume"])


def _without_output_dir(words: list[str]) -> list[str]:
    """A command's words without its --output-dir (--output-dir X, --output-dir=X)."""
    others, skip = [], False
    for word in words:
        if not skip and not word.startswith("--output-dir"):
            others.append(word)
        skip = word == "--output-dir"
    return others


def goes_on(config: TrainingConfig, folder: RunFolder) -> str:
    """What continues the run in `folder`: its --resume command where it saved last/, else the command that starts it
    again."""
    if folder.state_file.exists():
        return f"to go on: {resume_command(config, folder)}"
    return f"to start it again: {start_again(config, folder)}"


def kept(folder: RunFolder, state) -> str:
    """What a stopped run kept, for the engine's state (engine/callbacks.EngineState) where it stopped: the step that
    last/ holds, and how many steps after it are lost; or that nothing was saved."""
    if not folder.state_file.exists():
        return f"nothing was saved, so its {state.step} step(s) are lost" if state.step else "nothing was trained"
    try:  # the loop's position only: its tensors stay on disk (mmap)
        saved = torch.load(folder.state_file, map_location="cpu", weights_only=True, mmap=True)
        saved = saved.get("engine", saved)
    except Exception:  # a state --resume refuses, naming why
        saved = None
    if not isinstance(saved, dict) or not isinstance(saved.get("step"), int):
        return f"{folder.last} is kept"
    stage = saved.get("stage", "")
    where = f"step {saved['step']}" + (f" of stage {stage}" if stage else "")
    lost = state.step - saved["step"] if stage == state.stage else 0
    return f"{folder.last} holds {where}" + (f", so the {lost} step(s) after it are lost" if lost > 0 else "")


def flags_after_restart(folder: RunFolder) -> dict:
    """torchrun --max-restarts, in a restarted attempt (rank 0): the run its job's last attempt began in the folder
    goes on from its last checkpoint (resume), or starts again where it saved none (overwrite); a run of another
    command is left alone (the command then runs as given, and is refused as any command would be)."""
    if folder.latest_command().get("torchrun_job") != distributed.job():
        return {}
    if folder.state_file.exists():
        log.warning("torchrun restart %d: resuming the run in %s from its last checkpoint", distributed.restarts(),
                    folder)
        return {"resume": True}
    log.warning("torchrun restart %d: the run in %s saved no checkpoint before its processes stopped; starting it "
                "again", distributed.restarts(), folder)
    return {"overwrite": True}


def with_values(config: TrainingConfig, **values) -> TrainingConfig:
    """The config with some flags changed (checked again); its command line stays."""
    try:
        changed = dataclasses.replace(config, **values)
    except ValueError as error:  # a run config edited by hand
        raise CheckpointError(f"--resume: the run's flags are refused: {error}") from None
    return changed


# What the engine's save_last writes into training_state.pt, each of which its restore reads.
STATE_ENTRIES = ("engine", "optimizer", "scheduler", "scaler", "rng", "losses", "run")


def load_training_state(folder: RunFolder) -> dict:
    """last/training_state.pt, once it is seen to be whole and this run's: its last evaluation (last_record) is a
    line of the run's metrics.jsonl, which a state taken from another run's last/ does not have."""
    # Tensors, numbers, strings and containers only: weights_only refuses anything executable.
    state = load_or_fail(folder.state_file, lambda file: torch.load(file, map_location="cpu", weights_only=True),
                         "the training state")
    missing = [name for name in STATE_ENTRIES if name not in state] if isinstance(state, dict) else ["every"]
    if missing == ["engine"] and "step" in state:  # saved before the loop's state was one object: at the top level
        missing = []
    if missing:
        raise CheckpointError(f"{folder.state_file}: not a whole training state (no {', '.join(missing)} entry); put "
                              f"back the run's own last/, or start the run again with --overwrite")
    own = run_id(read_config(folder.path)) if folder.config_file.is_file() else None
    if state.get("run_id") and own and state["run_id"] != own:
        raise CheckpointError(f"{folder.state_file}: another run's training state (it records run {state['run_id']}, "
                              f"the run config of {folder} run {own}); put back the run's own last/, or start the "
                              f"run again with --overwrite")
    engine = state.get("engine", state)
    evaluation = engine.get("last_record") if isinstance(engine, dict) else None
    if evaluation and folder.metrics_log.exists() and not any(  # a multi-stage run's lines name their stage too
            all(record.get(key) == value for key, value in evaluation.items()) for _, record in folder.records()):
        raise CheckpointError(f"{folder.state_file}: another run's training state (its last evaluation, at step "
                              f"{evaluation.get('step')}, is not in {folder.metrics_log}); put back the run's own "
                              f"last/, or start the run again with --overwrite")
    return state


@dataclass
class Resumption:
    """What --resume continues from: the interrupted run's last/ (weights), the training state its next fit
    restores (state), the run's own flags that the command leaves out (flags) and the provenance it recorded. A
    run whose command ended (finished: where) has nothing left to do, once its flags and data are checked where it
    kept last/."""
    weights: Path | None = None
    state: dict | None = None
    flags: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)
    finished: dict | None = None


def find_resumption(folder: RunFolder, config: TrainingConfig) -> Resumption:
    """--resume in `folder` (rank 0 alone reads it; torchrun's other processes get the answer by broadcast)."""
    finished = folder.finished()
    if finished and not folder.state_file.exists():
        return Resumption(finished=finished)
    weights, flags, provenance = check_resumable(folder, config)
    if finished:
        return Resumption(flags=flags, provenance=provenance, finished=finished)
    broken = not_finite_weights(folder.last)
    if broken:
        good = last_finite_checkpoint(folder)
        raise CheckpointError(f"--resume: {folder.last}: weights that are not finite ({broken}), nothing to resume "
                              f"from; " + (f"the run's last checkpoint whose weights are finite is {good}" if good else
                                           "no checkpoint of the run holds finite weights"))
    return Resumption(weights, load_training_state(folder), flags, provenance)


def last_finite_checkpoint(folder: RunFolder) -> Path | None:
    """The run's last checkpoint whose weights are finite: last/ (with its training state), else best/; None when
    neither is."""
    candidates = [folder.last] if folder.state_file.exists() else []
    for checkpoint in [*candidates, folder.best]:
        if any(checkpoint.glob("*.safetensors")) and not_finite_weights(checkpoint) is None:
            return checkpoint
    return None
