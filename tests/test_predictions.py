import csv
import os

import numpy as np
import pandas as pd
import pytest
import torch

from minbert.common.outputs import LeaderboardFolder
from minbert.evaluation.predictions import leaderboard_file, prediction_path

IDS = ["0a1b", "ffe3", "91cd", "77aa"]


def write_predictions(folder, task: str, split: str, ids, predictions):
    """One leaderboard file, written as the commands write theirs: a set (of one), with its record."""
    leaderboard = LeaderboardFolder(folder, "--predictions-dir", "a test").claim(overwrite=False)
    try:
        return leaderboard.write(leaderboard_file(task, split, ids, predictions))[0]
    finally:
        leaderboard.release()


def read_rows(path) -> tuple[list[str], list[list[str]]]:
    """Parse a prediction file the way a tolerant grader would: csv, fields stripped."""
    with open(path, newline="") as f:
        header = f.readline()
        rows = [[field.strip() for field in row] for row in csv.reader(f)]
    return [name.strip() for name in header.split("\t")], rows


def test_file_name_header_and_rows_follow_the_course_starter(tmp_path):
    path = write_predictions(tmp_path, "sst", "dev", IDS, torch.tensor([4, 0, 2, 2]))
    assert path == tmp_path / "sst-dev-output.csv"
    text = path.read_text()
    assert text.splitlines()[0] == "id \t Predicted_Sentiment "  # the starter's exact header line
    assert text.splitlines()[1] == "0a1b , 4 "
    header, rows = read_rows(path)
    assert header == ["id", "Predicted_Sentiment"]
    assert rows == [["0a1b", "4"], ["ffe3", "0"], ["91cd", "2"], ["77aa", "2"]]


@pytest.mark.parametrize("task, split, column, predictions", [
    ("para", "test", "Predicted_Is_Paraphrase", np.array([1.0, 0.0, 1.0, 1.0])),
    ("sts", "dev", "Predicted_Similarity", [0.25, 4.999, 3.0, 1.0 / 3.0]),
])
def test_pandas_reads_back_the_ids_in_order_and_the_values(tmp_path, task, split, column, predictions):
    path = write_predictions(tmp_path, task, split, IDS, predictions)
    assert path.name == f"{task}-{split}-output.csv"
    assert read_rows(path)[0] == ["id", column]
    table = pd.read_csv(path, sep=r"\s*,\s*", engine="python", skiprows=1, header=None,
                        names=["id", "value"], dtype={"id": str})
    assert table["id"].tolist() == IDS
    np.testing.assert_allclose(table["value"].astype(float).to_numpy(), np.asarray(predictions, dtype=float))


def test_a_write_that_dies_midway_leaves_no_file(tmp_path):
    def predictions_then_crash():
        yield 1
        yield 2
        raise KeyboardInterrupt  # e.g. the run is stopped while writing

    with pytest.raises(KeyboardInterrupt):
        write_predictions(tmp_path, "sst", "test", IDS, predictions_then_crash())
    assert os.listdir(tmp_path) == []  # neither the target nor the temporary file


def test_a_failed_rewrite_keeps_the_previous_file_whole(tmp_path):
    path = write_predictions(tmp_path, "sts", "test", IDS, [1.0, 2.0, 3.0, 4.0])
    before = path.read_text()
    with pytest.raises(ValueError):
        write_predictions(tmp_path, "sts", "test", IDS, [1.0, float("nan"), 3.0, 4.0])
    assert path.read_text() == before
    assert sorted(os.listdir(tmp_path)) == [path.name, "written-by.json"]


@pytest.mark.parametrize("task, ids, predictions, message", [
    ("sst", IDS, [1, 2, 3], "shorter|longer"),
    ("sst", IDS, [1, 2.5, 3, 4], "class index"),
    ("para", IDS, [1, 2, 0, 0], "0/1"),
    ("sts", ["a,b", "c", "d", "e"], [1.0, 2.0, 3.0, 4.0], "comma"),
])
def test_bad_predictions_are_refused(tmp_path, task, ids, predictions, message):
    with pytest.raises(ValueError, match=message):
        write_predictions(tmp_path, task, "dev", ids, predictions)
    assert os.listdir(tmp_path) == []


def test_unknown_task_or_split_is_refused(tmp_path):
    with pytest.raises(ValueError, match="task"):
        prediction_path(tmp_path, "nli", "dev")
    with pytest.raises(ValueError, match="split"):
        prediction_path(tmp_path, "sst", "train")
