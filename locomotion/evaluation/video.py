"""Offscreen video of one env of a batch, when MuJoCo has an offscreen GL backend: the
camera that films it, an MP4 recorder for play, GIFs for the evaluator and animated WebP
for the docs."""

from __future__ import annotations

import io
import os
from pathlib import Path

import mujoco
import numpy as np

from locomotion.envs.vec_env import LocomotionEnv


def renderer_problem(need: str = "imageio") -> str | None:
    """Why offscreen rendering (and writing with ``need``: imageio for MP4, PIL for GIF) is
    unavailable here, or None when it works."""
    if os.environ.get("MUJOCO_GL") not in ("egl", "osmesa"):
        return "set MUJOCO_GL=egl (GPU) or MUJOCO_GL=osmesa (CPU) to record video"
    try:
        __import__(need)
    except ImportError:
        return f"install {need} (pip install 'locomotion[video]') to write video"
    try:
        model = mujoco.MjModel.from_xml_string("<mujoco/>")
        with mujoco.Renderer(model, 16, 16):
            pass
    except Exception as e:  # noqa: BLE001 - any GL failure means "no renderer"
        return f"MUJOCO_GL={os.environ['MUJOCO_GL']} cannot render here ({type(e).__name__}: {e})"
    return None


class TrackingCamera:
    """Renders a model's state (qpos) with a camera that follows the robot's base."""

    def __init__(self, env: LocomotionEnv, width: int = 640, height: int = 480,
                 distance: float = 1.8, elevation: float = -20.0, azimuth: float = 120.0):
        self.model = env.model
        self.data = mujoco.MjData(env.model)
        self.renderer = mujoco.Renderer(env.model, height, width)
        self.camera = mujoco.MjvCamera()
        self.camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
        self.camera.trackbodyid = env.model.body(env.spec.base_body).id
        self.camera.distance, self.camera.elevation, self.camera.azimuth = (
            distance, elevation, azimuth)

    def frame(self, qpos: np.ndarray) -> np.ndarray:
        self.data.qpos[:] = qpos
        mujoco.mj_forward(self.model, self.data)
        self.renderer.update_scene(self.data, self.camera)
        return self.renderer.render().copy()

    def close(self) -> None:
        self.renderer.close()


class VideoRecorder:
    """Renders env ``index`` after every step (``on_step`` of ``evaluate_episodes``)."""

    def __init__(self, env: LocomotionEnv, index: int = 0, width: int = 640, height: int = 480):
        self.env = env
        self.index = index
        self.camera = TrackingCamera(env, width, height)
        self.frames: list[np.ndarray] = []

    def __call__(self, env: LocomotionEnv) -> None:
        self.frames.append(self.camera.frame(env.sim.qpos[self.index].numpy()))

    def save(self, path: str | Path) -> Path:
        import imageio

        path = Path(path)
        imageio.mimwrite(path, self.frames, fps=round(1.0 / self.env.control_dt))
        self.camera.close()
        return path


def gif_bytes(frames: list[np.ndarray], fps: float, colors: int = 32) -> bytes:
    """An endlessly looping GIF on one shared palette (far smaller than a palette per frame,
    which also flickers)."""
    from PIL import Image

    strip = Image.fromarray(np.concatenate(frames[::max(1, len(frames) // 8)], axis=0))
    palette = strip.quantize(colors=colors, method=Image.Quantize.MEDIANCUT)
    images = [Image.fromarray(f).quantize(palette=palette, dither=Image.Dither.NONE)
              for f in frames]
    out = io.BytesIO()
    images[0].save(out, format="GIF", save_all=True, append_images=images[1:],
                   duration=round(1000 / fps), loop=0, optimize=True)
    return out.getvalue()


def webp_bytes(frames: list[np.ndarray], fps: float, quality: int = 80) -> bytes:
    """An endlessly looping lossy animated WebP: full colour at about half the bytes of a
    24-colour GIF of the same frames, which is why the docs' clips use it."""
    from PIL import Image, features

    if not features.check("webp"):
        raise RuntimeError("this Pillow was built without WebP support; install a Pillow wheel "
                           "from PyPI (pip install --force-reinstall pillow)")
    images = [Image.fromarray(f) for f in frames]
    out = io.BytesIO()
    images[0].save(out, format="WEBP", save_all=True, append_images=images[1:],
                   duration=round(1000 / fps), loop=0, quality=quality,
                   method=4)  # Pillow's default for animations (0) makes files 1.7x larger
    return out.getvalue()
