"""A task's split, tokenised once and ready to batch: the examples' views, ids and labels.

A sentence task has one view of each example. A pair task has two: its two sentences (bi-encoding, each
embedded on its own), or the pair cross-encoded in both orders, "[CLS] s1 [SEP] s2" and "[CLS] s2 [SEP] s1"
(Mohammed and Sabane's DPH heads). A batch stacks the views into one encoder call of views * batch rows.
"""
from dataclasses import dataclass

import torch

from models.tokenizer import Encoded, Tokenizer, collate

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


def encode_views(tokenizer: Tokenizer, texts: list[tuple[str, ...]], encoding: str, max_length: int,
                 source: str) -> list[list[Encoded]]:
    """The views of each example: texts[i] is (sentence,) or (sentence1, sentence2).

    Truncations are reported once a view, naming the column of a bi-encoded pair; a cross-encoded pair's
    second order holds the same tokens as its first, so it is not reported twice."""
    columns = [list(column) for column in zip(*texts)]

    def encode(*parts, source=source):
        return tokenizer.encode(*parts, max_length=max_length, source=source)

    if len(columns) == 1:
        return [encode(columns[0])]
    first, second = columns
    if encoding == "bi":
        return [encode(first, source=f"{source} (first sentences)"),
                encode(second, source=f"{source} (second sentences)")]
    return [encode(first, second, source=f"{source} (sentence pairs)"), encode(second, first, source=None)]
