"""The errors a user can cause and fix. Commands turn them into one line and exit code 2 (cli.run);
anything else is a bug and keeps its traceback."""
import difflib
from collections.abc import Iterable


class UserError(Exception):
    """Something the user can fix: the message names the file (and line) or the flag."""


class DataError(UserError, ValueError):
    """A data file cannot be read as asked."""


class CheckpointError(UserError):
    """A checkpoint (or another file we load) cannot be found or read."""


class UsageError(UserError):
    """Flags that cannot work together or on this machine, found after parsing (e.g. fp16 on a CPU)."""


class FlagError(UsageError, ValueError):
    """A flag's value that this machine, this torch or this data cannot serve (--compile where torch cannot
    compile, a token budget below the longest input), found below the command: a ValueError too, so a config's own
    checks (cli.parse_config) report it as a usage error like cli.run does."""


class DiskFullError(UserError):
    """A write that found no space left on its device (the message names the file or folder and the space needed)."""


class Interrupted(Exception):
    """A command stopped by a signal after saving what lets it go on (the trainers' last/): the message says how.
    cli.run prints it and exits with 128 + the signal's number, as a shell reports a command a signal ended."""

    def __init__(self, message: str, signal_number: int):
        super().__init__(message)
        self.signal_number = signal_number


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """"did you mean X?" for the known name nearest a mistyped one (--epoch: --epochs; quickstart: quick-start), by
    difflib's similarity; "" when none is near enough to be a guess worth printing."""
    # difflib's default cutoff, 0.6, guesses --quiet for --quantize (predict's flag, given to train): a guess that
    # misleads is worse than none. 0.75 keeps a letter dropped, doubled or swapped (--epoch, --tri, fp23).
    nearest = difflib.get_close_matches(word, list(known), n=1, cutoff=0.75)
    return f"did you mean {nearest[0]}?" if nearest else ""


class SignalStop(KeyboardInterrupt):
    """A signal that stops a command at once (a second Ctrl-C, or any signal where there is no step to finish first):
    raised where the command is, as Ctrl-C raises KeyboardInterrupt, so that every `finally` and context exit cleans
    up (locks, temporary files); the command then says where it stands (Interrupted)."""

    def __init__(self, signal_number: int):
        super().__init__()
        self.signal_number = signal_number
