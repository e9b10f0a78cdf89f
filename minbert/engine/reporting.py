"""Where a run's numbers go, beside what it prints: the metrics log (OUTPUT_DIR/metrics.jsonl, always) and the
loggers --report-to chooses (REPORTERS: tensorboard, mlflow). Each is a callback (engine/callbacks.py) of the
metrics log's lines (on_log), and is told the run's flags once they are known (log_config). Rank 0 alone writes;
a logger's library is imported only by the runs that ask for it. The loggers name the numbers alike:
train/loss/<name>, train/epoch_loss/<name>, train/lr, train/head_lr, train/examples_per_s, dev/<metric> (a
multi-stage run's with its stage first: unsup/train/loss/loss)."""
import os
import time
from pathlib import Path

from minbert.common.errors import UsageError
from minbert.common.files import check_writable, load_failure
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
    hparams (its HPARAMS tab, in this folder, not a sub-run) and as text."""

    def __init__(self, folder: str):
        from torch.utils.tensorboard import SummaryWriter

        before = set(Path(folder).glob("*")) if Path(folder).is_dir() else set()
        self.writer = SummaryWriter(folder)  # which makes its event file at once
        self.made = sorted(set(Path(folder).glob("*")) - before)

    def files(self):
        return self.made

    def log_config(self, flags):
        from torch.utils.tensorboard.summary import hparams

        values = {name: value if isinstance(value, (bool, int, float, str)) else str(value)
                  for name, value in flags.items()}
        for summary in hparams(values, {}):
            self.writer.file_writer.add_summary(summary)
        self.writer.add_text("flags", "\n".join(f"    --{name.replace('_', '-')} {value}"
                                                for name, value in flags.items()))

    def on_log(self, state, control, record):
        for name, value in scalars(record).items():
            self.writer.add_scalar(name, value, record["step"])
        self.writer.flush()

    def close(self, failed):
        self.writer.close()


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


def mlflow_store(report_to: str) -> Path | None:
    """The local path of MLflow's tracking store that --report-to mlflow writes ($MLFLOW_TRACKING_URI: a sqlite:///
    or file: URI, or a folder; unset, ./mlflow.db), or None: no MLflow, or a store on a server."""
    if "mlflow" not in report_to.split(","):
        return None
    uri = os.environ.get("MLFLOW_TRACKING_URI", "") or "sqlite:///mlflow.db"
    for scheme in ("sqlite:///", "file://", "file:"):
        if uri.startswith(scheme):
            return Path(uri.removeprefix(scheme))
    return None if "://" in uri else Path(uri)


def reporters(report_to: str, tensorboard: str, folder: RunFolder) -> list[Reporter]:
    """The metrics log and the loggers of --report-to NAMES (--tensorboard DIR alone reports to TensorBoard, in
    DIR; --report-to tensorboard without it, in OUTPUT_DIR/tensorboard)."""
    names = [name for name in report_to.split(",") if name]
    unknown = [name for name in names if name not in REPORTERS]
    if unknown:
        raise UsageError(f"--report-to {report_to}: {', '.join(unknown)} is not one of {', '.join(REPORTERS)}")
    chosen = [MetricsLog(folder)]
    if "tensorboard" in names or tensorboard:
        tensorboard = tensorboard or str(folder.path / "tensorboard")
        check_writable(tensorboard, "--tensorboard")
        chosen.append(TensorBoard(tensorboard))
    if "mlflow" in names:
        try:
            chosen.append(MLflow(Path(folder.path).resolve().name))
        except Exception as error:  # a store that cannot be written, a server that does not answer
            store = os.environ.get("MLFLOW_TRACKING_URI") or "mlflow.db"
            raise UsageError(f"--report-to mlflow: cannot write MLflow's tracking store {store} "
                             f"({load_failure(error)})") from None
    return chosen
