"""One command at a time in a place: an exclusive lock (flock) on a lock file that holds the holder's pid.

Every folder or file a command writes takes it: a run folder (its .lock), a --predictions-dir, an ensemble's report,
predict.py's --output. The kernel drops the lock of a process however it ends (kill -9 too), so a lock file left
by a killed command is stale: the next command locks it and writes its own pid. The lock file is also how a command
knows its place is still where it was: a folder moved (mv) or removed while the command runs takes its lock file
with it (in_place).
"""
import fcntl
import os
from pathlib import Path

from minbert.common.errors import UsageError

# The lock files this process holds (resolved path -> [open lock file, claims]): a process holds a place once, so
# that a second claim by the same process (a library caller building two runs in one folder) is not refused.
_held: dict[str, list] = {}


def _key(lock_file: Path) -> str:
    return str(Path(lock_file).resolve())


def lock(lock_file: Path, in_use: str, place: str = "") -> None:
    """Lock `lock_file` for this process; held by another, a UsageError: `in_use` with {pid} its holder's pid.
    place: what the message of a lock that cannot be written names (the flag and its value); the lock file is then
    removed, so that a full disk leaves none."""
    key = _key(lock_file)
    if key in _held:
        _held[key][1] += 1
        return
    while True:
        # Unbuffered: a pid that does not fit (a full disk) fails at its write, once, and closing the file does not
        # flush it again (which would raise the same error from inside the handler of the first).
        handle = open(lock_file, "a+b", buffering=0)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().decode("ascii", "replace").strip()
            handle.close()
            raise UsageError(in_use.format(pid=holder or "?")) from None
        try:  # the holder may have released it and removed the file after we opened it: lock the new one
            if os.stat(lock_file).st_ino == os.fstat(handle.fileno()).st_ino:
                break
        except FileNotFoundError:
            pass
        handle.close()
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n".encode("ascii"))
    except OSError as error:  # a full disk (ENOSPC): the pid does not fit
        Path(lock_file).unlink(missing_ok=True)
        handle.close()
        raise UsageError(f"{place or lock_file}: cannot write there ({error.strerror or error})") from None
    _held[key] = [handle, 1]


def in_place(lock_file: Path) -> bool:
    """Whether the lock file this process holds is still at its path: False once its folder was moved or removed
    (or the file itself was). A lock this process does not hold counts as in place: there is nothing to compare."""
    held = _held.get(_key(lock_file))
    if held is None:
        return True
    try:
        there = os.stat(lock_file)
    except OSError:
        return False
    ours = os.fstat(held[0].fileno())
    return (there.st_dev, there.st_ino) == (ours.st_dev, ours.st_ino)


def now_at(lock_file: Path) -> Path | None:
    """Where the lock file this process holds is now, wherever it was moved (Linux: /proc/self/fd); None once it
    was removed, where the system cannot tell, or for a lock this process does not hold."""
    held = _held.get(_key(lock_file))
    if held is None:
        return None
    try:
        where = os.readlink(f"/proc/self/fd/{held[0].fileno()}")
    except OSError:
        return None
    return None if where.endswith(" (deleted)") else Path(where)


def unlock(lock_file: Path) -> None:
    """End a claim; the process's last claim unlocks and removes the lock file, wherever its folder was moved."""
    key = _key(lock_file)
    if key not in _held:
        return
    _held[key][1] -= 1
    if _held[key][1] == 0:
        here = in_place(lock_file)
        moved = None if here else now_at(lock_file)
        handle = _held.pop(key)[0]
        if here or moved:  # before unlocking: no one can lock the file we remove
            (Path(lock_file) if here else moved).unlink(missing_ok=True)
        handle.close()
