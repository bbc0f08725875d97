"""The horizon toy: phase dependence, reset schedules on it, Runner on it, the study driver."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from locomotion.rl.runner import Runner
from research import stagger_study
from research.study import load_config
from research.toy_horizon import PhaseTargetEnv

# The stagger study's config is the training config with task=toy (and the grid beside it).
SMALL = ["task=toy", "num_envs=32", "algo.num_steps=8", "logging.tensorboard=false",
         "algo.policy.actor_hidden_dims=[16]", "algo.policy.critic_hidden_dims=[16]"]


def make_env(*overrides: str) -> PhaseTargetEnv:
    return PhaseTargetEnv(load_config("stagger_study", [*SMALL, *overrides]))


def run_episode(env: PhaseTargetEnv, act) -> torch.Tensor:
    """Returns of the first episode of every env (synchronized start)."""
    env.reset()
    for _ in range(env.max_episode_length):
        _, _, _, truncated, info = env.step(act(env))
    assert truncated.all()
    return info["episode"]["return"]


def test_right_action_and_reward_weight_depend_on_phase():
    env = make_env("reset=sync")
    optimal = run_episode(env, PhaseTargetEnv.optimal_actions)
    assert optimal.min() == pytest.approx(1.0, abs=1e-5)  # the best return is 1
    # The action that is right at the start of the episode, held for the whole episode.
    env.reset()
    start_action = env.optimal_actions().clone()
    assert run_episode(env, lambda e: start_action).max() < 0.5
    # Different phases: a different right action and a different observation.
    env.reset()
    env.episode_length[:] = torch.arange(env.num_envs) * env.max_episode_length // env.num_envs
    distance = (env.optimal_actions() - env.optimal_actions()[0]).norm(dim=1)[1:]
    assert distance.min() > 0.02 and distance.max() > 0.5
    obs = env._observe()["policy"]
    assert (obs - obs[0]).norm(dim=1)[1:].min() > 0.05
    phases = torch.tensor([0.25, 0.75])
    assert env.reward_weight(phases)[0] > 1.5 * env.reward_weight(phases)[1]


def test_schedules_set_the_counters_and_batches_cover_the_horizon():
    uniformity = {}
    for schedule in ("sync", "random_counter", "staggered"):
        env = make_env(f"reset={schedule}")
        env.reset()
        if schedule == "staggered":
            assert env.schedule.num_groups == env.max_episode_length // 8
            assert torch.equal(env.episode_length, env.schedule.offsets())
        for _ in range(8):
            env.step(torch.zeros(env.num_envs, env.num_actions))
        uniformity[schedule] = env.phase.pop()[1]
    assert uniformity["sync"] == 0.0
    assert uniformity["staggered"] == pytest.approx(1.0)
    assert uniformity["random_counter"] > 0.8


def test_runner_trains_and_resumes_on_the_toy(tmp_path):
    cfg = load_config("stagger_study", [*SMALL, "reset=staggered", "logging.save_interval=2"])
    straight = Runner(PhaseTargetEnv(cfg), cfg, log_dir=tmp_path / "a")
    straight.learn(4)
    first = Runner(PhaseTargetEnv(cfg), cfg, log_dir=tmp_path / "b")
    first.learn(2)
    resumed = Runner(PhaseTargetEnv(cfg), cfg, log_dir=tmp_path / "c")
    resumed.load(first.checkpoint_path)
    resumed.learn(2)
    for a, b in zip(straight.policy.parameters(), resumed.policy.parameters(), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(straight.env.episode_length, resumed.env.episode_length)


@pytest.mark.slow
def test_study_cell_runs_resumes_and_reports(tmp_path):
    study = stagger_study
    cfg = load_config("stagger_study", [
        f"out_dir={tmp_path}", "grid.schedules=[sync,staggered]", "grid.rollout_lengths=[8]",
        "study.toy.seeds=[0]", "study.toy.num_envs=[16]", "study.toy.env_steps=2560",
        "study.toy.config.algo.policy.actor_hidden_dims=[16]",
        "study.toy.config.algo.policy.critic_hidden_dims=[16]"])
    ran = study.run_grid(cfg, tmp_path)
    assert [c.name for c in ran] == ["sync_K8_N16_s0", "staggered_K8_N16_s0"]
    curve = study.read_csv(tmp_path / "curves" / "staggered_K8_N16_s0.csv")
    assert curve["env_steps"][-1] == 2560 and len(curve["iteration"]) == 20
    assert curve["phase_uniformity"].min() == pytest.approx(1.0)
    assert (curve["explained_variance"] <= 1.0).all()
    sync = study.read_csv(tmp_path / "curves" / "sync_K8_N16_s0.csv")
    assert sync["phase_uniformity"].max() == 0.0

    finished = tmp_path / "curves" / "sync_K8_N16_s0.csv.xz"
    stamp = finished.stat().st_mtime_ns
    assert study.run_grid(cfg, tmp_path) == []  # finished cells are skipped
    assert finished.stat().st_mtime_ns == stamp

    study.report(cfg, tmp_path)
    for name in ("return_vs_env_steps", "return_vs_training_time", "phase_histogram", "critic",
                 "scaling_with_n"):
        assert (tmp_path / f"{name}.png").stat().st_size > 0
    assert "| 8 | 16 | staggered |" in (tmp_path / "summary.md").read_text()

    cfg.study.toy.config.algo.ppo.gamma = 0.9  # another experiment: its curves are not these
    with pytest.raises(ValueError,
                       match=r"sync_K8_N16_s0.csv.xz was trained with other \['algo.ppo.gamma'\]"):
        study.run_grid(cfg, tmp_path)
    cfg.study.toy.env_steps = 5120
    with pytest.raises(ValueError, match="ran 2560 env steps"):
        study.run_grid(cfg, tmp_path)


@pytest.mark.slow
@pytest.mark.subprocess
def test_study_runs_cells_in_parallel_with_the_same_curves(tmp_path):
    study = stagger_study  # the spawned workers import it as research.stagger_study
    cfg = load_config("stagger_study", [
        "grid.schedules=[sync,staggered]", "grid.rollout_lengths=[8]", "study.toy.seeds=[0]",
        "study.toy.num_envs=[16]", "study.toy.env_steps=1280",
        "study.toy.config.algo.policy.actor_hidden_dims=[16]",
        "study.toy.config.algo.policy.critic_hidden_dims=[16]"])
    ran = study.run_grid(cfg, tmp_path / "parallel", jobs=2)
    assert sorted(c.name for c in ran) == ["staggered_K8_N16_s0", "sync_K8_N16_s0"]
    study.run_grid(cfg, tmp_path / "serial")
    for cell in ran:
        a, b = (study.read_csv(tmp_path / d / "curves" / f"{cell.name}.csv")
                for d in ("parallel", "serial"))
        for column in a.keys() - {"wall_s"}:
            assert np.array_equal(a[column], b[column], equal_nan=True), column
    with pytest.raises(ValueError, match="jobs must be at least 1"):
        study.run_grid(cfg, tmp_path / "serial", jobs=0)


def test_threshold_crossing_needs_a_window_of_half_the_envs():
    study = stagger_study
    curve = {"env_steps": np.array([10.0, 20, 30]), "wall_s": np.array([1.0, 2, 3]),
             "return": np.array([15.0, 9.0, 13.0]), "episodes": np.array([1.0, 512, 600])}
    assert study.first_crossing(curve, 12.0, 1024) == (30.0, 3.0)  # one early fall is no hit
    assert study.first_crossing(curve, 12.0, 2) == (10.0, 1.0)
    assert all(map(math.isnan, study.first_crossing(curve, 20.0, 2)))
