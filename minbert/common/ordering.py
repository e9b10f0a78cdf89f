"""Evaluation's order: batches of similar length, the longest first (data/batching.py has training's)."""


# Evaluation's batches come longest first: each batch's blocks then fit where a longer batch's were freed. In the
# order of growing length, each batch needs larger blocks than any freed so far, and glibc's heap grows batch by
# batch (predicting Quora's dev set peaked at 1,263 MB that way, 815 MB longest first; docs/results.md, "Memory").


def sorted_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Batches of examples of similar length, the longest first, for evaluation: the least padding, no
    randomness."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)][::-1]
