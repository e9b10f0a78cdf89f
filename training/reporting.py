"""Where a run's numbers go, beside what it prints: the metrics log (OUTPUT_DIR/metrics.jsonl, always) and the
loggers --report-to chooses (tensorboard). Each is a callback (training/callbacks.py) of the metrics log's lines
(on_log), and is told the run's flags once they are known (log_config). Rank 0 alone writes; a logger's library
is imported only by the runs that ask for it."""
from common.run_folder import RunFolder
from training.callbacks import Callback


class Reporter(Callback):
    """A destination of the metrics log's lines."""

    def log_config(self, flags: dict) -> None:
        """The run's flags, with the values chosen for flags left to a default."""

    def close(self) -> None:
        """The command's end."""


class MetricsLog(Reporter):
    """OUTPUT_DIR/metrics.jsonl: one JSON object a line."""

    def __init__(self, folder: RunFolder):
        self.folder = folder

    def on_log(self, state, control, record):
        self.folder.append_record(record)


class TensorBoard(Reporter):
    """--tensorboard DIR: the lines' numbers as scalars at their step, one set of tags for every trainer:
    train/loss/<name>, train/epoch_loss/<name>, train/lr, train/head_lr, train/examples_per_s, dev/<metric>; the
    flags as hparams (its HPARAMS tab, in this folder, not a sub-run) and as text."""

    def __init__(self, folder: str):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(folder)

    def log_config(self, flags):
        from torch.utils.tensorboard.summary import hparams

        values = {name: value if isinstance(value, (bool, int, float, str)) else str(value)
                  for name, value in flags.items()}
        for summary in hparams(values, {}):
            self.writer.file_writer.add_summary(summary)
        self.writer.add_text("flags", "\n".join(f"    --{name.replace('_', '-')} {value}"
                                                for name, value in flags.items()))

    def on_log(self, state, control, record):
        for group, prefix in (("loss", "train/loss"), ("train_loss", "train/epoch_loss"), ("dev", "dev")):
            for name, value in record.get(group, {}).items():
                self.writer.add_scalar(f"{prefix}/{name}", value, record["step"])
        for name in ("lr", "head_lr", "examples_per_s"):
            if name in record:
                self.writer.add_scalar(f"train/{name}", record[name], record["step"])
        self.writer.flush()

    def close(self):
        self.writer.close()
