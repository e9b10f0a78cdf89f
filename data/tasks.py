"""The three fine-tuning tasks' splits, tokenised once and ready to batch.

A pair task holds two views of each example: its two sentences (bi-encoding, each embedded on
its own), or the pair cross-encoded in both orders, "[CLS] s1 [SEP] s2" and "[CLS] s2 [SEP] s1"
(seed 003). A batch stacks the views into one encoder call of views * batch rows.
"""
from dataclasses import dataclass
from pathlib import Path

import torch

from data.batching import collate
from data.readers import DataError, read_quora, read_sentiment, read_sts, sample_records
from models.tokenizer import Encoded, Tokenizer

TASKS = ("sst", "para", "sts")
FILES = {  # task -> (train, dev, test) in ../shared/data, the course's names
    "sst": ("ids-sst-train.csv", "ids-sst-dev.csv", "ids-sst-test-student.csv"),
    "para": ("quora-train.csv", "quora-dev.csv", "quora-test-student.csv"),
    "sts": ("sts-train.csv", "sts-dev.csv", "sts-test-student.csv"),
}
PAIR_ENCODINGS = ("bi", "cross")


@dataclass
class TaskSplit:
    task: str
    ids: list[str]
    views: list[list[Encoded]]  # views[v][i]: view v of example i
    labels: torch.Tensor | None  # None for test-student files

    def __len__(self) -> int:
        return len(self.ids)

    def lengths(self) -> list[int]:
        return [max(len(view[i].input_ids) for view in self.views) for i in range(len(self))]

    def batch(self, rows: list[int], pad_id: int) -> dict:
        """{"inputs": padded tensors of len(views) * len(rows) rows, view-major; "labels": [len(rows)]}."""
        inputs = collate([view[i] for view in self.views for i in rows], pad_id)
        return {"inputs": inputs, "labels": None if self.labels is None else self.labels[rows]}


def read_task_file(task: str, path: Path, labeled: bool):
    if task == "sst":
        return read_sentiment(path, num_classes=5, labeled=labeled)
    return (read_quora if task == "para" else read_sts)(path, labeled=labeled)


def load_split(task: str, path: Path, tokenizer: Tokenizer, max_length: int, pair_encoding: str = "bi",
               labeled: bool = True, max_examples: int = 0) -> TaskSplit:
    records, _ = read_task_file(task, path, labeled)
    records = sample_records(records, max_examples)
    if not records:
        raise DataError(f"{path}: no usable rows")
    source = path.name
    if task == "sst":
        views = [tokenizer.encode([r.sentence for r in records], max_length=max_length, source=source)]
    elif pair_encoding == "bi":
        views = [tokenizer.encode([r.sentence1 for r in records], max_length=max_length, source=source),
                 tokenizer.encode([r.sentence2 for r in records], max_length=max_length, source=source)]
    else:
        first, second = [r.sentence1 for r in records], [r.sentence2 for r in records]
        views = [tokenizer.encode(first, second, max_length=max_length, source=source),
                 tokenizer.encode(second, first, max_length=max_length, source=source)]
    labels = None
    if labeled:
        labels = torch.tensor([r.label for r in records], dtype=torch.long if task == "sst" else torch.float)
    return TaskSplit(task, [r.id for r in records], views, labels)
