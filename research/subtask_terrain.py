"""Where a multitask policy fails on a terrain subtask: per terrain type and level.

    python -m research.subtask_terrain runs/<run>/checkpoints/latest.pt stairs [--num-envs 256]

Every env slot of a batch built from the checkpoint's own config runs the named subtask for
two episode lengths (the terrain curriculum keeps moving levels, as in training). Each
whole episode is binned by the tile it started on; the script prints one markdown row per
(terrain type, level): episodes, the share that survived, the share that succeeded, the
mean tracking error and the mean distance walked from the spawn point.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch

from locomotion.evaluation.policies import load_policy
from locomotion.tasks import make_env, subtasks_of

COLUMNS = ("survived", "success", "lin_vel_error", "distance")


def terrain_outcomes(path: str, subtask: str, num_envs: int) -> dict[tuple[str, int], dict]:
    """Per (terrain type, level) of the starting tile: episode count and mean of ``COLUMNS``."""
    policy = load_policy(path)
    cfg = policy.train_config.copy()
    cfg.num_envs = num_envs
    env = make_env(cfg)
    try:
        subtasks, curriculum = subtasks_of(env), env.curriculum
        if subtasks is None or curriculum is None:
            raise ValueError(f"{path} was not trained on multitask subtasks over a terrain grid")
        if subtask not in subtasks.names:
            raise ValueError(f"unknown subtask {subtask!r}; this policy's: {subtasks.names}")
        k = subtasks.names.index(subtask)
        counts = torch.zeros(len(subtasks.names), dtype=torch.long)
        counts[k] = num_envs
        subtasks.slots.retarget(counts)
        obs = env.reset()
        sums: dict[tuple[str, int], dict] = defaultdict(lambda: dict.fromkeys(
            ("episodes", *COLUMNS), 0.0))
        for _ in range(2 * env.max_episode_length):
            tiles = curriculum.columns.clone(), curriculum.levels.clone()  # before respawns
            obs, _, terminated, truncated, info = env.step(policy.act(obs["policy"]))
            if "episode" not in info:
                continue
            ep = info["episode"]
            ids = (terminated | truncated).nonzero().squeeze(1)
            keep = (ep["partial"] == 0) & (ep["subtask"] == k)
            values = torch.stack((ep["timeout"], ep["success"], ep["lin_vel_error"],
                                  ep["distance"]), dim=1)[keep]
            for i, row in zip(ids[keep].tolist(), values.tolist(), strict=True):
                bin_ = sums[(env.terrain.column_types[int(tiles[0][i])], int(tiles[1][i]))]
                bin_["episodes"] += 1
                for col, value in zip(COLUMNS, row, strict=True):
                    bin_[col] += value
    finally:
        env.close()
    return {key: {"episodes": s["episodes"], **{c: s[c] / s["episodes"] for c in COLUMNS}}
            for key, s in sorted(sums.items())}


def table(outcomes: dict[tuple[str, int], dict]) -> str:
    lines = ["| terrain | level | episodes | survived | success | tracking error (m/s) | "
             "distance (m) |", "|---|---|---|---|---|---|---|"]
    for (kind, level), o in outcomes.items():
        lines.append(f"| {kind} | {level} | {o['episodes']:.0f} | {o['survived']:.2f} | "
                     f"{o['success']:.2f} | {o['lin_vel_error']:.3f} | {o['distance']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("subtask")
    parser.add_argument("--num-envs", type=int, default=256)
    args = parser.parse_args()
    torch.manual_seed(0)
    print(table(terrain_outcomes(args.checkpoint, args.subtask, args.num_envs)))


if __name__ == "__main__":
    main()
