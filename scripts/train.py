"""Train a gait policy: ``python scripts/train.py [hydra overrides]``.

Examples:
    python scripts/train.py
    python scripts/train.py num_envs=2048 reset=sync algo.num_steps=16 seed=3
    python scripts/train.py resume=runs/<run>/checkpoints/latest.pt
    python scripts/train.py sim=warp device=cuda num_envs=8192   # MuJoCo Warp on a GPU
"""

from __future__ import annotations

from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from locomotion.envs import LocomotionEnv
from locomotion.export import export_checkpoint
from locomotion.rl.runner import Runner


@hydra.main(config_path="../configs", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    env = LocomotionEnv(cfg)
    runner = Runner(env, cfg, log_dir=run_dir)
    if cfg.resume:
        runner.load(cfg.resume)
        print(f"resumed from {cfg.resume} at iteration {runner.iteration}")
    remaining = int(cfg.max_iterations) - runner.iteration
    try:
        runner.learn(max(remaining, 0))
    finally:
        env.close()
    print(f"checkpoint: {runner.checkpoint_path}")
    if cfg.export:
        print(export_checkpoint(runner.checkpoint_path).summary())
    print(f"tensorboard: tensorboard --logdir {run_dir / 'tensorboard'}")


if __name__ == "__main__":
    main()
