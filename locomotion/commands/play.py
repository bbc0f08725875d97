"""Run a trained policy for one episode per env and print tracking, survival and distance.

    locomotion-play checkpoint=runs/<run>/checkpoints/latest.pt
    locomotion-play checkpoint=pretrained:go1        # the policy shipped with the package
    MUJOCO_GL=osmesa locomotion-play checkpoint=... solver=fidelity
    locomotion-play checkpoint=... terrain=rough     # on the terrain grid
    locomotion-play checkpoint=pretrained:go1 viewer=native   # MuJoCo's window, keys steer
    locomotion-play checkpoint=pretrained:go1 viewer=web      # a page at http://localhost:8080
"""

from __future__ import annotations

import json
from pathlib import Path

import hydra
from omegaconf import DictConfig

from locomotion.commands.errors import run_app, user_errors
from locomotion.config import replay_config
from locomotion.config_checks import ConfigError
from locomotion.evaluation import evaluate_episodes, walks
from locomotion.evaluation.video import VideoRecorder, renderer_problem
from locomotion.rl.checkpoint import load_checkpoint, policy_from_checkpoint
from locomotion.robots import resolve_policy_path
from locomotion.tasks import make_env
from locomotion.viewer import load_session
from locomotion.viewer.native import run_native
from locomotion.viewer.web import WebViewer

VIEWERS = ("native", "web")


@hydra.main(config_path="pkg://locomotion.configs", config_name="play", version_base="1.3")
@user_errors
def play(cfg: DictConfig) -> None:
    if cfg.get("viewer"):
        return watch(cfg)
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


def watch(cfg: DictConfig) -> None:
    """Step the policy in real time under a viewer until it is closed (web: Ctrl+C)."""
    if cfg.viewer not in VIEWERS:
        raise ConfigError(f"unknown viewer {cfg.viewer!r}; valid: {list(VIEWERS)} or null")
    solver = cfg.solver.name if cfg.get("solver") else None
    session = load_session(cfg.checkpoint, int(cfg.viewer_envs), int(cfg.seed), solver,
                           cfg.get("terrain"), float(cfg.push_speed))
    if cfg.mode is not None:
        session.set_mode(str(cfg.mode))
    if cfg.viewer == "native":
        return run_native(session)
    viewer = WebViewer(session, str(cfg.web.host), int(cfg.web.port))
    print(f"viewer: {viewer.url}  (Ctrl+C stops)", flush=True)
    try:
        session.run(viewer.on_step)
    except KeyboardInterrupt:
        pass
    finally:
        viewer.close()


def main() -> None:
    run_app(play)


if __name__ == "__main__":
    main()
