"""One command at a time in a place: an exclusive lock (flock) on a lock file that holds the holder's pid.

Every folder or file a command writes takes it: a run folder (its .lock), a --predictions-dir, an ensemble's report,
predict.py's --output. The kernel drops the lock of a process however it ends (kill -9 too), so a lock file left
by a killed command is stale: the next command locks it and writes its own pid.
"""
import fcntl
import os
from pathlib import Path

from minbert.common.errors import UsageError

# The lock files this process holds (resolved path -> [open lock file, claims]): a process holds a place once, so
# that a second claim by the same process (a library caller building two runs in one folder) is not refused.
_held: dict[str, list] = {}


def lock(lock_file: Path, in_use: str) -> None:
    """Lock `lock_file` for this process; held by another, a UsageError: `in_use` with {pid} its holder's pid."""
    key = str(Path(lock_file).resolve())
    if key in _held:
        _held[key][1] += 1
        return
    while True:
        handle = open(lock_file, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            raise UsageError(in_use.format(pid=holder or "?")) from None
        try:  # the holder may have released it and removed the file after we opened it: lock the new one
            if os.stat(lock_file).st_ino == os.fstat(handle.fileno()).st_ino:
                break
        except FileNotFoundError:
            pass
        handle.close()
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    _held[key] = [handle, 1]


def unlock(lock_file: Path) -> None:
    """End a claim; the process's last claim unlocks and removes the lock file."""
    key = str(Path(lock_file).resolve())
    if key not in _held:
        return
    _held[key][1] -= 1
    if _held[key][1] == 0:
        handle = _held.pop(key)[0]
        Path(lock_file).unlink(missing_ok=True)  # before unlocking: no one can lock the file we remove
        handle.close()
