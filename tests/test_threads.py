"""Thread defaults: the physics takes the usable cores, torch what is left (at least one),
and settings that oversubscribe the cores are warned about."""

import pytest

from locomotion.sim.threads import plan_threads, usable_cores


def test_defaults_fill_the_cores_once():
    plan = plan_threads(None, None, cpu_physics=True, cores=8)
    assert (plan.physics, plan.torch, plan.warning) == (8, 1, None)
    gpu = plan_threads(None, None, cpu_physics=False, cores=8)
    assert (gpu.physics, gpu.torch, gpu.warning) == (0, 8, None)
    shared = plan_threads(3, None, cpu_physics=True, cores=8)
    assert (shared.physics, shared.torch) == (3, 5)


@pytest.mark.parametrize("physics, torch_threads", [(None, 4), (12, None), (4, 4)])
def test_oversubscribing_settings_are_warned_about(physics, torch_threads):
    plan = plan_threads(physics, torch_threads, cpu_physics=True, cores=4)
    assert plan.warning and "oversubscribe the 4 usable cores" in plan.warning


def test_the_learner_takes_every_core_unless_torch_threads_or_learner_threads_say_otherwise():
    plan = plan_threads(None, None, cpu_physics=True, cores=8)
    assert (plan.torch, [plan.learner_for(share) for share in (7.8, 0.9)]) == (1, [8, 8])
    assert plan.describe() == "8 physics threads, 1 torch threads, 8 learning on 8 usable cores"
    assert plan_threads(None, 2, cpu_physics=True, cores=8).learner_for(7.8) == 2
    auto = plan_threads(None, None, cpu_physics=True, cores=8, learner_threads="auto")
    assert auto.learner is None and auto.describe().endswith("learning on up to 8")
    # an idle machine: the rollout kept every core busy; a shared one: about one
    assert [auto.learner_for(share) for share in (7.8, 3.4, 0.9, 0.2, 12.0)] == [8, 3, 1, 1, 8]
    told = plan_threads(None, None, cpu_physics=True, cores=8, learner_threads=3)
    assert [told.learner_for(share) for share in (7.8, 0.9)] == [3, 3]
    with pytest.raises(ValueError, match="learner_threads must be a whole number >= 1"):
        plan_threads(None, None, cpu_physics=True, cores=2, learner_threads=0)
    with pytest.raises(ValueError, match=r"whole number >= 1, auto or null .* got 'all'"):
        plan_threads(None, None, cpu_physics=True, cores=2, learner_threads="all")


def test_bad_thread_counts_are_clear_errors():
    with pytest.raises(ValueError, match="torch_threads must be a whole number >= 1"):
        plan_threads(None, 0, cpu_physics=True, cores=2)


def test_env_applies_the_plan(make_env):
    import torch

    env = make_env(reset=False)
    assert env.threads.physics == env.sim.nthread == usable_cores()
    assert torch.get_num_threads() == env.threads.torch == 1
    with pytest.warns(UserWarning, match="oversubscribe"):
        make_env(f"+torch_threads={usable_cores() + 1}", reset=False)
