"""Tests for the gymnasium and rsl_rl adapters: contracts, same-step time-outs, an rsl_rl run.

Gymnasium 1.4 has no checker for vector envs (``gymnasium.utils.env_checker.check_env``
accepts a ``gymnasium.Env`` only), so its vector-agnostic pieces are applied here instead:
the passive checker's space and observation checks (with its warnings made errors),
``data_equivalence`` for seeding determinism, ``data_shares_objects`` for buffer reuse, and
two of gymnasium's consumers of vector envs (``RecordEpisodeStatistics``, which handles
same-step autoreset, and ``benchmark_vector_step``).
"""

import time
import warnings

import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.utils.passive_env_checker import (
    check_action_space,
    check_obs,
    check_observation_space,
    data_shares_objects,
)
from gymnasium.utils.performance import benchmark_vector_step
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.vector import RecordEpisodeStatistics

from locomotion import tasks
from locomotion.config import load_config
from locomotion.envs.gymnasium_adapter import GymnasiumVectorEnv
from locomotion.envs.rsl_rl_adapter import RslRlVecEnv
from locomotion.envs.vec_env import LocomotionEnv

NUM_ENVS = 8
HORIZON = 10  # control steps in task.episode_length_s = 0.2 at control_dt = 0.02
STEPS = 20


def make_env(num_envs: int = NUM_ENVS) -> LocomotionEnv:
    """All envs start together and time out together after HORIZON steps."""
    cfg = load_config("env", [f"num_envs={num_envs}", "reset=sync", "task.episode_length_s=0.2"])
    env = tasks.make_env(cfg)
    assert env.max_episode_length == HORIZON
    return env


def policy_warmup_config():
    """Staggered starts whose warm-up steps need a policy."""
    return load_config("env", [f"num_envs={NUM_ENVS}", "reset=staggered", "reset.warmup=policy",
                               "rollout_length=4", "task.episode_length_s=0.2"])


def strict_check_obs(obs, space, method: str) -> None:
    """Gymnasium's passive observation check, with its warnings turned into failures."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_obs(obs, space, method)


# ---------------------------------------------------------------------- gymnasium
def test_gymnasium_contract_and_same_step_timeout():
    assert GymnasiumVectorEnv.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    env = GymnasiumVectorEnv(make_env(), autoreset_mode=AutoresetMode.SAME_STEP)
    assert env.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    assert env.num_envs == NUM_ENVS
    for space in (env.single_observation_space, env.observation_space):
        check_observation_space(space)
    for space in (env.single_action_space, env.action_space):
        check_action_space(space)
    assert env.single_observation_space == spaces.Box(-np.inf, np.inf, (48,), np.float32)
    assert env.observation_space.shape == (NUM_ENVS, 48)
    low, high = env.env.action_bounds.numpy().T
    assert env.single_action_space == spaces.Box(low, high, (12,), np.float32)
    assert (low < 0).all() and (high > 0).all() and (high - low < 2 * env.env.action_clip).all()
    assert env.action_space.shape == (NUM_ENVS, 12)

    obs, info = env.reset(seed=0)
    assert info == {}
    strict_check_obs(obs, env.observation_space, "reset")
    env.action_space.seed(0)
    length = np.zeros(NUM_ENVS, dtype=int)
    seen_timeout = False
    for _ in range(STEPS):
        actions = env.action_space.sample()
        assert actions in env.action_space
        prev = obs
        obs, rew, term, trunc, infos = env.step(actions)
        strict_check_obs(obs, env.observation_space, "step")
        assert not data_shares_objects(prev, obs)
        assert rew.shape == (NUM_ENVS,) and rew.dtype == np.float64 and np.isfinite(rew).all()
        assert term.shape == trunc.shape == (NUM_ENVS,)
        assert term.dtype == trunc.dtype == np.bool_
        done = term | trunc
        length += 1
        np.testing.assert_array_equal(trunc, (length >= HORIZON) & ~term)
        seen_timeout |= bool(trunc.any())
        if not done.any():
            assert infos == {}
            continue
        for key in ("_final_obs", "_final_info"):
            np.testing.assert_array_equal(infos[key], done)
        final_obs, final_info = infos["final_obs"], infos["final_info"]
        assert final_obs.dtype == object and final_obs.shape == (NUM_ENVS,)
        for i in range(NUM_ENVS):
            if done[i]:
                strict_check_obs(final_obs[i], env.single_observation_space, "step")
                assert not np.allclose(final_obs[i], obs[i]), "final obs must be pre-reset"
            else:
                assert final_obs[i] is None
        np.testing.assert_array_equal(final_info["_length"], done)
        np.testing.assert_array_equal(final_info["length"][done], length[done])
        np.testing.assert_array_equal(final_info["timeout"][done], trunc[done])
        length[done] = 0
    assert seen_timeout
    env.close()
    assert env.closed


def test_gymnasium_matches_env_and_is_seeded():
    """Same numbers as the raw env (including final obs and stats); a seed replays exactly."""
    adapter = GymnasiumVectorEnv(make_env(), autoreset_mode="SameStep")
    raw = make_env()
    obs, _ = adapter.reset(seed=3)
    raw.gen.manual_seed(3)
    np.testing.assert_array_equal(obs, raw.reset()["policy"].numpy())
    rng = np.random.default_rng(0)
    actions = [rng.standard_normal((NUM_ENVS, 12), dtype=np.float32) for _ in range(HORIZON + 2)]
    rollout = []
    for act in actions:
        out = adapter.step(act)
        ref_obs, ref_rew, ref_term, ref_trunc, ref_info = raw.step(torch.from_numpy(act))
        np.testing.assert_array_equal(out[0], ref_obs["policy"].numpy())
        np.testing.assert_array_equal(out[1], ref_rew.numpy().astype(np.float64))
        np.testing.assert_array_equal(out[2], ref_term.numpy())
        np.testing.assert_array_equal(out[3], ref_trunc.numpy())
        if "final_obs" in ref_info:
            ids = (ref_term | ref_trunc).nonzero().squeeze(1).tolist()
            for j, i in enumerate(ids):
                np.testing.assert_array_equal(out[4]["final_obs"][i],
                                              ref_info["final_obs"]["policy"][i].numpy())
                for key, values in ref_info["episode"].items():
                    assert out[4]["final_info"][key][i] == values[j].item()
        rollout.append(out)
    assert any("final_obs" in out[4] for out in rollout)

    again, _ = adapter.reset(seed=3)
    np.testing.assert_array_equal(again, obs)
    assert data_equivalence(adapter.step(actions[0]), rollout[0], exact=True)
    other, _ = adapter.reset(seed=4)
    assert not np.allclose(other, obs)
    adapter.close()
    raw.close()


def test_gymnasium_dict_observations_and_consumers():
    env = GymnasiumVectorEnv(make_env(), obs_group=("policy", "critic"),
                             autoreset_mode=AutoresetMode.SAME_STEP)
    assert isinstance(env.single_observation_space, spaces.Dict)
    assert env.observation_space["critic"].shape == (NUM_ENVS, 53)
    check_observation_space(env.observation_space)
    stats = RecordEpisodeStatistics(env)
    obs, _ = stats.reset(seed=1)
    strict_check_obs(obs, env.observation_space, "reset")
    for _ in range(HORIZON):
        obs, _, _, trunc, infos = stats.step(np.zeros((NUM_ENVS, 12), np.float32))
        strict_check_obs(obs, env.observation_space, "step")
    assert trunc.all()
    np.testing.assert_array_equal(infos["episode"]["l"], HORIZON)
    for final in infos["final_obs"]:
        strict_check_obs(final, env.single_observation_space, "step")
    assert benchmark_vector_step(env, target_duration=0, seed=0) > 0

    calls = []

    def warmup(o):
        calls.append(o)
        return np.zeros((NUM_ENVS, 12), np.float32)

    raw = tasks.make_env(policy_warmup_config())
    raw.reset(lambda o: torch.zeros(NUM_ENVS, 12))  # the adapter can't reset it without a policy
    warm = GymnasiumVectorEnv(raw, obs_group="critic")
    obs, _ = warm.reset(options={"warmup_policy": warmup})
    assert calls and all(isinstance(c, np.ndarray) and c.shape == (NUM_ENVS, 53) for c in calls)
    strict_check_obs(obs, warm.observation_space, "reset")
    with pytest.raises(ValueError, match="unknown reset options"):
        warm.reset(options={"reset_mask": np.ones(NUM_ENVS, bool)})
    with pytest.raises(ValueError, match="obs_group"):
        GymnasiumVectorEnv(warm.env, obs_group="proprio")
    env.close()
    warm.close()


# ---------------------------------------------------------------------- rsl_rl
def test_rsl_rl_adapter_steps_and_times_out():
    pytest.importorskip("tensordict")  # the adapter's observation type; comes with rsl-rl-lib
    env = RslRlVecEnv(make_env())
    assert (env.num_envs, env.num_actions, env.max_episode_length) == (NUM_ENVS, 12, HORIZON)
    assert env.cfg is env.env.cfg and str(env.device) == "cpu"
    obs = env.get_observations()
    assert set(obs.keys()) == {"policy", "critic"} and tuple(obs.batch_size) == (NUM_ENVS,)
    assert obs["policy"].shape == (NUM_ENVS, 48) and obs["critic"].shape == (NUM_ENVS, 53)

    gen = torch.Generator().manual_seed(0)
    length = torch.zeros(NUM_ENVS, dtype=torch.long)
    timeouts = 0
    with torch.inference_mode():  # how rsl_rl's runner collects rollouts
        for _ in range(STEPS):
            obs, rew, dones, extras = env.step(torch.randn(NUM_ENVS, 12, generator=gen))
            time_outs = extras["time_outs"]
            assert obs["policy"].dtype == rew.dtype == torch.float32
            assert rew.shape == dones.shape == time_outs.shape == (NUM_ENVS,)
            assert dones.dtype == time_outs.dtype == torch.bool
            length += 1
            at_horizon = length >= HORIZON
            assert dones[at_horizon].all() and not time_outs[~at_horizon].any()
            assert torch.equal(env.episode_length_buf, torch.where(dones, 0, length))
            timeouts += int(time_outs.sum())
            if dones.any():
                final = extras["final_obs"]
                assert final["critic"].shape == (NUM_ENVS, 53)
                assert not torch.allclose(final["policy"][dones], obs["policy"][dones])
                assert torch.equal(extras["episode"]["length"], length[dones].float())
                assert torch.equal(extras["episode"]["timeout"], time_outs[dones].float())
            else:
                assert "final_obs" not in extras and "episode" not in extras
            length[dones] = 0
    assert timeouts > 0
    env.step(torch.zeros(NUM_ENVS, 12))  # still steppable outside inference mode

    env.episode_length_buf = torch.randint_like(env.episode_length_buf, high=HORIZON)
    assert env.env.episode_length is env.episode_length_buf
    assert int(env.env.episode_length.max()) < HORIZON
    env.close()

    warmed = []
    staggered = RslRlVecEnv(tasks.make_env(policy_warmup_config()),
                            warmup_policy=lambda o: warmed.append(o) or torch.zeros(NUM_ENVS, 12))
    assert warmed and len(staggered.episode_length_buf.unique()) > 1  # the schedule was applied
    staggered.close()


def test_rsl_rl_on_policy_runner(tmp_path, capsys):
    pytest.importorskip("rsl_rl")
    from rsl_rl.env import VecEnv
    from rsl_rl.runners import OnPolicyRunner

    env = RslRlVecEnv(make_env(16))
    for name in VecEnv.__abstractmethods__:
        assert callable(getattr(env, name)), name
    for name in VecEnv.__annotations__:
        assert hasattr(env, name), name

    net = {"class_name": "MLPModel", "hidden_dims": [16], "activation": "elu",
           "obs_normalization": True}
    train_cfg = {
        "num_steps_per_env": 8,
        "save_interval": 100,
        "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
        "algorithm": {"class_name": "PPO", "num_learning_epochs": 2, "num_mini_batches": 2,
                      "learning_rate": 1e-3, "gamma": 0.99, "lam": 0.95},
        "actor": {**net, "distribution_cfg": {"class_name": "GaussianDistribution",
                                              "init_std": 1.0}},
        "critic": net,
    }
    runner = OnPolicyRunner(env, train_cfg, log_dir=str(tmp_path), device="cpu")
    before = [p.detach().clone() for p in runner.alg.actor.parameters()]
    runner.learn(num_learning_iterations=2, init_at_random_ep_len=True)

    assert runner.current_learning_iteration == 1
    after = list(runner.alg.actor.parameters())
    assert all(torch.isfinite(p).all() for p in after)
    assert any(not torch.equal(b, a) for b, a in zip(before, after, strict=True))
    printed = capsys.readouterr().out
    # extras["episode"] reached rsl_rl's logger (16 steps > horizon, so episodes ended)
    for key in ("return", "timeout", "lin_vel_error"):
        assert f"Mean episode {key}:" in printed
    assert (tmp_path / "model_1.pt").exists()
    env.step(torch.zeros(16, 12))  # the env outlives rsl_rl's inference-mode rollouts
    env.close()


def test_gymnasium_next_step_autoreset():
    """Gymnasium's default mode: the ending step shows the last observation, the next step
    restarts the sub-env (its action ignored) with reward 0 and no done flag."""
    adapter = GymnasiumVectorEnv(make_env())
    assert adapter.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    obs, _ = adapter.reset(seed=0)
    zeros = np.zeros((NUM_ENVS, 12), np.float32)
    for _ in range(HORIZON - 1):
        obs, _, term, trunc, infos = adapter.step(zeros)
        assert not (term | trunc).any() and infos == {}
    last, rew, term, trunc, infos = adapter.step(zeros)
    assert trunc.all() and not term.any()
    np.testing.assert_array_equal(infos["length"], HORIZON)
    np.testing.assert_array_equal(infos["_length"], True)
    assert np.abs(last - obs).max() < 1.0  # one step on from the previous obs, not a respawn
    first, rew, term, trunc, infos = adapter.step(np.full((NUM_ENVS, 12), 5.0, np.float32))
    assert not (term | trunc).any() and (rew == 0).all() and infos == {}
    assert (adapter.env.episode_length == 0).all()  # restarted, the action never applied
    np.testing.assert_array_equal(first, adapter.env.obs["policy"].numpy())
    adapter.close()


def test_gymnasium_wrappers_step_on_the_adapter():
    from gymnasium.wrappers.vector import (
        DtypeObservation,
        FlattenObservation,
        NormalizeObservation,
        RescaleAction,
        TransformObservation,
    )

    env = GymnasiumVectorEnv(make_env())
    wrapped = RescaleAction(DtypeObservation(FlattenObservation(NormalizeObservation(
        TransformObservation(env, lambda o: 2 * o, env.observation_space))), np.float64),
        -1.0, 1.0)
    obs, _ = wrapped.reset(seed=0)
    assert obs.dtype == np.float64 and obs.shape == (NUM_ENVS, 48)
    wrapped.action_space.seed(0)
    for _ in range(HORIZON + 2):  # through a time-out and the restart after it
        obs, rew, term, trunc, _ = wrapped.step(wrapped.action_space.sample())
        assert np.isfinite(obs).all() and np.isfinite(rew).all()
    # the policy acts in [-1, 1]; the env's bounds (the joint ranges) are what it maps onto
    assert (wrapped.action_space.low == -1).all() and (wrapped.action_space.high == 1).all()
    low, high = env.env.action_bounds.numpy().T
    np.testing.assert_array_equal(env.action_space.low[0], low.astype(np.float32))
    np.testing.assert_array_equal(env.action_space.high[0], high.astype(np.float32))
    wrapped.close()


@pytest.mark.slow
def test_a_second_reset_skips_the_warm_up():
    cfg = load_config("env", ["num_envs=256", "reset=staggered", "rollout_length=24"])
    env = GymnasiumVectorEnv(tasks.make_env(cfg))
    env.reset(seed=0)  # the first reset warms up (seconds)
    assert len(np.unique(env.env.episode_length.numpy())) > 1
    start = time.perf_counter()
    env.reset(seed=1)
    assert time.perf_counter() - start < 1.0
    counters = env.env.episode_length.numpy()
    assert len(np.unique(counters)) > 1  # counters staggered, states respawned
    env.close()


# ---------------------------------------------------------------------- Stable-Baselines3
def test_sb3_ppo_trains_through_the_adapter(tmp_path, monkeypatch):
    pytest.importorskip("stable_baselines3")
    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path))  # SB3 makes its log folder there
    from stable_baselines3 import PPO

    from locomotion.envs.sb3_adapter import Sb3VecEnv

    env = Sb3VecEnv(make_env())
    obs = env.reset()
    assert obs.shape == (NUM_ENVS, 48) and obs.dtype == np.float32
    raw_final = None
    for t in range(HORIZON):
        env.step_async(np.zeros((NUM_ENVS, 12), np.float32))
        obs, rew, done, infos = env.step_wait()
        if t < HORIZON - 1:
            assert not done.any() and all(i == {} for i in infos)
        raw_final = env.env.obs["policy"].numpy()
    assert done.all()
    for i, info in enumerate(infos):
        assert info["TimeLimit.truncated"] is True
        assert info["terminal_observation"].shape == (48,)
        assert not np.allclose(info["terminal_observation"], obs[i])  # pre-reset
        assert info["episode"]["l"] == HORIZON
    np.testing.assert_array_equal(obs, raw_final)

    model = PPO("MlpPolicy", env, n_steps=32, batch_size=64, n_epochs=2, seed=0,
                policy_kwargs={"net_arch": [32, 32]})
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(total_timesteps=4 * 32 * NUM_ENVS)
    after = list(model.policy.parameters())
    assert any(not torch.equal(b, a) for b, a in zip(before, after, strict=True))
    assert len(model.ep_info_buffer) > 0
    assert all(e["l"] == HORIZON for e in model.ep_info_buffer)
    env.close()


def test_sb3_leaves_warm_up_episodes_out_of_its_statistics():
    pytest.importorskip("stable_baselines3")
    from locomotion.envs.sb3_adapter import Sb3VecEnv

    cfg = load_config("env", [f"num_envs={NUM_ENVS}", "reset=staggered", "rollout_length=2",
                              "task.episode_length_s=0.2"])
    env = Sb3VecEnv(tasks.make_env(cfg))
    env.reset()
    ended, reported = 0, []
    for _ in range(2 * HORIZON):
        env.step_async(np.zeros((NUM_ENVS, 12), np.float32))
        _, _, done, infos = env.step_wait()
        ended += int(done.sum())
        reported += [i["episode"]["l"] for i in infos if "episode" in i]
    assert ended > len(reported) > 0  # the staggered first episodes were partial
    assert set(reported) == {HORIZON}
    env.close()
