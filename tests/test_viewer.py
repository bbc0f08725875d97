"""The viewers: the session both drive, the native viewer's keys, and the web viewer served by
``locomotion-play viewer=web`` as a browser meets it (HTTP, then the scene over its socket)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
import torch

from locomotion.config import load_config
from locomotion.config_checks import ConfigError
from locomotion.tasks import make_env
from locomotion.viewer import ViewerSession, viewer_config
from locomotion.viewer.native import KEY_END, KEY_HOME, KEY_UP, on_key

GO1_BODIES = {"trunk"} | {f"{leg}_{part}" for leg in ("FR", "FL", "RR", "RL")
                          for part in ("hip", "thigh", "calf")}


GAITS_WITHOUT_SUBTASKS = ("task=multitask", "multitask=none", "terrain=flat",
                          "randomization=none", "~task.observations.policy.subtask",
                          "~task.observations.critic.subtask")


def session(*overrides: str) -> ViewerSession:
    trained = load_config("train", list(overrides))
    env = make_env(viewer_config(trained, 2, seed=0))
    zero = torch.zeros(2, env.num_actions)
    return ViewerSession(env, lambda obs: zero)


def test_commands_are_clipped_and_held():
    s = session()
    s.set_command(vx=5.0, yaw=-0.3)
    assert s.command[0] == pytest.approx(s.limits[0][1])  # clipped to the trained range
    for _ in range(3):
        s.step()
    assert torch.allclose(s.env.task.commands, torch.tensor([[s.limits[0][1], 0.0, -0.3]] * 2,
                                                               dtype=torch.float32))


def test_keys_and_widgets_change_the_session_only_between_steps():
    s = session()
    on_key(s, KEY_UP)
    on_key(s, KEY_UP)
    assert s.command[0] == 0.0  # queued, not applied from the viewer's thread
    s.step()
    assert s.command[0] == pytest.approx(0.2)
    on_key(s, KEY_END)
    s.step()
    assert np.all(s.command == 0.0)


def test_gait_mode_switches_every_env_now_and_after_a_fall():
    s = session(*GAITS_WITHOUT_SUBTASKS)
    assert s.modes == ["trot", "pace", "bound", "pronk"]
    on_key(s, KEY_HOME)
    s.step()
    gait = s.env.task.gait
    assert s.mode == "pace"
    assert (gait.gait == gait.index("pace")).all()
    s.env.restart(torch.arange(2))
    assert (gait.gait == gait.index("pace")).all()
    with pytest.raises(ConfigError, match="valid"):
        s.set_mode("gallop")


def test_push_kicks_the_base():
    s = session()
    before = s.env.sim.qvel[:, 0:2].clone()
    s.push(direction=0.0)
    assert torch.allclose(s.env.sim.qvel[:, 0] - before[:, 0], torch.ones(2, dtype=before.dtype))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scene_messages(url: str, seconds: float) -> list[dict]:
    """What a browser receives from the viewer's socket in ``seconds``: viser's frames are
    zstd-compressed msgpack after two 8-byte sizes."""
    import msgspec
    import viser
    import zstandard
    from websockets.sync.client import connect

    out = []
    with connect(url, subprotocols=[f"viser-v{viser.__version__}"], max_size=None) as ws:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                raw = ws.recv(timeout=1.0)
            except TimeoutError:
                continue
            size = int.from_bytes(raw[:8], "little")
            packed = int.from_bytes(raw[8:16], "little")
            inner = zstandard.ZstdDecompressor().decompress(raw[16:16 + packed],
                                                            max_output_size=size)
            out += msgspec.msgpack.decode(inner)["messages"]
    return out


@pytest.mark.subprocess
@pytest.mark.slow
def test_web_viewer_serves_the_page_and_the_robot(tmp_path):
    pytest.importorskip("viser", reason="the viewer extra")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "locomotion.commands.play", "checkpoint=pretrained:go1",
         "viewer=web", "viewer_envs=2", "web.host=127.0.0.1", f"web.port={port}"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        start, status = time.monotonic(), None
        while time.monotonic() - start < 15.0 and proc.poll() is None:
            try:
                status = urllib.request.urlopen(f"http://127.0.0.1:{port}", timeout=1).status
                break
            except OSError:
                time.sleep(0.2)
        assert status == 200, "no page within 15 s"
        messages = scene_messages(f"ws://127.0.0.1:{port}", 3.0)
        nodes = {m["name"] for m in messages if "name" in m}
        for env in (0, 1):
            assert {f"/env{env}/{b}" for b in GO1_BODIES} <= nodes
        heights = [m["position"][2] for m in messages
                   if m.get("type") == "SetPositionMessage" and m["name"] == "/env0/trunk"]
        assert len(heights) > 10  # the robot moves: positions keep coming ...
        assert min(heights) > 0.05 and max(heights) - min(heights) > 1e-3  # ... above ground
    finally:
        proc.terminate()
        proc.wait(timeout=20)
