"""Clips of the shipped policies for the docs: animated WebP rendered offscreen, each under
a size cap.

    MUJOCO_GL=egl python scripts/make_clips.py                # every clip of configs/clips.yaml
    MUJOCO_GL=osmesa python scripts/make_clips.py 'only=[walk]'

Each clip steps its policy in a viewer session (locomotion/viewer/session.py: the user's
command held, pushes on request) and renders one env with a camera tracking its base.
"""

from __future__ import annotations

from pathlib import Path

import hydra
import numpy as np
from omegaconf import DictConfig

from locomotion.evaluation.video import TrackingCamera, renderer_problem, webp_bytes
from locomotion.viewer import load_session


def shown_env(session, terrain_type: str | None) -> int:
    """The env to film: the first whose tile is of ``terrain_type`` (any env without one)."""
    if terrain_type is None:
        return 0
    env = session.env
    kinds = [env.terrain.column_types[c] for c in env.curriculum.columns.tolist()]
    if terrain_type not in kinds:
        raise ValueError(f"no env on a {terrain_type!r} tile; the envs stand on {set(kinds)}")
    return kinds.index(terrain_type)


def record(cfg: DictConfig, clip: DictConfig) -> list[np.ndarray]:
    session = load_session(clip.policy, int(cfg.num_envs), int(cfg.seed),
                           push_speed=float(clip.get("push_speed", 1.0)))
    if clip.get("mode"):
        session.set_mode(str(clip.mode))
    session.set_command(*clip.command)
    index = shown_env(session, clip.get("terrain_type"))
    env = session.env
    camera = TrackingCamera(env, int(cfg.width), int(cfg.height), **cfg.camera)
    every = max(1, round(1.0 / (float(cfg.fps) * env.control_dt)))
    push_step = round(clip.push_at_s / env.control_dt) if clip.get("push_at_s") else None
    frames = []
    for step in range(round(float(clip.seconds) / env.control_dt)):
        if step == push_step:
            session.push(direction=np.pi / 2)  # sideways, across the walking direction
        session.step()
        if step % every == 0:
            frames.append(camera.frame(session.qpos(index)))
    camera.close()
    env.close()
    return frames


@hydra.main(config_path="../configs", config_name="clips", version_base="1.3")
def main(cfg: DictConfig) -> None:
    problem = renderer_problem("PIL")
    if problem:
        raise SystemExit(f"error: {problem}")
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = list(cfg.only) if cfg.only else list(cfg.clips)
    unknown = sorted(set(names) - set(cfg.clips))
    if unknown:
        raise SystemExit(f"error: unknown clips {unknown}; valid: {sorted(cfg.clips)}")
    for name in names:
        frames = record(cfg, cfg.clips[name])
        data = webp_bytes(frames, float(cfg.fps), int(cfg.quality))
        if len(data) > cfg.max_kb * 1024:
            raise SystemExit(f"error: {name}.webp is {len(data) // 1024} KB, over the "
                             f"{cfg.max_kb} KB cap: lower fps, size, quality or seconds")
        (out / f"{name}.webp").write_bytes(data)
        print(f"{out / name}.webp: {len(frames)} frames, {len(data) // 1024} KB")


if __name__ == "__main__":
    main()
