"""Run the conditions of one batch side by side: levels on env slots, first episodes only.

Condition c owns env slots [c E, (c + 1) E). All episodes start together (sync reset) and
last the same time; an env's first episode is the only one counted (autoreset restarts it
at once, and what it does afterwards is ignored). Slot k of every condition gets the same
command and push direction (common random numbers), so level-to-level differences are not
drowned by differences in what was asked. When conditions x episodes exceed the batch
size the batch runs again in rounds, each with fresh spawn states, commands and pushes.
"""

from __future__ import annotations

import logging
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from omegaconf import DictConfig, OmegaConf

from locomotion.config import config_group, replay_config
from locomotion.evaluation.failure_clips import FailureClips
from locomotion.evaluation.metrics import Episodes
from locomotion.evaluation.policies import Policy
from locomotion.evaluation.suite import JOINT_AXES, Batch, Condition, Suite, SuiteError
from locomotion.robots import ROBOTS_DIR
from locomotion.sim.rotations import projected_gravity, quat_rotate_inverse
from locomotion.tasks import make_env

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchShape:
    """How a batch's conditions fill env slots: E episodes per condition per round."""

    conditions: int
    per_round: int
    rounds: int

    @classmethod
    def fit(cls, conditions: int, episodes: int, max_envs: int) -> BatchShape:
        per_round_max = max(1, max_envs // conditions)
        rounds = math.ceil(episodes / per_round_max)
        return cls(conditions, math.ceil(episodes / rounds), rounds)

    @property
    def num_envs(self) -> int:
        return self.conditions * self.per_round

    @property
    def episodes(self) -> int:
        return self.per_round * self.rounds


def batch_config(policy: Policy, batch: Batch, suite: Suite, num_envs: int, seed: int,
                 sim: DictConfig, device: str) -> DictConfig:
    """The policy's training env with this batch's model, nominal apart from manual events."""
    cfg = replay_config(policy.train_config, num_envs, seed, solver=batch.solver)
    cfg.sim = sim
    cfg.device = device
    task = cfg.task
    task.episode_length_s = float(suite.cfg.episode_length_s)
    task.commands.resample_time_s = float(suite.cfg.episode_length_s) + 1.0  # never resampled
    if task.commands.get("heading"):  # and never steered: the slot's yaw-rate command holds
        task.commands.heading = None
    if batch.terrain:
        terrain = config_group("terrain", str(suite.cfg.terrain))
        terrain.curriculum.enabled = False  # each env stays on the level it is given
        cfg.terrain = terrain
    else:
        cfg.terrain = config_group("terrain", "flat")
    if cfg.get("multitask") is not None:  # subtasks would change commands and terrain
        cfg.multitask = None
    if batch.robot is not None:
        cfg.robot.spec = robot_spec_for(str(cfg.robot.spec), batch.robot)
    cfg.randomization = randomization_config(batch, suite, float(task.control_dt))
    return cfg


def robot_spec_for(spec: str, mjcf: str) -> str:
    """A copy of robot spec ``spec`` (a name or a spec.yaml) pointing at another MJCF of the
    robot, written to a temporary folder: the same joints, gains and feet by name."""
    path = Path(spec) if spec.endswith((".yaml", ".yml")) else ROBOTS_DIR / spec / "spec.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["mjcf"] = str(Path(mjcf).resolve())
    out = Path(tempfile.mkdtemp(prefix="robot_axis_")) / "spec.yaml"
    out.write_text(yaml.safe_dump(raw))
    return str(out)


def randomization_config(batch: Batch, suite: Suite, control_dt: float) -> DictConfig:
    """Manual events for the axes this batch moves (their values are set per slot later);
    observation noise at the preset's amplitudes when the noise axis is in the batch."""
    levels: dict[str, list] = {}
    for c in batch.conditions:
        for axis, value in c:
            levels.setdefault(axis, []).append(value)
    events: dict[str, dict] = {}
    if "friction" in levels:
        events["friction"] = {"mode": "manual", "friction": [min(levels["friction"]),
                                                             max(levels["friction"])]}
    if "payload" in levels:
        events["payload"] = {"mode": "manual", "mass": {"add": [0.0, max(levels["payload"])]}}
    if "strength" in levels:
        events["actuator"] = {"mode": "manual", "strength": {
            "scale": [min(levels["strength"]), max(levels["strength"])]}}
    if "latency" in levels:
        events["latency"] = {"mode": "manual", "steps": [
            0, max(latency_steps(v, control_dt) for v in levels["latency"])]}
    if "push" in levels:
        top = max(levels["push"])
        events["push"] = {"mode": "manual", "velocity": [-top, top]}
    joint = {axis: [0.0, max(levels[axis])] for axis in JOINT_AXES if axis in levels}
    if joint:  # values are set per slot: the level, or the joint's own value (0 .. max)
        events["joint_dynamics"] = {"mode": "manual", **joint}
    if "contact" in levels:
        events["contact"] = {"mode": "manual", "timeconst": [min(levels["contact"]),
                                                             max(levels["contact"])]}
    noise = {}
    if "noise" in levels:
        preset = config_group("randomization", str(suite.cfg.noise_preset))
        noise = OmegaConf.to_container(preset.observation_noise)
        if not noise:
            raise SuiteError(f"noise preset {suite.cfg.noise_preset!r} has no observation_noise")
    return OmegaConf.create({"name": "evaluation", "events": events, "observation_noise": noise})


def latency_steps(ms: float, control_dt: float) -> int:
    """A latency level (ms) in whole control steps; other values are an error."""
    steps = ms / 1000.0 / control_dt
    if abs(steps - round(steps)) > 1e-6:
        raise SuiteError(f"latency {ms} ms is not a whole number of {control_dt * 1000:g} ms "
                         "control steps")
    return round(steps)


class BatchRunner:
    """One env batch holding a set of conditions; ``run()`` returns their episodes."""

    def __init__(self, policy: Policy, batch: Batch, suite: Suite, seed: int, sim: DictConfig,
                 device: str, progress: Callable[[str], None] | None = None,
                 film_s: float = 0.0):
        """``film_s`` > 0 keeps the last ``film_s`` seconds before the first failure of each
        condition (``clips``)."""
        cfg = suite.cfg
        self.shape = BatchShape.fit(len(batch.conditions), int(cfg.episodes_per_level),
                                    int(cfg.max_envs))
        self.batch, self.suite, self.seed = batch, suite, seed
        self.progress = progress or log.info
        env_cfg = batch_config(policy, batch, suite, self.shape.num_envs, seed, sim, device)
        self.env = env = make_env(env_cfg)
        if env.observation_sizes["policy"] != policy.observation_size:
            env.close()
            raise SuiteError(
                f"policy {policy.label!r} takes {policy.observation_size} observations but its "
                f"replay env makes {env.observation_sizes['policy']}")
        self.policy = policy.to(env.device)
        self.dt = env.control_dt
        qvel = env.sim.qvel  # actuator velocities are qvel @ moment.T (see _power)
        self._moment = torch.as_tensor(env.layout.actuator_moment, dtype=qvel.dtype,
                                       device=qvel.device)
        self.push_step = round(float(cfg.push.time_s) / self.dt)
        rec = cfg.recovery
        self.recovery = (float(rec.lin_vel_error), float(rec.max_tilt),
                         max(1, round(float(rec.hold_s) / self.dt)))
        self._assign()
        self.film = None
        if film_s > 0:
            e = self.shape.per_round
            self.film = FailureClips(self.shape.num_envs, env.model.nq,
                                     max(1, round(film_s / self.dt)),
                                     torch.arange(self.shape.num_envs) // e)

    def clips(self) -> dict[Condition, torch.Tensor]:
        """States [steps, nq] before the first failure of each condition that had one."""
        if self.film is None:
            return {}
        return {self.batch.conditions[c]: states for c, states in self.film.states.items()}

    # ------------------------------------------------------------------ slots
    def _slots(self, index: int) -> torch.Tensor:
        e = self.shape.per_round
        return torch.arange(index * e, (index + 1) * e)

    def _assign(self) -> None:
        """Put every condition's levels on its slots (events persist through resets)."""
        env, n, dev = self.env, self.shape.num_envs, self.env.device
        r = env.randomizer
        self.push_speed = torch.zeros(n, device=dev)
        self.forward = torch.full((n,), math.nan, device=dev)  # nan: sampled command
        self.payload = torch.zeros(n, dtype=torch.float64)
        r.set_noise_scale(torch.arange(n), 0.0)
        joint_event = r.events.get("joint_dynamics")
        for i, cond in enumerate(self.batch.conditions):
            ids = self._slots(i)
            k = len(ids)
            if joint_event is not None:  # every slot: its levels, else the model's values
                dofs = torch.as_tensor(env.layout.joint_qvel)
                levels = dict(cond)
                r.set("joint_dynamics", ids, **{
                    axis: (torch.full((k, len(dofs)), float(levels[axis])) if axis in levels
                           else torch.as_tensor(getattr(env.model, JOINT_AXES[axis])[dofs])
                           .expand(k, -1))
                    for axis in joint_event.draws})
            for axis, v in cond:
                if axis == "friction":
                    r.set("friction", ids, friction=torch.full((k, 1), v))
                elif axis == "payload":
                    r.set("payload", ids, mass=torch.full((k, 1), v))
                    self.payload[ids] = v
                elif axis == "strength":
                    r.set("actuator", ids, strength=torch.full((k, 1), v))
                elif axis == "latency":
                    r.set("latency", ids, steps=torch.full((k,), latency_steps(v, self.dt)))
                elif axis == "noise":
                    r.set_noise_scale(ids, v)
                elif axis == "push":
                    self.push_speed[ids.to(dev)] = v
                elif axis == "command":
                    self.forward[ids.to(dev)] = v
                elif axis == "terrain":
                    self._place_on_terrain(ids, int(v))
                elif axis == "contact":
                    r.set("contact", ids, timeconst=torch.full((k, 1), v))
                elif axis in JOINT_AXES:
                    pass  # set above, with the joint axes the condition leaves alone
                elif axis not in ("solver", "robot"):  # the batch's compiled model
                    raise SuiteError(f"no slot assignment for axis {axis!r}")
        self.push_ids = (self.push_speed > 0).nonzero().squeeze(1).cpu()
        self.mass = float(env.model.body_mass.sum()) + self.payload

    def _place_on_terrain(self, ids: torch.Tensor, level: int) -> None:
        """Spawn ``ids`` on grid row ``level``, spread over the columns of the suite's
        terrain types (every column when it names none)."""
        cur = self.env.curriculum
        if cur is None:
            raise SuiteError("terrain levels need a terrain grid; the batch has none")
        if not 0 <= level < cur.terrain.levels:
            raise SuiteError(f"terrain level {level} is outside the grid's levels "
                             f"0..{cur.terrain.levels - 1}")
        kinds = self.suite.terrain_types
        columns = torch.tensor([c for c, kind in enumerate(cur.terrain.column_types)
                                if kinds is None or kind in kinds], device=cur.levels.device)
        spread = columns[torch.arange(len(ids), device=columns.device) % len(columns)]
        cur.place(ids, spread, torch.full((len(ids),), level))

    # ------------------------------------------------------------------ rounds
    def run(self) -> dict[Condition, Episodes]:
        """Every round of the batch; the episodes of each condition, rounds concatenated."""
        gen = torch.Generator().manual_seed(self.seed)  # commands and push directions
        parts: dict[Condition, list[Episodes]] = {c: [] for c in self.batch.conditions}
        s = self.shape
        for rnd in range(s.rounds):
            start = time.perf_counter()
            out = self._round(gen)
            for i, c in enumerate(self.batch.conditions):
                ids = self._slots(i)
                parts[c].append(Episodes(**{k: v[ids] for k, v in out.items()}))
            self.progress(f"  batch solver={self.batch.solver}"
                          f"{' terrain' if self.batch.terrain else ''}"
                          f"{f' robot={Path(self.batch.robot).name}' if self.batch.robot else ''}"
                          f": round {rnd + 1}/"
                          f"{s.rounds} ({s.conditions} conditions x {s.per_round} episodes = "
                          f"{s.num_envs} envs) in {time.perf_counter() - start:.1f} s")
        return {c: Episodes.cat(p) for c, p in parts.items()}

    def _commands(self, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-slot commands [N, 3] and push directions [N, 2], shared by slot index."""
        c, e = self.suite.cfg.commands, self.shape.per_round
        cols = [float(lo) + (float(hi) - float(lo)) * torch.rand(e, generator=gen)
                for lo, hi in (c.lin_vel_x, c.lin_vel_y, c.ang_vel_yaw)]
        angle = 2 * math.pi * torch.rand(e, generator=gen)
        direction = torch.stack((angle.cos(), angle.sin()), dim=1)
        reps = self.shape.conditions
        dev = self.env.device
        cmd = torch.stack(cols, dim=1).repeat(reps, 1).to(dev)
        fixed = ~torch.isnan(self.forward)
        cmd[fixed] = 0.0
        cmd[fixed, 0] = self.forward[fixed]
        return cmd, direction.repeat(reps, 1).to(dev)

    @torch.inference_mode()
    def _round(self, gen: torch.Generator) -> dict[str, torch.Tensor]:
        env, n, dev, dt = self.env, self.shape.num_envs, self.env.device, self.dt
        cmd, direction = self._commands(gen)
        env.reset()
        obs = env.set_commands(cmd)
        push_velocity = (self.push_speed[:, None] * direction)[self.push_ids.to(dev)]
        err_max, tilt_max, hold = self.recovery

        f32 = {"device": dev, "dtype": torch.float32}
        alive = torch.ones(n, dtype=torch.bool, device=dev)
        recorded = torch.zeros(n, dtype=torch.bool, device=dev)
        out = {k: torch.zeros(n, **f32) for k in ("lin_vel_error", "yaw_error", "distance")}
        survived = torch.zeros(n, dtype=torch.bool, device=dev)
        energy = torch.zeros(n, **f32)
        recovery = torch.full((n,), math.nan, **f32)
        streak = torch.zeros(n, dtype=torch.long, device=dev)
        pushed = self.push_speed > 0
        for t in range(1, env.max_episode_length + 1):
            if self.film is not None:
                self.film.record(env.sim.qpos)
            obs, _, terminated, truncated, info = env.step(self.policy.act(obs["policy"]))
            done = terminated | truncated
            if self.film is not None and bool((terminated & ~recorded).any()):
                self.film.failed((terminated & ~recorded).nonzero().squeeze(1))
            if "episode" in info:
                ids = done.nonzero().squeeze(1)
                first = ~recorded[ids]
                ep, fid = info["episode"], ids[first]
                survived[fid] = ep["timeout"][first] > 0
                for k in out:
                    out[k][fid] = ep[k][first]
                recorded[ids] = True
            alive &= ~done
            energy += torch.where(alive, self._power() * dt, 0.0)
            if t == self.push_step and len(self.push_ids):
                env.randomizer.set("push", self.push_ids, velocity=push_velocity.cpu())
            if t > self.push_step:
                lin_err, tilt = self._tracking()
                ok = alive & pushed & (lin_err < err_max) & (tilt < tilt_max)
                streak = torch.where(ok, streak + 1, 0)
                newly = (streak == hold) & torch.isnan(recovery)
                recovery = torch.where(newly, (t - hold + 1 - self.push_step) * dt, recovery)
        if not bool(recorded.all()):
            raise RuntimeError("some envs did not finish their first episode in time")
        mass = self.mass.to(torch.float32)
        return {"survived": survived.cpu(), **{k: v.cpu() for k, v in out.items()},
                "energy": energy.cpu(), "mass": mass, "pushed": pushed.cpu(),
                "recovery": recovery.cpu()}

    # The few state columns the metrics need, read straight from the backend: the task's
    # full World (every sensor converted to float32) would cost more than the metrics.
    def _power(self) -> torch.Tensor:
        """Mechanical power sum_a |f_a v_a| of every env [N], W: each actuator's force times
        the velocity of what it drives (a joint, or a tendon coupling several on the
        dm_control quadruped, whose 12 actuators move 16 joints)."""
        sim, task = self.env.sim, self.env.task
        force = sim.sensordata[:, task.torque_cols]
        velocity = sim.qvel @ self._moment.T
        return (force * velocity).abs().sum(1).float()

    def _tracking(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Planar velocity error against the command (body frame) [N] and tilt [N], rad."""
        sim = self.env.sim
        quat = sim.qpos[:, 3:7].float()
        velocity = quat_rotate_inverse(quat, sim.qvel[:, 0:3].float())
        error = (self.env.task.commands[:, :2] - velocity[:, :2]).norm(dim=1)
        tilt = torch.acos((-projected_gravity(quat)[:, 2]).clamp(-1.0, 1.0))
        return error, tilt

    def close(self) -> None:
        self.env.close()
