"""The browser viewer: a viser server showing a session's envs side by side, with widgets for
the command, the gait or subtask, and pushes (``locomotion-play viewer=web``).

Works on a headless machine (a GPU box reached over SSH: forward the port); the page draws
with WebGL in the browser, so the server needs no GPU or display. Scene nodes are named
``/env<i>/<body>``, one frame per MuJoCo body, with the body's geoms as meshes below it.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np

from locomotion.config_checks import ConfigError
from locomotion.viewer.scene import geom_meshes
from locomotion.viewer.session import ViewerSession

SPACING = 1.5  # m between robots shown side by side on flat ground
WINDOW_MARGIN = 6.0  # m of terrain drawn around the shown robots
FRAME_RATE = 30.0  # scene updates per second sent to the browser
CAMERA_OFFSET = np.array([-0.8, -1.8, 0.7])  # m, where the camera starts, from env 0's base


def env_offsets(count: int, flat: bool) -> np.ndarray:
    """[count, 3] display offsets: a square grid on flat ground (every env spawns near the
    origin there), none on terrain (each env has its own tile)."""
    if not flat:
        return np.zeros((count, 3))
    side = math.ceil(math.sqrt(count))
    i = np.arange(count)
    return np.stack([(i // side) * SPACING, (i % side) * SPACING, np.zeros(count)], 1)


class WebViewer:
    """Serves ``session``'s first ``shown`` envs at http://host:port."""

    def __init__(self, session: ViewerSession, host: str = "0.0.0.0", port: int = 8080,
                 shown: int | None = None):
        try:
            import viser  # the `viewer` extra
        except ImportError:
            raise ConfigError("viewer=web needs viser: pip install 'locomotion[viewer]'") from None

        self.session = session
        env = session.env
        self.model = env.model
        self.shown = min(shown or env.num_envs, env.num_envs)
        self.offsets = env_offsets(self.shown, env.terrain is None)
        self.data = [mujoco.MjData(self.model) for _ in range(self.shown)]
        self.server = viser.ViserServer(host=host, port=port, verbose=False)
        self.url = f"http://{'localhost' if host in ('0.0.0.0', '') else host}:{port}"
        self.base = env.model.body(env.spec.base_body).id
        self.frames: dict[tuple[int, int], object] = {}
        self._build_gui()
        self._build_scene()
        self._every = max(1, round(1.0 / (FRAME_RATE * env.control_dt)))

    # ----------------------------------------------------------------- scene
    def _build_scene(self) -> None:
        scene, m = self.server.scene, self.model
        scene.set_up_direction("+z")
        scene.configure_environment_map("warehouse", environment_intensity=0.4)
        xy = self.session.env.sim.qpos[:self.shown, :2].numpy() + self.offsets[:, :2]
        window = (*(xy.min(0) - WINDOW_MARGIN), *(xy.max(0) + WINDOW_MARGIN))
        meshes = geom_meshes(m, window)
        for g in (g for g in meshes if g.body == 0):  # the ground: drawn once, never moves
            scene.add_mesh_simple(f"/world/geom_{g.geom}", g.vertices, g.faces,
                                  color=_rgb(g.rgba), wxyz=g.quat,
                                  position=m.geom_pos[g.geom], flat_shading=True)
        robot = [g for g in meshes if g.body != 0]
        for i in range(self.shown):
            for b in range(1, m.nbody):
                self.frames[i, b] = scene.add_frame(f"/env{i}/{m.body(b).name}",
                                                    show_axes=False)
            for g in robot:
                scene.add_mesh_simple(f"/env{i}/{m.body(g.body).name}/geom_{g.geom}",
                                      g.vertices, g.faces, color=_rgb(g.rgba),
                                      position=g.pos, wxyz=g.quat)
        self._kinematics()
        start = self.data[0].xpos[self.base] + self.offsets[0]
        self.server.initial_camera.look_at = start
        self.server.initial_camera.position = start + CAMERA_OFFSET
        self._offsets: dict[int, np.ndarray] = {}
        self.server.on_client_connect(self._watch_camera)
        self._update_scene()

    def _kinematics(self) -> None:
        """Body poses of the shown envs (their ``data``) from the batch's joint positions."""
        for i, d in enumerate(self.data):
            d.qpos[:] = self.session.qpos(i)
            mujoco.mj_kinematics(self.model, d)

    def _update_scene(self) -> None:
        m = self.model
        self._kinematics()
        with self.server.atomic():
            for i, d in enumerate(self.data):
                for b in range(1, m.nbody):
                    frame = self.frames[i, b]
                    frame.position = d.xpos[b] + self.offsets[i]
                    frame.wxyz = d.xquat[b]
        if self.follow.value:
            self._follow(self.data[0].xpos[self.base] + self.offsets[0])

    def _follow(self, target: np.ndarray) -> None:
        """Move every browser's camera with env 0's base at the offset its user last left it
        (orbiting and zooming in the page change the offset, not the target)."""
        for cid, client in self.server.get_clients().items():
            offset = self._offsets.get(cid, CAMERA_OFFSET)
            with client.atomic():
                client.camera.look_at = target
                client.camera.position = target + offset

    def _watch_camera(self, client) -> None:
        """Keep the offset of a newly connected browser's camera from what it is looking at."""
        def moved(camera) -> None:
            self._offsets[client.client_id] = (np.asarray(camera.position)
                                               - np.asarray(camera.look_at))

        client.camera.on_update(moved)

    # ----------------------------------------------------------------- widgets
    def _build_gui(self) -> None:
        gui, s = self.server.gui, self.session
        names = ("forward (m/s)", "lateral (m/s)", "yaw rate (rad/s)")
        self.sliders = []
        for axis, name in enumerate(names):
            low, high = s.limits[axis]
            slider = gui.add_slider(name, min=float(low), max=float(high), step=0.05,
                                    initial_value=float(s.command[axis]))
            slider.on_update(lambda _, a=axis, w=slider: s.request(
                s.set_command, *[w.value if k == a else None for k in range(3)]))
            self.sliders.append(slider)
        stop = gui.add_button("stop")
        stop.on_click(lambda _: self._stop())
        if s.modes:
            label = "subtask" if s.subtasks is not None else "gait"
            mode = gui.add_dropdown(label, options=tuple(s.modes), initial_value=s.mode)
            mode.on_update(lambda _: s.request(s.set_mode, mode.value))
        push = gui.add_button("push")
        push.on_click(lambda _: s.request(s.push))
        self.follow = gui.add_checkbox("camera follows env 0", initial_value=True)

    def _stop(self) -> None:
        for w in self.sliders:
            w.value = 0.0
        self.session.request(self.session.set_command, 0.0, 0.0, 0.0)

    # ----------------------------------------------------------------- loop
    def on_step(self) -> bool:
        if self.session.steps % self._every == 0:
            self._update_scene()
        return True

    def close(self) -> None:
        self.server.stop()


def _rgb(rgba) -> tuple[int, int, int]:
    """An RGBA in [0, 1] as viser's 0-255 RGB."""
    return tuple(int(round(255 * c)) for c in rgba[:3])
