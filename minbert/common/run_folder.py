"""A run's folder (a trainer's --output-dir): the one module that knows its layout, resolves a run to its
checkpoint, and owns the folder while a command writes there.

    OUTPUT_DIR/
        best/               the best checkpoint (multitask_classifier.py)
        last/               the resumable checkpoint: a checkpoint folder plus training_state.pt
        metrics.jsonl       the metrics log, one JSON object a line
        run_config.json     every flag (each path absolute), the values chosen for flags left to a default
                            (resolved), what reproduces the run (provenance: the command, the folder it ran in, and
                            each --resume's), what the run writes in the folder (wrote: all that --overwrite may
                            remove), and, once the command ended, where the run finished (finished)
        .lock               while a command runs in it: that command's pid, locked by its process

Every checkpoint folder (best/, last/, pretrain_contrastive.py's output and its model1/, model2/) holds the
run config it was trained with, in a file of the same name. Where the folder is, is not a flag --resume compares
(engine/engine.py): a moved or copied run folder resumes where it now is. A folder moved or removed while a command
runs in it stops the command at its next write (check_in_place): it never writes on where the folder was.
"""
import json
import logging
import os
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from minbert.common import locks
from minbert.common.errors import CheckpointError, UsageError
from minbert.common.files import (append_jsonl, atomic_directory, atomic_file, check_writable, make_folders, read_json,
                                  recover_directory, recover_files, remove_empty, remove_entry, same_place,
                                  why_not_removable, without_local_path, without_local_paths, write_json)

log = logging.getLogger(__name__)

BEST, LAST = "best", "last"
METRICS = "metrics.jsonl"
RUN_CONFIG = "run_config.json"
STATE = "training_state.pt"
LOCK = ".lock"
WROTE = "wrote"  # the run config's record of the entries of its folder a run writes (RunFolder.manifest)
# Inside a checkpoint a run saved (best/, last/): the record of the files the save wrote there, by their paths inside
# it and their sizes, saved with them. What it does not list was put there since, and --overwrite leaves it alone.
SAVED_FILES = ".written-by.json"
# What a run config holds beside the flags: a run's run config is a --config file too, whose reader skips these.
RECORD_KEYS = ("resolved", "provenance", "finished", WROTE)

# ---- a checkpoint folder's run config ----

def config_file(checkpoint: str | Path) -> Path:
    return Path(checkpoint) / RUN_CONFIG


def has_config(checkpoint: str | Path) -> bool:
    return config_file(checkpoint).is_file()


def read_config(checkpoint: str | Path) -> dict:
    """The run config of a checkpoint or run folder; anything but a JSON object is one line naming the file."""
    path = config_file(checkpoint)
    config = read_json(path)
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: not a run's configuration (a JSON {type(config).__name__}, expected an "
                              f"object of flags)")
    return config


def run_id(config: dict) -> str | None:
    """The id a run config's run got at its start (provenance.run_id): its training states carry it, so that one
    copied from another run is told apart whenever it was copied. None in a run config from before ids were given."""
    record = config.get("provenance")
    return record.get("run_id") if isinstance(record, dict) else None


def write_config(checkpoint: str | Path, config: dict) -> None:
    write_json(config_file(checkpoint), config)


def shareable_config(config: dict) -> dict:
    """A run config as a folder made to be shared holds it (best/, pretrain_contrastive.py's output): every absolute
    or home path, a flag's value, a data file's name or a path in a command, shortened to its last part. Where the
    files lay on the machine that trained it means nothing elsewhere, and may say too much. The run folder's own
    run config and last/'s keep them: --resume reads the run's flags and data files there."""
    def shorten(value, key=""):
        if isinstance(value, dict):
            return {without_local_path(name): shorten(item, name) for name, item in value.items()}
        if isinstance(value, list):
            return [shorten(item, key) for item in value]
        if isinstance(value, str):
            return without_local_paths(value) if key == "command" else without_local_path(value)
        return value

    return shorten(config)


# ---- a run folder ----

class RunFolder:
    """A run folder, at `path`: its entries, the run it holds, its claim by a command."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.best, self.last = self.path / BEST, self.path / LAST
        self.metrics_log = self.path / METRICS
        self.state_file = self.last / STATE
        self.config_file = config_file(self.path)
        self.lock_file = self.path / LOCK
        self.held = []  # outputs of the run's outside the folder, released with it (hold)
        self.log_begun = False  # whether this command appended to metrics.jsonl (append_record)
        self.made = []  # the folders its claim created
        # Between a claim and start(): what the command will replace, kept as it is until the run can train.
        self.waiting = False
        self.replaced: list[Path] = []  # what --overwrite removes: what the run it replaces wrote
        self.kept_log: bytes | None = None  # metrics.jsonl as --resume cuts it back
        self.new_config: dict | None = None  # the run config the command writes
        self.goes_on: Callable[[RunFolder], str] | None = None  # its claim's

    def __str__(self) -> str:
        return str(self.path)

    # ---- a finished run, as what reads it sees it ----

    def checkpoint(self) -> Path:
        """The checkpoint a run stands for: a run folder's best/, or the folder itself (a checkpoint folder)."""
        return self.best if self.best.is_dir() else self.path

    def encoders(self) -> list[Path]:
        """The checkpoint folders of pretrain_contrastive.py's output: the folder itself, or the subfolders holding
        a checkpoint and its run config (--method ct writes model1/ and model2/; best/, last/ and the temporary
        folders of a save are not such)."""
        inside = sorted(entry for entry in self.path.iterdir() if entry.name not in (BEST, LAST)
                        and not entry.name.startswith(".") and has_config(entry)
                        and (entry / "config.json").is_file()) if self.path.is_dir() else []
        return inside or [self.path]

    def is_run(self) -> bool:
        """A trainer's run folder with no checkpoint in it to use: a run config, and neither the files of a
        checkpoint (config.json) nor checkpoint folders of pretrain_contrastive.py inside (best/ aside)."""
        return has_config(self.path) and not (self.path / "config.json").is_file() and self.encoders() == [self.path]

    def check_is_checkpoint(self, flag: str) -> None:
        """Refuse, naming what to give instead, a folder that holds checkpoints rather than being one: a run folder
        (its best/), pretrain_contrastive.py --method ct's output (model1/, model2/), a run with none yet."""
        if not self.path.is_dir() or (self.path / "config.json").is_file():
            return
        inside = [self.best] if (self.best / "config.json").is_file() else self.encoders()
        if inside != [self.path]:
            raise UsageError(f"{flag} {self.path}: a folder of checkpoints, not a checkpoint; give "
                             + " or ".join(f"{flag} {folder}" for folder in inside))
        if self.is_run():
            raise CheckpointError(f"{flag} {self.path}: a run with no checkpoint yet (no {BEST}/): it saves one at "
                                  f"its first evaluation")

    # ---- owning it ----

    def claim(self, owned: tuple[str, ...], resume: bool, overwrite: bool, sources: dict[str, str],
              again: str = "the same command with --overwrite",
              goes_on: Callable[["RunFolder"], str] | None = None) -> None:
        """Own the folder for a command: created if need be and locked for this process (a second command into it
        is refused, naming the first's pid); a run in it refused unless continued (--resume) or replaced
        (--overwrite: what the run there recorded writing is removed, nothing else: _replace), once the newest
        complete files of saves that died half-way are put back. owned: the entries the command writes over whole
        (best/, last/, metrics.jsonl); sources: flag -> path, what it reads. What the command replaces in a run it
        finds there (--overwrite's entries, --resume's log lines and run config) stays as it is until start(). Under
        torchrun rank 0 alone claims (its machine alone has the folder). goes_on: for a run folder, what continues
        its run, or starts it again (the command's words: a moved folder's line says it)."""
        self.goes_on = goes_on
        if resume and overwrite:
            raise UsageError("--resume continues the run in --output-dir and --overwrite replaces it: give one of them")
        check_writable(self.path, "--output-dir")
        self.made = make_folders(self.path)  # taken back if the command is refused before it writes anything
        try:
            self._lock()
            # First the run as its last command left it: a checkpoint a kill caught between its two renames is
            # back in place, so that --overwrite replaces it too.
            recover_files(self.path)
            for folder in (self.last, self.best):
                recover_directory(folder)
            self.waiting = resume
            if not resume:
                self._replace(owned, overwrite, sources, again)
        except BaseException:
            self.release()
            raise

    def _lock(self) -> None:
        locks.lock(self.lock_file, f"--output-dir {self.path} is in use by another command (pid {{pid}}); wait "
                                   f"until it ends, or choose another --output-dir", place=f"--output-dir {self.path}")

    def release(self) -> None:
        """End this command's claim; the process's last claim unlocks the folder and removes the lock file (the
        kernel unlocks it too when the process ends, however it ends)."""
        locks.unlock(self.lock_file)
        while self.held:
            self.held.pop().release()
        remove_empty(self.made)

    def hold(self, output) -> None:
        """An output of the run's outside its folder (a --predictions-dir, claimed): released with the folder."""
        self.held.append(output)

    def _replace(self, owned: tuple[str, ...], overwrite: bool, sources: dict[str, str], again: str) -> None:
        """Refuse to start a run in a folder that holds another (the transformers Trainer's rule: no run is mixed
        with another, or silently replaced), unless --overwrite replaces it (at start(), once the new run can train);
        a run that stopped before its first checkpoint is named as such, with the command that starts it again.

        --overwrite removes what the run there recorded writing (its run config's WROTE), never an entry by its name
        alone: an entry the command writes over whole (`owned`) that no run recorded is the user's, and the command
        is refused. Everything is checked before anything goes: no entry is, or lies behind, a symbolic link (it
        would remove what lies outside the folder), each can be removed, none holds what the command reads."""
        if has_config(self.path) and not self.holds_run_config():
            raise UsageError(f"--output-dir {self.path} holds a {RUN_CONFIG} that no run wrote (it records no run's "
                             f"id nor what the run wrote), which the run would write over, --overwrite or not; move "
                             f"it out of {self.path}, or choose another --output-dir")
        # Folders without a file in them do not count: a start refused after check_writable leaves such folders;
        # nor does a run's config alone: a start that stopped before its first step (bad data, a loss not finite).
        held = [entry.name for entry in sorted(self.path.iterdir()) if entry.name != LOCK and _holds_files(entry)]
        if held == [RUN_CONFIG]:
            held = []
        if held and not overwrite and self.stopped_unsaved():
            raise UsageError(f"--output-dir {self.path} holds a run that stopped before it saved a checkpoint to "
                             f"resume from; start it again: {again}")
        if held and not overwrite:
            shown = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
            raise UsageError(f"--output-dir {self.path} already holds files ({shown}): continue its run with --resume, "
                             f"start again over it with --overwrite, or choose another --output-dir")
        self.waiting = bool(held)
        if not held:
            return
        recorded = self.written()
        foreign = [name for name in owned if name not in recorded and _holds_files(self.path / name)]
        if foreign:
            them, were = ("them", "were") if len(foreign) > 1 else ("it", "was")
            raise UsageError(f"--overwrite: {', '.join(foreign)} in {self.path} {were} not written by a run (no "
                             f"{RUN_CONFIG} there records {them}), and --overwrite removes only what a run wrote; move "
                             f"{them} out of {self.path}, or choose another --output-dir")
        replaced = [(name, self.path / name) for name in recorded if os.path.lexists(self.path / name)]
        for name, entry in replaced:
            self._check_removable(name, entry)
            for flag, source in sources.items():
                if source and _inside(Path(source), entry):
                    raise UsageError(f"--overwrite would remove {entry}, which {flag} {source} reads; copy it out of "
                                     f"{self.path} first, or choose another --output-dir")
        self.replaced = [entry for _, entry in replaced]

    def _check_removable(self, name: str, entry: Path) -> None:
        """Refuse (before anything is removed) an entry --overwrite cannot remove whole from within the folder: one
        its record names outside the folder (an absolute path, .., a path through a symbolic link), a symbolic link
        itself, or one holding a file or folder the system will not let go (why_not_removable)."""
        relative = Path(name)
        if relative.is_absolute() or ".." in relative.parts:
            raise UsageError(f"--overwrite would remove {entry}, which lies outside {self.path} (its {RUN_CONFIG} "
                             f"records it); --overwrite removes only what lies inside the run folder, and removed "
                             f"nothing: choose another --output-dir")
        if entry.is_symlink() or entry.parent.resolve() != self.path.resolve().joinpath(*relative.parts[:-1]):
            what = (f"a symbolic link to {os.readlink(entry)}" if entry.is_symlink() else
                    "which lies outside it, through a symbolic link")
            raise UsageError(f"--overwrite would remove {entry}, {what}; --overwrite never follows a link out of "
                             f"{self.path}, and removed nothing: remove the link yourself, or choose another "
                             f"--output-dir")
        added = _not_saved_there(entry)
        if added:
            raise UsageError(f"--overwrite would remove {added}, which the run did not write ({SAVED_FILES} in "
                             f"{entry}, the record of what its save wrote there, does not list it), and removed "
                             f"nothing: move it out of {entry}, or choose another --output-dir")
        reason = why_not_removable(entry)
        if reason:
            raise UsageError(f"--overwrite cannot remove {entry} ({reason}), and removed nothing: make it removable, "
                             f"or choose another --output-dir")

    def holds_run_config(self) -> bool:
        """Whether the folder's run_config.json is a run's: what a trainer records as it writes it (the run's id, what
        it writes in the folder), never only its name; a file of flags of the user's (a --config file) is not."""
        try:
            config = read_config(self.path)
        except CheckpointError:
            return False
        return bool(run_id(config)) or isinstance(config.get(WROTE), list)

    def written(self) -> list[str]:
        """What the run in the folder recorded writing there (its run config's WROTE: paths inside the folder); []
        where no run recorded anything."""
        if not has_config(self.path):
            return []
        try:
            recorded = read_config(self.path).get(WROTE)
        except CheckpointError:
            return []
        return [name for name in recorded if isinstance(name, str) and name] if isinstance(recorded, list) else []

    def manifest(self, owned: tuple[str, ...], files: list[Path], resumed: bool) -> list[str]:
        """WROTE, recorded before the run writes any of it: the entries the command writes over whole (owned), the
        files it adds to a folder it does not own whole (its TensorBoard file in OUTPUT_DIR/tensorboard/), by their
        paths inside the run folder (files elsewhere are not the folder's), and, resumed, what the run wrote before."""
        root, inside = self.path.resolve(), []
        for file in files:
            try:
                inside.append(Path(file).resolve().relative_to(root).as_posix())
            except ValueError:
                continue
        return list(dict.fromkeys([*(self.written() if resumed else []), *owned, *inside]))

    def start(self) -> None:
        """The run can train: its model, data and callbacks are set up, its first step is next. Only now what it
        replaces goes (--overwrite's entries, the log lines --resume repeats) and its run config is written, so that
        a command that fails before (a model that does not load, data that does not parse) leaves the run it found
        as it was. Rank 0 only; a second call does nothing."""
        if not self.waiting:
            return
        self.waiting = False
        self.check_in_place()
        for entry in self.replaced:
            remove_entry(entry)
            if entry.parent != self.path:  # a file the run added to a folder of the user's (tensorboard/): gone
                remove_empty([entry.parent])  # with it once empty
        if self.replaced:
            log.info("--overwrite: removed %s from %s", ", ".join(str(entry.relative_to(self.path))
                                                                 for entry in self.replaced), self.path)
        if self.kept_log is not None:
            self._write_log()
        if self.new_config is not None:
            write_config(self.path, self.new_config)
        self.replaced, self.new_config = [], None

    def _write_log(self) -> None:
        with atomic_file(self.metrics_log) as temp:
            temp.write_bytes(self.kept_log)
        self.kept_log = None

    def check_outside_checkpoints(self, path: str | Path, flag: str) -> None:
        """Refuse an output folder inside best/ or last/, which each save replaces whole (its files would go)."""
        for folder in (self.best, self.last):
            if path and _inside(Path(path), folder):
                raise UsageError(f"{flag} {path}: inside {folder}, which each save of the run replaces whole; "
                                 f"choose a folder outside {self.best} and {self.last}")

    # ---- what a run writes ----

    @contextmanager
    def save_checkpoint(self, best: bool, run_config: dict, expected: int = 0):
        """best/ or last/: yields a temporary folder for the checkpoint's files; with the run config beside them it
        takes the place of the old checkpoint in one swap (a save that dies half-way leaves the old one). best/ is
        made to be shared: its run config names no local path (shareable_config)."""
        self.check_in_place()
        with atomic_directory(self.best if best else self.last, expected=expected) as temp:
            yield temp
            write_config(temp, shareable_config(run_config) if best else run_config)
            write_json(temp / SAVED_FILES, {"files": {file.relative_to(temp).as_posix(): file.stat().st_size
                                                      for file in sorted(temp.rglob("*")) if file.is_file()}})

    def remove_resumable(self) -> None:
        """A finished command that keeps no resumable checkpoint (pretrain_contrastive.py) removes last/."""
        remove_entry(self.last)

    def write_config(self, config: dict) -> None:
        """The run folder's run config; while a claim waits for start() (a run found in the folder), written then."""
        if self.waiting:
            self.new_config = config
        else:
            self.check_in_place()
            write_config(self.path, config)

    def saved_config(self) -> dict:
        """The run config of the resumable checkpoint: the flags the interrupted run was trained with."""
        return read_config(self.last)

    def finished(self) -> dict | None:
        """Where the run's command ended ({"step", "stopped_early"}), or None when it did not (or never began)."""
        return read_config(self.path).get("finished") if has_config(self.path) else None

    def copied_from(self) -> Path | None:
        """The run folder this one is a copy of (cp -r), where that run still is: the --output-dir its run config
        records, another folder, holding a run of the same id. None for a run in the folder it was recorded in, a
        moved one (nothing of the same id where it was), or a run config recording no absolute --output-dir."""
        if not has_config(self.path):
            return None
        config = read_config(self.path)
        recorded, own = config.get("output_dir"), run_id(config)
        if not (isinstance(recorded, str) and os.path.isabs(recorded) and own) or same_place(recorded, self.path):
            return None
        original = Path(recorded)
        try:
            return original if has_config(original) and run_id(read_config(original)) == own else None
        except CheckpointError:
            return None

    def stopped_unsaved(self) -> bool:
        """Whether the folder holds a run that stopped (killed, or failed) before it saved last/: nothing to resume."""
        return self.holds_run_config() and not self.finished() and not self.state_file.exists()

    def latest_command(self) -> dict:
        """The provenance of the last command that ran the run (its start's, or its latest --resume's); {} if none."""
        if not has_config(self.path):
            return {}
        start = read_config(self.path).get("provenance", {})
        return [start, *start.get("resumed", [])][-1]

    def started_with(self) -> str:
        """The command line the run started with (its run config's), or "" where none is recorded."""
        return self._started("command")

    def started_in(self) -> str:
        """The folder the run's command started in, its paths relative to it, or "" where none is recorded."""
        return self._started("cwd")

    def _started(self, key: str) -> str:
        if not has_config(self.path):
            return ""
        value = read_config(self.path).get("provenance", {}).get(key, "")
        return value if isinstance(value, str) else ""

    def mark_finished(self, run_config: dict, step: int, stopped_early: bool) -> None:
        """The command ended: --resume has nothing left to do."""
        self.start()
        self.check_in_place()
        write_config(self.path, {**run_config, "finished": {"step": step, "stopped_early": stopped_early}})

    def append_record(self, record: dict) -> None:
        """A line of metrics.jsonl. Once the log was begun, an append never makes it again: a log removed meanwhile
        (rm -rf of the folder under way) stops the command, rather than leave a new log where the folder was."""
        self.check_in_place()
        try:
            append_jsonl(self.metrics_log, record, create=not self.log_begun)
        except FileNotFoundError:
            self.check_in_place()
            raise UsageError(f"--output-dir {self.path}: {METRICS} was removed while the command ran in it; it "
                             f"stopped, and wrote nothing more") from None
        self.log_begun = True

    def check_in_place(self) -> None:
        """Stop a command whose folder was moved (mv) or removed while it ran, before it writes again: it would
        write on where the folder was, without a lock, a run of its folder's lines and checkpoints missing. Its lock
        file tells (common/locks.py): it goes with the folder. What the run saved stays where the folder is now. The
        outputs it holds outside the folder (a --predictions-dir) are checked alike."""
        for output in self.held:
            output.check_in_place()
        if locks.in_place(self.lock_file):
            return
        now = locks.now_at(self.lock_file)
        if now is None:
            raise UsageError(f"--output-dir {self.path} was removed while the command ran in it; it stopped, and "
                             f"wrote nothing more")
        moved = RunFolder(now.parent)
        saved = f"what it saved is in {moved}" if moved.state_file.exists() else "it saved no checkpoint to resume from"
        advice = self.goes_on(moved) if self.goes_on else f"its --output-dir is now {moved}"
        raise UsageError(f"--output-dir {self.path} was moved to {now.parent} while the command ran in it; it "
                         f"stopped, and wrote nothing more where the folder was; {saved}; {advice}")

    def records(self) -> list[tuple[bytes, dict]]:
        """The lines of metrics.jsonl and what each holds, but for a last line a kill or a full disk cut short (no
        newline at its end). A line the run did not write (not UTF-8 text, or not a JSON object with its step: a
        user's note) is refused, naming its lines, and never removed: --resume rewrites the log (keep_records_until),
        and the log is the run's record, which analyze.py reads back."""
        if not self.metrics_log.exists():
            return []
        lines = self.metrics_log.read_bytes().split(b"\n")
        lines = lines[:-1]  # after the last newline: nothing, or a line cut short
        records, foreign = [], []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                raise CheckpointError(f"{self.metrics_log}: line {number}: not UTF-8 text, so not a line of ours; "
                                      f"remove it to resume") from None
            try:
                record = json.loads(text)
            except json.JSONDecodeError:
                record = None
            if is_record(record):
                records.append((line, record))
            else:
                foreign.append(number)
        if foreign:
            shown = ", ".join(map(str, foreign[:10])) + (f" and {len(foreign) - 10} more" if len(foreign) > 10 else "")
            raise CheckpointError(f"{self.metrics_log}: line{'s' if len(foreign) > 1 else ''} {shown}: not the run's "
                                  f"(each of its lines is a JSON object with its step and event); move them out of the "
                                  f"file to resume")
        return records

    def keep_records_until(self, step: int, stage: str = "") -> None:
        """--resume at `step` of `stage` (a multi-stage run's; "" for one stage): a run killed after a log line but
        before its checkpoint repeats those steps; their lines go (at start(), while a claim waits for it), and every
        line after them, and so does a last line the kill cut short. The lines of the stages before stay."""
        if not self.metrics_log.exists():
            return
        kept, in_stage = [], False
        for line, record in self.records():
            line_stage = record.get("stage", "")
            in_stage = in_stage or line_stage == stage
            if (line_stage == stage and record["step"] > step) or (in_stage and line_stage != stage):
                break  # the first line after the checkpoint
            kept.append(line)
        if self.metrics_log.read_bytes() != b"".join(line + b"\n" for line in kept):
            self.kept_log = b"".join(line + b"\n" for line in kept)
            if not self.waiting:
                self._write_log()


EVENTS = ("train", "eval", "finish")  # what each line of metrics.jsonl is (engine/engine.py writes them)


def is_record(record) -> bool:
    """Whether a line's JSON is one the run wrote: an object with its step and its event (an evaluation of a run from
    before events were written: its dev metrics), not a note of the user's that happens to hold a step."""
    return (isinstance(record, dict) and isinstance(record.get("step"), int)
            and (record.get("event") in EVENTS or ("event" not in record and isinstance(record.get("dev"), dict))))


def _inside(path: Path, folder: Path) -> bool:
    """Whether `path` is `folder` or lies inside it, wherever either points (symbolic links, ., ..)."""
    path, folder = path.expanduser().resolve(), folder.expanduser().resolve()
    return path == folder or folder in path.parents


def add_to_saved(folder: Path, file: Path) -> None:
    """A file a run wrote into a checkpoint it saved before (its test outputs in best/), added to the checkpoint's
    record of its files (SAVED_FILES), where it has one."""
    record = folder / SAVED_FILES
    try:
        saved = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(saved, dict) and isinstance(saved.get("files"), dict):
        saved["files"][file.relative_to(folder).as_posix()] = file.stat().st_size
        write_json(record, saved)


def _not_saved_there(folder: Path) -> Path | None:
    """The first file (or link) in a checkpoint folder that its save's record (SAVED_FILES) does not list: put there
    since. None where all are listed, or for a folder without a record (a file; a checkpoint saved before records
    were made)."""
    try:
        saved = json.loads((folder / SAVED_FILES).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return next((path for path in sorted(folder.rglob("*")) if (path.is_file() or path.is_symlink())
                 and path != folder / SAVED_FILES and path.relative_to(folder).as_posix() not in saved), None)


def _holds_files(entry: Path) -> bool:
    """Whether an entry holds something: a file or a link, or a folder with one somewhere inside (a folder of empty
    folders holds nothing: what a refused start leaves)."""
    if entry.is_symlink() or (entry.exists() and not entry.is_dir()):
        return True
    return entry.is_dir() and any(path.is_symlink() or not path.is_dir() for path in entry.rglob("*"))
