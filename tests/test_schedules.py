from collections import Counter

import pytest
import torch

from minbert.training.schedules import SCHEDULES, count_batches, plan_epoch

TASKS = ("sst", "para", "sts")

# Deliberately unequal: STS is the smallest set, as in the project's data.
BATCHES = {"sst": 6, "para": 10, "sts": 3}


def batches_consumed(steps) -> Counter:
    return Counter(task for step in steps for task in step)


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_count_batches_rounds_the_last_partial_batch():
    assert count_batches({"sst": 33, "sts": 32}, 16) == {"sst": 3, "sts": 2}
    assert count_batches({"sst": 33, "sts": 32}, 16, drop_last=True) == {"sst": 2, "sts": 2}


def test_avg_takes_every_task_each_step_and_downsamples_to_the_smallest():
    steps = plan_epoch("avg", BATCHES)
    assert steps == [("sst", "para", "sts")] * 3
    assert batches_consumed(steps) == {"sst": 3, "para": 3, "sts": 3}


def test_batch_round_robin_alternates_then_finishes_the_larger_tasks():
    steps = plan_epoch("rr-batch", BATCHES, task_order=["sst", "para", "sts"])
    assert batches_consumed(steps) == BATCHES  # every batch once
    names = [task for (task,) in steps]
    assert names[:9] == ["sst", "para", "sts"] * 3
    assert names[9:15] == ["sst", "para"] * 3  # STS ran out
    assert names[15:] == ["para"] * 4  # then SST: Quora alone to the end


def test_batch_round_robin_with_a_repeated_task_takes_two_of_its_batches_per_cycle():
    names = [task for (task,) in plan_epoch("rr-batch", {"sst": 4, "sts": 4}, task_order=["sst", "sts", "sst"])]
    assert names == ["sst", "sts", "sst"] * 2 + ["sts"] * 2


def test_epoch_round_robin_is_one_whole_pass_per_task_in_order():
    names = [task for (task,) in plan_epoch("rr-epoch", BATCHES, task_order=["sts", "sst", "para"])]
    assert names == ["sts"] * 3 + ["sst"] * 6 + ["para"] * 10
    repeated = plan_epoch("rr-epoch", BATCHES, task_order=["sts", "sst", "sts"])
    assert batches_consumed(repeated) == {"sts": 6, "sst": 6}


def test_sequential_gives_each_task_a_contiguous_block_of_epochs():
    order = ["para", "sst", "sts"]
    per_epoch = [plan_epoch("sequential", BATCHES, epoch=e, num_epochs=10, task_order=order) for e in range(10)]
    owners = []
    for steps in per_epoch:
        ((task,),) = set(steps)  # one task per epoch...
        assert len(steps) == BATCHES[task]  # ...a full pass over it
        owners.append(task)
    assert owners == ["para"] * 4 + ["sst"] * 3 + ["sts"] * 3
    with pytest.raises(ValueError, match="at least 3 epochs"):
        plan_epoch("sequential", BATCHES, epoch=0, num_epochs=2, task_order=order)


def test_mtdnn_merges_all_batches_and_shuffles_them_with_the_generator():
    steps = plan_epoch("mtdnn", BATCHES, generator=generator(0))
    assert batches_consumed(steps) == BATCHES and all(len(step) == 1 for step in steps)
    grouped = [(task,) for task in BATCHES for _ in range(BATCHES[task])]
    assert steps != grouped
    assert steps == plan_epoch("mtdnn", BATCHES, generator=generator(0))
    gen = generator(0)
    first_epoch, second_epoch = (plan_epoch("mtdnn", BATCHES, generator=gen) for _ in range(2))
    assert first_epoch != second_epoch  # the same generator gives a new order each epoch


def test_mtdnn_weights_scale_how_often_a_task_is_drawn():
    steps = plan_epoch("mtdnn", BATCHES, task_weights={"para": 2, "sst": 0.5}, generator=generator())
    assert batches_consumed(steps) == {"para": 20, "sst": 3, "sts": 3}
    # para=2 doubles Quora's share relative to the others: 10/3 para batches per STS batch before, 20/3 after
    partial = plan_epoch("mtdnn", BATCHES, task_weights={"para": 0.25, "sts": 0}, generator=generator())
    assert batches_consumed(partial) == {"para": 3, "sst": 6}  # ceil(2.5) = 3; weight 0 drops STS


def test_mtdnn_spreads_tasks_over_the_epoch():
    # A shuffle puts SST batches in the second half too, unlike a grouped order.
    steps = plan_epoch("mtdnn", {"sst": 50, "para": 50}, generator=generator(1))
    second_half = batches_consumed(steps[50:])
    assert 10 < second_half["sst"] < 40


def test_weights_are_refused_outside_mtdnn_and_for_untrained_tasks():
    with pytest.raises(ValueError, match="mtdnn"):
        plan_epoch("avg", BATCHES, task_weights={"para": 2})
    with pytest.raises(ValueError, match="not trained"):
        plan_epoch("mtdnn", {"sst": 2}, task_weights={"para": 2})
    with pytest.raises(ValueError, match="zero"):
        plan_epoch("mtdnn", {"sst": 2}, task_weights={"sst": 0})


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_every_schedule_refuses_a_task_without_batches(schedule):
    with pytest.raises(ValueError, match="at least one batch"):
        plan_epoch(schedule, {"sst": 2, "sts": 0})


def test_unknown_schedule_and_task_order_errors():
    with pytest.raises(ValueError, match="unknown schedule"):
        plan_epoch("random", BATCHES)
    with pytest.raises(ValueError, match="task order"):
        plan_epoch("rr-epoch", BATCHES, task_order=["sst", "nli"])
    with pytest.raises(ValueError, match="outside"):
        plan_epoch("rr-epoch", BATCHES, epoch=3, num_epochs=3)
