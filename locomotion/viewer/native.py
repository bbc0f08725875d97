"""MuJoCo's own interactive window on one env of a session (``locomotion-play viewer=native``).

The window shows env ``index`` of the batch, its camera tracking the robot's base; keys set
the command (``CONTROLS``). MuJoCo's viewer already binds most letters and Space, Tab,
Backspace, so the controls use keys it leaves free.
"""

from __future__ import annotations

from locomotion.viewer.session import ViewerSession

# GLFW key codes, as mujoco.viewer's key_callback receives them
KEY_ENTER, KEY_RIGHT, KEY_LEFT, KEY_DOWN, KEY_UP = 257, 262, 263, 264, 265
KEY_PAGE_UP, KEY_PAGE_DOWN, KEY_HOME, KEY_END = 266, 267, 268, 269

CONTROLS = """\
    Up / Down          forward command  +/- 0.1 m/s
    Page Up / Down     lateral command  +/- 0.1 m/s
    Left / Right       yaw-rate command +/- 0.2 rad/s
    End                stop (all commands 0)
    Home               next gait (gait-conditioned policy) or subtask (multitask policy)
    Enter              push the robot (a kick in a random direction)"""

STEPS = {KEY_UP: (0, 0.1), KEY_DOWN: (0, -0.1), KEY_PAGE_UP: (1, 0.1),
         KEY_PAGE_DOWN: (1, -0.1), KEY_LEFT: (2, 0.2), KEY_RIGHT: (2, -0.2)}


def on_key(session: ViewerSession, key: int) -> None:
    """Queue what ``key`` asks of ``session`` (runs in the viewer's thread)."""
    if key in STEPS:
        session.request(session.nudge, *STEPS[key])
    elif key == KEY_END:
        session.request(session.set_command, 0.0, 0.0, 0.0)
    elif key == KEY_HOME and session.modes:
        following = session.modes[(session.modes.index(session.mode) + 1) % len(session.modes)]
        session.request(session.set_mode, following)
    elif key == KEY_ENTER:
        session.request(session.push)


def run_native(session: ViewerSession, index: int = 0) -> None:
    """Open the window and step ``session`` in real time until the window is closed."""
    import mujoco.viewer  # needs a display (GLFW)

    env = session.env
    data = mujoco.MjData(env.model)
    base = env.model.body(env.spec.base_body).id

    def show() -> bool:
        data.qpos[:] = session.qpos(index)
        mujoco.mj_forward(env.model, data)
        viewer.sync()
        return viewer.is_running()

    with mujoco.viewer.launch_passive(env.model, data,
                                      key_callback=lambda key: on_key(session, key)) as viewer:
        viewer.cam.type = mujoco.mjtCamera.mjCAMERA_TRACKING
        viewer.cam.trackbodyid = base
        viewer.cam.distance, viewer.cam.elevation = 2.0, -20.0
        print(CONTROLS)
        session.run(show)
