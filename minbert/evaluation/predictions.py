"""The course leaderboard's prediction files: {task}-{dev,test}-output.csv (sst, para, sts; cfimdb too).

The format copies, byte for byte, what the CS224N starter's test_multitask writes and the leaderboard
has always accepted (we do not know the grader's parser, so we do not "fix" it into strict CSV):
    header:  "id \\t Predicted_Sentiment \\n"   (id, space, TAB, space, column name, space)
    rows:    "{id} , {prediction} \\n"          (space-comma-space between the fields)
Readers must therefore strip whitespace around fields, e.g. csv.reader plus str.strip(), or pandas
with sep=r"\\s*,\\s*". 
Predictions: SST an integer class 0-4, paraphrase 0 or 1 (the starter wrote "1.0"; the same number),
STS a float (tasks.Task.format; each task's column is in the registry). One row per id, in the order given.
A run's or an ensemble's files are written as one set (common.outputs.LeaderboardFolder): a command that
dies mid-write leaves the previous set (or none), never half of a file, nor files of two sets.
"""
import os
from collections.abc import Iterable
from pathlib import Path

from minbert.data.readers import id_problem
from minbert.tasks import REGISTRY

SPLITS = ("dev", "test")


def prediction_path(out_dir: str | Path, task: str, split: str) -> Path:
    if task not in REGISTRY:
        raise ValueError(f"unknown task {task!r}; expected one of {', '.join(REGISTRY)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    return Path(out_dir) / f"{task}-{split}-output.csv"


def _format_id(sentence_id) -> str:
    sentence_id = str(sentence_id)
    # The format has no quoting, so an id must not contain its separators (the readers refuse such ids before any
    # training: this is the last guard, for ids from elsewhere).
    problem = id_problem(sentence_id)
    if problem:
        raise ValueError(f"{problem}: {sentence_id!r}")
    return sentence_id


def header_line(task: str) -> str:
    """A leaderboard file's first line."""
    return f"id \t {REGISTRY[task].column} \n"


def row_line(task: str, sentence_id, value) -> str:
    """A leaderboard file's line of one prediction."""
    return f"{_format_id(sentence_id)} , {REGISTRY[task].format(float(value))} \n"


def write_prediction_file(path: str | Path, task: str, ids: Iterable, predictions: Iterable) -> None:
    """Write one prediction file at `path` (a set's temporary path: the set makes it whole). Tensors and arrays are
    accepted."""
    ids = ids.tolist() if hasattr(ids, "tolist") else ids
    predictions = predictions.tolist() if hasattr(predictions, "tolist") else predictions
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(header_line(task))
        for sentence_id, value in zip(ids, predictions, strict=True):
            f.write(row_line(task, sentence_id, value))
        f.flush()
        os.fsync(f.fileno())


def leaderboard_file(task: str, split: str, ids: Iterable, predictions: Iterable) -> dict:
    """{file name: what writes it at a path} for a set of leaderboard files (common.outputs.LeaderboardFolder)."""
    return {prediction_path("", task, split).name: lambda path: write_prediction_file(path, task, ids, predictions)}
