"""Reset schedules under early terminations: ``phase_locked`` keeps the stagger that falls
take from ``staggered``, and episode statistics, time-outs and the adapters stay right."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from locomotion.config import load_config
from locomotion.envs.gymnasium_adapter import GymnasiumVectorEnv
from locomotion.envs.reset_schedule import ResetSchedule
from locomotion.rl.runner import Runner
from locomotion.tasks import make_env

N, K, H = 16, 5, 50  # envs, rollout length, control steps in the 1 s episodes
# Random actions and a base that may tilt 0.1 rad: nearly every robot falls within a few
# steps of its spawn, as early in training.
FALLS = ("num_envs=16", "rollout_length=5", "task.episode_length_s=1.0",
         "task.terminations.max_tilt=0.1")


def test_restart_counters_by_schedule():
    """A time-out restarts every schedule's counter at 0; only phase_locked keeps a fallen
    env's counter (its group's phase); it groups and warms up as staggered does."""
    counters = torch.tensor([H, 7, 49])
    locked = ResetSchedule("phase_locked", N, H, K)
    assert locked.restart_counters(counters).tolist() == [0, 7, 49]
    for name in ("sync", "random_counter", "staggered"):
        assert ResetSchedule(name, N, H, K).restart_counters(counters).tolist() == [0, 0, 0]
    staggered = ResetSchedule("staggered", N, H, K)
    assert locked.prewarm and locked.num_groups == staggered.num_groups == H // K
    assert torch.equal(locked.offsets(), staggered.offsets())


def run_with_falls(schedule: str, step_mode: str, steps: int = H + 2 * K, warmup: str = "zero"):
    """Random actions for ``steps`` steps; the phase uniformity of every K-step batch, and
    per step the counters [N] and (terminated, truncated, episode statistics)."""
    env = make_env(load_config("env", [*FALLS, f"reset={schedule}", f"step_mode={step_mode}",
                                       f"reset.warmup={warmup}"]))
    env.reset()
    gen = torch.Generator().manual_seed(0)
    uniformity, counters, ends = [], [], []
    for t in range(1, steps + 1):
        _, _, term, trunc, info = env.step(torch.randn(N, env.num_actions, generator=gen))
        counters.append(env.episode_length.clone())
        ends.append((term, trunc, dict(info.get("episode", {}))))
        if t % K == 0:
            uniformity.append(env.phase.pop()[1])
    offsets = env.schedule.offsets()
    env.close()
    return uniformity, counters, ends, offsets


@pytest.mark.parametrize("step_mode", ["indexed", pytest.param("masked", marks=pytest.mark.slow)])
def test_phase_locked_keeps_the_stagger_through_frequent_falls(step_mode):
    """Under frequent falls staggered counters collapse toward 0 and the batch loses its
    spread of phases; phase_locked keeps every env in its group's phase, so every batch
    covers the horizon and time-outs fall only where the groups' do."""
    staggered, _, ends, _ = run_with_falls("staggered", step_mode)
    falls = sum(int(term.sum()) for term, _, _ in ends)
    assert falls > 3 * N  # the falls this test is about do happen
    assert np.mean(staggered) < 0.95 and min(staggered) < 0.8
    locked, counters, ends, offsets = run_with_falls("phase_locked", step_mode)
    assert sum(int(term.sum()) for term, _, _ in ends) > 3 * N
    assert min(locked) >= 0.95
    for t, (counter, (term, trunc, _)) in enumerate(zip(counters, ends, strict=True), 1):
        assert torch.equal(counter, (offsets + t) % H)  # the group's phase, falls or not
        assert torch.equal(trunc, ~term & (counter == 0))  # time-outs: the group's only


def test_the_none_warm_up_sets_counters_and_simulates_nothing():
    """reset.warmup=none: each group's counter starts at its offset while every robot starts
    fresh (sync's states, nothing simulated); phase_locked then keeps that spread through
    frequent falls, and the first episodes of the groups with an offset count as partial."""
    envs = {name: make_env(load_config("env", [*FALLS, f"reset={name}", "reset.warmup=none"]))
            for name in ("sync", "phase_locked")}
    for env in envs.values():
        env.reset()
    locked, fresh = envs["phase_locked"], envs["sync"]
    assert not locked.schedule.prewarm
    assert torch.equal(locked.episode_length, locked.schedule.offsets())
    assert len(set(locked.episode_length.tolist())) == locked.schedule.num_groups > 1
    assert (locked.sim.state[:, 0] == 0).all()
    assert torch.equal(locked.sim.qpos, fresh.sim.qpos)
    for env in envs.values():
        env.close()
    uniformity, counters, ends, offsets = run_with_falls("phase_locked", "indexed",
                                                         warmup="none")
    assert sum(int(term.sum()) for term, _, _ in ends) > 3 * N
    assert min(uniformity) >= 0.95
    first = {}
    for t, (counter, (term, trunc, episode)) in enumerate(zip(counters, ends, strict=True), 1):
        assert torch.equal(counter, (offsets + t) % H)
        for j, i in enumerate((term | trunc).nonzero().squeeze(1).tolist()):
            first.setdefault(i, float(episode["partial"][j]))
    assert all(first[i] == float(offsets[i] > 0) for i in first) and len(first) == N


def test_phase_locked_episode_statistics():
    """Falls end episodes as terminations, time-outs as truncations; an episode that begins
    part-way into the horizon (after a fall) is partial, one that begins at counter 0
    (after a time-out) is whole and its length is the steps it lived."""
    _, counters, ends, _ = run_with_falls("phase_locked", "indexed")
    began_at_zero = counters[0] - 1 == 0  # the counters training started from
    born = torch.zeros(N, dtype=torch.long)  # step after which each env's episode began
    whole_seen = partial_seen = 0
    for t, (counter, (term, trunc, episode)) in enumerate(zip(counters, ends, strict=True), 1):
        ids = (term | trunc).nonzero().squeeze(1)
        if not len(ids):
            continue
        assert torch.equal(episode["timeout"], trunc[ids].float())
        whole = episode["partial"] == 0
        assert torch.equal(whole, began_at_zero[ids])
        assert torch.equal(episode["length"][whole], (t - born[ids][whole]).float())
        whole_seen += int(whole.sum())
        partial_seen += int((~whole).sum())
        began_at_zero[ids] = counter[ids] == 0
        born[ids] = t
    assert whole_seen > 0 and partial_seen > N


def test_phase_locked_next_step_autoreset():
    """Gymnasium's next-step autoreset respawns an env one step after its episode ended,
    with the counter the dropped episode began with: the episode after a time-out is whole,
    the one after a fall stays in its group's phase (one step late) and is partial."""
    env = make_env(load_config("env", [
        "num_envs=4", "rollout_length=2", "task.episode_length_s=0.2", "reset=phase_locked",
        "task.init_state.joint_pos_scale=[1.0,1.0]", "task.init_state.base_lin_vel=0.0",
        "task.init_state.base_ang_vel=0.0"]))  # a calm start: standing robots do not fall
    adapter = GymnasiumVectorEnv(env)
    adapter.reset(seed=0)
    h = env.max_episode_length
    assert env.schedule.offsets().tolist() == [7, 5, 2, 0] and h == 10
    zeros = np.zeros((4, env.num_actions), np.float32)
    for _ in range(3):
        _, _, term, trunc, _ = adapter.step(zeros)
    assert trunc.tolist() == [True, False, False, False] and not term.any()
    tilted = torch.tensor([np.cos(0.75), np.sin(0.75), 0.0, 0.0], dtype=env.sim.qpos.dtype)
    env.sim.qpos[2, 3:7] = tilted  # rolled 1.5 rad: env 2 falls in the next step
    _, _, term, trunc, _ = adapter.step(zeros)  # step 4: env 0 restarts, env 2 falls
    assert term.tolist() == [False, False, True, False] and not trunc.any()
    assert env.episode_length[0] == 0
    adapter.step(zeros)  # step 5: env 2 restarts at the counter of its fall
    assert env.episode_length[2] == 2 + 4
    partial = {}
    for _ in range(10):
        _, _, _, trunc, infos = adapter.step(zeros)
        for i in np.flatnonzero(trunc):
            partial.setdefault(int(i), infos["partial"][i])
    assert partial[0] == 0 and partial[2] == 1  # env 0 at step 14, env 2 at step 9
    adapter.close()


@pytest.mark.slow
def test_the_runner_warms_up_with_the_policy_it_trains():
    """reset.warmup=policy: the runner's warm-up steps the groups with its own policy's
    actions, once per warm-up step; zero and random are the other warm-ups."""
    def runner(warmup: str) -> Runner:
        cfg = load_config("train", [
            "num_envs=8", "algo.num_steps=4", "task.episode_length_s=0.2", "reset=staggered",
            f"reset.warmup={warmup}", "algo.policy.actor_hidden_dims=[16]",
            "algo.policy.critic_hidden_dims=[16]", "logging.tensorboard=false"])
        return Runner(make_env(cfg), cfg)

    warmed = runner("policy")
    act, calls = warmed.policy.act_inference, []

    def acting(obs: torch.Tensor) -> torch.Tensor:
        calls.append(act(obs))
        return calls[-1]

    warmed.policy.act_inference = acting
    warmed.start()
    assert len(calls) == int(warmed.env.schedule.offsets().max()) > 0
    assert all(a.abs().sum() > 0 for a in calls)
    others = {w: runner(w) for w in ("zero", "random")}
    for other in others.values():
        other.start()
    zero = others["zero"].env.sim.qpos
    assert not torch.equal(warmed.env.sim.qpos, zero)
    assert not torch.equal(others["random"].env.sim.qpos, zero)
    for r in (warmed, *others.values()):
        r.env.close()
