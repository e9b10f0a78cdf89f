"""Files written so that a run that dies half-way leaves the old file or folder, never half of a new one, and a
full disk is one line naming what could not be written."""
import errno
import hashlib
import json
import os
import shlex
import shutil
import tempfile
import traceback
from contextlib import contextmanager
from pathlib import Path

from minbert.common.errors import CheckpointError, DiskFullError, UsageError, did_you_mean

# Where a command reads and writes by default. Run from a checkout of the repository (the scripts at its root, or
# `pip install -e .`), the course's data lies beside it (../shared/data) and the outputs go inside it (runs/,
# predictions/), wherever the command runs from. Installed as a package, the outputs go into the current folder and
# the data folder is named by --data-dir or by the environment variable MINBERT_DATA_DIR (which also wins in a
# checkout). A path given on the command line is relative to the current folder, as in any command.
PACKAGE = Path(__file__).resolve().parents[1]
CHECKOUT = PACKAGE.parent if (PACKAGE.parent / "pyproject.toml").is_file() else None
HOME = CHECKOUT or Path.cwd()
DATA_VARIABLE = "MINBERT_DATA_DIR"
DEFAULT_DATA = (Path(os.environ[DATA_VARIABLE]).resolve() if os.environ.get(DATA_VARIABLE)
                else CHECKOUT.parent / "shared" / "data" if CHECKOUT else HOME / "data")


def absolute(path: str | Path) -> str:
    """A path as an absolute one, as it is spelled (~ expanded, . and .. taken out, links kept): what a run config
    records, so that a command run from another folder finds the same file."""
    return os.path.abspath(os.path.expanduser(path))


def same_place(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file or folder, however spelled (runs/x, ./runs/x, /home/me/runs/x, a link)."""
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def in_repository(path: str) -> str:
    """A default folder or file of the commands (runs/multitask, predictions): `path` inside the checkout, or inside
    the current folder for an installed package."""
    return str(HOME / path)


# The recipes shipped with the package (minbert/recipes/): --config quick-start names quick-start.yaml there, and
# search.py's --space quick-start names search/quick-start.yaml.
RECIPES = PACKAGE / "recipes"


def recipe_file(name: str, folder: Path = RECIPES) -> str:
    """A --config or --space value as a file: the file it names, or else the packaged recipe of that name
    (quick-start -> minbert/recipes/quick-start.yaml); a name that is neither is returned as given, for the
    reader to refuse (unknown_recipe says what to write instead)."""
    packaged = folder / f"{name}.yaml"
    return str(packaged) if not Path(name).exists() and "/" not in name and packaged.is_file() else name


def packaged_recipes(folder: Path = RECIPES) -> str:
    """The names of the packaged recipes in `folder`, as a message lists them."""
    return ", ".join(recipe_names(folder))


def recipe_names(folder: Path = RECIPES) -> list[str]:
    return sorted(path.stem for path in folder.glob("*.yaml"))


def unknown_recipe(name: str, folder: Path = RECIPES, what: str = "recipe") -> str:
    """What is wrong with a --config or --space value that names no file and no packaged recipe (quickstart): the
    recipes there are (what: "recipe", or "space" for search.py's), and the nearest; "" for a file or a recipe that
    exists."""
    if Path(recipe_file(name, folder)).exists():
        return ""
    if "/" in name:  # a path: not meant as a recipe's name
        return "no such file"
    guess = did_you_mean(name, recipe_names(folder))
    return (f"no such file, and no {what} of that name comes with the toolkit{f'; {guess}' if guess else ''} "
            f"(the {what}s: {packaged_recipes(folder)})")


def missing_default_data(path: Path) -> str | None:
    """What to do when a data file is missing because the default data folder does not exist: one line for the
    user, or None when `path` is not in the default data folder or the folder exists."""
    folder = Path(path).parent
    if folder.is_dir() or folder.resolve() != DEFAULT_DATA.resolve():
        return None
    return (f"the data folder {folder} does not exist: give --data-dir FOLDER (the course's data files), or set "
            f"{DATA_VARIABLE}")


# Less than this left on a device when a write fails means the disk is full, whatever the writer said: torch.save
# reports a full disk as "unexpected pos 576 vs 534", safetensors and tokenizers as "os error 28" in a message.
NEARLY_FULL = 1 << 20


def _size(path: Path | None) -> int:
    """Bytes of a file, or of the files under a folder; 0 when there is nothing."""
    if path is None or not path.exists():
        return 0
    if path.is_file():
        return path.stat().st_size
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def _shown_size(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size / 1e3:.1f} kB"


def free_space(folder: Path) -> str:
    """The space left on the device of `folder`, as a message says it."""
    return _shown_size(shutil.disk_usage(folder).free)


def _is_disk_full(error: BaseException, folder: Path) -> bool:
    cause = error
    while cause is not None:
        if isinstance(cause, DiskFullError) or (isinstance(cause, OSError) and cause.errno in (errno.ENOSPC,
                                                                                              errno.EDQUOT)):
            return True
        if "No space left on device" in str(cause) or "os error 28" in str(cause):
            return True
        cause = cause.__cause__ or cause.__context__
    try:  # torch.save's errors say nothing of the cause; an OSError that is not ENOSPC is another failure
        return isinstance(error, RuntimeError) and shutil.disk_usage(folder).free < NEARLY_FULL
    except OSError:
        return False


def _disk_full_error(error: BaseException, target: Path, written: Path | None, expected: int,
                     kept: str = "") -> DiskFullError | None:
    """The one line for a write of `target` that found the disk full, or None for any other failure. written: the
    half-written temporary copy (removed here, so that the free space said is what the user has); expected: the
    best guess of the bytes the whole write needs (0: none); kept: what is intact."""
    if not _is_disk_full(error, target.parent):
        return None
    # The writer's finished frames go: a file one of them still holds open (torch.save's) keeps its space taken.
    traceback.clear_frames(error.__traceback__)
    size = _size(written)
    if written is not None:
        shutil.rmtree(written, ignore_errors=True) if written.is_dir() else written.unlink(missing_ok=True)
    free = shutil.disk_usage(target.parent).free
    needed = (f"it needs about {_shown_size(max(size, expected))}, " if expected else
              f"it needs more than {_shown_size(size)}, " if size else "")
    kept = kept or (f"the previous {target.name} is intact" if target.exists() else "nothing of it was written")
    return DiskFullError(f"{target}: no space left on the device; {kept} ({needed}{_shown_size(free)} free)")


def _as_umask_allows(path: Path) -> None:
    """`path` (and what a folder holds) readable as the umask allows: files 0666 and folders 0777 less the umask,
    as open() and mkdir() make them (0644 and 0755 under umask 022, as transformers and sentence-transformers
    save). mkstemp, mkdtemp and safetensors make them 0600 and 0700: unreadable to a teammate or a shared folder."""
    mask = os.umask(0)
    os.umask(mask)
    for entry in [path, *path.rglob("*")] if path.is_dir() else [path]:
        if not entry.is_symlink():
            entry.chmod((0o777 if entry.is_dir() else 0o666) & ~mask)



def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read a block at a time (model weights do not fit twice in memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()

@contextmanager
def atomic_file(path: str | Path):
    """Yield a temporary path next to `path`; on success it replaces `path` in one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        yield Path(temp)
        _as_umask_allows(Path(temp))
        os.replace(temp, path)
    except Exception as error:
        full = _disk_full_error(error, path, Path(temp), _size(path))
        if full is None:
            raise
        raise full from None
    finally:
        Path(temp).unlink(missing_ok=True)


@contextmanager
def atomic_directory(path: str | Path, expected: int = 0):
    """Yield a temporary folder; on success it takes the place of `path` (the old one is removed). expected: about
    how many bytes the folder takes (a disk that fills up says so), if the old one is no guide.

    The swap is two renames: path -> .path.old, then temp -> path, then .path.old is removed. A process that
    dies at any point leaves one complete folder, path or .path.old, which recover_directory puts back; one that a
    signal stops (KeyboardInterrupt) puts it back itself.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield temp
        _as_umask_allows(temp)
        old = path.with_name(f".{path.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if path.exists():
            path.rename(old)
        temp.rename(path)
        shutil.rmtree(old, ignore_errors=True)
    except KeyboardInterrupt:  # a signal that stops the command at once: the old folder back if the swap was half-way
        recover_directory(path)
        raise
    except Exception as error:
        full = _disk_full_error(error, path, temp, max(expected, _size(path)))
        if full is None:
            raise
        raise full from None
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


# atomic_files: the complete set of new files waits here, inside the folder, until each is in place.
READY = ".files.ready"
# A set's record of what it holds (common/outputs.py): moved into place last, so that once it is there, so is its set.
SET_RECORD = "written-by.json"


@contextmanager
def atomic_files(folder: str | Path, expected: int = 0):
    """Yield a temporary folder; on success its files (subfolders too) take their places in `folder` as one set,
    and the folder's other files stay as they are: an output folder may hold the user's files, a TensorBoard
    folder, other runs. expected: about how many bytes the files take (a disk that fills up says so).

    Once the set is complete the temporary folder is renamed to folder/.files.ready, then each file is moved into
    place. A process that dies before that rename leaves the old files; one that dies after it leaves
    .files.ready, whose files recover_files moves into place: the folder ends with one whole set, never parts of two.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(dir=folder, prefix=".files.", suffix=".tmp"))
    try:
        yield temp
        _as_umask_allows(temp)
        temp.rename(folder / READY)
        _move_into(folder / READY, folder)
    except KeyboardInterrupt:  # a signal that stops the command at once: a complete set moved the rest of the way in
        recover_files(folder)
        raise
    except Exception as error:
        full = _disk_full_error(error, folder, temp, expected, kept=f"the files in {folder} are as they were")
        if full is None:
            raise
        raise full from None
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _move_into(ready: Path, folder: Path) -> None:
    """Each file under `ready` to its place in `folder` (one rename each, the set's record last), then `ready` goes."""
    for file in sorted((path for path in ready.rglob("*") if not path.is_dir()), key=lambda path: (
            path == ready / SET_RECORD, path)):
        target = folder / file.relative_to(ready)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(file, target)
    shutil.rmtree(ready)


def recover_files(folder: str | Path) -> None:
    """After a crash in atomic_files: a complete set moved the rest of the way in, an incomplete one removed."""
    folder = Path(folder)
    if (folder / READY).is_dir():
        _move_into(folder / READY, folder)
    for temp in folder.glob(".files.*.tmp"):
        shutil.rmtree(temp, ignore_errors=True)


def remove_entry(path: str | Path) -> None:
    """Remove a file or folder of ours. A folder is renamed to a temporary name first (.name.removed.tmp, which
    recover_directory removes), so that a process that dies meanwhile leaves it whole or gone, never half."""
    path = Path(path)
    if not path.is_dir():
        path.unlink(missing_ok=True)
        return
    doomed = path.with_name(f".{path.name}.removed.tmp")
    shutil.rmtree(doomed, ignore_errors=True)
    path.rename(doomed)
    shutil.rmtree(doomed)


def why_not_removable(entry: str | Path) -> str:
    """Why the system would not let remove_entry remove `entry` whole (the path and the system's reason), or "" if
    it would: asked of the system itself, with nothing removed, since permissions alone do not tell (root ignores
    them; an immutable or append-only file, a read-only or mounted folder, stop root too). Every folder it would
    change must take a file and let it go again; every file must take a second name (the system refuses one to an
    immutable or append-only file, which it would not remove either); no folder may be a mount point."""
    entry = Path(entry)
    folders = [entry.parent, *(Path(root) for root, _, _ in os.walk(entry))]  # os.walk follows no link
    files = [Path(root) / name for root, _, names in os.walk(entry) for name in names] if entry.is_dir() else [entry]
    for folder in folders[1:]:
        if os.path.ismount(folder):
            return f"{folder}: a mount point"
    try:
        for folder in folders:
            probe = tempfile.NamedTemporaryFile(dir=folder, prefix=".removable-", suffix=".tmp", delete=True)
            probe.close()
        for file in files:
            if file.is_symlink():
                continue  # a link inside the entry goes as a name of its folder, whatever it points to
            twin = file.with_name(f".{file.name}.removable.tmp")
            os.link(file, twin)
            os.unlink(twin)
    except OSError as error:
        return f"{error.filename}: {error.strerror or error}"
    return ""


_made: set[Path] = set()  # the folders this command created and may take back (made_here)


def make_folders(folder: str | Path) -> list[Path]:
    """Create `folder` and its missing parents; the ones created, deepest first (for remove_empty)."""
    folder = Path(folder)
    missing = [path for path in (folder, *folder.parents) if not path.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    _made.update(path.resolve() for path in missing)
    return missing


def made_here(folder: str | Path) -> bool:
    """Whether this command created `folder` (an output folder it takes back if refused): not the user's, so not
    what a hint about the user's folders names."""
    return Path(folder).resolve() in _made


def remove_empty(folders: list[Path]) -> None:
    """Remove those of `folders` (deepest first) that hold nothing: what a refused command created, it takes back.
    Those that stay hold what the command wrote: from then on the user's (made_here no longer names them)."""
    for index, folder in enumerate(folders):
        try:
            folder.rmdir()
        except OSError:  # it holds something (or is gone): it stays, and so do its parents
            _made.difference_update(path.resolve() for path in folders[index:])
            return
        _made.discard(folder.resolve())


def check_writable(folder: str | Path, flag: str, shown: Path | None = None) -> None:
    """Fail before any training if `folder` cannot be created or written, not at the first save. shown: what the
    message names as the flag's value (default: the folder). Folders it had to create are removed again."""
    reason = why_not_writable(folder)
    if reason:
        raise UsageError(f"{flag} {shown or folder}: cannot write there ({reason})")


def why_not_writable(folder: str | Path) -> str:
    """Why `folder` cannot be created or written (the system's reason), or "" if it can; folders it had to create
    are removed again."""
    folder, made = Path(folder), []
    try:
        made = make_folders(folder)
        probe = tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-", delete=True)
        probe.close()
    except OSError as error:
        return error.strerror or str(error)
    finally:
        remove_empty(made)
    return ""


def check_writable_file(path: str | Path, flag: str) -> None:
    """Fail before the work if the file `path` cannot be written (its folder cannot be, or it is a folder)."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{flag} {path}: a folder; give the name of a file to write")
    check_writable(path.parent, flag, shown=path)


def load_or_fail(path: str | Path, load, what: str):
    """load(path), with any failure (missing, truncated, not the format) turned into one line naming the file."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: file not found")
    try:
        return load(path)
    except Exception as error:  # whatever the loader raises on a bad file, the user gets its name and the reason
        raise CheckpointError(f"{path}: cannot read {what} ({load_failure(error)})") from None


def load_failure(error: Exception) -> str:
    """Why a file did not load, in one whole line: torch's refusal of a pickle holding more than tensors said as
    what it is (never its advice to load it with weights_only=False, which would run the file's code), any other
    error's first line, cut at a word with an ellipsis, not in the middle of one."""
    text = str(error).strip()
    if text.startswith("Weights only load failed"):
        return "it holds Python objects, not only tensors, and such a file is never unpickled: its code could run"
    reason = text.splitlines()[0] if text else ""
    if len(reason) > 200:
        reason = reason[:200].rsplit(" ", 1)[0] + " ..."
    return f"{type(error).__name__}: {reason}" if reason else type(error).__name__


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


def append_jsonl(path: str | Path, record: dict, create: bool = True) -> None:
    """One JSON object a line (metrics logs): appended, so earlier lines are never rewritten (a line cut short by a
    full disk is dropped when the run is resumed). create: False where the file must exist already (a
    FileNotFoundError if it does not, never a new file)."""
    path, line = Path(path), json.dumps(record) + "\n"
    try:
        handle = os.open(path, os.O_WRONLY | os.O_APPEND | (os.O_CREAT if create else 0), 0o666)
        with open(handle, "a", encoding="utf-8") as f:
            f.write(line)
    except FileNotFoundError:
        raise
    except OSError as error:
        full = _disk_full_error(error, path, None, len(line.encode()), kept="its earlier lines are intact")
        if full is None:
            raise
        raise full from None


def without_local_path(text: str) -> str:
    """An absolute or home-relative path shortened to its last part, any other text as it is (what is shared, a card
    or a run config: where the files lay on the machine that trained it means nothing elsewhere, and may say too
    much)."""
    return (Path(text).name or text) if text.startswith(("/", "~")) else text


def without_local_paths(command: str) -> str:
    """The command with each of its paths shortened by without_local_path (a flag's --flag=PATH too)."""
    def shorten(word: str) -> str:
        flag, equals, value = word.partition("=") if word.startswith("--") else ("", "", word)
        return flag + equals + without_local_path(value)
    return shlex.join(shorten(word) for word in shlex.split(command))
