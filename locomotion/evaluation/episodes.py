"""Run one full episode in every env of a batch and summarize how the policy did."""

from __future__ import annotations

from collections.abc import Callable

import torch

from locomotion.envs.vec_env import LocomotionEnv

#: "Walks": mean planar velocity tracking error at most this (m/s) ...
WALK_MAX_TRACKING_ERROR = 0.15
#: ... and at least this share of episodes reach the time-out.
WALK_MIN_SURVIVAL = 0.95


@torch.inference_mode()
def evaluate_episodes(env: LocomotionEnv, act: Callable[[torch.Tensor], torch.Tensor],
                      on_step: Callable[[LocomotionEnv], None] | None = None) -> dict[str, float]:
    """Reset every env together, run until each finished its first episode, return means.

    ``act`` maps policy observations to actions (deterministic for evaluation);
    ``on_step`` is called after every step (e.g. to render a frame).
    Metrics: ``survival`` (share of episodes reaching the time-out), ``tracking_error``
    (m/s, planar, per-episode mean), ``yaw_error`` (rad/s), ``distance`` (m), ``return``,
    and with gait commands ``gait_match`` (share of foot contacts on the gait schedule).
    """
    obs = env.reset()
    n = env.num_envs
    recorded = torch.zeros(n, dtype=torch.bool, device=env.device)
    sums: dict[str, torch.Tensor] = {}
    for _ in range(env.max_episode_length):
        obs, _, terminated, truncated, info = env.step(act(obs["policy"]))
        if on_step is not None:
            on_step(env)
        if "episode" not in info:
            continue
        done_ids = (terminated | truncated).nonzero().squeeze(1)
        first = ~recorded[done_ids]
        for k, v in info["episode"].items():
            sums.setdefault(k, torch.zeros(n, device=env.device))[done_ids[first]] = v[first]
        recorded[done_ids] = True
        if recorded.all():
            break
    if not recorded.all():
        raise RuntimeError("some envs did not finish an episode within the horizon")
    gait = {"gait_match": float(sums["gait_match"].mean())} if "gait_match" in sums else {}
    return {
        "survival": float(sums["timeout"].mean()),
        "tracking_error": float(sums["lin_vel_error"].mean()),
        "yaw_error": float(sums["yaw_error"].mean()),
        "distance": float(sums["distance"].mean()),
        "return": float(sums["return"].mean()),
        "episodes": float(n),
        **gait,
    }


def walks(metrics: dict[str, float]) -> bool:
    """The project's "walk" criterion on ``evaluate_episodes`` metrics."""
    return (metrics["tracking_error"] <= WALK_MAX_TRACKING_ERROR
            and metrics["survival"] >= WALK_MIN_SURVIVAL)
