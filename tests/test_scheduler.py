"""Tests for the multitask scheduler: floors, sums, progress-following, rank balance, slots."""

import pytest
import torch

from locomotion.multitask import Scheduler, SchedulerConfig, SubtaskSlots, split_across_ranks
from locomotion.multitask.scheduler import split_slots

NAMES = ["flat", "rough", "stairs", "push"]


def feed(s: Scheduler, rates: list[list[float]]) -> None:
    for row in rates:
        s.update(torch.tensor(row), torch.ones(len(row)))


@pytest.mark.parametrize("slots", [8, 37, 512, 1000])
def test_allocation_respects_floors_and_sums_to_slots(slots):
    s = Scheduler(NAMES, slots, SchedulerConfig(floor=0.1))
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        s.update(torch.rand(4, generator=gen), torch.randint(0, 3, (4,), generator=gen))
        counts = s.allocate()
        assert int(counts.sum()) == slots
        assert (counts >= max(1, round(0.1 * slots))).all()


def test_progress_gets_the_slots_mastered_and_hopeless_get_the_floor():
    s = Scheduler(NAMES, 1000, SchedulerConfig(floor=0.05))
    # flat: mastered; rough: improving fast; stairs: stuck at 0; push: improving slowly
    feed(s, [[0.99, 0.1 + 0.04 * t, 0.0, 0.2 + 0.01 * t] for t in range(15)])
    counts = s.allocate()
    assert counts[0] == counts[2] == 50  # the floor
    assert counts[1] > counts[3] > 50
    assert int(counts.sum()) == 1000


def test_uniform_ignores_progress():
    s = Scheduler(NAMES, 100, SchedulerConfig(allocation="uniform"))
    feed(s, [[0.99, 0.1 + 0.04 * t, 0.0, 0.5] for t in range(15)])
    assert s.allocate().tolist() == [25, 25, 25, 25]


def test_untried_subtasks_are_not_starved():
    s = Scheduler(NAMES, 100, SchedulerConfig(floor=0.0))
    s.update(torch.tensor([0.5, 0.0, 0.0, 0.0]), torch.tensor([5, 0, 0, 0]))
    assert (s.allocate() > 0).all()


def test_split_slots_largest_remainder():
    assert split_slots(torch.tensor([1.0, 1.0, 1.0]), 10, torch.zeros(3)).tolist() == [4, 3, 3]
    assert split_slots(torch.tensor([0.0, 0.0]), 5, torch.tensor([1, 1])).tolist() == [3, 2]
    with pytest.raises(ValueError, match="floors need"):
        split_slots(torch.ones(3), 2, torch.ones(3))


def test_ranks_get_equal_slots_and_balanced_cost():
    counts = torch.tensor([101, 33, 60, 6])
    cost = torch.tensor([1.0, 4.0, 2.5, 1.0])  # rough terrain costs four flat steps
    per_rank = split_across_ranks(counts, cost, 4, 50)
    assert per_rank.sum(1).tolist() == [50] * 4 and per_rank.sum(0).tolist() == counts.tolist()
    load = (per_rank.double() * cost).sum(1)
    assert (load.max() - load.min()) / load.mean() < 0.1


def test_slot_switches_subtask_only_at_reset():
    slots = SubtaskSlots(10, torch.tensor([4, 3, 3]))
    before = slots.current.clone()
    moved = slots.retarget(torch.tensor([2, 2, 6]))
    assert moved == 3 and slots.counts("target", 3).tolist() == [2, 2, 6]
    assert torch.equal(slots.current, before)  # nobody switched yet
    changed = (slots.target != slots.current).nonzero().squeeze(1)
    slots.adopt(changed[:1])
    assert (slots.current != before).sum() == 1
    slots.adopt(torch.arange(10))
    assert slots.counts("current", 3).tolist() == [2, 2, 6]


def test_invalid_scheduler_config_is_a_clear_error():
    with pytest.raises(ValueError, match="not one of"):
        SchedulerConfig(allocation="greedy")
    with pytest.raises(ValueError, match="cannot give 4 subtasks"):
        Scheduler(NAMES, 6, SchedulerConfig(floor=0.5))


def test_no_signal_yet_means_even_shares():
    s = Scheduler(NAMES, 100, SchedulerConfig(floor=0.0))
    s.update(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.tensor([5, 5, 0, 0]))
    assert s.allocate().tolist() == [25, 25, 25, 25]
