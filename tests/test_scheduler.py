"""Tests for the multitask scheduler: floors, sums, progress-following, rank balance, slots."""

import pytest
import torch

from locomotion.multitask import Scheduler, SchedulerConfig, split_across_ranks
from locomotion.multitask.scheduler import split_slots
from locomotion.tasks.slots import SubtaskSlots

NAMES = ["flat", "rough", "stairs", "push"]


def feed(s: Scheduler, rates: list[list[float]], episodes: float = 100.0) -> None:
    """Iterations of ``episodes`` episodes per subtask at the given success rates."""
    for row in rates:
        s.update(torch.tensor(row) * episodes, torch.full((len(row),), episodes))


@pytest.mark.parametrize("slots", [8, 37, 512, 1000])
def test_allocation_respects_floors_and_sums_to_slots(slots):
    s = Scheduler(NAMES, slots, SchedulerConfig(floor=0.1, patience=5))
    gen = torch.Generator().manual_seed(0)
    for _ in range(40):
        episodes = torch.randint(0, 3, (4,), generator=gen)
        s.update(torch.binomial(episodes.double(), torch.rand(4, generator=gen).double()), episodes)
        counts = s.allocate()
        assert int(counts.sum()) == slots
        assert (counts >= max(1, round(0.1 * slots))).all()


def test_progress_gets_the_slots_mastered_and_hopeless_get_the_floor():
    s = Scheduler(NAMES, 1000, SchedulerConfig(floor=0.05, keep=0.5, patience=1000))
    # flat: mastered; rough: improving fast; stairs: stuck at 0; push: improving slowly
    feed(s, [[0.99, 0.1 + 0.01 * t, 0.0, 0.2 + 0.003 * t] for t in range(60)])
    assert s.classes()["mastered"].tolist() == [True, False, False, False]
    assert s.classes()["hopeless"].tolist() == [False, False, True, False]
    counts = s.allocate()
    assert counts[0] == counts[2] == 50  # the floor
    assert counts[1] > counts[3] >= 125  # learning: at least half their uniform 250
    assert int(counts.sum()) == 1000


def test_subtask_without_success_keeps_uniform_share_until_patience_runs_out():
    s = Scheduler(NAMES, 1000, SchedulerConfig(floor=0.05, patience=500))
    feed(s, [[0.5 + 0.01 * t, 0.5, 0.5, 0.0] for t in range(4)])  # 400 episodes each
    assert s.classes()["exploring"].tolist() == [False, False, False, True]
    assert s.allocate()[3] >= 250  # no progress to follow yet, but not starved
    feed(s, [[0.6, 0.5, 0.5, 0.0]])  # 500 episodes without a success
    assert s.classes()["hopeless"][3] and s.allocate()[3] == 50
    feed(s, [[0.6, 0.5, 0.5, 0.3]] * 3)  # it starts to succeed: learning again
    assert s.classes()["learning"][3] and s.allocate()[3] > 50


def test_gaps_within_sampling_noise_are_not_progress():
    s = Scheduler(NAMES, 100, SchedulerConfig(floor=0.0))
    gen = torch.Generator().manual_seed(1)
    for _ in range(200):  # success 0.5 throughout, three episodes per iteration
        s.update(torch.binomial(torch.full((4,), 3.0), torch.full((4,), 0.5), generator=gen),
                 torch.full((4,), 3.0))
    assert s.progress.max() < 0.05
    raw = (s.recent - s.long_successes / s.long_episodes).abs()
    assert raw.max() > s.progress.max()


def test_learning_subtasks_keep_their_share_of_uniform_slots():
    s = Scheduler(NAMES, 1000, SchedulerConfig(floor=0.05, keep=0.75))
    feed(s, [[0.2 + 0.02 * t, 0.5, 0.5, 0.5] for t in range(30)])  # only flat improves
    counts = s.allocate()
    assert counts[1:].tolist() == [187] * 3 and counts[0] == 1000 - 3 * 187


def test_by_default_only_mastered_and_hopeless_give_up_slots():
    s = Scheduler(NAMES, 1000, SchedulerConfig(floor=0.05, patience=5000))
    # flat: mastered; rough: improving fast; stairs: flat at 0.5; push: not succeeding yet
    feed(s, [[0.99, 0.1 + 0.02 * t, 0.5, 0.0] for t in range(30)])
    counts = s.allocate()
    assert counts[0] == 50 and (counts[1:] >= 250).all()  # nobody unmastered below uniform
    assert counts[1] == 1000 - 50 - 2 * 250  # the mastered one's slots follow progress


def test_stalled_subtasks_lend_slots_only_while_another_progresses():
    s = Scheduler(NAMES, 1000, SchedulerConfig(floor=0.05, stalled=0.5))
    feed(s, [[0.2 + 0.02 * t, 0.5, 0.5, 0.5] for t in range(30)])  # only flat improves
    assert s.classes()["learning"].all() and (s.progress[1:] == 0).all()
    assert s.allocate().tolist() == [625, 125, 125, 125]
    assert Scheduler(NAMES, 1000, SchedulerConfig(floor=0.05)).allocate().tolist() == [250] * 4
    feed(s, [[0.8, 0.5, 0.5, 0.5]] * 300)  # flat levels off below mastery: nobody progresses
    assert s.progress.max() == 0 and s.allocate().tolist() == [250] * 4


def test_uniform_ignores_progress():
    s = Scheduler(NAMES, 100, SchedulerConfig(allocation="uniform"))
    feed(s, [[0.99, 0.1 + 0.04 * t, 0.0, 0.5] for t in range(15)])
    assert s.allocate().tolist() == [25, 25, 25, 25]


def test_fixed_shares_follow_the_weights_and_ignore_progress():
    s = Scheduler(NAMES, 100, SchedulerConfig(allocation="fixed",
                                              weights={"flat": 3.0, "push": 0.0}))
    feed(s, [[0.99, 0.1 + 0.04 * t, 0.0, 0.5] for t in range(15)])
    assert s.allocate().tolist() == [60, 20, 20, 0]  # weights 3, 1 (unnamed), 1, 0


def test_learning_progress_starts_from_weighted_base_shares_and_frees_the_mastered():
    s = Scheduler(NAMES, 1000, SchedulerConfig(floor=0.05, weights={"flat": 3.0, "push": 0.0}))
    assert s.base_share.tolist() == [530, 210, 210, 50]  # floor + the rest by weight 3:1:1:0
    feed(s, [[0.0, 0.0, 0.0, 0.0]] * 5)  # nothing succeeded yet: all exploring
    assert s.allocate().tolist() == [530, 210, 210, 50]  # the base shares
    feed(s, [[0.99, 0.2 + 0.01 * t, 0.3, 0.4] for t in range(60)])
    counts = s.allocate()
    assert counts[0] == 50  # mastered: the floor, its weight notwithstanding
    assert counts[1] > 210 and counts[2] >= 210 and counts[3] >= 50  # learning: base or more
    assert int(counts.sum()) == 1000


def test_fixed_weights_must_name_subtasks_and_be_non_negative():
    with pytest.raises(ValueError, match=r"unknown subtasks \['stair'\]; the subtasks are"):
        Scheduler(NAMES, 100, SchedulerConfig(allocation="fixed", weights={"stair": 2.0}))
    with pytest.raises(ValueError, match="must be >= 0"):
        SchedulerConfig(allocation="fixed", weights={"flat": -1.0})
    with pytest.raises(ValueError, match="every subtask weight 0"):
        Scheduler(NAMES, 100, SchedulerConfig(weights=dict.fromkeys(NAMES, 0.0)))


def test_untried_subtasks_are_not_starved():
    s = Scheduler(NAMES, 100, SchedulerConfig(floor=0.0))
    feed(s, [[0.1 + 0.05 * t, 0.0, 0.0, 0.0] for t in range(10)], episodes=0.0)
    s.update(torch.tensor([40.0, 0, 0, 0]), torch.tensor([50.0, 0, 0, 0]))
    assert (s.allocate()[1:] >= 25).all()  # the uniform share


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
    with pytest.raises(ValueError, match="keep must lie in"):
        SchedulerConfig(keep=1.5)
    with pytest.raises(ValueError, match="stalled must lie in"):
        SchedulerConfig(stalled=-0.5)
    with pytest.raises(ValueError, match="cannot give 4 subtasks"):
        Scheduler(NAMES, 6, SchedulerConfig(floor=0.5))
    with pytest.raises(ValueError, match="lacks"):
        Scheduler(NAMES, 8, SchedulerConfig()).load_state_dict({"fast": torch.zeros(4)})


def test_no_signal_yet_means_even_shares():
    s = Scheduler(NAMES, 100, SchedulerConfig(floor=0.0))
    # one iteration: 4 of 5 flat episodes succeed (not yet mastered beyond noise), none of rough's
    s.update(torch.tensor([4.0, 0.0, 0.0, 0.0]), torch.tensor([5.0, 5.0, 0.0, 0.0]))
    assert not s.classes()["mastered"].any()
    assert s.allocate().tolist() == [25, 25, 25, 25]


def test_few_episodes_all_successful_count_as_mastered_only_beyond_noise():
    s = Scheduler(NAMES, 100, SchedulerConfig(mastered=0.8))
    s.update(torch.tensor([2.0, 5.0, 0.0, 0.0]), torch.tensor([2.0, 5.0, 0.0, 0.0]))
    assert s.classes()["mastered"].tolist() == [False, True, False, False]


def learning_pair(allocation: str) -> Scheduler:
    """flat mastered (its slots free), rough and stairs rising alike, push flat at 0.5."""
    s = Scheduler(NAMES, 1000, SchedulerConfig(allocation=allocation, floor=0.05))
    feed(s, [[0.99, 0.1 + 0.01 * t, 0.1 + 0.01 * t, 0.5] for t in range(60)])
    assert s.progress[1] == s.progress[2] > 0 and s.progress[3] == 0
    return s


def test_progress_per_cost_gives_the_expensive_subtask_fewer_slots_for_equal_progress():
    cost = torch.tensor([1.0, 1.5, 1.0, 1.0])  # a rough slot costs 1.5 flat ones
    counts = learning_pair("progress_per_cost").allocate(cost)
    assert learning_pair("learning_progress").allocate().tolist() == [50, 350, 350, 250]
    # the 200 freed slots split 1/1.5 : 1, so both buy the same extra compute (80 x 1.5)
    assert counts.tolist() == [50, 330, 370, 250]


@pytest.mark.parametrize("cost", [1.0, 3.7, 2e-5])
def test_progress_per_cost_with_equal_costs_allocates_as_learning_progress(cost):
    gen = torch.Generator().manual_seed(2)
    runs = {a: Scheduler(NAMES, 509, SchedulerConfig(allocation=a, patience=400))
            for a in ("learning_progress", "progress_per_cost")}
    rate = torch.tensor([0.3, 0.1, 0.2, 0.5], dtype=torch.float64)
    priced = 0  # re-allocations where unequal costs would have moved slots
    for _ in range(80):  # four subtasks rising at different speeds, binomial episodes
        rate = (rate + torch.tensor([0.02, 0.01, 0.005, 0.0])).clamp(max=0.95)
        episodes = torch.randint(10, 30, (4,), generator=gen).double()
        successes = torch.binomial(episodes, rate, generator=gen)
        for s in runs.values():
            s.update(successes, episodes)
        lp = runs["learning_progress"].allocate()
        assert torch.equal(runs["progress_per_cost"].allocate(torch.full((4,), cost)), lp)
        priced += not torch.equal(runs["progress_per_cost"].allocate(
            torch.tensor([1.0, 1.3, 1.0, 1.0])), lp)
    assert priced > 20


def test_progress_per_cost_needs_a_positive_cost_per_subtask():
    s = learning_pair("progress_per_cost")
    for cost in (None, torch.ones(3), torch.tensor([1.0, 0.0, 1.0, 1.0]),
                 torch.tensor([1.0, float("nan"), 1.0, 1.0])):
        with pytest.raises(ValueError, match="needs a positive, finite cost per subtask"):
            s.allocate(cost)
