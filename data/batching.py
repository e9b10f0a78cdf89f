"""Which rows go into which batch: length-grouped for training, length-sorted for evaluation, shared out
between processes and accumulation steps."""
import torch


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
