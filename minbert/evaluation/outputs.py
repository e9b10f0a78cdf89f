"""A finished run's saved soft outputs (OUTPUT_DIR/best/outputs-{task}-{split}.pt) and the dev rows they score.

multitask_classifier.py writes one file per task and split: {"ids": [...], "outputs": tensor}, the outputs being
what tasks.Task.soft gives (class probabilities [N, classes], P(paraphrase) [N], scores in [0, 5] [N]).
ensemble.py combines them; analyze.py errors looks at them.
"""
from pathlib import Path

import torch

from minbert.common.errors import CheckpointError, DataError
from minbert.common.files import atomic_file, load_or_fail
from minbert.common.run_folder import RunFolder, add_to_saved
from minbert.data.splits import TaskSplit
from minbert.evaluation.predictions import SPLITS, leaderboard_file
from minbert.tasks import REGISTRY


def write_outputs(folder: Path, split_name: str, splits: dict[str, TaskSplit], outputs: dict[str, torch.Tensor]) -> None:
    """Each task's soft outputs on a split, beside a checkpoint (and in the record of its files, if it has one)."""
    for name, task_outputs in outputs.items():
        path = folder / f"outputs-{name}-{split_name}.pt"
        with atomic_file(path) as temp:
            torch.save({"ids": splits[name].ids, "outputs": task_outputs}, temp)
        add_to_saved(folder, path)


def leaderboard_files(folder: Path, tasks: list[str], splits: tuple[str, ...] = SPLITS) -> dict:
    """The leaderboard files of a checkpoint's saved outputs, those of each task's splits, as a set to write
    (common.outputs.LeaderboardFolder.write)."""
    files = {}
    for task in tasks:
        for split in splits:
            saved = read_outputs(folder / f"outputs-{task}-{split}.pt", task)
            files |= leaderboard_file(task, split, saved["ids"], REGISTRY[task].hard(saved["outputs"]))
    return files


def read_outputs(path: Path, task: str) -> dict:
    saved = load_or_fail(path, lambda file: torch.load(file, map_location="cpu", weights_only=True), "saved outputs")
    if not isinstance(saved, dict) or not {"ids", "outputs"} <= set(saved):
        raise CheckpointError(f"{path}: expected a dict with 'ids' and 'outputs'")
    ids, outputs = list(saved["ids"]), saved["outputs"]
    expected = [len(ids), *REGISTRY[task].soft_shape]  # what outputs-{task}-*.pt holds
    if not isinstance(outputs, torch.Tensor) or list(outputs.shape) != expected:
        shape = list(outputs.shape) if isinstance(outputs, torch.Tensor) else type(outputs).__name__
        raise CheckpointError(f"{path}: outputs of shape {shape} for {len(ids)} ids; expected {expected}")
    if not torch.isfinite(outputs).all():  # weights that were not finite: no ensemble or analysis uses them
        raise CheckpointError(f"{path}: outputs that are not finite (NaN or infinity), of weights that were not; "
                              f"take a checkpoint saved before its run diverged")
    return {"ids": ids, "outputs": outputs}


def load_member(folder: str | Path) -> dict[str, dict[str, dict]]:
    """A member's saved outputs, task -> split -> {"ids", "outputs"}; tasks it has no files for are left out."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: no such folder")
    folder = RunFolder(folder).checkpoint()
    member = {}
    for task in REGISTRY:
        paths = {split: folder / f"outputs-{task}-{split}.pt" for split in SPLITS}
        missing = [path.name for path in paths.values() if not path.is_file()]
        if len(missing) == len(paths):
            continue  # not trained on this task
        if missing:
            raise CheckpointError(f"{folder}: {missing[0]} is missing (its other split is there)")
        member[task] = {split: read_outputs(path, task) for split, path in paths.items()}
    if not member:
        raise CheckpointError(f"{folder}: no outputs-{{task}}-{{dev,test}}.pt files; multitask_classifier.py "
                              f"writes them into OUTPUT_DIR/best/ when training ends (a run stopped earlier has none)")
    return member


def dev_records(data_dir: str | Path, task: str, ids: list[str]) -> list:
    """The labelled rows of `ids`, in their order, from the task's dev file."""
    path = Path(data_dir) / REGISTRY[task].files[1]
    records = REGISTRY[task].read(path, labeled=True)
    record_by_id = {record.id: record for record in records}
    unknown = [i for i in ids if i not in record_by_id]
    if unknown:
        raise DataError(f"{path}: no labelled row for {len(unknown)} of the members' dev ids (e.g. {unknown[0]!r}); "
                        f"is --data-dir the data the members were evaluated on?")
    return [record_by_id[i] for i in ids]


def dev_labels(data_dir: str | Path, task: str, ids: list[str]) -> torch.Tensor:
    """The gold labels of `ids`, in their order, from the task's dev file."""
    return torch.tensor([float(record.label) for record in dev_records(data_dir, task, ids)])
