"""A study in its storage, shared by any number of workers (search.py processes, on one machine or several):
where it is kept, which worker runs which trial, how many trials it still needs, and what happens to a trial whose
worker died.

Storage (--storage): an SQLite file in the study folder by default; `journal`, a journal file there (text, appended
to: one line an event, fit to be committed to git); an RDB URL (postgresql://, mysql://, sqlite:///) or a journal
file's path on a shared disk for workers on several machines. The storage a study folder's study is kept in is
recorded there (STORAGE_RECORD) when the study is made, and used when --storage is left out: a command that names
another is refused, so that a study is never continued in a second storage beside the first.

Workers. Every worker records its host and process id on the trials it runs. A trial left running by a worker that
died (killed, out of memory, a machine switched off) is marked failed, and its configuration is run again once as a
new trial (user attribute retry_of): by the next worker that starts on the same machine (it sees the process gone),
and with an RDB storage also by any worker anywhere once the dead worker's heartbeat is older than HEARTBEAT_GRACE.
A trial stopped by Ctrl-C or SIGTERM (a batch job's time limit) is failed and queued again the same way.
"""
import contextlib
import fcntl
import json
import os
import socket
from pathlib import Path

import optuna
from optuna.trial import TrialState

from minbert.common.errors import UsageError
from minbert.common.files import make_folders, write_json
from minbert.common.outputs import STUDY_FILES

HEARTBEAT_INTERVAL, HEARTBEAT_GRACE = 60, 180  # seconds (RDB storages only: Optuna's heartbeat)
COUNTED = (TrialState.COMPLETE, TrialState.PRUNED)
SQLITE, JOURNAL, STORAGE_RECORD = STUDY_FILES


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@contextlib.contextmanager
def one_at_a_time(study_dir: Path, made: list[Path]):
    """Held by one worker of the study folder at a time: two workers that open a new SQLite storage together both
    create its tables, and the second fails ("table alembic_version already exists"). Its lock file is removed when
    the block ends (a refused command leaves nothing behind): a worker that locked a file since removed locks the
    new one.

    The study folder is created here, its new folders added to `made` (for remove_empty): until the lock file is in
    it, another worker starting at the same moment may remove it again (its check that the folder can be written
    takes back the folder it created), and then it is created again."""
    path = study_dir / ".opening.lock"
    while True:
        made.extend(folder for folder in make_folders(study_dir) if folder not in made)
        try:
            lock = open(path, "a")
        except FileNotFoundError:  # the folder was removed since it was made: make it again
            continue
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when a killed worker's process ends
        try:
            if os.stat(path).st_ino == os.fstat(lock.fileno()).st_ino:
                break
        except FileNotFoundError:
            pass
        lock.close()
    try:
        yield
    finally:
        path.unlink(missing_ok=True)  # before unlocking: no one can lock the file we remove
        lock.close()


def recorded_storage(study_dir: Path) -> str | None:
    """The storage the study of a study folder is kept in (as canonical_storage writes it): its record, or for a
    study made before records were kept, the one default storage file in the folder; None if neither says."""
    record = study_dir / STORAGE_RECORD
    if record.is_file():
        try:
            return str(json.loads(record.read_text(encoding="utf-8"))["storage"])
        except (OSError, ValueError, KeyError, TypeError):
            raise UsageError(f"{record}: not the record of the study's storage (a JSON object with its \"storage\"); "
                             f"put it back, or remove it and give --storage") from None
    found = [name for name, file in (("sqlite", SQLITE), ("journal", JOURNAL)) if (study_dir / file).is_file()]
    return found[0] if len(found) == 1 else None


def canonical_storage(storage: str, study_dir: Path) -> str:
    """--storage as the record keeps it: sqlite or journal for the study folder's own files (however they were
    named: the folder may be moved, or cloned with git), an absolute path for any other journal or SQLite file,
    and an RDB URL with its password hidden (a study folder may be committed)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if storage in ("", "sqlite", "journal"):
        return storage or "sqlite"
    if "://" not in storage:
        path = Path(storage).expanduser().resolve()
        return "journal" if path == (study_dir / JOURNAL).resolve() else str(path)
    try:
        url = make_url(storage)
    except ArgumentError:
        return storage
    if url.drivername.startswith("sqlite") and url.database:
        path = Path(url.database).expanduser().resolve()  # relative to the folder the command runs in
        return "sqlite" if path == (study_dir / SQLITE).resolve() else f"sqlite:///{path}"
    return url.render_as_string(hide_password=True)


def study_storage(storage: str, study_dir: Path) -> str:
    """The storage a command opens: --storage, or when it is left out, the one the study folder's study is kept in.
    A --storage other than the study's is refused (UsageError)."""
    recorded = recorded_storage(study_dir)
    if recorded is None:
        return storage
    if not storage:
        if ":***@" in recorded:
            raise UsageError(f"--study-dir {study_dir}: its study is kept in {recorded}, whose password is not "
                             f"recorded; give it: --storage URL")
        return recorded
    if canonical_storage(storage, study_dir) != recorded:
        raise UsageError(f"--storage {storage}: the study in {study_dir} is kept in {shown_storage(recorded)}; leave "
                         f"--storage out to use it, or give another --study-dir")
    return storage


def shown_storage(storage: str) -> str:
    """A storage as --storage takes it, said in a line: the study folder's own files by their flag value."""
    return {"sqlite": f"{SQLITE} (the default --storage)", "journal": f"{JOURNAL} (--storage journal)"}.get(
        storage, storage)


def record_storage(storage: str, study_dir: Path) -> None:
    """Record the storage of the study folder's study, if it is not recorded yet (at the study's start)."""
    if not (study_dir / STORAGE_RECORD).is_file():
        write_json(study_dir / STORAGE_RECORD, {"storage": canonical_storage(storage, study_dir)})


def storage_file(storage: str, study_dir: Path) -> Path | None:
    """The local file a storage is kept in (an SQLite file, a journal), or None for a database server."""
    if storage in ("", "sqlite", "journal"):
        return study_dir / (JOURNAL if storage == "journal" else SQLITE)
    if storage.startswith("sqlite:///"):
        return Path(storage.removeprefix("sqlite:///"))
    return None if "://" in storage else Path(storage)


def open_storage(storage: str, study_dir: Path, must_exist: bool = False) -> tuple[optuna.storages.BaseStorage, str]:
    """The storage that --storage names, and how to say it in a line. must_exist: a command that reads a study
    (--report, --confirm, --resume) creates no storage; one that is not there is refused."""
    if storage in ("", "sqlite", "journal"):
        path = storage_file(storage, study_dir)
        if must_exist and not path.is_file():
            raise UsageError(f"--study-dir {study_dir}: no study there (no {path.name}); give the folder of a study "
                             f"that has trials")
        storage = str(path) if storage == "journal" else f"sqlite:///{path}"
    if "://" in storage:
        try:
            return optuna.storages.RDBStorage(
                storage, engine_kwargs={"connect_args": {"timeout": 60}} if storage.startswith("sqlite") else None,
                heartbeat_interval=HEARTBEAT_INTERVAL, grace_period=HEARTBEAT_GRACE,
                heartbeat_stale_trial_callback=queue_again), storage
        except Exception as error:  # a driver missing, a server that does not answer, a file that is no database
            raise UsageError(f"--storage {storage}: cannot open it ({error.__class__.__name__}: "
                             f"{str(error).splitlines()[0]})") from None
    path = Path(storage)
    if path.is_dir():
        raise UsageError(f"--storage {storage}: a folder; give a journal file's path (or an RDB URL)")
    if must_exist and not path.is_file():
        raise UsageError(f"--storage {storage}: no study there (no such journal file); give the journal of a study "
                         f"that has trials")
    check_journal(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        backend = optuna.storages.journal.JournalFileBackend(storage)
    except OSError as error:
        raise UsageError(f"--storage {storage}: cannot write there ({error.strerror or error})") from None
    return optuna.storages.JournalStorage(backend), f"journal file {storage}"


def check_journal(path: Path) -> None:
    """A journal file whose every line is one of Optuna's (a JSON object and its newline), or none: one cut short (a
    full disk, a kill) or edited is refused, naming the line, before anything is appended to it."""
    try:
        lines = path.read_bytes().split(b"\n") if path.is_file() else [b""]
    except OSError as error:
        raise UsageError(f"{path}: cannot read it ({error.strerror or error})") from None
    for number, line in enumerate(lines, start=1):
        if number == len(lines) and not line:
            return  # after the last newline
        try:
            whole = number < len(lines) and isinstance(json.loads(line), dict)
        except ValueError:
            whole = False
        if not whole:
            raise UsageError(f"{path}: line {number}: not a line of an Optuna journal (cut short, or edited); the "
                             f"study cannot be read: put back a whole copy, or remove the line")


def open_study(storage, name: str, recipe: dict, space: dict, resume: bool, sampler, pruner,
               baseline: dict | None, objective: str = "overall", must_exist: bool = False) -> optuna.Study:
    """The study `name`, created if there is none (with baseline, the recipe's own values, as its first trial), unless
    must_exist (--report, --confirm). A study that has trials is continued only with --resume, and only with the
    recipe, space and objective it was started with (UsageError otherwise): two recipes in one study would rank
    their trials together, and two objectives would rank values of two metrics."""
    recipe, space = json.loads(json.dumps(recipe)), json.loads(json.dumps(space))
    if must_exist and name not in optuna.get_all_study_names(storage):
        raise UsageError(f"no study {name!r} in {storage_name(storage)}; give the --study-dir (or --study-name) of a "
                         f"study that has trials")
    try:  # of workers started together, one creates the study (the storage decides which) and queues its baseline
        study = optuna.create_study(storage=storage, study_name=name, direction="maximize", sampler=sampler,
                                    pruner=pruner)
        study.set_user_attr("recipe", recipe)
        study.set_user_attr("space", space)
        study.set_user_attr("objective", objective)
        if baseline:
            study.enqueue_trial(baseline, user_attrs={"baseline": True})
        return study
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(storage=storage, study_name=name, sampler=sampler, pruner=pruner)
    if study.get_trials(deepcopy=False) and not resume:
        raise UsageError(f"the study {name!r} in {storage_name(storage)} has {len(study.trials)} trial(s) already; "
                         f"add --resume to continue it (or --join to join its other workers), or give another "
                         f"--study-dir")
    saved = study.user_attrs.get("objective", objective)  # a study from before objectives were kept takes ours
    if saved != objective:
        raise UsageError(f"the study {name!r} was started with --objective {saved}, not {objective}: its values are "
                         f"{saved} scores; give --objective {saved}, or another --study-dir")
    for key, value in (("recipe", recipe), ("space", space)):
        saved = study.user_attrs.get(key, value)  # a study made another way takes ours
        if saved != value:
            changed = sorted(k for k in saved.keys() | value.keys() if saved.get(k) != value.get(k))
            raise UsageError(f"the study {name!r} was started with another {key} (it differs in "
                             f"{', '.join(changed)}); give its own, or another --study-dir")
    return study


def storage_name(storage) -> str:
    return getattr(storage, "url", None) or "its journal file"


def trials_needed(study: optuna.Study, wanted: int, number: int | None = None) -> int:
    """How many more trials --trials wanted asks for: finished (complete or pruned) and running trials count, failed
    ones not. With number (a trial just asked for), only the trials before it count: of two workers that asked at
    the same moment for the last trial needed, the later one finds none left."""
    counted = study.get_trials(deepcopy=False, states=COUNTED + (TrialState.RUNNING,))
    return wanted - sum(1 for trial in counted if number is None or trial.number < number)


def fail_dead_workers(study: optuna.Study) -> list[int]:
    """Mark failed the running trials whose worker on this machine is gone, and queue each again; returns their
    numbers. (With an RDB storage, Optuna's heartbeat does the same for every machine's.)"""
    host, failed = socket.gethostname(), []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker_host, _, pid = str(trial.user_attrs.get("worker", "")).rpartition(":")
        if worker_host != host or not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            if study._storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL):
                failed.append(trial.number)
                queue_again(study, trial)
        except optuna.exceptions.UpdateFinishedTrialError:  # another worker got there first
            pass
    optuna.storages.fail_stale_trials(study)  # RDB: heartbeats older than HEARTBEAT_GRACE (calls queue_again)
    return failed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def queue_again(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """Run a failed trial's configuration again as a new trial, once (a retry is not retried: a configuration that
    kills its worker twice is left failed); an interrupted one (a signal stopped its worker) always: the stop was
    not its configuration's doing."""
    if "retry_of" in trial.user_attrs and not trial.user_attrs.get("interrupted"):
        return
    study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
