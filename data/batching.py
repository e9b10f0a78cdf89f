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
