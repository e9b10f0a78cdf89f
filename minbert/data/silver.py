"""Silver data: examples labelled by a teacher model, not by people (`minbert silver` writes them, `minbert train
--silver` trains on them). A silver folder holds one file a task, {task}-silver.csv, in the course's format (the
leading index column, id, the sentence or the two sentences, the label column: the teacher's class, 0/1 or score)
plus a soft_label column: the teacher's class probabilities (comma-separated), P(paraphrase) or score, which is
what a student learns; and silver.json, what made them (the teacher, the retrieval, the counts).

Sentences are compared after normalise(): lower case, the course's tokenisation undone (-lrb- is "(", `` is "),
and then everything but letters and digits dropped, so that "it 's" and "It's", or spacing, do not hide a match.
"""
import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from minbert.common.errors import DataError
from minbert.data.readers import ReadReport, text_lines

SOFT_COLUMN = "soft_label"
INFO = "silver.json"
# The course's (Penn Treebank's) escapes of brackets, quotes and slashes.
_ESCAPES = {"-lrb-": "(", "-rrb-": ")", "-lsb-": "[", "-rsb-": "]", "-lcb-": "{", "-rcb-": "}", "``": '"',
            "''": '"', "\\/": "/", "\\*": "*"}
_ESCAPE = re.compile("|".join(re.escape(e) for e in _ESCAPES))
_NOT_WORD = re.compile(r"[^0-9a-z]+")


def normalise(sentence: str) -> str:
    """What two sentences share when they are the same text written or tokenised differently ("" for none)."""
    return _NOT_WORD.sub("", _ESCAPE.sub(lambda m: _ESCAPES[m.group(0)], sentence.lower()))


def file_name(task: str) -> str:
    return f"{task}-silver.csv"


@dataclass
class SilverSet:
    """A task's silver examples: texts[i] is (sentence,) or (sentence1, sentence2); soft[i] what the student learns."""
    ids: list[str]
    texts: list[tuple[str, ...]]
    soft: torch.Tensor  # [n, classes] probabilities, or [n] P(paraphrase) or scores

    def __len__(self) -> int:
        return len(self.ids)


def write_silver(path: Path, silver: SilverSet, label_column: str, hard: torch.Tensor, format_label) -> None:
    """The course's tab-separated layout, one example a row, with the soft label last."""
    pair = len(silver.texts[0]) == 2 if silver.texts else False
    text_columns = ["sentence1", "sentence2"] if pair else ["sentence"]
    with open(path, "w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
        writer.writerow(["", "id", *text_columns, label_column, SOFT_COLUMN])
        for index, (id_, texts, label, soft) in enumerate(zip(silver.ids, silver.texts, hard.tolist(),
                                                                silver.soft.tolist())):
            soft_text = ",".join(f"{p:.6g}" for p in soft) if isinstance(soft, list) else f"{soft:.6g}"
            writer.writerow([index, id_, *(t.replace("\t", " ").replace("\n", " ") for t in texts),
                             format_label(label), soft_text])


def read_silver(path: Path, pair: bool, classes: int, low: float = 0.0, high: float = 1.0) -> SilverSet:
    """A silver file; classes: the soft label's probabilities a row (0: one number in [low, high]). A row that
    cannot be used raises DataError naming its line: a silver file is written by `minbert silver`, not by hand."""
    columns = ["id", "sentence1", "sentence2"] if pair else ["id", "sentence"]
    lines = text_lines(Path(path), ReadReport(Path(path)))
    reader = csv.reader(lines, delimiter="\t")
    header = next(reader, None)
    if header is None or any(c not in header for c in [*columns, SOFT_COLUMN]):
        raise DataError(f"{path}: not a silver file of a {'pair' if pair else 'sentence'} task (its header needs "
                        f"{', '.join([*columns, SOFT_COLUMN])}); write one with `minbert silver`")
    where = {name: header.index(name) for name in [*columns, SOFT_COLUMN]}
    ids, texts, soft = [], [], []
    for line, row in enumerate(reader, start=2):
        try:
            values = [float(v) for v in row[where[SOFT_COLUMN]].split(",")]
            text = tuple(row[where[c]] for c in columns[1:])
            identifier = row[where["id"]]
        except (IndexError, ValueError):
            raise DataError(f"{path}: line {line}: not a row of a silver file") from None
        good = (len(values) == classes and all(0 <= v <= 1 for v in values) and abs(sum(values) - 1) < 1e-3
                if classes else len(values) == 1 and low <= values[0] <= high)
        if not good or not all(t.strip() for t in text) or not all(math.isfinite(v) for v in values):
            raise DataError(f"{path}: line {line}: soft label {row[where[SOFT_COLUMN]]!r} is not "
                            + (f"{classes} probabilities" if classes else f"a number in [{low:g}, {high:g}]")
                            + " or a sentence is empty")
        ids.append(identifier)
        texts.append(text)
        soft.append(values if classes else values[0])
    if not ids:
        raise DataError(f"{path}: no silver examples")
    return SilverSet(ids, texts, torch.tensor(soft, dtype=torch.float))
