"""Offscreen video of one env of a batch, when MuJoCo has an offscreen GL backend."""

from __future__ import annotations

import os
from pathlib import Path

import mujoco
import numpy as np

from locomotion.envs.vec_env import LocomotionEnv


def renderer_problem() -> str | None:
    """Why offscreen rendering is unavailable here, or None when it works."""
    if os.environ.get("MUJOCO_GL") not in ("egl", "osmesa"):
        return "set MUJOCO_GL=egl (GPU) or MUJOCO_GL=osmesa (CPU) to record video"
    try:
        import imageio  # noqa: F401
    except ImportError:
        return "install imageio and imageio-ffmpeg (pip install 'locomotion[video]') to write MP4"
    try:
        model = mujoco.MjModel.from_xml_string("<mujoco/>")
        with mujoco.Renderer(model, 16, 16):
            pass
    except Exception as e:  # noqa: BLE001 - any GL failure means "no renderer"
        return f"MUJOCO_GL={os.environ['MUJOCO_GL']} cannot render here ({type(e).__name__}: {e})"
    return None


class VideoRecorder:
    """Renders env ``index`` after every step with a camera tracking its base."""

    def __init__(self, env: LocomotionEnv, index: int = 0, width: int = 640, height: int = 480):
        self.env = env
        self.index = index
        self.data = mujoco.MjData(env.model)
        self.renderer = mujoco.Renderer(env.model, height, width)
        self.camera = mujoco.MjvCamera()
        self.camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
        self.camera.trackbodyid = env.model.body(env.spec.base_body).id
        self.camera.distance, self.camera.elevation, self.camera.azimuth = 1.8, -20.0, 120.0
        self.frames: list[np.ndarray] = []

    def __call__(self, env: LocomotionEnv) -> None:
        self.data.qpos[:] = env.sim.qpos[self.index].numpy()
        self.data.qvel[:] = env.sim.qvel[self.index].numpy()
        mujoco.mj_forward(env.model, self.data)
        self.renderer.update_scene(self.data, self.camera)
        self.frames.append(self.renderer.render().copy())

    def save(self, path: str | Path) -> Path:
        import imageio

        path = Path(path)
        imageio.mimwrite(path, self.frames, fps=round(1.0 / self.env.control_dt))
        return path
