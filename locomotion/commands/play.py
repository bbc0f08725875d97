"""Run a trained policy for one episode per env and print tracking, survival and distance.

    locomotion-play checkpoint=runs/<run>/checkpoints/latest.pt
    locomotion-play checkpoint=pretrained:go1        # the policy shipped with the package
    MUJOCO_GL=osmesa locomotion-play checkpoint=... solver=fidelity
    locomotion-play checkpoint=... terrain=rough     # on the terrain grid
"""

from __future__ import annotations

import json
from pathlib import Path

import hydra
from omegaconf import DictConfig

from locomotion.commands.errors import run_app, user_errors
from locomotion.config import replay_config
from locomotion.evaluation import evaluate_episodes, walks
from locomotion.evaluation.video import VideoRecorder, renderer_problem
from locomotion.rl.checkpoint import load_checkpoint, policy_from_checkpoint
from locomotion.robots import resolve_policy_path
from locomotion.tasks import make_env


@hydra.main(config_path="pkg://locomotion.configs", config_name="play", version_base="1.3")
@user_errors
def play(cfg: DictConfig) -> None:
    data = load_checkpoint(resolve_policy_path(cfg.checkpoint))
    policy = policy_from_checkpoint(data)
    solver = cfg.solver.name if cfg.get("solver") else None
    env = make_env(replay_config(data["config"], cfg.num_envs, cfg.seed, solver,
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
    if recorder is not None:  # the only file play writes: its folder is made for it
        out = Path(cfg.out)
        out.mkdir(parents=True, exist_ok=True)
        print(f"video: {recorder.save(out / 'play.mp4')}")


def main() -> None:
    run_app(play)


if __name__ == "__main__":
    main()
