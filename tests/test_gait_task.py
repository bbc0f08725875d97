"""task=gaits: flat walking with a gait command drawn per episode, no subtasks; the share
of foot contacts on the gait schedule is an episode statistic."""

from __future__ import annotations

import torch

from locomotion.config import load_config
from locomotion.tasks import make_env, subtasks_of
from locomotion.tasks.gaits import FREE


def test_gaits_are_drawn_per_episode_and_their_match_is_an_episode_statistic():
    cfg = load_config("env", ["task=gaits", "num_envs=16", "reset=sync",
                              "task.episode_length_s=0.1"])
    env = make_env(cfg)
    env.reset()
    gait = env.task.gait
    assert subtasks_of(env) is None and gait.names == ["trot", "pace", "bound", "pronk"]
    flat = make_env(load_config("env", ["num_envs=16", "reset=sync"]))
    assert env.observation_sizes["policy"] == flat.observation_sizes["policy"] + 2 * 4 + 1
    flat.close()
    drawn = [gait.gait.clone()]
    weight = env.task.reward_weights["gait_contact"] * env.control_dt
    for _ in range(4):  # four episodes of 5 steps
        for _ in range(env.max_episode_length):
            _, _, term, trunc, info = env.step(torch.zeros(env.num_envs, env.num_actions))
            if "episode" in info:
                ep = info["episode"]
                # the mean of the per-step share that the gait_contact reward sums
                expected = ep["gait_contact"] / (weight * ep["length"])
                assert torch.allclose(ep["gait_match"], expected, atol=1e-5)
                assert ((ep["gait_match"] >= 0) & (ep["gait_match"] <= 1)).all()
        assert (term | trunc).all()
        drawn.append(gait.gait.clone())
    drawn = torch.stack(drawn)  # [episodes, envs]
    assert (drawn != FREE).all() and set(drawn.unique().tolist()) == {0, 1, 2, 3}
    assert ((drawn != drawn[0]).any(0)).float().mean() > 0.5  # most envs changed gait
    env.close()
