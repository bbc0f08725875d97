"""A policy stepping a small batch under a user's commands: what both viewers drive.

The batch is the policy's training env replayed (``replay_config``) with what a person at a
keyboard expects instead of a training episode: commands change only when the user changes
them (no resampling, no heading steering), episodes last an hour (a fall still restarts
the env), pushes come on request, and every env runs the same gait or subtask.
"""

from __future__ import annotations

import math
import queue
import time
from collections.abc import Callable

import numpy as np
import torch
from omegaconf import DictConfig

from locomotion.config import replay_config
from locomotion.config_checks import ConfigError
from locomotion.envs.vec_env import LocomotionEnv
from locomotion.rl.checkpoint import load_checkpoint, policy_from_checkpoint
from locomotion.robots import resolve_policy_path
from locomotion.tasks import make_env, subtasks_of

EPISODE_S = 3600.0  # a viewer's episodes end by falls, not by a time-out


def viewer_config(trained: dict, num_envs: int, seed: int, solver: str | None = None,
                  terrain: str | DictConfig | None = None, push_speed: float = 1.0) -> DictConfig:
    """The env config of a trained run, set up for watching (see the module docstring)."""
    cfg = replay_config(trained, num_envs, seed, solver, terrain=terrain)
    task = cfg.task
    task.episode_length_s = EPISODE_S
    task.commands.resample_time_s = 2 * EPISODE_S
    task.commands.standing_fraction = 0.0
    if task.commands.get("heading"):
        task.commands.heading = None
    cfg.randomization = {"name": "viewer", "observation_noise": {}, "events": {
        "push": {"mode": "manual", "velocity": [-push_speed, push_speed]}}}
    if cfg.get("terrain") and cfg.terrain.get("curriculum"):
        cfg.terrain.curriculum.enabled = False  # robots stay where they spawn
    return cfg


class ViewerSession:
    """One policy, one batch, one command for every env; ``step`` advances a control step.

    ``modes`` lists what the policy can be asked to do besides a velocity: the subtasks of a
    multitask policy, else the gaits of a gait-conditioned one, else nothing.
    """

    def __init__(self, env: LocomotionEnv, act: Callable[[torch.Tensor], torch.Tensor],
                 push_speed: float = 1.0):
        self.env = env
        self.act = act
        self.push_speed = push_speed
        self.subtasks = subtasks_of(env)
        gait = env.task.gait
        self.modes: list[str] = (list(self.subtasks.names) if self.subtasks is not None
                                 else list(gait.names) if gait is not None else [])
        self.mode = self.modes[0] if self.modes else None
        ranges = env.cfg.task.commands
        self.limits = np.array([ranges.lin_vel_x, ranges.lin_vel_y, ranges.ang_vel_yaw],
                               dtype=np.float64)  # [3, (low, high)]
        self.command = np.zeros(3)
        self.steps = 0
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._ids = torch.arange(env.num_envs, device=env.device)
        self.obs = env.reset()
        self.set_mode(self.mode)

    # ----------------------------------------------------------------- what the user sets
    def set_command(self, vx: float | None = None, vy: float | None = None,
                    yaw: float | None = None) -> np.ndarray:
        """Set any of the three command values, clipped to the policy's trained ranges."""
        for i, v in enumerate((vx, vy, yaw)):
            if v is not None:
                self.command[i] = float(np.clip(v, *self.limits[i]))
        self.obs = self.env.set_commands(torch.tensor(self.command, dtype=torch.float32)
                                         .expand(self.env.num_envs, 3))
        return self.command

    def nudge(self, axis: int, delta: float) -> np.ndarray:
        """Add ``delta`` to command ``axis`` (0: forward, 1: lateral, 2: yaw rate)."""
        values: list[float | None] = [None, None, None]
        values[axis] = self.command[axis] + delta
        return self.set_command(*values)

    def set_mode(self, mode: str | None) -> None:
        """Run gait or subtask ``mode`` (one of ``modes``) in every env, from now on.

        A subtask also sets terrain and command ranges, so its envs respawn; a gait switches
        in place with the clock's phase kept."""
        if mode is None and not self.modes:
            return
        if mode not in self.modes:
            raise ConfigError(f"unknown mode {mode!r}; valid: {self.modes}")
        self.mode = mode
        if self.subtasks is not None:
            self.subtasks.slots.target.fill_(self.modes.index(mode))
            self.obs = self.env.restart(self._ids)
        else:
            self.env.task.gait.switch(self._ids, self.env.task.gait.index(mode))
        self.set_command()

    def push(self, direction: float | None = None) -> None:
        """Kick every env's base sideways-or-forward at ``push_speed`` (m/s, world frame),
        in ``direction`` (rad) or a random one."""
        angle = np.random.uniform(-math.pi, math.pi) if direction is None else direction
        kick = self.push_speed * torch.tensor([math.cos(angle), math.sin(angle)])
        self.env.randomizer.set("push", self._ids, velocity=kick.expand(self.env.num_envs, 2))

    def request(self, change: Callable[..., object], *args) -> None:
        """Run ``change(*args)`` (one of the setters above) before the next step: for
        callbacks of a viewer's own thread (keys, widgets), which must not change the batch
        while it steps."""
        self._requests.put((change, args))

    # ----------------------------------------------------------------- stepping
    def step(self) -> None:
        """One control step of the policy; a fallen env restarts (the env's own reset) and
        every env keeps the user's command."""
        while not self._requests.empty():
            change, args = self._requests.get()
            change(*args)
        with torch.no_grad():
            actions = self.act(self.obs["policy"])
        self.obs, *_ = self.env.step(actions)
        self.obs = self.env.set_commands(torch.tensor(self.command, dtype=torch.float32)
                                         .expand(self.env.num_envs, 3))
        self.steps += 1

    def qpos(self, index: int = 0) -> np.ndarray:
        """Joint positions of env ``index`` (float64, the MjModel's layout)."""
        return self.env.sim.qpos[index].numpy()

    def run(self, on_step: Callable[[], bool], real_time: bool = True) -> None:
        """Step until ``on_step`` (called after every step) returns False, at the control
        rate when ``real_time``."""
        dt = self.env.control_dt
        next_at = time.perf_counter()
        while True:
            self.step()
            if not on_step():
                return
            if real_time:
                next_at += dt
                time.sleep(max(0.0, next_at - time.perf_counter()))
                next_at = max(next_at, time.perf_counter() - dt)  # don't race to catch up


def load_session(checkpoint: str, num_envs: int, seed: int = 0, solver: str | None = None,
                 terrain: str | DictConfig | None = None,
                 push_speed: float = 1.0) -> ViewerSession:
    """A session of the checkpoint's policy (a run's checkpoint, an export's or
    ``pretrained:ROBOT``) on ``num_envs`` envs."""
    data = load_checkpoint(resolve_policy_path(checkpoint))
    policy = policy_from_checkpoint(data)
    env = make_env(viewer_config(data["config"], num_envs, seed, solver, terrain, push_speed))
    return ViewerSession(env, policy.act_inference, push_speed)
