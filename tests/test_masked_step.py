"""The env's masked step mode, a GPU's: no host reads per env step, a seed repeats its run,
and finished episodes are reported and respawned as in the indexed mode.

Host reads are counted with ``locomotion.envs.host_reads.HostReads`` on Warp's CPU device (on
a GPU, ``scripts/gpu_check.py`` runs the same steps under
``torch.cuda.set_sync_debug_mode``).
"""

from __future__ import annotations

import pytest
import torch

from locomotion.config import load_config
from locomotion.envs.host_reads import HostReads
from locomotion.envs.vec_env import EpisodeBatch
from locomotion.rl.runner import Runner
from locomotion.tasks import make_env

SMALL = ["num_envs=8", "algo.num_steps=16", "task.episode_length_s=0.2",
         "logging.tensorboard=false", "algo.policy.actor_hidden_dims=[32]",
         "algo.policy.critic_hidden_dims=[32]"]
PUSH_OFTEN = "randomization.events.push.interval_s=[0.02,0.1]"  # pushes fire in a rollout


def test_the_counter_sees_host_reads():
    x, ids = torch.arange(4.0), torch.tensor([0, 1])
    with HostReads() as reads:
        _ = x[ids] * 2 + torch.where(x > 1, x, 0.0).sum()  # none: index tensors, where
        _ = torch.normal(x, 1.0) + torch.randn_like(x)
        assert reads.count == 0
        if x.sum() > 0:  # __bool__
            pass
        x.max().item(), x.tolist(), x.cpu(), x.to("cpu"), x.nonzero(), x[x > 1]
        int(x[0]), float(x[1]), torch.tensor([1.0]), torch.where(x > 1)
        torch.normal(x, x)  # torch.distributions.Normal.sample
    assert reads.count == 12


def warp_runner(*overrides: str) -> Runner:
    cfg = load_config("train", ["sim=warp", "device=cpu", "step_mode=masked", *SMALL,
                                *overrides])
    env = make_env(cfg)
    assert env.step_mode == "masked"
    return Runner(env, cfg)


@pytest.mark.warp
@pytest.mark.slow
@pytest.mark.parametrize("overrides", [[], ["task=rough", "randomization=robust", PUSH_OFTEN],
                                       ["task=multitask", PUSH_OFTEN],
                                       ["task=gaits", "reset=phase_locked"]],
                         ids=["flat", "rough_robust", "multitask", "gaits_phase_locked"])
def test_no_host_reads_per_env_step(overrides):
    """sim=warp, masked steps (what device=cuda runs): the env's step, its resets and
    randomization read nothing back; a rollout of K steps reads once (its episode means)."""
    runner = warp_runner(*overrides)
    env = runner.env
    runner.start()
    runner.train_iteration()  # graph captured, every env has reset once
    env.phase.pop()
    with HostReads() as reads:
        _, episodes = runner._collect()
    per_step = reads.count / runner.num_steps
    assert reads.count <= 1, reads.where  # the tally's means, once per rollout
    assert per_step <= 2  # the bar
    assert episodes["count"] >= env.num_envs  # every env ended an episode: resets were read-free
    runner.storage.clear()
    with HostReads() as reads:
        for _ in range(4):
            env.step(torch.zeros(env.num_envs, env.num_actions))
    assert reads.count == 0, reads.where
    env.close()


def masked_env(make_env, *overrides: str):
    return make_env("step_mode=masked", *overrides)


def test_same_seed_same_masked_run(make_env):
    """Two masked envs of one seed step alike, resets and randomization included."""
    overrides = ("randomization=robust", PUSH_OFTEN, "seed=3")
    envs = [masked_env(make_env, *overrides) for _ in range(2)]
    gen = torch.Generator().manual_seed(0)
    for _ in range(60):  # the 1 s episodes end at step 50
        actions = 0.3 * torch.randn(16, envs[0].num_actions, generator=gen)
        out = [env.step(actions) for env in envs]
        for k in out[0][0]:
            assert torch.equal(out[0][0][k], out[1][0][k])
        assert torch.equal(out[0][1], out[1][1])
    assert torch.equal(envs[0].sim.qpos, envs[1].sim.qpos)
    assert torch.equal(envs[0].task.commands, envs[1].task.commands)


def test_masked_time_out_reports_and_respawns(make_env):
    """At the horizon every env is truncated, its statistics are in the EpisodeBatch and
    it starts over at time 0 with cleared actions, as in the indexed mode."""
    env = masked_env(make_env)
    horizon = env.max_episode_length
    zeros = torch.zeros(16, env.num_actions)
    for _ in range(horizon - 1):
        _, _, term, trunc, info = env.step(zeros)
        assert not term.any() and not trunc.any()
        assert isinstance(info["episode"], EpisodeBatch) and not info["episode"].mask.any()
        assert len(info["episode"]["length"]) == 0  # reading the rows: no episode ended
    obs, _, term, trunc, info = env.step(zeros)
    assert trunc.all() and not term.any() and int(info["diverged"]) == 0
    ep = info["episode"]
    assert torch.equal(ep["length"], torch.full((16,), float(horizon)))
    assert torch.equal(ep["timeout"], torch.ones(16))
    assert set(ep) >= {"return", "distance", "partial", "lin_vel_error"}
    assert (env.episode_length == 0).all() and (env.sim.state[:, 0] == 0).all()
    assert not torch.equal(obs["policy"], info["final_obs"]["policy"])
    assert torch.equal(obs["policy"][:, -env.num_actions:], zeros)


def test_masked_reset_redraws_only_the_envs_that_ended(make_env):
    """Reset-mode model draws in a masked reset reach the table and the backend for the
    masked envs only."""
    env = masked_env(make_env, "randomization=robust", "randomization.events.friction.mode=reset")
    ground = env.model.geom("ground").id
    before = env.randomizer.table["geom_friction"].clone()
    mask = torch.zeros(16, dtype=torch.bool)
    mask[[1, 5]] = True
    env._reset_where(mask, {k: v.clone() for k, v in env.obs.items()})
    after = env.randomizer.table["geom_friction"]
    assert (after != before).flatten(1).any(1).tolist() == mask.tolist()
    for i in range(16):
        assert env.sim.models[i].geom_friction[ground, 0] == pytest.approx(
            float(after[i, ground, 0]))


def test_masked_diverged_env_is_reset_and_counted(make_env, tmp_path, monkeypatch):
    """A NaN state in a masked step: that env alone terminates, respawns and is counted."""
    monkeypatch.chdir(tmp_path)  # MuJoCo logs its instability warning to ./MUJOCO_LOG.TXT
    env = masked_env(make_env)
    zeros = torch.zeros(16, env.num_actions)
    env.step(zeros)
    env.sim.qvel[3, 0] = float("nan")
    obs, reward, term, _, info = env.step(zeros)
    assert term.tolist() == [i == 3 for i in range(16)] and reward[3] == 0.0
    assert int(info["diverged"]) == 1 and env.diverged_count == 1
    assert all(torch.isfinite(v).all() for v in obs.values())
    assert env.episode_length[3] == 0 and env.episode_length[0] == 2
    env.reset()
    assert env.diverged_count == 0


def test_masked_bad_actions_raise_once_per_rollout(make_env):
    """Non-finite actions cannot raise in a masked step (that would read the device); they
    are counted and raised by check_actions_seen, which the runner calls per iteration."""
    env = masked_env(make_env)
    bad = torch.zeros(16, env.num_actions)
    bad[2, 0] = float("nan")
    env.step(bad)
    with pytest.raises(ValueError, match="NaN or inf"):
        env.check_actions_seen()
    env.check_actions_seen()  # cleared


def test_masked_training_logs_what_indexed_logs(tmp_path):
    """A masked training run (native physics here) logs the same statistics as an indexed
    one: the episode means come from the device tally, once per iteration."""
    rows = {}
    for mode in ("indexed", "masked"):
        cfg = load_config("train", [f"step_mode={mode}", "reset=sync", "num_envs=8",
                                    "algo.num_steps=30", "task.episode_length_s=0.5",
                                    "logging.tensorboard=false", "task=rough",
                                    "algo.policy.actor_hidden_dims=[32]",
                                    "algo.policy.critic_hidden_dims=[32]"])
        env = make_env(cfg)
        runner = Runner(env, cfg)
        rows[mode] = runner.train_iteration()["episodes"]
        env.close()
    assert rows["indexed"]["count"] == rows["masked"]["count"] == 8  # one time-out each
    assert set(rows["indexed"]) == set(rows["masked"])
    assert rows["masked"]["length"] == 25.0 and rows["masked"]["timeout"] == 1.0
