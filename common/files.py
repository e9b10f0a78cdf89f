"""Files written so that a run that dies half-way leaves the old file or folder, never half of a new one."""
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from common.errors import CheckpointError, UsageError

# The course's data, beside the project (../shared/data); every command takes --data-dir to point elsewhere.
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@contextmanager
def atomic_file(path: str | Path):
    """Yield a temporary path next to `path`; on success it replaces `path` in one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        yield Path(temp)
        os.chmod(temp, 0o644)  # mkstemp makes 0600 files; outputs are meant to be shared
        os.replace(temp, path)
    finally:
        Path(temp).unlink(missing_ok=True)


@contextmanager
def atomic_directory(path: str | Path):
    """Yield a temporary folder; on success it takes the place of `path` (the old one is removed).

    The swap is two renames: path -> .path.old, then temp -> path, then .path.old is removed. A process that
    dies at any point leaves one complete folder, path or .path.old, which recover_directory puts back.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield temp
        old = path.with_name(f".{path.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if path.exists():
            path.rename(old)
        temp.rename(path)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def recover_directory(path: str | Path) -> None:
    """After a crash: the newest complete folder back at `path`, and no half-written temporary folders.

    If a save died between its two renames, only .path.old holds a complete folder: it becomes path again.
    If it died after them, .path.old is a leftover. Temporary folders (.path.*.tmp) are never complete.
    """
    path = Path(path)
    old = path.with_name(f".{path.name}.old")
    if old.exists() and not path.exists():
        old.rename(path)
    shutil.rmtree(old, ignore_errors=True)
    for temp in path.parent.glob(f".{path.name}.*.tmp"):
        shutil.rmtree(temp, ignore_errors=True) if temp.is_dir() else temp.unlink(missing_ok=True)


def check_writable(folder: str | Path, flag: str) -> None:
    """Fail before any training if `folder` cannot be created or written, not at the first save."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-", delete=True)
        probe.close()
    except OSError as error:
        raise UsageError(f"{flag} {folder}: cannot write there ({error.strerror or error})") from None


def load_or_fail(path: str | Path, load, what: str):
    """load(path), with any failure (missing, truncated, not the format) turned into one line naming the file."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: file not found")
    try:
        return load(path)
    except Exception as error:  # whatever the loader raises on a bad file, the user gets its name and the reason
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"{path}: cannot read {what} ({type(error).__name__}: {reason[:200]})") from None


def write_json(path: str | Path, value) -> None:
    with atomic_file(path) as temp:
        temp.write_text(json.dumps(value, indent=2, default=str) + "\n", encoding="utf-8")


def read_json(path: str | Path) -> dict:
    """A JSON file we wrote (or a checkpoint's config); any failure is one line naming the file."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path}: line {error.lineno}: not valid JSON ({error.msg})") from None
    except (OSError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: cannot read ({error})") from None


def append_jsonl(path: str | Path, record: dict) -> None:
    """One JSON object a line (metrics logs): appended, so earlier lines are never rewritten."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
