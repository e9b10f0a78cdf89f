"""From tokenised inputs to padded tensors."""
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # models.tokenizer imports this module
    from models.tokenizer import Encoded


def collate(inputs: list["Encoded"], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad to the longest input of this batch (not a global maximum), so short batches stay cheap."""
    width = max(len(e.input_ids) for e in inputs)
    input_ids = torch.full((len(inputs), width), pad_id, dtype=torch.long)
    token_type_ids = torch.zeros((len(inputs), width), dtype=torch.long)
    attention_mask = torch.zeros((len(inputs), width), dtype=torch.long)
    for row, e in enumerate(inputs):
        n = len(e.input_ids)
        input_ids[row, :n] = torch.tensor(e.input_ids)
        token_type_ids[row, :n] = torch.tensor(e.token_type_ids)
        attention_mask[row, :n] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}


def length_grouped_batches(lengths: list[int], batch_size: int, generator: torch.Generator,
                           group_batches: int = 50) -> list[list[int]]:
    """Shuffled batches of indices whose inputs have similar lengths, so padding stays small.

    Shuffle, cut into groups of `group_batches` batches, sort each group by length, cut it into
    batches, then shuffle the batches: each batch is random in content but uniform in length.
    """
    order = torch.randperm(len(lengths), generator=generator).tolist()
    group = batch_size * group_batches
    batches = []
    for start in range(0, len(order), group):
        chunk = sorted(order[start:start + group], key=lambda i: lengths[i])
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


def sorted_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Batches in order of length, for evaluation: the least padding, no randomness."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def split_rows(inputs: dict[str, torch.Tensor], size: int) -> list[dict[str, torch.Tensor]]:
    """Consecutive chunks of at most `size` rows of a padded batch (gradient caching embeds them one by one)."""
    rows = len(inputs["input_ids"])
    return [{name: tensor[start:start + size] for name, tensor in inputs.items()} for start in range(0, rows, size)]
