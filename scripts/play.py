"""Run a trained policy for one episode per env and print tracking, survival and distance.

    python scripts/play.py checkpoint=runs/<run>/checkpoints/latest.pt
    MUJOCO_GL=osmesa python scripts/play.py checkpoint=... solver=fidelity
    python scripts/play.py checkpoint=... terrain=rough     # on the terrain grid
"""

from __future__ import annotations

import json
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from locomotion.config import replay_config
from locomotion.envs import LocomotionEnv
from locomotion.evaluation import evaluate_episodes, walks
from locomotion.evaluation.video import VideoRecorder, renderer_problem
from locomotion.rl.checkpoint import load_checkpoint
from locomotion.rl.runner import policy_from_checkpoint


@hydra.main(config_path="../configs", config_name="play", version_base="1.3")
def main(cfg: DictConfig) -> None:
    data = load_checkpoint(cfg.checkpoint)
    policy = policy_from_checkpoint(data)
    solver = cfg.solver.name if cfg.get("solver") else None
    env = LocomotionEnv(replay_config(data["config"], cfg.num_envs, cfg.seed, solver,
                                      terrain=cfg.get("terrain")))
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
