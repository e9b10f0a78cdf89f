"""A task's split, tokenised once and ready to batch: the examples' views, ids and labels; and its training
batches across an epoch (TaskStream).

A sentence task has one view of each example. A pair task has two: its two sentences (bi-encoding, each
embedded on its own), or the pair cross-encoded in both orders, "[CLS] s1 [SEP] s2" and "[CLS] s2 [SEP] s1"
(Mohammed and Sabane's DPH heads). A batch stacks the views into one encoder call of views * batch rows.
"""
import math
from dataclasses import dataclass

import torch

from minbert.common.seeding import derived_seed
from minbert.data.batching import Buckets, length_grouped_batches, token_budget_batches
from minbert.models.tokenizer import Encoded, Tokenizer, collate



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

    def token_lengths(self) -> list[int]:
        """Each example's real tokens, all its views together: what a batch of it holds (--max-tokens)."""
        return [sum(len(view[i].input_ids) for view in self.views) for i in range(len(self))]

    def batch(self, rows: list[int], pad_id: int, buckets: Buckets | None = None) -> dict:
        """{"inputs": padded tensors of len(views) * len(rows) rows, view-major; "labels": [len(rows)]; "padded":
        whether any row has padding, known here on the host; "rows": len(rows)}. With `buckets`, the inputs are as
        wide as the batch's bucket and, where it pads rows, have its number of rows in each view: the model's
        outputs past the first "rows" are the padding rows', which nothing uses."""
        all_rows = buckets.padded_rows(rows) if buckets else rows
        encoded = [view[i] for view in self.views for i in all_rows]
        longest = max(len(e.input_ids) for e in encoded)
        width = buckets.width(longest) if buckets else longest
        return {"inputs": collate(encoded, pad_id, width), "labels": None if self.labels is None else self.labels[rows],
                "padded": any(len(e.input_ids) < width for e in encoded), "rows": len(rows)}


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


class TaskStream:
    """One task's training batches across an epoch: pass p of the data is a fresh length-grouped shuffle, so a
    schedule may take more batches of a task in an epoch than one pass holds (MT-DNN's task weights).
    max_tokens > 0: batches of up to that many real tokens (token_lengths) instead of batch_size rows."""

    def __init__(self, split: TaskSplit, batch_size: int, seed: int, epoch: int, task_index: int,
                 max_tokens: int = 0):
        self.split, self.batch_size, self.max_tokens = split, batch_size, max_tokens
        self.lengths = split.token_lengths() if max_tokens else split.lengths()
        self.seed_words = [seed, epoch, task_index]
        self.passes = {}  # pass index -> its batches (the last two asked for)

    def pass_batches(self, index: int) -> list[list[int]]:
        """The batches of pass `index` over the data."""
        if index not in self.passes:
            generator = torch.Generator().manual_seed(derived_seed(*self.seed_words, index))
            self.passes = {i: b for i, b in self.passes.items() if i == index - 1}
            self.passes[index] = (token_budget_batches(self.lengths, self.max_tokens, generator) if self.max_tokens
                                  else length_grouped_batches(self.lengths, self.batch_size, generator))
        return self.passes[index]

    def batch_indices(self, k: int) -> list[int]:
        """The rows of the epoch's k-th batch of this task."""
        if not self.max_tokens:  # every pass has the same number of batches
            per_pass = math.ceil(len(self.split) / self.batch_size)
            return self.pass_batches(k // per_pass)[k % per_pass]
        index = 0  # a token budget's passes differ in length: count through them
        while k >= len(batches := self.pass_batches(index)):
            k, index = k - len(batches), index + 1
        return batches[k]
