"""--tensorboard DIR: the metrics log's numbers and the run's flags in TensorBoard (rank 0 writes them; torch's
TensorBoard modules are imported only by the runs that ask for it)."""


def write_scalars(writer, record: dict) -> None:
    """A line of the metrics log (Engine.write_record) as scalars at its step. One set of tags for every trainer:
    train/loss/<name>, train/epoch_loss/<name>, train/lr, train/head_lr, train/examples_per_s, dev/<metric>."""
    for group, prefix in (("loss", "train/loss"), ("train_loss", "train/epoch_loss"), ("dev", "dev")):
        for name, value in record.get(group, {}).items():
            writer.add_scalar(f"{prefix}/{name}", value, record["step"])
    for name in ("lr", "head_lr", "examples_per_s"):
        if name in record:
            writer.add_scalar(f"train/{name}", record[name], record["step"])
    writer.flush()


def write_hparams(writer, flags: dict) -> None:
    """The run's flags in TensorBoard: as hparams (its HPARAMS tab, in this folder, not a sub-run) and as text."""
    from torch.utils.tensorboard.summary import hparams

    values = {name: value if isinstance(value, (bool, int, float, str)) else str(value)
              for name, value in flags.items()}
    for summary in hparams(values, {}):
        writer.file_writer.add_summary(summary)
    writer.add_text("flags", "\n".join(f"    --{name.replace('_', '-')} {value}" for name, value in flags.items()))
