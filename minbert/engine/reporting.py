"""Where a run's numbers go, beside what it prints: the metrics log (OUTPUT_DIR/metrics.jsonl, always) and the
loggers --report-to chooses (REPORTERS: tensorboard, mlflow). Each is a callback (engine/callbacks.py) of the
metrics log's lines (on_log), and is told the run's flags once they are known (log_config). Rank 0 alone writes;
a logger's library is imported only by the runs that ask for it. The loggers name the numbers alike:
train/loss/<name>, train/epoch_loss/<name>, train/lr, train/head_lr, train/examples_per_s, dev/<metric> (a
multi-stage run's with its stage first: unsup/train/loss/loss)."""
import os
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from minbert.common.errors import UsageError
from minbert.common.files import check_writable, load_failure, make_folders, remove_empty, why_not_writable
from minbert.common.run_folder import RunFolder
from minbert.engine.callbacks import Callback

REPORTERS = ("tensorboard", "mlflow")


def scalars(record: dict) -> dict[str, float]:
    """A line of the metrics log as the loggers' numbers, by name."""
    prefix = f"{record['stage']}/" if record.get("stage") else ""
    values = {f"{prefix}{tag}/{name}": value
              for group, tag in (("loss", "train/loss"), ("train_loss", "train/epoch_loss"), ("dev", "dev"))
              for name, value in record.get(group, {}).items()}
    return values | {f"{prefix}train/{name}": record[name] for name in ("lr", "head_lr", "examples_per_s")
                     if name in record}


class Reporter(Callback):
    """A destination of the metrics log's lines."""

    def log_config(self, flags: dict) -> None:
        """The run's flags, with the values chosen for flags left to a default."""

    def close(self, failed: bool) -> None:
        """The command's end (failed: by an error)."""

    def files(self) -> list[Path]:
        """The files it made for this command (the run folder records those inside it as the run's)."""
        return []


class MetricsLog(Reporter):
    """OUTPUT_DIR/metrics.jsonl: one JSON object a line."""

    def __init__(self, folder: RunFolder):
        self.folder = folder

    def on_log(self, state, control, record):
        self.folder.append_record(record)


class TensorBoard(Reporter):
    """--report-to tensorboard (or --tensorboard DIR): the lines' numbers as scalars at their step; the flags as
    hparams (its HPARAMS tab, in this folder, not a sub-run) and as text. An event file that cannot be written (a
    full disk) stops the command with one line; one that could not even be started is removed, with the folders
    made for it."""

    def __init__(self, folder: str, flag: str = "--tensorboard"):
        from torch.utils.tensorboard import SummaryWriter

        self.folder, self.flag = Path(folder), flag
        _quiet_event_writer_threads()
        before = set(self.folder.glob("*")) if self.folder.is_dir() else set()
        made = make_folders(folder)
        try:
            with self.writing():
                self.writer = SummaryWriter(folder)  # which makes its event file at once
        except BaseException:
            for events in self.folder.glob(f"events.out.tfevents.*.{socket.gethostname()}.{os.getpid()}.*"):
                events.unlink(missing_ok=True)  # this process's, made a moment ago: it holds nothing of a run
            remove_empty(made)
            raise
        self.made = sorted(set(self.folder.glob("*")) - before)

    def files(self):
        return self.made

    @contextmanager
    def writing(self):
        """What the event file's writer raises as one line (its writes fail in a thread of its own and are raised
        at the next write or flush)."""
        try:
            yield
        except OSError as error:
            raise UsageError(f"{self.flag} {self.folder}: cannot write its event file "
                             f"({error.strerror or error})") from None

    def log_config(self, flags):
        from torch.utils.tensorboard.summary import hparams

        values = {name: value if isinstance(value, (bool, int, float, str)) else str(value)
                  for name, value in flags.items()}
        with self.writing():
            for summary in hparams(values, {}):
                self.writer.file_writer.add_summary(summary)
            self.writer.add_text("flags", "\n".join(f"    --{name.replace('_', '-')} {value}"
                                                    for name, value in flags.items()))

    def on_log(self, state, control, record):
        with self.writing():
            for name, value in scalars(record).items():
                self.writer.add_scalar(name, value, record["step"])
            self.writer.flush()

    def close(self, failed):
        try:
            self.writer.close()
        except OSError:  # a write that failed, said already (or the command's own error is what it says)
            pass


def _quiet_event_writer_threads() -> None:
    """TensorBoard's event file is written by a thread of its own, which prints the traceback of a write that
    failed (a full disk) before the writer raises the same error, which the command says in one line: that
    thread's traceback is left out (any other thread's is printed as before)."""
    previous = threading.excepthook
    if getattr(previous, "quiet_event_writers", False):
        return

    def hook(args):
        if not (type(args.thread).__name__ == "_AsyncWriterThread" and isinstance(args.exc_value, OSError)):
            previous(args)

    hook.quiet_event_writers = True
    threading.excepthook = hook


class MLflow(Reporter):
    """--report-to mlflow: one MLflow run per command, in MLflow's tracking store ($MLFLOW_TRACKING_URI; unset,
    MLflow's default, ./mlflow.db) and experiment ($MLFLOW_EXPERIMENT_NAME; unset, MLflow's Default), named after
    --output-dir: the lines' numbers as metrics at their step, the flags as parameters. `mlflow ui` (or `mlflow
    server --backend-store-uri sqlite:///mlflow.db`) shows them."""

    def __init__(self, run_name: str):
        import mlflow

        self.client = mlflow.MlflowClient()
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "Default")
        found = self.client.get_experiment_by_name(name)
        experiment_id = found.experiment_id if found else self.client.create_experiment(name)
        self.run_id = self.client.create_run(experiment_id, run_name=run_name).info.run_id

    def log_config(self, flags):
        from mlflow.entities import Param

        self.client.log_batch(self.run_id, params=[Param(name, str(value)) for name, value in flags.items()])

    def on_log(self, state, control, record):
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(name, value, timestamp, record["step"])
                                                    for name, value in scalars(record).items()])

    def close(self, failed):
        self.client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")


def mlflow_uri() -> str:
    """MLflow's tracking store as $MLFLOW_TRACKING_URI names it (unset: ./mlflow.db, as MLflow 3's default)."""
    return os.environ.get("MLFLOW_TRACKING_URI", "") or "sqlite:///mlflow.db"


def mlflow_store(report_to: str) -> Path | None:
    """The local path of MLflow's tracking store that --report-to mlflow writes ($MLFLOW_TRACKING_URI: a sqlite:///
    or file: URI, or a folder; unset, ./mlflow.db), or None: no MLflow, or a store on a server."""
    if "mlflow" not in report_to.split(","):
        return None
    uri = mlflow_uri()
    for scheme in ("sqlite:///", "file://", "file:"):
        if uri.startswith(scheme):
            return Path(uri.removeprefix(scheme))
    return None if "://" in uri else Path(uri)


def check_mlflow_store(store: Path) -> None:
    """A local tracking store checked before MLflow opens it: MLflow retries a database it cannot open for two
    minutes, and takes a path that is not a database for its old folder store, which it no longer writes."""
    uri = mlflow_uri()
    unusable = f"--report-to mlflow: cannot write MLflow's tracking store {uri}"
    database = store.is_file() and _is_sqlite(store)
    if not uri.startswith("sqlite:"):
        if store.is_file():  # MLflow would take it for a folder store
            raise UsageError(f"{unusable} (a file, not a folder: set MLFLOW_TRACKING_URI="
                             f"sqlite:///{store if database else store.parent / 'mlflow.db'})")
        return
    if store.exists() and not store.is_file():
        raise UsageError(f"{unusable} (not a file: a folder, a device or a pipe)")
    if store.is_file() and store.stat().st_size and not database:
        raise UsageError(f"{unusable} (a file that is not an SQLite database)")
    reason = why_not_writable(store.parent)
    if reason:
        raise UsageError(f"{unusable} ({reason})")


def _is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as file:
            return file.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def reporters(report_to: str, tensorboard: str, folder: RunFolder) -> list[Reporter]:
    """The metrics log and the loggers of --report-to NAMES (--tensorboard DIR alone reports to TensorBoard, in
    DIR; --report-to tensorboard without it, in OUTPUT_DIR/tensorboard)."""
    names = [name for name in report_to.split(",") if name]
    unknown = [name for name in names if name not in REPORTERS]
    if unknown:
        raise UsageError(f"--report-to {report_to}: {', '.join(unknown)} is not one of {', '.join(REPORTERS)}")
    chosen = [MetricsLog(folder)]
    store = mlflow_store(report_to)
    if store:
        check_mlflow_store(store)
    if "tensorboard" in names or tensorboard:
        flag = "--tensorboard" if tensorboard else "--report-to tensorboard:"
        tensorboard = tensorboard or str(folder.path / "tensorboard")
        check_writable(tensorboard, flag)
        chosen.append(TensorBoard(tensorboard, flag))
    if "mlflow" in names:
        new = store is not None and not store.exists()
        try:
            chosen.append(MLflow(Path(folder.path).resolve().name))
        except Exception as error:  # a full disk, a server that does not answer
            if new and store.is_file() and not store.stat().st_size:
                store.unlink()  # the database it began holds nothing (a full disk)
            raise UsageError(f"--report-to mlflow: cannot write MLflow's tracking store {mlflow_uri()} "
                             f"({load_failure(error)})") from None
    return chosen
