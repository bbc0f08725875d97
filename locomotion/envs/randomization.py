"""Domain randomization: events that perturb each env's model, state, observations and actions.

An event (``configs/randomization/*.yaml``) has a mode and uniform draws:

- ``startup``: drawn once per env when the env is built;
- ``reset``: drawn again for an env at each of its resets;
- ``interval``: fired per env at random intervals (pushes);
- ``manual``: never drawn; values are set by code (the evaluator sweeps levels this way).

A draw is ``[low, high]`` (the value itself), ``{scale: [low, high]}`` (times the nominal
value) or ``{add: [low, high]}`` (plus the nominal value). All draws come from the env's
seeded generator on its device, one tensor per event for all affected envs, so a seed
gives the same randomization on either backend on one device. The per-env model table
lives on the env's device too. Model parameters reach the physics only through the
backend's ``set_params`` and pushes through its state tensors, so both backends share
this code. With no events the randomizer draws nothing and changes nothing.

``distinct_robots: K`` makes the startup draws K robots instead of one per env, each
shared by an equal share of the envs at random (Isaac Lab shares friction materials among
buckets the same way). On the CPU backend envs of one robot share one model copy, which
keeps the copies in cache; ``null`` draws one robot per env.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import mujoco
import numpy as np
import torch

from locomotion.envs.generators import restore_generator
from locomotion.sim.model_builder import ModelLayout
from locomotion.sim.robot_spec import RobotSpec
from locomotion.sim.rotations import quat_mul

log = logging.getLogger(__name__)

MODES = ("startup", "reset", "interval", "manual")
OPS = ("abs", "scale", "add")


class RandomizationError(ValueError):
    """A randomization config that cannot be applied (unknown event, bad range, ...)."""


@dataclass(frozen=True)
class Draw:
    """A uniform draw and how it combines with the nominal value."""

    op: str
    low: float
    high: float

    @classmethod
    def parse(cls, where: str, value) -> Draw:
        if isinstance(value, dict) or hasattr(value, "keys"):
            keys = list(value.keys())
            if len(keys) != 1 or keys[0] not in OPS[1:]:
                raise RandomizationError(f"{where}: a draw is [low, high] or one of "
                                         f"{{scale: [low, high]}}, {{add: [low, high]}}; "
                                         f"got keys {keys}")
            op, bounds = keys[0], value[keys[0]]
        else:
            op, bounds = "abs", value
        try:
            low, high = (float(b) for b in bounds)
        except (TypeError, ValueError):
            raise RandomizationError(f"{where}: range must be [low, high], got {bounds!r}") \
                from None
        if not (math.isfinite(low) and math.isfinite(high)):
            raise RandomizationError(f"{where}: range [{low}, {high}] is not finite")
        if low > high:
            raise RandomizationError(f"{where}: range [{low}, {high}] has min > max")
        return cls(op, low, high)

    def sample(self, n: int, k: int, gen: torch.Generator) -> torch.Tensor:
        """[n, k] values drawn uniformly in [low, high] (float64, on the generator's device)."""
        u = torch.rand(n, k, generator=gen, dtype=torch.float64, device=gen.device)
        return self.low + (self.high - self.low) * u

    def combine(self, nominal: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        if self.op == "scale":
            return nominal * value
        if self.op == "add":
            return nominal + value
        return value.expand(torch.broadcast_shapes(value.shape, nominal.shape))

    def bounds(self, nominal: np.ndarray) -> tuple[float, float]:
        """Smallest and largest value this draw can produce on ``nominal``."""
        ends = [self.combine(torch.as_tensor(nominal, dtype=torch.float64),
                             torch.tensor(v, dtype=torch.float64))
                for v in (self.low, self.high)]
        return float(min(e.min() for e in ends)), float(max(e.max() for e in ends))

    def __str__(self) -> str:
        return {"abs": "U({}, {})", "scale": "nominal x U({}, {})",
                "add": "nominal + U({}, {})"}[self.op].format(self.low, self.high)


class ModelTable:
    """Per-env copies of the model fields events change, pushed to the backend by rows."""

    def __init__(self, model: mujoco.MjModel, num_envs: int, device: torch.device | str = "cpu"):
        self.model = model
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.fields: dict[str, torch.Tensor] = {}
        self._nominal: dict[str, torch.Tensor] = {}
        self._before: dict[str, torch.Tensor] | None = None  # inside ``where``
        self._touched: set[str] = set()

    def nominal(self, field: str) -> torch.Tensor:
        """The shared model's value of ``field`` (read once; events read it at every draw)."""
        if field not in self._nominal:
            self._nominal[field] = torch.as_tensor(np.array(getattr(self.model, field)),
                                                   dtype=torch.float64, device=self.device)
        return self._nominal[field]

    def __getitem__(self, field: str) -> torch.Tensor:
        if field not in self.fields:
            self.fields[field] = self.nominal(field).repeat(self.num_envs,
                                                           *[1] * getattr(self.model, field).ndim)
        if self._before is not None and field not in self._before:
            self._before[field] = self.fields[field].clone()
        return self.fields[field]

    def commit(self, sim, ids: torch.Tensor, fields: tuple[str, ...]) -> None:
        if self._before is not None:  # inside ``where``: pushed once, at its end
            self._touched.update(fields)
            return
        for f in fields:
            sim.set_params(ids, f, self[f][ids])

    @contextlib.contextmanager
    def where(self, sim, mask: torch.Tensor):
        """Events applied to every env inside keep their rows where ``mask`` [N] is set and
        the old rows elsewhere; the fields they changed reach the backend once, for every
        env (no host read)."""
        self._before, self._touched = {}, set()
        try:
            yield
        finally:
            before, touched, self._before = self._before, self._touched, None
        ids = torch.arange(self.num_envs, device=self.device)
        for f in sorted(touched):
            new = self.fields[f]
            new.copy_(torch.where(mask.view(-1, *[1] * (new.dim() - 1)), new, before[f]))
            sim.set_params(ids, f, new)


class Event:
    """One randomization event; subclasses name their draws and apply them to envs."""

    DRAWS: tuple[str, ...] = ()
    MODES: tuple[str, ...] = ("startup", "reset", "manual")
    SETTINGS: dict[str, object] = {}

    def __init__(self, name: str, cfg, r: Randomizer):
        self.name = name
        self.r = r
        cfg = dict(cfg)
        self.mode = cfg.pop("mode", None)
        if self.mode not in self.MODES:
            raise RandomizationError(f"event {name!r}: mode {self.mode!r} is not one of "
                                     f"{list(self.MODES)}")
        self.settings = {k: cfg.pop(k, v) for k, v in self.SETTINGS.items()}
        unknown = sorted(set(cfg) - set(self.DRAWS))
        if unknown:
            raise RandomizationError(f"event {name!r}: unknown keys {unknown}; valid: "
                                     f"{['mode', *self.SETTINGS, *self.DRAWS]}")
        if not cfg:
            raise RandomizationError(f"event {name!r} draws nothing; give one of "
                                     f"{list(self.DRAWS)}")
        self.draws = {k: Draw.parse(f"event {name!r}, {k}", v) for k, v in cfg.items()}
        self.check()

    def sizes(self) -> dict[str, int]:
        """Number of values each draw takes per env."""
        return dict.fromkeys(self.DRAWS, 1)

    def check(self) -> None:
        """Reject draws that can produce invalid parameters."""

    def sample(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        sizes = self.sizes()
        return {k: d.sample(len(ids), sizes[k], self.r.gen) for k, d in self.draws.items()}

    def validate(self, values: dict[str, torch.Tensor]) -> None:
        """Reject values given by code (``Randomizer.set``) that the event cannot apply."""

    def apply(self, ids: torch.Tensor, values: dict[str, torch.Tensor]) -> None:
        raise NotImplementedError

    def apply_where(self, mask: torch.Tensor, values: dict[str, torch.Tensor]) -> None:
        """``apply`` to the envs where ``mask`` [N] is set, from every env's draws (interval
        events, in the masked step mode)."""
        raise NotImplementedError(f"event {self.name!r} cannot fire by mask")

    def describe(self) -> str:
        draws = ", ".join(f"{k} {d}" for k, d in self.draws.items())
        extra = "".join(f", {k}={v}" for k, v in self.settings.items())
        return f"{self.name} ({self.mode}): {draws}{extra}"


def _index(r: Randomizer, ids) -> torch.Tensor:
    """Model indices (geoms, bodies, dofs) as a tensor on the env's device."""
    return torch.as_tensor(np.asarray(ids), dtype=torch.long, device=r.device)


def _positive(event: Event, draw: str, nominal: np.ndarray, what: str) -> None:
    """Reject a draw (if configured) that can make ``what`` zero or negative."""
    if draw not in event.draws:
        return
    low, _ = event.draws[draw].bounds(nominal)
    if low <= 0:
        raise RandomizationError(f"event {event.name!r}: {draw} can reach {low:.4g}; "
                                 f"{what} must stay positive")


class Friction(Event):
    """Sliding friction of the ground and the feet (MuJoCo takes the larger of a pair)."""

    DRAWS = ("friction",)

    def check(self) -> None:
        r = self.r
        geoms = [r.model.geom(n).id for n in ["ground", *r.spec.feet]]
        self.geoms = _index(r, geoms)
        _positive(self, "friction", r.model.geom_friction[geoms, 0], "friction")

    def apply(self, ids, values):
        table = self.r.table
        nominal = table.nominal("geom_friction")[self.geoms, 0]
        table["geom_friction"][ids[:, None], self.geoms, 0] = self.draws["friction"].combine(
            nominal, values["friction"])
        table.commit(self.r.sim, ids, ("geom_friction",))


def _set_mass(r: Randomizer, ids, bodies: torch.Tensor, mass: torch.Tensor) -> None:
    """Set body masses [n, b] and scale their inertias with them (same shape, new mass)."""
    table = r.table
    nominal_mass = table.nominal("body_mass")[bodies]
    table["body_mass"][ids[:, None], bodies] = mass
    table["body_inertia"][ids[:, None], bodies] = (table.nominal("body_inertia")[bodies]
                                                   * (mass / nominal_mass)[..., None])
    table.commit(r.sim, ids, ("body_mass", "body_inertia"))


class Payload(Event):
    """Mass added to (or taken from) the base: a payload at the base's centre of mass."""

    DRAWS = ("mass",)

    def check(self) -> None:
        body = [self.r.model.body(self.r.spec.base_body).id]
        self.body = _index(self.r, body)
        _positive(self, "mass", self.r.model.body_mass[body], "the base mass")

    def apply(self, ids, values):
        nominal = self.r.table.nominal("body_mass")[self.body]
        _set_mass(self.r, ids, self.body, self.draws["mass"].combine(nominal, values["mass"]))


class LinkMass(Event):
    """Masses of the robot's links other than the base, one draw per link."""

    DRAWS = ("mass",)

    def check(self) -> None:
        m, base = self.r.model, self.r.model.body(self.r.spec.base_body).id
        bodies = [b for b in range(1, m.nbody) if b != base and m.body_mass[b] > 0]
        self.bodies = _index(self.r, bodies)
        _positive(self, "mass", m.body_mass[bodies], "link masses")

    def sizes(self):
        return {"mass": len(self.bodies)}

    def apply(self, ids, values):
        nominal = self.r.table.nominal("body_mass")[self.bodies]
        _set_mass(self.r, ids, self.bodies, self.draws["mass"].combine(nominal, values["mass"]))


class ComOffset(Event):
    """Shift of the base's centre of mass (x, y, z), m."""

    DRAWS = ("offset",)

    def check(self) -> None:
        self.body = self.r.model.body(self.r.spec.base_body).id

    def sizes(self):
        return {"offset": 3}

    def apply(self, ids, values):
        table = self.r.table
        nominal = table.nominal("body_ipos")[self.body]
        table["body_ipos"][ids, self.body] = self.draws["offset"].combine(nominal,
                                                                          values["offset"])
        table.commit(self.r.sim, ids, ("body_ipos",))


class Actuator(Event):
    """Motor strength (one factor on every torque) and PD gains (per actuator)."""

    DRAWS = ("strength", "kp", "kd")

    def check(self) -> None:
        r = self.r
        ids = np.asarray(r.layout.actuator_ids)
        self.ids = _index(r, ids)
        if r.spec.actuation != "pd" and {"kp", "kd"} & set(self.draws):
            raise RandomizationError(f"event {self.name!r}: kp/kd need PD actuation; robot "
                                     f"{r.spec.name!r} has actuation {r.spec.actuation!r}")
        m = r.model
        _positive(self, "strength", np.ones(1), "motor strength")
        _positive(self, "kp", m.actuator_gainprm[ids, 0], "kp")
        _positive(self, "kd", -m.actuator_biasprm[ids, 2], "kd")

    def sizes(self):
        return {"strength": 1, "kp": len(self.ids), "kd": len(self.ids)}

    def apply(self, ids, values):
        table, a = self.r.table, self.ids
        one = torch.ones(1, dtype=torch.float64, device=self.r.device)
        strength = values.get("strength", one.expand(len(ids), 1))
        if "strength" in self.draws:
            strength = self.draws["strength"].combine(one, strength)
        rows = ids[:, None]
        if self.r.spec.actuation != "pd":
            table["actuator_gear"][rows, a, 0] = table.nominal("actuator_gear")[a, 0] * strength
            table.commit(self.r.sim, ids, ("actuator_gear",))
            return
        kp, kd = (table.nominal("actuator_gainprm")[a, 0],
                  -table.nominal("actuator_biasprm")[a, 2])
        if "kp" in self.draws:
            kp = self.draws["kp"].combine(kp, values["kp"])
        if "kd" in self.draws:
            kd = self.draws["kd"].combine(kd, values["kd"])
        kp, kd = kp * strength, kd * strength
        table["actuator_gainprm"][rows, a, 0] = kp
        table["actuator_biasprm"][rows, a, 1] = -kp
        table["actuator_biasprm"][rows, a, 2] = -kd
        table["actuator_forcerange"][rows, a] = (table.nominal("actuator_forcerange")[a]
                                                 * strength[..., None])
        table.commit(self.r.sim, ids, ("actuator_gainprm", "actuator_biasprm",
                                       "actuator_forcerange"))


class JointDynamics(Event):
    """Joint damping, rotor armature and dry friction, per joint."""

    DRAWS = ("damping", "armature", "frictionloss")
    FIELDS = {"damping": "dof_damping", "armature": "dof_armature",
              "frictionloss": "dof_frictionloss"}

    def check(self) -> None:
        dofs = np.asarray(self.r.layout.joint_qvel)
        self.dofs = _index(self.r, dofs)
        for k, d in self.draws.items():
            low, _ = d.bounds(getattr(self.r.model, self.FIELDS[k])[dofs])
            if low < 0:
                raise RandomizationError(f"event {self.name!r}: {k} can reach {low:.4g}; "
                                         "it must not be negative")

    def sizes(self):
        return dict.fromkeys(self.DRAWS, len(self.dofs))

    def apply(self, ids, values):
        table = self.r.table
        fields = tuple(self.FIELDS[k] for k in self.draws)
        for k, d in self.draws.items():
            f = self.FIELDS[k]
            table[f][ids[:, None], self.dofs] = d.combine(table.nominal(f)[self.dofs], values[k])
        table.commit(self.r.sim, ids, fields)


class Contact(Event):
    """Softness of the foot-ground contacts: MuJoCo's solref (time constant, damping ratio)
    and solimp (impedance at zero and at full penetration) of the ground and the feet.

    Both geoms of a foot-ground pair get the same values, so the pair's mixed parameters are
    the drawn ones. A time constant under two physics steps is stiffened by MuJoCo to two.
    """

    DRAWS = ("timeconst", "dampratio", "dmin", "dmax")
    COLUMNS = {"timeconst": ("geom_solref", 0), "dampratio": ("geom_solref", 1),
               "dmin": ("geom_solimp", 0), "dmax": ("geom_solimp", 1)}

    def check(self) -> None:
        r = self.r
        geoms = [r.model.geom(n).id for n in ["ground", *r.spec.feet]]
        self.geoms = _index(r, geoms)
        for k in ("timeconst", "dampratio"):
            field, col = self.COLUMNS[k]
            _positive(self, k, getattr(r.model, field)[geoms, col], k)
        for k in ("dmin", "dmax"):
            if k in self.draws:
                low, high = self.draws[k].bounds(r.model.geom_solimp[geoms, 1 if k == "dmax"
                                                                     else 0])
                if low <= 0 or high >= 1:
                    raise RandomizationError(f"event {self.name!r}: {k} can reach "
                                             f"[{low:.4g}, {high:.4g}]; it must stay in (0, 1)")

    def apply(self, ids, values):
        table = self.r.table
        fields = sorted({self.COLUMNS[k][0] for k in self.draws})
        for k, d in self.draws.items():
            field, col = self.COLUMNS[k]
            nominal = table.nominal(field)[self.geoms, col]
            table[field][ids[:, None], self.geoms, col] = d.combine(nominal, values[k])
        table.commit(self.r.sim, ids, tuple(fields))


class EncoderBias(Event):
    """A constant offset on each measured joint position (what the policy sees), rad."""

    DRAWS = ("offset",)

    def sizes(self):
        return {"offset": self.r.num_joints}

    def apply(self, ids, values):
        zero = torch.zeros(1, dtype=torch.float64, device=self.r.device)
        self.r.joint_bias[ids] = self.draws["offset"].combine(zero, values["offset"]).float()


class Latency(Event):
    """Per-env action delay of a whole number of control steps."""

    DRAWS = ("steps",)

    def check(self) -> None:
        d = self.draws["steps"]
        if d.op != "abs" or d.low < 0 or d.low != int(d.low) or d.high != int(d.high):
            raise RandomizationError(f"event {self.name!r}: steps is a range of whole "
                                     f"control steps >= 0, e.g. [0, 1]; got {d}")

    @property
    def max_steps(self) -> int:
        return int(self.draws["steps"].high)

    def describe(self) -> str:
        d = self.draws["steps"]
        return f"{self.name} ({self.mode}): delay of {int(d.low)}..{int(d.high)} control steps"

    def sample(self, ids):
        d = self.draws["steps"]
        return {"steps": torch.randint(int(d.low), int(d.high) + 1, (len(ids), 1),
                                       generator=self.r.gen, device=self.r.gen.device)}

    def validate(self, values):
        steps = values["steps"]
        if (steps < 0).any() or (steps > self.max_steps).any():
            raise RandomizationError(f"latency steps must lie in [0, {self.max_steps}]")

    def apply(self, ids, values):
        self.r.delay[ids] = values["steps"].reshape(len(ids)).long()


class InitialState(Event):
    """Spawn state on top of the task's: base height, tilt and velocity; joint state."""

    DRAWS = ("height", "roll", "pitch", "linear", "angular", "joint_pos", "joint_vel")
    MODES = ("reset",)

    def sizes(self):
        j = self.r.num_joints
        return {"height": 1, "roll": 1, "pitch": 1, "linear": 3, "angular": 3,
                "joint_pos": j, "joint_vel": j}

    def check(self) -> None:
        self.jq = _index(self.r, self.r.layout.joint_qpos)
        self.jv = _index(self.r, self.r.layout.joint_qvel)

    def apply_state(self, ids, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        v = {k: t.to(qpos.dtype) for k, t in self.sample(ids).items()}
        for key, cols, state in (("height", slice(2, 3), qpos), ("linear", slice(0, 3), qvel),
                                 ("angular", slice(3, 6), qvel), ("joint_pos", self.jq, qpos),
                                 ("joint_vel", self.jv, qvel)):
            if key in v:
                state[:, cols] = self.draws[key].combine(state[:, cols], v[key])
        if "roll" in v or "pitch" in v:
            zero = torch.zeros(len(ids), 1, dtype=qpos.dtype, device=qpos.device)
            half = 0.5 * torch.cat((v.get("roll", zero), v.get("pitch", zero)), dim=1)
            c, s = half.cos(), half.sin()
            tilt = torch.stack((c[:, 0] * c[:, 1], s[:, 0] * c[:, 1], c[:, 0] * s[:, 1],
                                -s[:, 0] * s[:, 1]), dim=1)
            qpos[:, 3:7] = quat_mul(qpos[:, 3:7], tilt)


class Push(Event):
    """A kick that changes the base's planar velocity (world frame), at random intervals."""

    DRAWS = ("velocity",)
    MODES = ("interval", "manual")
    SETTINGS = {"interval_s": [5.0, 15.0]}

    def sizes(self):
        return {"velocity": 2}

    def apply(self, ids, values):
        qvel = self.r.sim.qvel
        qvel[ids, 0:2] += values["velocity"].to(qvel.dtype)

    def apply_where(self, mask, values):
        qvel = self.r.sim.qvel
        qvel[:, 0:2] += torch.where(mask[:, None], values["velocity"].to(qvel.dtype), 0.0)


class Force(Event):
    """An external force on the base held for ``duration_s`` (world frame, N)."""

    DRAWS = ("force",)
    MODES = ("interval", "manual")
    SETTINGS = {"interval_s": [5.0, 15.0], "duration_s": 0.1}

    def sizes(self):
        return {"force": 3}

    def apply(self, ids, values):
        r = self.r
        wrench = torch.zeros(len(ids), 6, dtype=torch.float64, device=r.device)
        wrench[:, :3] = values["force"]
        r.sim.apply_force(ids, r.spec.base_body, wrench)
        r.force_left[ids] = self.steps

    def apply_where(self, mask, values):
        r = self.r
        wrench = torch.zeros(len(mask), 6, dtype=torch.float64, device=r.device)
        wrench[:, :3] = values["force"]
        r.sim.apply_force_where(mask, r.spec.base_body, wrench)
        r.force_left.masked_fill_(mask, self.steps)

    @property
    def steps(self) -> int:
        """Control steps the force is held."""
        return max(1, round(float(self.settings["duration_s"]) / self.r.control_dt))


EVENTS: dict[str, type[Event]] = {
    "friction": Friction, "payload": Payload, "link_mass": LinkMass, "com_offset": ComOffset,
    "actuator": Actuator, "joint_dynamics": JointDynamics, "contact": Contact,
    "encoder_bias": EncoderBias,
    "latency": Latency, "initial_state": InitialState, "push": Push, "force": Force,
}


class Randomizer:
    """Applies a randomization config to a batch of envs (see the module docstring)."""

    def __init__(self, cfg, sim, model: mujoco.MjModel, spec: RobotSpec, layout: ModelLayout,
                 control_dt: float, gen: torch.Generator, obs_layout: dict[str, dict[str, slice]],
                 obs_scales: dict[str, torch.Tensor], seed: int, masked: bool = False):
        """``obs_layout``/``obs_scales``: the policy group's columns and scales per term;
        ``masked``: interval events fire by mask, without host reads (the env's masked
        step mode)."""
        self.model, self.spec, self.layout, self.sim = model, spec, layout, sim
        self.num_envs, self.device = sim.num_envs, sim.device
        self.masked = masked
        self._all_ids = torch.arange(self.num_envs, device=self.device)
        self.control_dt = control_dt
        self.gen = gen
        self.num_joints = len(spec.joints)
        self.table = ModelTable(model, self.num_envs, self.device)
        cfg = cfg or {}
        valid = ["name", "events", "observation_noise", "distinct_robots"]
        unknown = sorted(set(cfg) - set(valid))
        if unknown:
            raise RandomizationError(f"unknown randomization keys {unknown}; valid: {valid}")
        robots = cfg.get("distinct_robots")
        if robots is not None and (type(robots) is not int or robots < 1):
            raise RandomizationError("distinct_robots must be a whole number >= 1 or null "
                                     f"(one robot per env); got {robots!r}")
        self.distinct_robots = robots
        events = cfg.get("events") or {}
        bad = sorted(set(events) - set(EVENTS))
        if bad:
            raise RandomizationError(f"unknown randomization events {bad}; valid: "
                                     f"{sorted(EVENTS)}")
        self.events = {k: EVENTS[k](k, v, self) for k, v in events.items()}
        n, dev = self.num_envs, self.device
        self.joint_bias = torch.zeros(n, self.num_joints, device=dev)
        self.delay = torch.zeros(n, dtype=torch.long, device=dev)
        self.force_left = torch.zeros(n, dtype=torch.long, device=dev)
        self.noise_scale = torch.ones(n, 1, device=dev)
        latency = self.events.get("latency")
        self.max_delay = latency.max_steps if latency else 0
        self._history = torch.zeros(self.max_delay + 1, n, len(layout.actuator_ids),
                                    device=dev) if self.max_delay else None
        self._timers = {k: torch.zeros(n, device=dev) for k, e in self.events.items()
                        if e.mode == "interval"}
        # which envs an interval event may fire on (subtasks without pushes switch them off)
        self.enabled = {k: torch.ones(n, dtype=torch.bool, device=dev) for k in self._timers}
        policy = obs_layout.get("policy", {})
        self._noise = self._noise_amplitudes(cfg.get("observation_noise") or {}, policy,
                                             obs_scales)
        self._bias_cols = policy.get("joint_pos") if "encoder_bias" in self.events else None
        self._bias_scale = obs_scales["joint_pos"].to(dev) if self._bias_cols else None
        self.noise_gen = torch.Generator(device=dev).manual_seed(int(seed) + 7919)
        self.noise_exact = True  # False after a load from another kind of device

    # ------------------------------------------------------------------ setup
    def _noise_amplitudes(self, noise, policy, scales) -> torch.Tensor | None:
        """Per-column uniform noise half-widths of the policy observation, given in physical
        units and returned in the observation's scaled units."""
        if not noise:
            return None
        bad = sorted(set(noise) - set(policy))
        if bad:
            raise RandomizationError(f"observation_noise on terms {bad} that the policy does "
                                     f"not observe; policy terms: {sorted(policy)}")
        width = max(s.stop for s in policy.values())
        amp = torch.zeros(width, device=self.device)
        for term, a in noise.items():
            if float(a) < 0:
                raise RandomizationError(f"observation_noise.{term} = {a} is negative")
            cols = policy[term]
            amp[cols] = float(a) * scales[term].to(self.device).expand(cols.stop - cols.start)
        return amp

    def describe(self) -> list[str]:
        lines = [e.describe() for e in self.events.values()]
        if self._noise is not None:
            lines.append("observation noise (every step, policy group): uniform +- amplitude")
        return lines

    def startup(self) -> None:
        """Draw the startup events for every env and log what each event randomizes."""
        for line in self.describe():
            log.info("randomization: %s", line)
        ids = torch.arange(self.num_envs, device=self.device)
        k = self.distinct_robots
        drawn, robot = ids, ids  # one robot per env
        if k is not None and k < self.num_envs:
            log.info("randomization: startup draws make %d robots shared by %d envs", k,
                     self.num_envs)
            drawn = torch.arange(k, device=self.device)
            robot = torch.randperm(self.num_envs, generator=self.gen, device=self.gen.device) % k
        for e in self.events.values():
            if e.mode == "startup":
                e.apply(ids, {name: v[robot] for name, v in e.sample(drawn).items()})

    # ------------------------------------------------------------------ per reset / step
    def reset(self, env_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Redraw reset events of ``env_ids`` and perturb their spawn state in place."""
        if not self.events:
            return

        def restart_timer(name: str, e: Event) -> None:
            self._timers[name][env_ids] = self._interval(e, len(env_ids))

        self._redraw(env_ids, qpos, qvel, restart_timer)
        if self._history is not None:
            self._history[:, env_ids] = 0.0
        self.force_left[env_ids] = 0

    def reset_where(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """``reset`` of the envs where ``mask`` [N] is set: every env is drawn for and the
        draws are kept by mask; ``qpos``/``qvel`` [N, ...] are perturbed in every row (the
        backend keeps the masked ones). No host read."""
        if not self.events:
            return
        ids, n = self._all_ids, self.num_envs
        bias, delay = self.joint_bias.clone(), self.delay.clone()
        def restart_timer(name: str, e: Event) -> None:
            timer = self._timers[name]
            timer.copy_(torch.where(mask, self._interval(e, n), timer))

        with self.table.where(self.sim, mask):
            self._redraw(ids, qpos, qvel, restart_timer)
        self.joint_bias.copy_(torch.where(mask[:, None], self.joint_bias, bias))
        self.delay.copy_(torch.where(mask, self.delay, delay))
        if self._history is not None:
            self._history.masked_fill_(mask[None, :, None], 0.0)
        self.force_left.masked_fill_(mask, 0)

    def _redraw(self, ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor,
                restart_timer: Callable[[str, Event], None]) -> None:
        """Draw the reset events of ``ids`` and restart interval timers, in event order (the
        order of the random draws)."""
        for name, e in self.events.items():
            if e.mode == "reset":
                if isinstance(e, InitialState):
                    e.apply_state(ids, qpos, qvel)
                else:
                    e.apply(ids, e.sample(ids))
            elif e.mode == "interval":
                restart_timer(name, e)

    def _interval(self, e: Event, n: int) -> torch.Tensor:
        low, high = (float(x) for x in e.settings["interval_s"])
        return low + (high - low) * torch.rand(n, generator=self.gen, device=self.gen.device)

    def before_physics(self) -> None:
        """Release force pushes that have run their time, then fire due interval events."""
        if self.masked:
            self._before_physics_where()
            return
        if "force" in self.events:
            ending = (self.force_left == 1).nonzero().squeeze(1)
            self.force_left.clamp_(min=1).sub_(1)
            if len(ending):
                self.sim.apply_force(ending, self.spec.base_body,
                                     torch.zeros(len(ending), 6, dtype=torch.float64,
                                                 device=self.device))
        for name, timer in self._timers.items():
            timer -= self.control_dt
            due = timer <= 0
            fire = (due & self.enabled[name]).nonzero().squeeze(1)
            if len(fire):
                e = self.events[name]
                e.apply(fire, e.sample(fire))
            due = due.nonzero().squeeze(1)
            if len(due):
                timer[due] = self._interval(self.events[name], len(due))

    def _before_physics_where(self) -> None:
        """``before_physics`` without host reads: events drawn for every env, kept by mask."""
        if "force" in self.events:
            ending = self.force_left == 1
            zero = torch.zeros(self.num_envs, 6, dtype=torch.float64, device=self.device)
            self.sim.apply_force_where(ending, self.spec.base_body, zero)
            self.force_left.clamp_(min=1).sub_(1)
        for name, timer in self._timers.items():
            timer -= self.control_dt
            due = timer <= 0
            e = self.events[name]
            e.apply_where(due & self.enabled[name], e.sample(self._all_ids))
            timer.copy_(torch.where(due, self._interval(e, self.num_envs), timer))

    def delayed(self, actions: torch.Tensor) -> torch.Tensor:
        """The actions the actuators receive: each env's own, ``delay`` steps old."""
        if self._history is None:
            return actions
        self._history = self._history.roll(1, dims=0)
        self._history[0] = actions
        return self._history[self.delay, self._all_ids]

    def observe(self, obs: dict[str, torch.Tensor],
                env_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Add encoder bias and sensor noise to the policy group (the critic sees truth)."""
        if self._noise is None and self._bias_cols is None:
            return obs
        idx = slice(None) if env_ids is None else env_ids
        policy = obs["policy"].clone()
        if self._bias_cols is not None:
            policy[:, self._bias_cols] += self.joint_bias[idx] * self._bias_scale
        if self._noise is not None:
            u = torch.rand(policy.shape, generator=self.noise_gen, device=self.device)
            policy += (2 * u - 1) * self._noise * self.noise_scale[idx]
        return {**obs, "policy": policy}

    # ------------------------------------------------------------------ manual levels
    def set(self, name: str, env_ids: torch.Tensor, **values: torch.Tensor) -> None:
        """Apply event ``name`` to ``env_ids`` with given values (e.g. an evaluator's levels).

        Values are in the event's draw units: ``friction=tensor([n, 1])`` for an ``abs``
        friction draw, factors for a ``scale`` draw, offsets for an ``add`` draw.
        """
        if name not in self.events:
            raise RandomizationError(f"event {name!r} is not configured; configured: "
                                     f"{sorted(self.events)}")
        e = self.events[name]
        sizes = e.sizes()
        ids = torch.as_tensor(env_ids, device=self.device)
        full = {k: torch.as_tensor(v, dtype=torch.float64, device=self.device).reshape(
            len(ids), sizes[k]) for k, v in values.items()}
        e.validate(full)
        e.apply(ids, full)

    def enable(self, name: str, env_ids: torch.Tensor, on: torch.Tensor | bool) -> None:
        """Let interval event ``name`` fire on ``env_ids`` (``on`` per env) or not; an event
        that is not configured as an interval event is left alone."""
        if name in self.enabled:
            self.enabled[name][env_ids] = on

    def enable_where(self, name: str, mask: torch.Tensor, on: torch.Tensor) -> None:
        """``enable`` for the envs where ``mask`` [N] is set, from rows of ``on`` [N]."""
        if name in self.enabled:
            self.enabled[name].copy_(torch.where(mask, on, self.enabled[name]))

    def set_noise_scale(self, env_ids: torch.Tensor, scale: torch.Tensor | float) -> None:
        """Scale the observation noise of ``env_ids`` (1: the preset's amplitudes, 0: none)."""
        self.noise_scale[torch.as_tensor(env_ids, device=self.device)] = scale

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        state = {"fields": {k: v.clone() for k, v in self.table.fields.items()},
                 "joint_bias": self.joint_bias.clone(), "delay": self.delay.clone(),
                 "force_left": self.force_left.clone(), "noise_scale": self.noise_scale.clone(),
                 "timers": {k: v.clone() for k, v in self._timers.items()},
                 "enabled": {k: v.clone() for k, v in self.enabled.items()},
                 "noise_gen": self.noise_gen.get_state()}
        if self._history is not None:
            state["history"] = self._history.clone()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore draws and timers, and set every randomized model field on the backend."""
        self.table.fields = {k: v.to(self.device, copy=True) for k, v in state["fields"].items()}
        self.table.commit(self.sim, torch.arange(self.num_envs, device=self.device),
                          tuple(self.table.fields))
        for k in ("joint_bias", "delay", "force_left", "noise_scale"):
            getattr(self, k).copy_(state[k])
        for k, v in state["timers"].items():
            self._timers[k].copy_(v)
            self.enabled[k].copy_(state["enabled"][k])
        self.noise_exact = restore_generator(self.noise_gen, state["noise_gen"])
        if self._history is not None:
            self._history.copy_(state["history"])
