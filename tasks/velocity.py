"""Planar velocity tracking: follow (vx, vy, yaw rate) commands on flat ground.

Commands, observation terms, reward terms and terminations of the classic legged-robot
velocity task. Everything is read from the simulator's state vector and sensors only, so
backends are interchangeable. Reward weights and observation scales come from config.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import TYPE_CHECKING

import torch
from omegaconf import DictConfig, OmegaConf

from locomotion.config_checks import ConfigError
from locomotion.sim.backend import SimBackend
from locomotion.sim.model_builder import ModelLayout, as_slice
from locomotion.sim.robot_spec import RobotSpec
from locomotion.sim.rotations import (
    heading,
    projected_gravity,
    quat_rotate_inverse,
    wrap_angle,
    yaw_quat,
)
from locomotion.tasks.gaits import GaitClock
from locomotion.tasks.observations import OBSERVATION_TERMS
from locomotion.tasks.rewards import REWARD_TERMS, RewardContext
from locomotion.tasks.terminations import TERMINATION_TERMS
from locomotion.tasks.world import World

if TYPE_CHECKING:
    from locomotion.sim.terrain import TerrainGrid


class VelocityTask:
    """Commands, observations, rewards and terminations for velocity tracking."""

    def __init__(self, cfg: DictConfig, spec: RobotSpec, layout: ModelLayout, num_envs: int,
                 dt: float, generator: torch.Generator, device: torch.device | str = "cpu",
                 terrain: TerrainGrid | None = None, masked: bool = False):
        """``generator`` (on ``device``) draws every random number; buffers live on ``device``;
        ``terrain`` (None: the ground plane at z = 0) is where heights are measured from;
        ``masked``: expired commands are redrawn for every env and kept by mask (no host
        read; the env's masked step mode)."""
        self.cfg = cfg
        self.masked = masked
        self.num_envs = num_envs
        self.dt = dt
        self.gen = generator
        self.device = dev = torch.device(device)
        f32 = torch.float32
        self.default_pose = torch.tensor(spec.default_pose, dtype=f32, device=dev)
        self.init_height = spec.init_height
        # spawn ranges as plain values: a config read costs microseconds at every reset
        self.spawn = SimpleNamespace(**OmegaConf.to_container(cfg.init_state, resolve=True))

        def index(ids):  # a slice (a view) where the columns allow, else an index tensor
            ids = as_slice(ids)
            return ids if isinstance(ids, slice) else torch.as_tensor(ids, device=dev)

        self.joint_qpos = index(layout.joint_qpos)
        self.joint_qvel = index(layout.joint_qvel)
        rng = torch.as_tensor(layout.joint_range, dtype=f32, device=dev)
        mid, half = rng.mean(1), 0.5 * (rng[:, 1] - rng[:, 0]) * cfg.rewards.soft_joint_limit
        self.soft_limits = torch.stack((mid - half, mid + half), dim=1)

        def cols(names):
            return index(layout.columns(names))

        self.foot_contact_cols = cols([f"{f}_contact" for f in spec.feet])
        self.bad_contact_cols = cols([f"{b}_contact" for b in spec.terminate_contacts])
        self.undesired_cols = (cols([f"{b}_contact" for b in spec.undesired_contacts])
                               if spec.undesired_contacts else None)
        self.torque_cols = cols([f"{a}_force" for a in spec.actuators])

        self.commands = torch.zeros(num_envs, 3, device=dev)
        c = cfg.commands
        self.standing_fraction = float(c.standing_fraction)
        self.resample_time_s = float(c.resample_time_s)
        ranges = torch.tensor([c.lin_vel_x, c.lin_vel_y, c.ang_vel_yaw], dtype=f32)
        self.command_range = ranges.repeat(num_envs, 1, 1).to(dev)  # [N, 3, (low, high)]
        steering = c.get("heading")
        self.heading_fraction = float(steering.fraction) if steering else 0.0
        self.heading_stiffness = float(steering.stiffness) if steering else 0.0
        if not 0.0 <= self.heading_fraction <= 1.0 or self.heading_stiffness < 0:
            raise ConfigError(f"commands.heading needs 0 <= fraction <= 1 and stiffness >= 0, "
                              f"got fraction {self.heading_fraction}, stiffness "
                              f"{self.heading_stiffness}")
        self.heading = torch.zeros(num_envs, device=dev)  # target yaw of steered envs, rad
        self.steered = torch.zeros(num_envs, dtype=torch.bool, device=dev)
        self.gait = GaitClock(cfg.gaits, len(spec.feet), num_envs, generator, dev) \
            if cfg.get("gaits") else None
        self.command_timer = torch.zeros(num_envs, device=dev)
        self.air_time = torch.zeros(num_envs, len(spec.feet), device=dev)
        self.last_contact = torch.ones(num_envs, len(spec.feet), dtype=torch.bool, device=dev)
        self.last_joint_vel = torch.zeros(num_envs, len(spec.joints), device=dev)

        r = cfg.rewards
        self.tracking_sigma = float(r.tracking_sigma)
        self.air_time_target = float(r.air_time_target)
        self.base_height_target = r.get("base_height_target")
        self.clip_negative_total = bool(r.clip_negative_total)
        self.max_tilt = float(cfg.terminations.max_tilt)
        self.fall_tilt = float(r.get("fall_tilt", self.max_tilt))  # configs saved before it
        self.termination_terms = [TERMINATION_TERMS["tilt"]] + (
            [TERMINATION_TERMS["base_contact"]] if cfg.terminations.base_contact else [])
        self.reward_weights = {k: float(v) for k, v in cfg.rewards.weights.items() if v != 0}
        unknown = sorted(set(self.reward_weights) - set(REWARD_TERMS))
        if unknown:
            raise ConfigError(f"unknown reward terms {unknown}; valid: {sorted(REWARD_TERMS)}")
        if not self.reward_weights:
            raise ConfigError("task.rewards.weights gives no term a nonzero weight; weigh at "
                              f"least one of the valid terms: {sorted(REWARD_TERMS)}")
        self._reward_column = torch.tensor([w * dt for w in self.reward_weights.values()],
                                           dtype=f32, device=dev)[:, None]  # [terms, 1]
        gait_terms = {"gait_contact"} & set(self.reward_weights) | {
            "gait" for terms in cfg.observations.values() if "gait" in terms}
        if gait_terms and self.gait is None:
            raise ConfigError(f"{sorted(gait_terms)} need gait commands: add task.gaits")
        for group, terms in cfg.observations.items():
            bad = sorted(set(terms) - set(OBSERVATION_TERMS))
            if bad:
                raise ConfigError(f"unknown observation terms {bad} in group {group!r}; "
                                  f"valid: {sorted(OBSERVATION_TERMS)}")
        self.obs_scales = {g: {k: torch.as_tensor(v, dtype=f32, device=dev)
                               for k, v in terms.items()}
                           for g, terms in cfg.observations.items()}
        self.terrain = terrain
        self.subtask_onehot: torch.Tensor | None = None  # [N, S] once subtasks are attached
        self._setup_height_scan(cfg.get("height_scan"))

    # ----------------------------------------------------------------- commands / resets
    def _rand(self, *shape: int) -> torch.Tensor:
        """Uniform [0, 1) draws of the task's generator, on its device."""
        return torch.rand(*shape, generator=self.gen, device=self.gen.device)

    def _uniform(self, n: int, low_high) -> torch.Tensor:
        low, high = float(low_high[0]), float(low_high[1])
        return low + (high - low) * self._rand(n)

    def sample_commands(self, env_ids: torch.Tensor) -> None:
        """Draw new commands for ``env_ids`` in their ranges; a configured share stand still."""
        n = len(env_ids)
        rng = self.command_range[env_ids]
        u = torch.stack([self._rand(n) for _ in range(3)], dim=1)
        cmd = rng[:, :, 0] + (rng[:, :, 1] - rng[:, :, 0]) * u
        stand = self._rand(n) < self.standing_fraction
        self.commands[env_ids] = cmd * (~stand).unsqueeze(1)
        self.command_timer[env_ids] = self.resample_time_s
        if self.heading_fraction > 0:
            self.heading[env_ids] = self._uniform(n, (-math.pi, math.pi))
            steer = self._rand(n) < self.heading_fraction
            self.steered[env_ids] = steer & ~stand

    def sample_commands_where(self, mask: torch.Tensor) -> None:
        """``sample_commands`` of the envs where ``mask`` [N] is set, drawn for every env and
        kept by mask (no host read)."""
        n = self.num_envs
        rng = self.command_range
        cmd = rng[:, :, 0] + (rng[:, :, 1] - rng[:, :, 0]) * self._rand(n, 3)
        stand = self._rand(n) < self.standing_fraction
        rows = mask[:, None]
        self.commands.copy_(torch.where(rows, cmd * (~stand).unsqueeze(1), self.commands))
        self.command_timer.masked_fill_(mask, self.resample_time_s)
        if self.heading_fraction > 0:
            heading = self._uniform(n, (-math.pi, math.pi))
            self.heading.copy_(torch.where(mask, heading, self.heading))
            steer = (self._rand(n) < self.heading_fraction) & ~stand
            self.steered.copy_(torch.where(mask, steer, self.steered))

    def set_command_ranges(self, env_ids: torch.Tensor, ranges: torch.Tensor) -> None:
        """Draw the next commands of ``env_ids`` from ``ranges`` [n, 3, (low, high)]."""
        self.command_range[env_ids] = ranges.to(self.command_range.device)

    def set_command_ranges_where(self, mask: torch.Tensor, ranges: torch.Tensor) -> None:
        """``set_command_ranges`` of the envs where ``mask`` [N] is set, from rows of
        ``ranges`` [N, 3, 2]."""
        self.command_range.copy_(torch.where(mask[:, None, None], ranges, self.command_range))

    def set_commands(self, commands: torch.Tensor, env_ids: torch.Tensor | None = None) -> None:
        """Set the commands [n, 3] of ``env_ids`` (all envs by default) until they expire."""
        self.commands[slice(None) if env_ids is None else env_ids] = commands.to(self.device)

    def initial_state(self, env_ids: torch.Tensor, nq: int, nv: int):
        """Spawn states for ``env_ids``: default pose scaled, random heading, small velocity."""
        n, s = len(env_ids), self.spawn
        qpos = torch.zeros(n, nq, device=self.device)
        qvel = torch.zeros(n, nv, device=self.device)
        qpos[:, 0:2] = self._uniform(2 * n, (-s.base_xy, s.base_xy)).view(n, 2)
        qpos[:, 2] = self.init_height
        qpos[:, 3:7] = yaw_quat(self._uniform(n, (-s.base_yaw, s.base_yaw)))
        scale = self._uniform(n * len(self.default_pose), s.joint_pos_scale).view(n, -1)
        qpos[:, self.joint_qpos] = self.default_pose * scale
        qvel[:, 0:3] = self._uniform(3 * n, (-s.base_lin_vel, s.base_lin_vel)).view(n, 3)
        qvel[:, 3:6] = self._uniform(3 * n, (-s.base_ang_vel, s.base_ang_vel)).view(n, 3)
        return qpos, qvel

    def reset_where(self, mask: torch.Tensor) -> None:
        """``reset`` of the envs where ``mask`` [N] is set (no host read)."""
        self.sample_commands_where(mask)
        if self.gait is not None:
            self.gait.reset_where(mask)
        rows = mask[:, None]
        self.air_time.masked_fill_(rows, 0.0)
        self.last_contact.masked_fill_(rows, True)
        self.last_joint_vel.masked_fill_(rows, 0.0)

    def reset(self, env_ids: torch.Tensor) -> None:
        """Clear per-episode trackers of ``env_ids`` and give them new commands."""
        self.sample_commands(env_ids)
        if self.gait is not None:
            self.gait.reset(env_ids)
        self.air_time[env_ids] = 0.0
        self.last_contact[env_ids] = True  # spawned standing on its feet
        self.last_joint_vel[env_ids] = 0.0

    def advance_commands(self, world: World) -> None:
        """Count down command timers, resample the expired ones and steer to headings.

        A steered env's yaw-rate command is ``stiffness x`` its heading error, clipped to its
        yaw-rate range: the robot walks a straight line in a drawn direction instead of a
        circle, so how far it gets from its spawn point measures how well it walks.
        """
        self.command_timer -= self.dt
        if self.gait is not None:
            self.gait.advance(self.dt)
        if self.masked:
            self.sample_commands_where(self.command_timer <= 0)
        else:
            expired = (self.command_timer <= 0).nonzero().squeeze(1)
            if len(expired):
                self.sample_commands(expired)
        if self.heading_fraction > 0:
            rate = self.heading_stiffness * wrap_angle(self.heading - heading(world.base_quat))
            limits = self.command_range[:, 2]
            rate = torch.clamp(rate, limits[:, 0], limits[:, 1])
            self.commands[:, 2] = torch.where(self.steered, rate, self.commands[:, 2])

    _STATE = ("commands", "command_timer", "air_time", "last_contact", "last_joint_vel")
    _STEERING = ("heading", "steered")  # absent from checkpoints made before headings

    def state_dict(self) -> dict:
        state = {k: getattr(self, k).clone() for k in self._STATE + self._STEERING}
        state["command_range"] = self.command_range.clone()
        if self.gait is not None:
            state["gait"] = self.gait.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        for k in self._STATE:
            getattr(self, k).copy_(state[k])
        for k in self._STEERING:
            if k in state:
                getattr(self, k).copy_(state[k])
        if "command_range" in state:
            self.command_range.copy_(state["command_range"])
        if self.gait is not None:
            self.gait.load_state_dict(state["gait"])

    # ----------------------------------------------------------------- world
    def world(self, sim: SimBackend, env_ids: torch.Tensor | None = None) -> World:
        """Read the batch (or the rows ``env_ids``) from the backend's state and sensors."""
        qpos, qvel, sens = sim.qpos, sim.qvel, sim.sensordata
        if env_ids is not None:
            qpos, qvel, sens = qpos[env_ids], qvel[env_ids], sens[env_ids]
        qpos, qvel, sens = qpos.float(), qvel.float(), sens.float()
        quat = qpos[:, 3:7]
        if env_ids is None:
            contact = sim.substep_sensordata[:, :, self.foot_contact_cols].amax(1) > 0
        else:
            contact = self.last_contact[env_ids]
        undesired = (sens[:, self.undesired_cols] > 0).sum(1, dtype=torch.float32) \
            if self.undesired_cols is not None else torch.zeros(len(qpos), device=qpos.device)
        return World(
            base_pos=qpos[:, 0:3],
            base_quat=quat,
            base_lin_vel=quat_rotate_inverse(quat, qvel[:, 0:3]),
            base_ang_vel=qvel[:, 3:6],
            gravity=projected_gravity(quat),
            joint_pos=qpos[:, self.joint_qpos],
            joint_vel=qvel[:, self.joint_qvel],
            foot_contact=contact,
            torques=sens[:, self.torque_cols],
            bad_contact=(sens[:, self.bad_contact_cols] > 0).any(1),
            undesired_contacts=undesired,
        )

    # ----------------------------------------------------------------- observations
    def observation_terms(self, w: World, actions: torch.Tensor,
                          env_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Every observation term the groups use, unscaled, [n, size] (physical units)."""
        rows = slice(None) if env_ids is None else env_ids
        used = dict.fromkeys(k for terms in self.obs_scales.values() for k in terms)
        return {k: OBSERVATION_TERMS[k](self, w, actions, rows) for k in used}

    def observe_subtasks(self, onehot: torch.Tensor) -> None:
        """Show the policy each env's subtask through the ``subtask`` term: ``onehot`` [N, S]
        is the subtask set's own buffer, updated in place as slots change subtask."""
        self.subtask_onehot = onehot

    def observations(self, w: World, actions: torch.Tensor,
                     env_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Observation groups (``policy``, ``critic``) as configured, each [n, dim]."""
        terms = self.observation_terms(w, actions, env_ids)
        return {g: torch.cat([terms[k] * s for k, s in scales.items()], dim=1)
                for g, scales in self.obs_scales.items()}

    def observation_layout(self, w: World, actions: torch.Tensor) -> dict[str, dict[str, slice]]:
        """Columns of each term in each observation group (where noise and biases go)."""
        sizes = {k: v.shape[1] for k, v in self.observation_terms(w, actions).items()}
        layout = {}
        for group, scales in self.obs_scales.items():
            start, cols = 0, {}
            for k in scales:
                cols[k] = slice(start, start + sizes[k])
                start += sizes[k]
            layout[group] = cols
        return layout

    # ----------------------------------------------------------------- terrain heights
    def _setup_height_scan(self, cfg: DictConfig | None) -> None:
        """Scan points [P, 2] in the base's yaw frame; ``in_policy`` adds the scan to the policy."""
        used = [g for g, terms in self.obs_scales.items() if "height_scan" in terms]
        if cfg is None:
            if used:
                raise ConfigError(f"observation groups {used} use height_scan but the task has "
                                  "no height_scan settings (size, spacing, clip, in_policy)")
            self.scan_points = None
            return
        (lx, ly), step = (float(v) for v in cfg.size), float(cfg.spacing)
        if not (lx >= 0 and ly >= 0 and step > 0):
            raise ConfigError(f"height_scan size {list(cfg.size)} must be >= 0 and spacing "
                              f"{step} > 0 (m)")
        xs = torch.linspace(-lx / 2, lx / 2, round(lx / step) + 1)
        ys = torch.linspace(-ly / 2, ly / 2, round(ly / step) + 1)
        self.scan_points = torch.cartesian_prod(xs, ys).to(self.device)
        self.scan_clip = (float(cfg.clip[0]), float(cfg.clip[1]))
        if cfg.in_policy and "policy" in self.obs_scales:
            scale = self.obs_scales.get("critic", {}).get("height_scan")
            self.obs_scales["policy"].setdefault(
                "height_scan", torch.tensor(1.0, device=self.device) if scale is None else scale)

    def ground_height(self, xy: torch.Tensor) -> torch.Tensor:
        """Ground height [...] under world points ``xy`` [..., 2] (0 on the plane)."""
        if self.terrain is None:
            return xy.new_zeros(xy.shape[:-1])
        return self.terrain.heights_at(xy)

    def base_height(self, w: World) -> torch.Tensor:
        """Base height above the ground beneath it [n, 1]."""
        if self.terrain is None:
            return w.base_pos[:, 2:3]
        return w.base_pos[:, 2:3] - self.terrain.heights_at(w.base_pos[:, :2]).unsqueeze(1)

    def height_scan(self, w: World) -> torch.Tensor:
        """Base z minus ground z at the scan points around the base, clipped [n, P]."""
        yaw = heading(w.base_quat).unsqueeze(1)
        cos, sin = yaw.cos(), yaw.sin()
        px, py = self.scan_points[:, 0], self.scan_points[:, 1]
        xy = torch.stack((cos * px - sin * py, sin * px + cos * py), dim=-1)
        scan = w.base_pos[:, 2:3] - self.ground_height(xy + w.base_pos[:, None, :2])
        return scan.clamp(*self.scan_clip)

    # ----------------------------------------------------------------- rewards
    def rewards(self, w: World, actions: torch.Tensor, last_actions: torch.Tensor):
        """Total reward [N] (already multiplied by dt) and each weighted term [N]."""
        contact = w.foot_contact
        first_contact = (self.air_time > 0) & contact
        self.air_time += self.dt
        ctx = RewardContext(w, self, actions, last_actions, first_contact)
        # the terms stacked and weighed in one product: the total is one sum
        rows = torch.stack([REWARD_TERMS[name](ctx) for name in self.reward_weights])
        rows *= self._reward_column
        terms = dict(zip(self.reward_weights, rows.unbind(0), strict=True))
        self.air_time *= ~contact
        self.last_contact.copy_(contact)
        self.last_joint_vel.copy_(w.joint_vel)
        total = rows.sum(0)
        if self.clip_negative_total:
            # the clip leaves the fall penalty out: clipped, lying down would cost nothing
            fall = terms.get("fallen")
            total = total.clamp(min=0.0) if fall is None else (total - fall).clamp(min=0.0) + fall
        return total, terms

    def episode_metrics(self, w: World) -> dict[str, torch.Tensor]:
        """What the env averages over each episode, per step [N]: the linear (m/s, planar
        norm) and yaw-rate (rad/s) command tracking errors and, with gait commands, the
        share of feet whose contact follows the gait schedule (0 for a free gait)."""
        out = {"lin_vel_error": (self.commands[:, :2] - w.base_lin_vel[:, :2]).norm(dim=1),
               "yaw_error": (self.commands[:, 2] - w.base_ang_vel[:, 2]).abs()}
        if self.gait is not None:
            out["gait_match"] = self.gait.contact_match(w.foot_contact)
        return out

    # ----------------------------------------------------------------- terminations
    def fallen(self, w: World) -> torch.Tensor:
        """Down, whether or not that ends the episode: a terminating body touches something
        or the base tilts past ``rewards.fall_tilt`` [n]."""
        return w.bad_contact | (w.tilt > self.fall_tilt)

    def terminations(self, w: World) -> torch.Tensor:
        """Failure (not timeout): any termination term switched on by config."""
        failed = self.termination_terms[0](self, w)
        for term in self.termination_terms[1:]:
            failed = failed | term(self, w)
        return failed
