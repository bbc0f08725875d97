"""Run a trained policy for one episode per env and print tracking, survival and distance.

    python scripts/play.py checkpoint=runs/<run>/checkpoints/latest.pt
    MUJOCO_GL=osmesa python scripts/play.py checkpoint=... solver=fidelity
"""

from __future__ import annotations

import json
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from locomotion.config import CONFIG_DIR
from locomotion.envs import LocomotionEnv
from locomotion.evaluation import evaluate_episodes, walks
from locomotion.evaluation.video import VideoRecorder, renderer_problem
from locomotion.rl.checkpoint import load_checkpoint
from locomotion.rl.runner import policy_from_checkpoint


def env_config(trained: dict, cfg: DictConfig) -> DictConfig:
    """The training run's env config, with this command's batch size, seed and solver."""
    env_cfg = OmegaConf.create(trained)
    env_cfg.num_envs = cfg.num_envs
    env_cfg.seed = cfg.seed
    env_cfg.reset = {"schedule": "sync", "num_groups": None, "warmup": "zero"}
    if cfg.solver:
        path = CONFIG_DIR / "solver" / f"{cfg.solver}.yaml"
        if not path.is_file():
            valid = sorted(p.stem for p in (CONFIG_DIR / "solver").glob("*.yaml"))
            raise ValueError(f"unknown solver profile {cfg.solver!r}; valid: {valid}")
        env_cfg.solver = OmegaConf.load(path)
    return env_cfg


@hydra.main(config_path="../configs", config_name="play", version_base="1.3")
def main(cfg: DictConfig) -> None:
    data = load_checkpoint(cfg.checkpoint)
    policy = policy_from_checkpoint(data)
    env = LocomotionEnv(env_config(data["config"], cfg))
    recorder = None
    if cfg.video:
        problem = renderer_problem()
        if problem:
            print(f"no video: {problem}")
        else:
            recorder = VideoRecorder(env)
    metrics = evaluate_episodes(env, policy.act_inference, on_step=recorder)
    env.close()
    metrics["walks"] = walks(metrics)
    print(json.dumps(metrics))
    if recorder is not None:
        out = Path(HydraConfig.get().runtime.output_dir) / "play.mp4"
        print(f"video: {recorder.save(out)}")


if __name__ == "__main__":
    main()
