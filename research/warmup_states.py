"""How far the staggered warm-up spreads the robots' physical states, not only counters.

After ``env.reset()`` under a staggered schedule each group has been stepped to its start
offset with the warm-up's actions. For bins of offsets the table gives the share of the
batch, the spread of base heights, the mean joint and base speeds, and the share of robots
that have settled: every joint within ``settled.joint_pos`` of the settled pose (the
median robot of the latest bin) and moving slower than ``settled.joint_vel``. Robots
that read settled are one state with different counters.

    python -m research.warmup_states                      # the default config's warm-up
    python -m research.warmup_states reset.warmup=random
"""

from __future__ import annotations

from pathlib import Path

import hydra
import torch
from hydra.utils import to_absolute_path
from omegaconf import DictConfig

from locomotion.tasks import make_env


def state_table(cfg: DictConfig) -> str:
    """The warm-up's states per bin of start offsets, as a markdown table."""
    env = make_env(cfg)
    env.reset()
    w = env.task.world(env.sim)
    offset_s = env.episode_length.float() * env.control_dt
    edges = torch.tensor(list(cfg.bins_s), dtype=torch.float32)
    bins = torch.bucketize(offset_s, edges[1:-1], right=True)
    latest = bins == bins.max()
    pose = w.joint_pos[latest].median(0).values
    joint_speed = w.joint_vel.abs().mean(1)
    from_pose = (w.joint_pos - pose).abs().amax(1)
    settled = (from_pose < cfg.settled.joint_pos) & (joint_speed < cfg.settled.joint_vel)
    lines = [f"reset={cfg.reset.schedule}, warmup={cfg.reset.warmup}, N = {env.num_envs}: "
             f"{float(settled.float().mean()):.1%} of the batch settled", "",
             "| start offset (s) | share of the batch | base height std (m) | largest joint's "
             "distance from the settled pose (rad) | mean joint speed (rad/s) | mean base "
             "speed (m/s) | settled |", "|---|---|---|---|---|---|---|"]
    for b in range(len(edges) - 1):
        rows = bins == b
        if not rows.any():
            continue
        lines.append(
            f"| {edges[b]:g}-{edges[b + 1]:g} | {float(rows.float().mean()):.1%} | "
            f"{float(w.base_pos[rows, 2].std()):.4f} | {float(from_pose[rows].mean()):.4f} | "
            f"{float(joint_speed[rows].mean()):.4f} | "
            f"{float(w.base_lin_vel[rows].norm(dim=1).mean()):.4f} | "
            f"{float(settled[rows].float().mean()):.1%} |")
    return "\n".join(lines) + "\n"


@hydra.main(config_path="configs", config_name="warmup_states", version_base="1.3")
def main(cfg: DictConfig) -> None:
    table = state_table(cfg)
    print(table)
    if cfg.out:
        Path(to_absolute_path(cfg.out)).write_text(table)


if __name__ == "__main__":
    main()
