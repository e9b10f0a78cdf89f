"""The files a command writes outside a run folder (common/run_folder.py owns those): the leaderboard folders of a
run or an ensemble (--predictions-dir), an ensemble's report (--out), predict.py's --output, and the folders of
analyze.py's and silver's --out, whose files are each checked and recorded as a single file is (check_files,
write_outputs, write_output).

Each of them is
- held by one command at a time, with the lock a run folder takes (common/locks.py): a second command is refused,
  naming the first's pid, and a lock left by a command killed with kill -9 is taken over;
- never one of the command's own inputs, and never inside a run folder or a checkpoint folder (another command's
  files, which a save or an --overwrite replaces whole);
- cleaned of the temporary files a killed writer left, by the next writer;
- written whole to a temporary file beside it and renamed into place (an interrupted write leaves the old file), with
  a record of the write beside it (.NAME.written-by.json: the command and the file's SHA-256): a file that exists is
  replaced only if such a record says a command of ours wrote it as it is now, or the user says --overwrite; never
  through a symbolic link, never a file of a checkpoint or of another command's leaderboard set, never one of the
  command's inputs, --overwrite or not.
A leaderboard folder's files (dev and test of every task, and an ensemble's report when it lies there) are written
as one set (common.files.atomic_files), with written-by.json, moved in last, which names the run or the ensemble
that wrote them and lists the files: a different writer is refused unless --overwrite is given, and then the old
set's files go.
"""
import json
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from minbert.common import locks
from minbert.common.errors import UsageError
from minbert.common.files import (SET_RECORD, atomic_file, atomic_files, check_writable, check_writable_file,
                                  file_sha256, make_folders, recover_files, remove_empty, write_json)
from minbert.common.run_folder import BEST, LAST, LOCK, METRICS, RUN_CONFIG, RunFolder

LEADERBOARD_FILES = "*-*-output.csv"  # evaluation/predictions.py's names: {task}-{dev,test}-output.csv


def _resolved(path: str | Path) -> Path:
    return Path(path).expanduser().resolve()


# The study folders of search.py (tuning/study.py's default storages, and the record of the storage its study is
# kept in, name them): no other command writes there.
STUDY_FILES = ("study.db", "study.journal", "study-storage.json")
_own: list[Path] = []  # folders this process writes in as their owner (owning): its own runs may lie inside them


@contextmanager
def owning(path: str | Path):
    """While the block runs, `path` is this process's own (search.py's study folder, whose trials are runs inside
    it): check_place lets outputs lie inside it."""
    _own.append(_resolved(path))
    try:
        yield
    finally:
        _own.pop()


def check_place(path: str | Path, flag: str, inputs: dict[str, str] | None = None, own_run: Path | None = None,
                itself: tuple[str, ...] = ()) -> None:
    """The one rule of every output a command writes (a file or a folder, whatever its flag): refuse one that is
    one of the command's inputs (flag -> path), or lies inside a checkpoint folder (best/, last/, an encoder's), a
    run folder or a study folder, other than own_run (the command's own run; a file that a command adds to the
    model folder it was given, as `minbert benchmark --out` does, names that folder as its own), or a folder this
    process owns (owning). itself: the kinds the output may be itself (a trainer's --output-dir is a run folder; a
    --study-dir, a study folder): only the folders above it are checked. And never an empty path (the current
    folder), nor a named pipe, a device or a socket: what a command writes whole and renames into place would replace
    it (as root, /dev/null itself), and its work would be lost; refused before the work starts."""
    if not str(path).strip():
        raise UsageError(f"{flag} '': an empty path, which would be the current folder; give the folder or file to "
                         f"write")
    special = special_file(path)
    if special:
        raise UsageError(f"{flag} {path}: {special}, not a regular file or folder; give the path of a file or folder "
                         f"to write")
    target = _resolved(path)
    for source_flag, source in (inputs or {}).items():
        if source and target == _resolved(source):
            raise UsageError(f"{flag} {path}: the file {source_flag} reads; writing it would destroy it before it "
                             f"is read; choose another {flag}")
        if source and _resolved(source).is_dir() and _resolved(source) in target.parents:
            raise UsageError(f"{flag} {path}: inside {source}, the folder {source_flag} reads; writing there could "
                             f"replace a file it reads; choose a place outside it")
    for folder in (target, *target.parents):
        if (own_run is not None and folder == _resolved(own_run)) or folder in _own:
            return
        kind = _kind(folder)
        if kind and not (folder == target and kind in itself):
            raise UsageError(f"{flag} {path}: inside {folder}, {kind}, whose files its own commands write and "
                             f"replace; choose a place outside it")


def special_file(path: str | Path) -> str:
    """What `path` is when it is neither a regular file nor a folder (wherever a link leads): "a named pipe", "a
    device" or "a socket"; "" for anything else, or nothing there."""
    try:
        mode = os.stat(Path(path).expanduser()).st_mode
    except OSError:
        return ""
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else ""


def _kind(folder: Path) -> str:
    """"a checkpoint folder" (a model's config with its weights or our run config), "a run folder" (our run config
    with a trainer's files beside it), "a study folder" (search.py's storage), or "" for any other folder."""
    if (folder / "config.json").is_file() and any((folder / name).is_file() for name in (
            RUN_CONFIG, "model.safetensors", "pytorch_model.bin")):
        return "a checkpoint folder"
    if (folder / RUN_CONFIG).is_file() and any((folder / name).exists() for name in (
            METRICS, BEST, LAST, LOCK)) or (folder / RUN_CONFIG).is_file() and RunFolder(folder).encoders() != [folder]:
        return "a run folder"
    if any((folder / name).is_file() for name in STUDY_FILES):
        return "a study folder"
    return ""


def _clean_temporaries(folder: Path, names) -> None:
    """The temporary files a killed writer of these names left (common.files.atomic_file's .NAME.*.tmp)."""
    for name in names:
        for temp in folder.glob(f".{name}.*.tmp"):
            temp.unlink(missing_ok=True)


def _record_of(path: Path) -> Path:
    """Where the record of a file a command wrote lies: .NAME.written-by.json beside it."""
    return path.with_name(f".{path.name}.written-by.json")


def written_by(path: str | Path) -> str | None:
    """The command that wrote the file `path` as it is now (its record, made at the write, holds the file's SHA-256),
    or None: no record, or the file changed since. Never a file's name or its first line: a user's file may look like
    any of ours."""
    path = Path(path)
    try:
        record = json.loads(_record_of(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not (isinstance(record, dict) and isinstance(record.get("written_by"), str) and path.is_file()):
        return None
    return record["written_by"] if record.get("sha256") == file_sha256(path) else None


def check_replaceable(path: Path, flag: str, overwrite: bool, checkpoint: Path | None = None) -> None:
    """Refuse an output file that the command may not replace: a symbolic link, a file of another command's
    leaderboard set, a file of the checkpoint folder `checkpoint` (the model's own folder a file is added to), each
    whatever the flags; and, unless --overwrite, any file no command of ours wrote (written_by)."""
    if path.is_symlink():
        raise UsageError(f"{flag} {path}: a symbolic link (to {os.readlink(path)}); a command never writes through a "
                         f"link: give the path of the file itself")
    if not path.exists():
        return
    leaderboard = LeaderboardFolder(path.parent, flag, "").record()
    if leaderboard and (path.name in leaderboard["files"] or path.name == SET_RECORD):
        raise UsageError(f"{flag} {path}: a file of the leaderboard files of {leaderboard.get('written_by', '?')} "
                         f"(listed in {path.parent / SET_RECORD}), which only their writer replaces; choose another "
                         f"{flag}")
    if written_by(path):
        return
    if checkpoint is not None:
        raise UsageError(f"{flag} {path}: a file of the checkpoint in {checkpoint}, which no command writes over, "
                         f"--overwrite or not; give a new file name")
    if not overwrite:
        raise not_ours(path, flag)


def not_ours(path: Path, flag: str) -> UsageError:
    """The refusal of an existing file that no command of ours wrote, which only --overwrite replaces."""
    return UsageError(f"{flag} {path}: a file no command of ours wrote (no record of the write beside it); choose "
                      f"another {flag}, or replace it with --overwrite")


@contextmanager
def output_file(path: str | Path, flag: str, inputs: dict[str, str] | None = None, overwrite: bool = False,
                checkpoint: Path | None = None):
    """Hold the file `path` for the command's writes (write_output): checked (check_place, writable,
    check_replaceable), locked (.NAME.lock beside it), leftover temporaries of a killed writer removed; unlocked when
    the block ends. checkpoint: the checkpoint folder the file is added to (check_place's own_run)."""
    # As given: '' is no path, though Path('') is the current folder.
    check_place(path, flag, inputs, own_run=checkpoint)
    path = Path(path)
    check_writable_file(path, flag)
    made, lock_file = make_folders(path.parent), path.with_name(f".{path.name}.lock")
    try:
        locks.lock(lock_file, f"{flag} {path} is being written by another command (pid {{pid}}); wait until it "
                              f"ends, or choose another {flag}", place=f"{flag} {path}")
        try:
            _clean_temporaries(path.parent, [path.name, _record_of(path).name])
            check_replaceable(path, flag, overwrite, checkpoint)
            yield path
        finally:
            locks.unlock(lock_file)
    finally:
        remove_empty(made)  # a command refused before it wrote takes back the folders it made


@contextmanager
def write_output(path: str | Path, writer: str):
    """The one way a command writes an output file (held by output_file): yields a temporary path beside it; when
    the block ends, the file takes the place of the old one in one rename (an interrupted block leaves the old file
    whole, or none), and its record says `writer` wrote it."""
    path = Path(path)
    with atomic_file(path) as temp:
        yield temp
    _record(path, writer)


def check_files(folder: str | Path, names, flag: str, overwrite: bool) -> None:
    """Before a command writes the files `names` into its output folder: each one it may not replace refused
    (check_replaceable), so that nothing is written."""
    for name in names:
        check_replaceable(Path(folder) / name, flag, overwrite)


@contextmanager
def write_outputs(folder: str | Path, writer: str):
    """The one way a command writes a set of files into its output folder (held by output_folder, the names checked
    by check_files): yields a temporary folder for them; when the block ends, they take their places as one set
    (common.files.atomic_files: an interrupted block leaves the old files), each with its record that `writer`
    wrote it, moved in with it."""
    with atomic_files(folder) as temp:
        yield temp
        for file in sorted(path for path in temp.iterdir() if path.is_file()):
            _record(file, writer)


def _record(path: Path, writer: str) -> None:
    """The record of the write of `path` beside it: who wrote it, and the file's SHA-256 (written_by reads it)."""
    write_json(_record_of(path), {"written_by": writer, "sha256": file_sha256(path)})


@contextmanager
def output_folder(path: str | Path, flag: str):
    """Hold the folder `path` for the command's files (written as one set: common.files.atomic_files): checked
    (check_place, writable, not a file), locked (its .lock), what a killed writer left cleaned; unlocked when the
    block ends."""
    check_place(path, flag)  # as given: '' is no path, though Path('') is the current folder
    path = Path(path)
    if path.is_file():
        raise UsageError(f"{flag} {path}: a file; give a folder for the files it writes")
    check_writable(path, flag)
    made = make_folders(path)
    try:
        locks.lock(path / LOCK, f"{flag} {path} is in use by another command (pid {{pid}}); wait until it ends, or "
                                f"choose another {flag}", place=f"{flag} {path}")
        try:
            recover_files(path)
            yield path
        finally:
            locks.unlock(path / LOCK)
    finally:
        remove_empty(made)


class LeaderboardFolder:
    """A --predictions-dir: the leaderboard files of one run or one ensemble (`writer`, e.g. "the run in runs/a"),
    written as one set with a record of who wrote them."""

    def __init__(self, path: str | Path, flag: str, writer: str):
        self.path, self.flag, self.writer, self.given = Path(path), flag, writer, str(path)
        self.lock_file = self.path / LOCK
        self.made = []  # the folders its claim created

    def __str__(self) -> str:
        return str(self.path)

    def claim(self, overwrite: bool, own_run: Path | None = None, resume: bool = False) -> "LeaderboardFolder":
        """Own the folder for the command: checked (check_place, writable), locked, a set a killed writer left
        half-moved completed and its temporaries removed; refused when it holds another writer's leaderboard files,
        unless --overwrite (which a run continued with --resume cannot take: it is told to take another folder), and
        whatever the flags when it holds leaderboard files that no record lists (the user's, whatever their names:
        no command replaces them)."""
        check_place(self.given, self.flag, own_run=own_run)
        check_writable(self.path, self.flag)
        self.made = make_folders(self.path)  # taken back if the command is refused before it writes anything
        try:
            locks.lock(self.lock_file, f"{self.flag} {self.path} is in use by another command (pid {{pid}}); wait "
                                       f"until it ends, or choose another {self.flag}",
                       place=f"{self.flag} {self.path}")
            recover_files(self.path)
            _clean_temporaries(self.path, [*self._files(), *self._unrecorded(), SET_RECORD])
            record = self.record()
            foreign = [name for name in self._unrecorded() if name not in self._files()]
            if foreign:
                raise UsageError(f"{self.flag} {self.path} holds leaderboard files that no command recorded writing "
                                 f"({', '.join(foreign)}): they may be yours, and no command replaces them, "
                                 f"--overwrite or not; move them out of {self.path}, or choose another {self.flag}")
            others = record.get("written_by") if record else None
            if others not in (None, self.writer) and not overwrite:
                advice = (f"resume with another {self.flag} (--resume takes a new one)" if resume else
                          f"choose another {self.flag}, or replace them with --overwrite")
                raise UsageError(f"{self.flag} {self.path} holds leaderboard files of {others} "
                                 f"({', '.join(self._files())}); {advice}")
        except BaseException:
            self.release()
            raise
        return self

    def release(self) -> None:
        locks.unlock(self.lock_file)
        remove_empty(self.made)

    def check_in_place(self) -> None:
        """Stop a command whose folder was moved, removed or replaced (by a file) while it held it, before it writes
        there again: it would make a new folder where the folder was (or fail on the file), without a lock. Its lock
        file tells (common/locks.py)."""
        if locks.in_place(self.lock_file):
            return
        now = locks.now_at(self.lock_file)
        where = f"moved to {now.parent}" if now else "removed (or replaced)"
        raise UsageError(f"{self.flag} {self.path} was {where} while the command ran; it stopped, and wrote nothing "
                         f"more where the folder was")

    def record(self) -> dict | None:
        """written-by.json: {"written_by": the writer, "files": {name: SHA-256}}; None where there is none."""
        try:
            record = json.loads((self.path / SET_RECORD).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) and isinstance(record.get("files"), dict) else None

    def _unrecorded(self) -> list[str]:
        return sorted(path.name for path in self.path.glob(LEADERBOARD_FILES))

    def _files(self) -> list[str]:
        """The files of the folder's set, as its record lists them ([] where there is none)."""
        record = self.record()
        return sorted(record["files"]) if record else []

    def write(self, files: dict[str, Callable[[Path], None]]) -> list[Path]:
        """Write the set: name -> a function that writes that file at the path it is given. The old set's files
        (its record's) that the new one does not have go."""
        self.check_in_place()
        stale = set(self._files())
        with atomic_files(self.path) as temp:
            for name, write in files.items():
                write(temp / name)
            write_json(temp / SET_RECORD, {"written_by": self.writer, "files": {
                name: file_sha256(temp / name) for name in sorted(files)}})
        for name in stale - set(files):
            (self.path / name).unlink(missing_ok=True)
        return [self.path / name for name in [*files, SET_RECORD]]
