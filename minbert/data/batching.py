"""Which rows go into which batch: length-grouped for training, length-sorted for evaluation, by a number of rows
or by a budget of real tokens, shared out between processes and accumulation steps (Share: a part's rows, and
the weight of their loss).

Every function returns lists of row indices into the caller's examples; the caller puts each batch's outputs
back at its rows (outputs[rows] = ...), so predictions come out in the examples' own order."""
from collections.abc import Callable
from dataclasses import dataclass

import torch

from minbert.common.errors import FlagError


def length_grouped_batches(lengths: list[int], batch_size: int, generator: torch.Generator,
                           group_batches: int = 50) -> list[list[int]]:
    """Shuffled batches of `batch_size` indices whose inputs have similar lengths, so padding stays small.

    Shuffle, cut into groups of `group_batches` batches, sort each group by length, cut it into
    batches, then shuffle the batches: each batch is random in content but uniform in length.
    """
    return _length_grouped(lengths, generator, batch_size * group_batches,
                           lambda chunk: [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)])


def token_budget_batches(lengths: list[int], max_tokens: int, generator: torch.Generator,
                         group_batches: int = 50) -> list[list[int]]:
    """Shuffled, length-grouped batches (as length_grouped_batches) of at most `max_tokens` real tokens each (the
    sum of their inputs' lengths): many short sentences or a few long ones, the same work a step.
    FlagError if one input alone is longer than the budget."""
    check_token_budget(max_tokens, max(lengths, default=0))
    # A group holds about `group_batches` batches' worth of examples, as in length_grouped_batches.
    mean_length = sum(lengths) / max(len(lengths), 1)
    group = max(1, round(max_tokens * group_batches / max(mean_length, 1)))
    return _length_grouped(lengths, generator, group, lambda chunk: _fill(chunk, lengths, max_tokens))


# Evaluation's batches come longest first, as common/ordering.py's sorted_batches (which says why).


def sorted_token_budget_batches(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Batches of examples of similar length of at most `max_tokens` real tokens each, the longest first, for
    evaluation and prediction. FlagError if one input alone is longer than the budget."""
    check_token_budget(max_tokens, max(lengths, default=0))
    return _fill(sorted(range(len(lengths)), key=lambda i: lengths[i]), lengths, max_tokens)[::-1]


def check_token_budget(max_tokens: int, longest: int) -> None:
    """FlagError unless a batch of `max_tokens` tokens holds an input of `longest` tokens (the longest an input
    may be, e.g. --max-length, or twice it for a pair encoded as two sentences)."""
    if max_tokens < longest:
        raise FlagError(f"--max-tokens {max_tokens} is smaller than the longest input ({longest} tokens), which "
                        f"would fit in no batch; use --max-tokens {longest} or more")


def _length_grouped(lengths: list[int], generator: torch.Generator, group: int,
                    cut: Callable[[list[int]], list[list[int]]]) -> list[list[int]]:
    """Shuffle, sort each group of `group` indices by length, cut it into batches, then shuffle the batches."""
    order = torch.randperm(len(lengths), generator=generator).tolist()
    batches = []
    for start in range(0, len(order), group):
        batches += cut(sorted(order[start:start + group], key=lambda i: lengths[i]))
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


def _fill(order: list[int], lengths: list[int], max_tokens: int) -> list[list[int]]:
    """`order` cut into consecutive batches, each as long as the next index still fits in `max_tokens`."""
    batches, tokens = [], 0
    for i in order:
        if not batches or tokens + lengths[i] > max_tokens:
            batches.append([])
            tokens = 0
        batches[-1].append(i)
        tokens += lengths[i]
    return batches


def split_rows(inputs: dict[str, torch.Tensor], size: int) -> list[dict[str, torch.Tensor]]:
    """Consecutive chunks of at most `size` rows of a padded batch (gradient caching embeds them one by one)."""
    rows = len(inputs["input_ids"])
    return [{name: tensor[start:start + size] for name, tensor in inputs.items()} for start in range(0, rows, size)]


def split_evenly(rows: list[int], parts: int) -> list[list[int]]:
    """`rows` cut into `parts` consecutive pieces whose sizes differ by at most one (the first ones larger):
    a batch shared out between processes and gradient-accumulation steps."""
    size, larger = divmod(len(rows), parts)
    pieces, start = [], 0
    for part in range(parts):
        end = start + size + (part < larger)
        pieces.append(rows[start:end])
        start = end
    return pieces


@dataclass(frozen=True)
class Share:
    """One process's part of a step's batch in one accumulation step: part `index` of `parts` (process r takes
    parts r * --grad-accum ... (r + 1) * --grad-accum - 1, one an accumulation step), `world` processes in all.
    Share() is the whole batch in a single process."""
    index: int = 0
    parts: int = 1
    world: int = 1

    def of(self, rows: list[int]) -> tuple[list[int], float]:
        """The rows this part computes of a step's `rows`, and the weight of their mean loss: the part's share of
        the step's rows, times the processes (whose gradients are averaged). Each part's mean loss times its weight
        makes the step's gradient that of the mean loss over all its rows, as one process with the whole batch
        gives, however unevenly they are shared out.

        A part without rows computes, under torchrun, the step's first row as a stand-in, weighed 0: every process
        then runs the same forward and backward passes, has gradients (zeros, for it) for the same parameters, and
        meets the others in the same collectives. In a single process it computes nothing ([], 0)."""
        piece = split_evenly(rows, self.parts)[self.index]
        if piece:
            return piece, len(piece) * self.world / len(rows)
        return (rows[:1] if self.world > 1 else []), 0.0


# --length-buckets: a batch's length is padded up to a multiple of this many tokens.
BUCKET_TOKENS = 32


@dataclass(frozen=True)
class Buckets:
    """A few batch shapes instead of one a length (--length-buckets): each batch padded to the next multiple of
    BUCKET_TOKENS tokens (at most `max_length`), and its rows up to `rows` (0: left as they are). A GPU then meets a
    handful of shapes: each costs its kernels' set-up (and a compiled graph or a CUDA graph) once, not once a length.
    A padding row repeats the batch's first (real tokens: nothing in it can overflow) and is left out of the loss
    and the outputs, so it weighs nothing: the step computes what the batch alone computes, to fp32 rounding."""
    max_length: int
    rows: int = 0

    def width(self, longest: int) -> int:
        """The tokens of a batch whose longest input has `longest`."""
        return min(self.max_length, -(-longest // BUCKET_TOKENS) * BUCKET_TOKENS)

    def padded_rows(self, rows: list[int]) -> list[int]:
        """`rows`, then copies of the first up to self.rows."""
        return rows + rows[:1] * (self.rows - len(rows))


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A batch's tensor copied without waiting for the host: from pinned memory, non_blocking, on CUDA."""
    return (tensor.pin_memory() if device.type == "cuda" else tensor).to(device, non_blocking=True)
