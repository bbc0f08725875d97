"""Tests for domain randomization: ranges, per-env isolation, pushes, latency, noise, errors."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from locomotion.config import load_config
from locomotion.envs.randomization import RandomizationError

N = 16
CALM = ("task.init_state.joint_pos_scale=[1.0,1.0]", "task.init_state.base_lin_vel=0.0",
        "task.init_state.base_ang_vel=0.0", "task.episode_length_s=5.0")


def actions(env, steps: int, seed: int = 1, scale: float = 0.3) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(env.num_envs, env.num_actions, generator=gen)
            for _ in range(steps)]


def with_events(env_from_cfg, events: dict, *overrides: str, noise: dict | None = None,
                robots: object = None):
    """An env whose randomization is exactly ``events`` (and ``noise``, ``robots``)."""
    cfg = load_config("env", ["num_envs=16", "reset=sync", *overrides])
    cfg.randomization = OmegaConf.create({"name": "test", "events": events,
                                          "observation_noise": noise or {},
                                          "distinct_robots": robots})
    return env_from_cfg(cfg)


def test_none_is_bit_identical_to_nominal(make_env, env_from_cfg):
    """randomization=none changes nothing: same trajectory as an env with no randomizer config."""
    env = make_env("randomization=none", "reset=random_counter")
    cfg = load_config("env", ["num_envs=16", "reset=random_counter", "task.episode_length_s=1.0",
                              "~randomization"])
    assert "randomization" not in cfg
    ref = env_from_cfg(cfg)
    for a in actions(env, 60):
        o1, r1, t1, u1, _ = env.step(a)
        o2, r2, t2, u2, _ = ref.step(a)
        assert all(torch.equal(o1[k], o2[k]) for k in o1)
        assert torch.equal(r1, r2) and torch.equal(t1, t2) and torch.equal(u1, u2)
    assert not env.randomizer.table.fields  # no model copies either
    assert all(m is env.sim.model for m in env.sim.models)


def test_robust_samples_in_range_and_differ(make_env):
    env = make_env("randomization=robust")
    model = env.model
    feet = [model.geom(f).id for f in env.spec.feet]
    ground = model.geom("ground").id
    friction = torch.tensor([[m.geom_friction[g, 0] for g in (ground, *feet)]
                             for m in env.sim.models])
    assert friction.min() >= 0.4 and friction.max() <= 1.25
    assert friction[:, 0].std() > 0.1  # differs across envs
    assert torch.equal(friction[:, 0:1].expand_as(friction), friction)  # one value per env
    base = model.body(env.spec.base_body).id
    payload = torch.tensor([m.body_mass[base] for m in env.sim.models]) - model.body_mass[base]
    assert payload.min() >= -1.0 - 1e-9 and payload.max() <= 2.0 + 1e-9 and payload.std() > 0.3
    strength = torch.tensor([m.actuator_forcerange[0, 1] for m in env.sim.models]) \
        / model.actuator_forcerange[0, 1]
    assert strength.min() >= 0.85 - 1e-9 and strength.max() <= 1.15 + 1e-9
    assert set(env.randomizer.delay.tolist()) == {0, 1}
    assert env.randomizer.joint_bias.abs().max() <= 0.02 and env.randomizer.joint_bias.std() > 0
    again = make_env("randomization=robust")  # same seed: same draws
    table, twin = env.randomizer.table, again.randomizer.table
    assert torch.equal(table["geom_friction"], twin["geom_friction"])
    other = make_env("randomization=robust", "seed=3")
    assert not torch.equal(env.randomizer.table["body_mass"], other.randomizer.table["body_mass"])


def test_sim2real_draws_joint_dynamics_and_contacts_in_range(make_env):
    """sim2real: joint damping 0-2.5, friction loss 0-0.3, armature 0.005-0.03 per joint,
    and one foot-ground softness per env on the ground and every foot."""
    env = make_env("randomization=sim2real")
    dofs = torch.as_tensor(env.layout.joint_qvel)
    for field, (low, high) in (("dof_damping", (0.0, 2.5)), ("dof_frictionloss", (0.0, 0.3)),
                               ("dof_armature", (0.005, 0.03))):
        values = torch.tensor(np.array([getattr(m, field)[dofs] for m in env.sim.models]))
        assert values.min() >= low and values.max() <= high and values.std() > 0.1 * high
    model = env.model
    geoms = [model.geom(g).id for g in ("ground", *env.spec.feet)]
    solref = torch.tensor(np.array([m.geom_solref[geoms] for m in env.sim.models]))
    solimp = torch.tensor(np.array([m.geom_solimp[geoms] for m in env.sim.models]))
    assert solref[..., 0].min() >= 0.02 and solref[..., 0].max() <= 0.05
    assert solref[..., 0].std() > 0.005
    assert torch.equal(solref[:, :1].expand_as(solref), solref)  # a pair mixes to the draw
    assert solimp[..., 0].min() >= 0.7 and solimp[..., 1].max() <= 0.99
    obs, *_ = env.step(torch.zeros(env.num_envs, env.num_actions))
    assert all(torch.isfinite(v).all() for v in obs.values())


def test_contact_event_refuses_invalid_impedance(env_from_cfg):
    with pytest.raises(RandomizationError, match="dmax can reach"):
        with_events(env_from_cfg, {"contact": {"mode": "startup", "dmax": [0.9, 1.0]}})


def test_per_env_change_touches_only_that_env(env_from_cfg):
    events = {"friction": {"mode": "manual", "friction": [0.1, 2.0]},
              "payload": {"mode": "manual", "mass": {"add": [0.0, 5.0]}}}
    env = with_events(env_from_cfg, events, *CALM)
    ref = with_events(env_from_cfg, events, *CALM)
    env.randomizer.set("friction", torch.tensor([3]), friction=torch.tensor([[0.2]]))
    env.randomizer.set("payload", torch.tensor([3]), mass=torch.tensor([[4.0]]))
    ground, base = env.model.geom("ground").id, env.model.body(env.spec.base_body).id
    assert env.sim.models[3].geom_friction[ground, 0] == pytest.approx(0.2)
    assert env.sim.models[3].body_mass[base] == pytest.approx(env.model.body_mass[base] + 4.0)
    for i in (0, 1, 2, 4, 15):
        assert env.sim.models[i].geom_friction[ground, 0] == env.model.geom_friction[ground, 0]
        assert env.sim.models[i].body_mass[base] == env.model.body_mass[base]
    for a in actions(env, 25):
        env.step(a)
        ref.step(a)
    others = torch.arange(N) != 3
    assert torch.equal(env.sim.qpos[others], ref.sim.qpos[others])
    assert not torch.equal(env.sim.qpos[3], ref.sim.qpos[3])  # heavier robot sits lower


def test_push_changes_base_velocity_by_requested_amount(env_from_cfg):
    events = {"push": {"mode": "manual", "velocity": [-1.0, 1.0]}}
    env = with_events(env_from_cfg, events, *CALM)
    ref = with_events(env_from_cfg, events, *CALM)
    zero = torch.zeros(N, env.num_actions)
    for _ in range(25):  # settle
        env.step(zero)
        ref.step(zero)
    kick = torch.zeros(N, 2)
    kick[:, 0] = torch.linspace(-1.0, 1.0, N)
    before = env.sim.qvel[:, 0:2].clone()
    env.randomizer.set("push", torch.arange(N), velocity=kick)
    assert torch.allclose(env.sim.qvel[:, 0:2] - before, kick.double())
    env.step(zero)
    ref.step(zero)
    dv = env.sim.qvel[:, 0] - ref.sim.qvel[:, 0]
    # one control step later the kick is still there, less what the feet's friction took
    assert torch.allclose(dv.float(), kick[:, 0], atol=0.35)
    assert (dv.sign() == kick[:, 0].sign().double()).all()


def test_interval_push_fires_on_schedule(env_from_cfg):
    events = {"push": {"mode": "interval", "interval_s": [0.1, 0.1], "velocity": [0.5, 0.5]}}
    env = with_events(env_from_cfg, events, *CALM)
    later = {"push": {**events["push"], "interval_s": [100.0, 100.0]}}  # same draws, no push
    ref = with_events(env_from_cfg, later, *CALM)
    zero = torch.zeros(N, env.num_actions)
    for _ in range(4):  # 0.08 s: before the first push
        env.step(zero)
        ref.step(zero)
    assert torch.equal(env.sim.qvel, ref.sim.qvel)
    env.step(zero)  # timer reaches 0.1 s: pushed this step
    ref.step(zero)
    assert (env.sim.qvel[:, 0:2] - ref.sim.qvel[:, 0:2] > 0.2).all()


def test_force_push_is_held_then_released(env_from_cfg):
    events = {"force": {"mode": "manual", "force": [-100.0, 100.0], "duration_s": 0.04}}
    env = with_events(env_from_cfg, events, *CALM)
    base = env.model.body(env.spec.base_body).id
    env.randomizer.set("force", torch.tensor([0, 1]), force=torch.tensor([[80.0, 0, 0],
                                                                        [0, -80.0, 0]]))
    held = []
    for _ in range(3):
        env.step(torch.zeros(N, env.num_actions))
        held.append(env.sim._xfrc[0, base, 0])
    assert held == [80.0, 0.0, 0.0]  # 0.04 s = two steps: released before the third
    assert env.sim.qvel[0, 0] > 0.1 and env.sim.qvel[1, 1] < -0.1


@pytest.mark.parametrize("max_delay", [1, 3])
def test_latency_delays_applied_action_by_exactly_its_steps(env_from_cfg, max_delay):
    events = {"latency": {"mode": "manual", "steps": [0, max_delay]}}
    env = with_events(env_from_cfg, events, *CALM)
    delay = torch.arange(N) % (max_delay + 1)
    env.randomizer.set("latency", torch.arange(N), steps=delay)
    seq = actions(env, 8)
    default = torch.as_tensor(env.layout.default_ctrl, dtype=torch.float64)
    for t, a in enumerate(seq):
        env.step(a)
        for i in range(N):
            src = t - int(delay[i])
            want = seq[src][i].double() if src >= 0 else torch.zeros(env.num_actions,
                                                                    dtype=torch.float64)
            ctrl = env.ctrl[i, env.layout.actuator_ids]
            assert torch.allclose(ctrl, default + env.spec.action_scale * want, atol=1e-6)


def test_latency_buffer_clears_on_reset(env_from_cfg):
    events = {"latency": {"mode": "reset", "steps": [1, 1]}}
    env = with_events(env_from_cfg, events, *CALM, "task.episode_length_s=0.1")
    for a in actions(env, 5):  # the 5th step ends every episode
        env.step(a)
    env.step(torch.ones(N, env.num_actions))
    default = torch.as_tensor(env.layout.default_ctrl, dtype=torch.float64)
    assert torch.allclose(env.ctrl[:, env.layout.actuator_ids], default.expand(N, -1))


def test_observation_noise_only_on_policy_and_bounded(env_from_cfg):
    noise = {"joint_vel": 1.5, "projected_gravity": 0.05}
    env = with_events(env_from_cfg, {}, *CALM, noise=noise)
    cols = env.task.observation_layout(env.task.world(env.sim), env.actions)
    obs, *_ = env.step(torch.zeros(N, env.num_actions))
    def term(group, name):
        return obs[group][:, cols[group][name]]

    diff = term("policy", "joint_vel") - term("critic", "joint_vel")
    scale = float(env.task.obs_scales["policy"]["joint_vel"])
    assert diff.abs().max() <= 1.5 * scale + 1e-6 and diff.abs().max() > 0.5 * scale
    same = term("policy", "commands") - term("critic", "commands")
    assert torch.equal(same, torch.zeros_like(same))


def test_randomized_env_resumes_exactly(make_env):
    env = make_env("randomization=robust", "reset=random_counter")
    for a in actions(env, 20):
        env.step(a)
    state = env.state_dict()
    later = actions(env, 30, seed=2)
    ref = [env.step(a)[0]["policy"].clone() for a in later]
    twin = make_env("randomization=robust", "reset=random_counter", "seed=5")
    twin.load_state_dict(state)
    for a, want in zip(later, ref, strict=True):
        assert torch.equal(twin.step(a)[0]["policy"], want)


def test_distinct_robots_share_draws_and_model_copies(env_from_cfg):
    events = {"friction": {"mode": "startup", "friction": [0.4, 1.25]},
              "payload": {"mode": "startup", "mass": {"add": [-1.0, 2.0]}},
              "encoder_bias": {"mode": "startup", "offset": [-0.02, 0.02]}}
    env = with_events(env_from_cfg, events, *CALM, robots=4)
    r, sim = env.randomizer, env.sim
    ground, base = env.model.geom("ground").id, env.model.body(env.spec.base_body).id
    robots = torch.cat((r.table["geom_friction"][:, ground, :1],
                        r.table["body_mass"][:, base:base + 1], r.joint_bias.double()), dim=1)
    distinct, robot_of, share = robots.unique(dim=0, return_inverse=True, return_counts=True)
    assert len(distinct) == 4 and share.tolist() == [4, 4, 4, 4]
    assert distinct[:, 0].min() >= 0.4 and distinct[:, 0].max() <= 1.25
    # one model copy per robot, holding that robot's values
    assert len({id(m) for m in sim.models}) == 4
    for i, m in enumerate(sim.models):
        assert m is not env.model and m is sim.models[int((robot_of == robot_of[i]).nonzero()[0])]
        assert m.geom_friction[ground, 0] == r.table["geom_friction"][i, ground, 0]
    # changing one env copies its model: its robot's other envs keep their values
    partners = (robot_of == robot_of[3]).nonzero().squeeze(1).tolist()
    before = sim.models[partners[0] if partners[0] != 3 else partners[1]].body_mass[base]
    r.set("payload", torch.tensor([3]), mass=torch.tensor([[1.5]]))
    assert len({id(m) for m in sim.models}) == 5
    assert sim.models[3].body_mass[base] == pytest.approx(env.model.body_mass[base] + 1.5)
    assert all(sim.models[p].body_mass[base] == before for p in partners if p != 3)
    # a resumed env shares copies the same way
    twin = with_events(env_from_cfg, events, *CALM, "seed=5", robots=4)
    twin.load_state_dict(env.state_dict())
    assert len({id(m) for m in twin.sim.models}) == 5


@pytest.mark.parametrize("robots", [0, 2.5, "many"])
def test_invalid_distinct_robots_is_a_clear_error(env_from_cfg, robots):
    with pytest.raises(RandomizationError, match="distinct_robots must be a whole number"):
        with_events(env_from_cfg, {}, robots=robots)


@pytest.mark.parametrize("events, match", [
    ({"friction": {"mode": "startup", "friction": [1.2, 0.4]}}, "min > max"),
    ({"payload": {"mode": "startup", "mass": {"add": [-20.0, 1.0]}}}, "must stay positive"),
    ({"link_mass": {"mode": "startup", "mass": {"scale": [-0.5, 1.0]}}}, "must stay positive"),
    ({"gravity": {"mode": "startup", "g": [0, 1]}}, r"unknown randomization events.*friction"),
    ({"friction": {"mode": "sometimes", "friction": [0.5, 1.0]}}, r"mode 'sometimes'.*startup"),
    ({"push": {"mode": "startup", "velocity": [0, 1]}}, r"mode 'startup'.*interval"),
    ({"friction": {"mode": "startup", "mu": [0.5, 1.0]}}, r"unknown keys \['mu'\]"),
    ({"friction": {"mode": "startup", "friction": {"times": [0.5, 1.0]}}}, "scale"),
    ({"latency": {"mode": "reset", "steps": [0, 1.5]}}, "whole"),
])
def test_invalid_config_is_a_clear_error(env_from_cfg, events, match):
    with pytest.raises(RandomizationError, match=match):
        with_events(env_from_cfg, events)


def test_noise_on_unobserved_term_is_a_clear_error(env_from_cfg):
    with pytest.raises(RandomizationError, match="policy terms"):
        with_events(env_from_cfg, {}, noise={"foot_contact": 0.1})
