"""Batches by a budget of real tokens: every example once, none over budget, length-grouped, seeded, and the
examples' own order restorable; a step's batch shared out, each part's loss weighed by its rows."""
import random

import pytest
import torch

from minbert.common.errors import FlagError
from minbert.common.ordering import sorted_batches
from minbert.data.batching import (Share, _fill, check_token_budget, length_grouped_batches,
                                   sorted_token_budget_batches, token_budget_batches)

BUDGET = 256


def course_like_lengths(count: int = 500, seed: int = 0) -> list[int]:
    """Mostly short sentences (about 25 tokens), a few long ones, and one as long as the budget."""
    rng = random.Random(seed)
    return [min(128, int(rng.lognormvariate(3, 0.5)) + 3) for _ in range(count - 1)] + [BUDGET]


def training_batches(lengths, seed=0):
    return token_budget_batches(lengths, BUDGET, torch.Generator().manual_seed(seed))


def padding_fraction(batches, lengths) -> float:
    padded = sum(len(rows) * max(lengths[i] for i in rows) for rows in batches)
    return 1 - sum(lengths) / padded


@pytest.mark.parametrize("make", [training_batches, lambda lengths: sorted_token_budget_batches(lengths, BUDGET)],
                         ids=["training", "evaluation"])
def test_every_example_once_and_no_batch_over_budget(make):
    lengths = course_like_lengths()
    batches = make(lengths)
    assert sorted(i for rows in batches for i in rows) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in rows) <= BUDGET for rows in batches)
    assert any(sum(lengths[i] for i in rows) == BUDGET for rows in batches), "the budget-long example fits alone"
    # Batches are filled: on average over 80% of the budget (a batch closes only when the next one won't fit).
    assert sum(lengths) / len(batches) > 0.8 * BUDGET


def test_evaluation_batches_are_sorted_and_each_as_full_as_the_next_example_allows():
    """Longest batch first; in the order of growing length each batch is as full as the next example allows."""
    lengths = course_like_lengths()
    growing = sorted_token_budget_batches(lengths, BUDGET)[::-1]
    order = [i for rows in growing for i in rows]
    assert [lengths[i] for i in order] == sorted(lengths)
    for rows, following in zip(growing, growing[1:]):
        assert sum(lengths[i] for i in rows) + lengths[following[0]] > BUDGET


def test_training_batches_group_similar_lengths():
    lengths = course_like_lengths()
    grouped = training_batches(lengths)
    # The same budget without sorting: the examples in a random order, cut as they come.
    ungrouped = _fill(torch.randperm(len(lengths), generator=torch.Generator().manual_seed(0)).tolist(), lengths,
                      BUDGET)
    assert padding_fraction(grouped, lengths) < 0.05 < 0.2 < padding_fraction(ungrouped, lengths)


def test_training_batches_are_seeded():
    lengths = course_like_lengths()
    assert training_batches(lengths, seed=1) == training_batches(lengths, seed=1)
    assert training_batches(lengths, seed=1) != training_batches(lengths, seed=2)
    assert training_batches(lengths, seed=1)[0] != training_batches(lengths, seed=2)[0], "a new order from the start"


def test_predictions_come_back_in_the_examples_order():
    """What evaluation does with the batches: run each, put its outputs at its rows."""
    lengths = course_like_lengths(50)
    examples = torch.tensor(lengths, dtype=torch.float) * 10 + torch.arange(50)  # each example's own "prediction"
    outputs = torch.full((50,), float("nan"))
    for rows in sorted_token_budget_batches(lengths, BUDGET):
        outputs[rows] = examples[rows] * 2
    assert torch.equal(outputs, examples * 2)


def test_an_input_longer_than_the_budget_is_refused_in_one_line():
    with pytest.raises(FlagError, match=r"^--max-tokens 100 is smaller than the longest input \(128 tokens\), "
                                        r"which would fit in no batch; use --max-tokens 128 or more$"):
        check_token_budget(100, 128)
    check_token_budget(128, 128)
    with pytest.raises(FlagError, match="--max-tokens 255 is smaller than the longest input"):
        token_budget_batches(course_like_lengths(), 255, torch.Generator().manual_seed(0))
    with pytest.raises(FlagError, match="--max-tokens 255 is smaller than the longest input"):
        sorted_token_budget_batches(course_like_lengths(), 255)


def test_no_examples_no_batches():
    assert token_budget_batches([], BUDGET, torch.Generator().manual_seed(0)) == []
    assert sorted_token_budget_batches([], BUDGET) == []


def test_batches_by_count_keep_their_shape_and_evaluations_come_longest_first():
    lengths = course_like_lengths(103)
    batches = length_grouped_batches(lengths, 10, torch.Generator().manual_seed(0))
    assert sorted(map(len, batches)) == [3] + [10] * 10
    evaluation = sorted_batches(lengths, 10)
    assert [len(rows) for rows in evaluation] == [3] + [10] * 10  # the 3 longest examples first
    assert [lengths[i] for rows in evaluation[::-1] for i in rows] == sorted(lengths)


def test_each_part_of_a_step_weighs_its_rows_and_a_part_without_rows_computes_a_stand_in_weighed_0():
    rows = [10, 11, 12]
    # 2 processes x 2 accumulation parts: a row each for the first three parts, none for the last.
    parts = [Share(index, parts=4, world=2).of(rows) for index in range(4)]
    assert parts == [([10], 2 / 3), ([11], 2 / 3), ([12], 2 / 3), ([10], 0.0)]
    # The processes' gradients are averaged: the weights sum to the processes, as one process's whole batch weighs 1.
    assert sum(weight for _, weight in parts) == pytest.approx(2)
    assert Share().of(rows) == (rows, 1.0)
    assert Share(1, parts=2).of([10]) == ([], 0.0)  # a single process computes nothing for a part without rows
