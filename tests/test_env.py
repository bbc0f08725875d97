"""Tests for the batched env: determinism, autoreset, timeouts, reset schedules, failures."""

import math
from types import SimpleNamespace

import pytest
import torch
from omegaconf import open_dict

from locomotion import tasks
from locomotion.config import load_config
from locomotion.envs import PhaseHistogram, ResetSchedule
from locomotion.sim.rotations import projected_gravity, yaw_quat
from locomotion.tasks.rewards import REWARD_TERMS

N = 16
H = 50  # control steps in the 1 s episodes of the base config
NO_FAILURES = ("task.terminations.max_tilt=4.0", "task.terminations.base_contact=false")
CALM_START = ("task.init_state.joint_pos_scale=[1.0,1.0]", "task.init_state.base_lin_vel=0.0",
              "task.init_state.base_ang_vel=0.0")


def zeros(env):
    """Zero actions for every env."""
    return torch.zeros(env.num_envs, env.num_actions)


def random_actions(env, steps: int, seed: int = 1, scale: float = 0.3) -> list[torch.Tensor]:
    """A fixed sequence of Gaussian actions."""
    gen = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(env.num_envs, env.num_actions, generator=gen)
            for _ in range(steps)]


def clone_obs(obs):
    """A copy of an observation dict."""
    return {k: v.clone() for k, v in obs.items()}


def assert_obs_equal(a, b, rows=slice(None)):
    """Every observation group bit-identical on ``rows``."""
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k][rows], b[k][rows]), k


def roll_quat(angle: float) -> torch.Tensor:
    """Base quaternion rolled by ``angle`` about world x."""
    return torch.tensor([math.cos(angle / 2), math.sin(angle / 2), 0.0, 0.0], dtype=torch.float64)


# ------------------------------------------------------------------ determinism
def test_same_seed_same_trajectory(make_env):
    """Bit-identical for one seed, whatever the thread count; another seed differs."""
    envs = [make_env("task.episode_length_s=0.2", f"seed={seed}", f"sim.nthread={nthread}")
            for seed, nthread in ((0, 2), (0, 3), (1, 2))]
    actions = random_actions(envs[0], 30)
    runs = []
    for env in envs:
        run = []
        for a in actions:
            obs, rew, term, trunc, _ = env.step(a)
            run.append((clone_obs(obs), rew.clone(), term.clone(), trunc.clone()))
        runs.append(run)
    assert sum(int(step[3].sum()) for step in runs[0]) >= 2 * N  # resets happened
    for (o0, r0, te0, tr0), (o1, r1, te1, tr1) in zip(runs[0], runs[1], strict=True):
        assert_obs_equal(o0, o1)
        assert torch.equal(r0, r1) and torch.equal(te0, te1) and torch.equal(tr0, tr1)
    assert not torch.equal(runs[0][0][0]["critic"], runs[2][0][0]["critic"])
    assert not torch.equal(envs[0].sim.qpos, envs[2].sim.qpos)


# ------------------------------------------------------------------ autoreset
def test_only_finished_envs_reset(make_env):
    """Timed-out envs respawn; the others match a run where nobody ended."""
    env = make_env("reset=random_counter")
    ref = make_env()  # same seed, all counters at 0: nobody ends in the first H steps
    start = env.episode_length.clone()
    end_step = H - start  # step at which each env times out
    assert (end_step <= 30).any() and (end_step > 30).any()
    for k, a in enumerate(random_actions(env, 30), start=1):
        obs, _, term, trunc, info = env.step(a)
        ref_obs, *_ = ref.step(a)
        assert not term.any()
        assert torch.equal(trunc, end_step == k)
        alive = end_step > k
        assert torch.equal(env.sim.qpos[alive], ref.sim.qpos[alive])
        assert torch.equal(env.sim.qvel[alive], ref.sim.qvel[alive])
        assert_obs_equal(obs, ref_obs, alive)
        assert torch.equal(env.episode_length[alive], start[alive] + k)
        ended = ~alive
        assert torch.equal(env.episode_length[ended], k - end_step[ended])
        expected_time = (k - end_step[ended]).double() * env.control_dt
        assert torch.allclose(torch.from_numpy(env.sim.state[:, 0])[ended], expected_time)
        if trunc.any():
            assert torch.equal(info["episode"]["length"], torch.full((int(trunc.sum()),), float(H)))


def test_timeout_truncates_at_horizon(make_env):
    """An episode of H steps ends truncated, not terminated."""
    env = make_env(*CALM_START)
    for _ in range(H - 1):
        _, _, term, trunc, info = env.step(zeros(env))
        assert not term.any() and not trunc.any() and info == {}
    _, _, term, trunc, info = env.step(zeros(env))
    assert trunc.all() and not term.any()
    ep = info["episode"]
    assert torch.equal(ep["length"], torch.full((N,), float(H)))
    assert torch.equal(ep["timeout"], torch.ones(N))
    assert info["diverged"] == 0
    assert (env.episode_length == 0).all() and (env.sim.state[:, 0] == 0).all()


def test_final_obs_is_pre_reset_observation(make_env):
    """final_obs is the last observation before the autoreset."""
    env = make_env()
    ref = make_env("task.episode_length_s=2.0")  # same seed, does not time out at H
    for a in random_actions(env, H):
        obs, _, _, trunc, info = env.step(a)
        ref_obs, *_ = ref.step(a)
    assert trunc.all()
    assert_obs_equal(info["final_obs"], ref_obs)
    for k in obs:
        assert not torch.equal(obs[k], info["final_obs"][k]), k  # obs is the reset one
    assert torch.equal(obs["policy"][:, -env.num_actions:], zeros(env))  # last actions cleared


def test_tilt_terminates_not_truncates(make_env):
    """A tipped base terminates that env alone; final_obs is pre-reset."""
    env = make_env("task.terminations.base_contact=false")
    ref = make_env(*NO_FAILURES)
    actions = random_actions(env, 6)
    for a in actions[:5]:
        env.step(a)
        ref.step(a)
    for e in (env, ref):
        e.sim.qpos[2, 3:7] = roll_quat(1.5)
    obs, _, term, trunc, info = env.step(actions[5])
    ref_obs, _, ref_term, *_ = ref.step(actions[5])
    assert not ref_term.any()
    assert term.tolist() == [i == 2 for i in range(N)] and not trunc.any()
    assert_obs_equal(info["final_obs"], ref_obs)
    assert_obs_equal(obs, ref_obs, torch.arange(N) != 2)
    assert not torch.equal(obs["policy"][2], ref_obs["policy"][2])
    assert torch.equal(info["episode"]["length"], torch.tensor([6.0]))
    assert torch.equal(info["episode"]["timeout"], torch.tensor([0.0]))
    assert env.episode_length[2] == 0 and env.sim.state[2, 0] == 0.0


def test_base_contact_terminates(make_env):
    """The trunk touching the ground terminates that env alone."""
    env = make_env("task.terminations.max_tilt=4.0")  # tilt alone cannot terminate
    env.step(zeros(env))
    env.sim.qpos[5, 2] = 0.03  # trunk into the ground, upright
    _, _, term, trunc, info = env.step(zeros(env))
    assert term.tolist() == [i == 5 for i in range(N)] and not trunc.any()
    assert info["diverged"] == 0


def test_failure_at_horizon_is_termination(make_env):
    """A failure on the timeout step counts as terminated only."""
    env = make_env(*CALM_START)
    for _ in range(H - 1):
        env.step(zeros(env))
    env.sim.qpos[0, 3:7] = roll_quat(1.5)
    _, _, term, trunc, info = env.step(zeros(env))
    assert term[0] and not trunc[0]
    assert trunc[1:].all() and not term[1:].any()
    assert torch.equal(info["episode"]["timeout"], (torch.arange(N) != 0).float())


# ------------------------------------------------------------------ reset schedules
@pytest.mark.parametrize("num_envs,horizon,rollout,groups", [
    (16, 50, 24, 3), (20, 100, 10, 10), (4, 100, 10, 4), (64, 50, 1, 50), (8, 50, 100, 1),
])
def test_staggered_offsets_cover_horizon(num_envs, horizon, rollout, groups):
    """B = ceil(H/K) capped by N and H groups, spaced H/B apart."""
    sched = ResetSchedule("staggered", num_envs, horizon, rollout)
    assert sched.num_groups == groups
    assert sched.prewarm == (groups > 1)
    offs = sched.group_offsets
    assert offs[0] == 0 and offs[-1] < horizon
    gaps = torch.diff(torch.cat((offs, torch.tensor([horizon]))))
    spacing = horizon / groups
    assert (gaps >= math.floor(spacing)).all() and (gaps <= math.ceil(spacing)).all()
    sizes = torch.bincount(sched.group, minlength=groups)
    assert sizes.max() - sizes.min() <= 1 and sizes.min() >= 1
    assert torch.equal(sched.offsets(), offs[sched.group])
    for other in ("sync", "random_counter"):
        s = ResetSchedule(other, num_envs, horizon, rollout)
        assert not s.prewarm and (s.offsets() == 0).all()


def test_staggered_reset_pre_advances_states(make_env):
    """Staggered reset advances states, not only counters."""
    env = make_env("num_envs=20", "rollout_length=10", "task.episode_length_s=2.0",
                   "reset=staggered", *CALM_START)
    horizon, sched = env.max_episode_length, env.schedule
    assert horizon == 100 and sched.num_groups == 10
    offsets = sched.offsets()
    assert sorted(set(offsets.tolist())) == list(range(0, 100, 10))
    assert torch.equal(env.episode_length, offsets)
    # states, not only counters, are advanced: sim clock, command timers, settled bodies
    sim_time = torch.from_numpy(env.sim.state[:, 0].copy())
    assert torch.allclose(sim_time, offsets.double() * env.control_dt)
    resample = env.cfg.task.commands.resample_time_s
    expected_timer = resample - offsets.float() * env.control_dt
    assert torch.allclose(env.task.command_timer, expected_timer, atol=1e-4)
    height = env.sim.qpos[:, 2]
    fresh = offsets == 0
    assert torch.allclose(height[fresh], torch.tensor(env.spec.init_height, dtype=torch.float64))
    assert (height[~fresh] < env.spec.init_height - 0.01).all()
    joint_vel = env.sim.qvel[:, env.layout.joint_qvel]
    assert (joint_vel[fresh] == 0).all() and (joint_vel[~fresh] != 0).any(1).all()
    # each group times out H - offset steps later; the first K steps cover the horizon
    first_end = torch.full((20,), -1)
    for k in range(1, horizon + 1):
        _, _, term, trunc, _ = env.step(zeros(env))
        assert not term.any()
        first_end = torch.where((first_end < 0) & trunc, k, first_end)
        if k == 10:
            _, uniformity = env.phase.pop()
            assert uniformity > 0.99
    assert torch.equal(first_end, horizon - offsets)


def test_sync_phase_histogram_is_narrow(make_env):
    """Synchronized starts fill only the first K/H of the phases."""
    env = make_env("num_envs=20", "rollout_length=10", "task.episode_length_s=2.0")
    for _ in range(10):
        env.step(zeros(env))
    hist, uniformity = env.phase.pop()
    assert uniformity < 0.3
    assert hist[:2].sum() == pytest.approx(1.0)


def test_phase_histogram_uniformity():
    """Uniformity is 1 for even phases, 0 for one bin; pop clears."""
    hist = PhaseHistogram(num_bins=10)
    hist.record(torch.arange(100), 100)
    p, u = hist.pop()
    assert u == pytest.approx(1.0) and torch.allclose(p, torch.full((10,), 0.1, dtype=p.dtype))
    hist.record(torch.full((50,), 3), 100)
    _, u = hist.pop()
    assert u == pytest.approx(0.0)
    assert hist.counts.sum() == 0


def test_heading_commands_steer_the_yaw_rate(make_env):
    env = make_env("task=rough", "terrain=flat", "num_envs=4",
                   "task.commands.standing_fraction=0.0")
    task = env.task
    assert task.steered.all()  # fraction 1: every moving command is a heading
    task.heading[:] = torch.tensor([0.5, -0.5, 3.0, 3.0])
    yaw = torch.tensor([0.0, 0.0, 0.0, -3.0])
    task.advance_commands(SimpleNamespace(base_quat=yaw_quat(yaw)))
    # 0.5 x heading error, within the yaw-rate range [-1, 1]; the error wraps round +-pi
    expected = torch.tensor([0.25, -0.25, 1.0, 0.5 * (6.0 - 2 * math.pi)])
    assert torch.allclose(task.commands[:, 2], expected, atol=1e-5)

    flat = make_env("num_envs=4")  # flat task: yaw rates are drawn, never steered
    before = flat.task.commands.clone()
    flat.task.advance_commands(SimpleNamespace(base_quat=yaw_quat(yaw)))
    assert torch.equal(flat.task.commands, before) and not flat.task.steered.any()
    with pytest.raises(ValueError, match="commands.heading needs 0 <= fraction <= 1"):
        make_env("task=rough", "terrain=flat", "task.commands.heading.fraction=1.5")


def test_episodes_begun_before_training_are_partial_and_averaged_over_their_steps(make_env):
    env = make_env("reset=random_counter")
    start = env.episode_length.clone()
    errors = []
    accumulate = env._accumulate

    def recording(reward, terms, metrics):
        errors.append(metrics["lin_vel_error"].clone())
        accumulate(reward, terms, metrics)

    env._accumulate = recording
    finished = {}
    for _ in range(env.max_episode_length + 1):
        _, _, term, trunc, info = env.step(torch.zeros(env.num_envs, env.num_actions))
        for j, i in enumerate((term | trunc).nonzero().squeeze(1).tolist()):
            ep = {k: v[j].item() for k, v in info["episode"].items()}
            finished.setdefault(i, (ep, len(errors)))
    assert len(finished) == env.num_envs and any(ep["partial"] for ep, _ in finished.values())
    for i, (ep, steps) in finished.items():
        assert ep["partial"] == float(start[i] > 0)
        ran = torch.stack(errors[:steps])[:, i]  # every step of this env since training began
        assert ep["lin_vel_error"] == pytest.approx(ran.mean().item(), rel=1e-5)


def test_random_counter_randomizes_counters_not_states(make_env):
    """random_counter draws counters; states are fresh."""
    env = make_env("reset=random_counter")
    ref = make_env()
    counters = env.episode_length
    assert ((counters >= 0) & (counters < H)).all()
    assert len(set(counters.tolist())) > N // 2
    assert (env.sim.state[:, 0] == 0).all()
    assert torch.equal(env.sim.qpos, ref.sim.qpos) and torch.equal(env.sim.qvel, ref.sim.qvel)
    assert torch.equal(env.task.commands, ref.task.commands)
    assert_obs_equal(env.obs, ref.obs)


def test_policy_warmup(make_env):
    """warmup=policy needs a policy and calls it once per warm-up step."""
    env = make_env("reset=staggered", "reset.warmup=policy", reset=False)
    with pytest.raises(ValueError, match="warm-up policy"):
        env.reset()
    calls = []

    def policy(obs):
        calls.append(obs["policy"].shape)
        return torch.zeros(N, env.num_actions)

    env.reset(policy)
    assert len(calls) == int(env.schedule.offsets().max())
    assert calls[0] == (N, env.obs["policy"].shape[1])


# ------------------------------------------------------------------ standing and inputs
def test_robot_stands_under_zero_actions(make_env):
    """Zero actions from a calm start: 2 s upright, no failures."""
    env = make_env("num_envs=8", "task.episode_length_s=3.0", *CALM_START)
    for _ in range(100):
        _, reward, term, trunc, _ = env.step(zeros(env))
        assert not term.any() and not trunc.any()
        assert torch.isfinite(reward).all()
    qpos = env.sim.qpos.float()
    assert (qpos[:, 2] > 0.22).all()
    assert (projected_gravity(qpos[:, 3:7])[:, 2] < -0.98).all()
    assert env.diverged_count == 0


@pytest.mark.parametrize("bad,match", [
    (lambda a: a.index_put_((torch.tensor(3), torch.tensor(0)), torch.tensor(math.nan)), "NaN"),
    (lambda a: a.index_put_((torch.tensor(7), torch.tensor(4)), torch.tensor(math.inf)), "inf"),
    (lambda a: a[:, :-1], r"shape \(16, 12\).*got \(16, 11\)"),
    (lambda a: a[0], r"got \(12,\)"),
    (lambda a: a[:-1], r"got \(15, 12\)"),
])
def test_bad_actions_raise(make_env, bad, match):
    """Non-finite or misshapen actions raise before anything is stepped."""
    env = make_env()
    env.step(zeros(env))
    before = env.sim.qpos.clone()
    with pytest.raises(ValueError, match=match):
        env.step(bad(zeros(env)))
    assert torch.equal(env.sim.qpos, before) and (env.episode_length == 1).all()


def test_diverged_env_reset_and_counted(make_env, tmp_path, monkeypatch):
    """A NaN state is reset and counted; other envs are unaffected."""
    monkeypatch.chdir(tmp_path)  # MuJoCo logs its instability warning to ./MUJOCO_LOG.TXT
    env = make_env()
    ref = make_env()
    actions = random_actions(env, 20)
    for a in actions[:5]:
        env.step(a)
        ref.step(a)
    env.sim.qvel[3, 0] = math.nan
    others = torch.arange(N) != 3
    for k, a in enumerate(actions[5:]):
        obs, reward, term, trunc, info = env.step(a)
        ref_obs, ref_reward, *_ = ref.step(a)
        if k == 0:
            assert info["diverged"] == 1 and env.diverged_count == 1
            assert term.tolist() == [i == 3 for i in range(N)] and not trunc.any()
            assert reward[3] == 0.0
            assert all(torch.isfinite(v).all() for v in info["final_obs"].values())
            assert env.episode_length[3] == 0
        else:
            assert not term.any() and "diverged" not in info
        assert all(torch.isfinite(v).all() for v in obs.values())
        assert_obs_equal(obs, ref_obs, others)
        assert torch.equal(reward[others], ref_reward[others])
        assert torch.equal(env.sim.qpos[others], ref.sim.qpos[others])
    assert env.diverged_count == 1
    env.reset()
    assert env.diverged_count == 0


def test_reward_terms_present_and_finite(make_env):
    """Every configured reward term is reported and finite (base_height and fallen, off by
    default, switched on)."""
    env = make_env("task.episode_length_s=0.2", "task.rewards.weights.base_height=-20.0",
                   "task.rewards.weights.fallen=-3.0")
    weights = dict(env.cfg.task.rewards.weights)
    assert set(weights) == set(REWARD_TERMS) - {"gait_contact"}  # gaits: task=multitask
    for a in random_actions(env, 10, scale=1.0):
        _, reward, _, trunc, info = env.step(a)
        assert torch.isfinite(reward).all() and (reward >= 0).all()
    assert trunc.all()
    episode = info["episode"]
    assert set(weights) | {"return", "length", "timeout", "lin_vel_error", "yaw_error"} \
        <= set(episode)
    assert all(torch.isfinite(v).all() and v.shape == (N,) for v in episode.values())
    assert (episode["torques"] < 0).all() and (episode["action_rate"] < 0).all()
    world = env.task.world(env.sim)
    total, terms = env.task.rewards(world, zeros(env), env.actions)
    assert set(terms) == {k for k, w in weights.items() if w != 0}
    assert all(v.shape == (N,) and torch.isfinite(v).all() for v in terms.values())
    assert torch.allclose(total, torch.stack(list(terms.values())).sum(0).clamp(min=0))


# ------------------------------------------------------------------ config errors
@pytest.mark.parametrize("override,match,listed", [
    ("task.name=swim", "unknown task 'swim'", "flat_velocity"),
    ("+task.rewards.weights.jump=1.0", r"unknown reward terms \['jump'\]", "track_lin_vel"),
    ("+task.observations.policy.lidar=1.0", r"unknown observation terms \['lidar'\]",
     "projected_gravity"),
    ("reset.schedule=shuffled", "unknown reset schedule 'shuffled'", "random_counter"),
    ("reset.warmup=expert", "unknown warm-up policy 'expert'", "zero"),
    ("sim.backend=mjx", "unknown sim backend 'mjx'", "warp"),
])
def test_unknown_names_raise(make_env, override, match, listed):
    """Unknown config names raise ValueError listing the valid ones."""
    with pytest.raises(ValueError, match=match) as err:
        make_env(override, reset=False)
    assert "valid" in str(err.value) and repr(listed) in str(err.value)


def test_a_task_without_reward_terms_is_refused():
    """Every weight 0 leaves nothing to learn: an error listing the terms, not a zero reward."""
    cfg = load_config("env", ["num_envs=16"])
    with open_dict(cfg):
        cfg.task.rewards.weights = dict.fromkeys(cfg.task.rewards.weights, 0.0)
    with pytest.raises(ValueError, match="gives no term a nonzero weight") as err:
        tasks.make_env(cfg)
    assert "'track_lin_vel'" in str(err.value)


def test_control_dt_must_be_multiple_of_timestep(make_env):
    """control_dt must be a whole number of physics steps."""
    with pytest.raises(ValueError, match="not a multiple"):
        make_env("task.control_dt=0.012", reset=False)
