"""Perturbation suites: the axes a policy is swept along, and the plan of env batches.

A suite (``configs/eval/*.yaml``) names one-axis ``sweeps`` and two-axis ``grids`` with
their levels. Every level (or grid cell) is a *condition*: the axes it moves away from
nominal. Conditions that are the same physical setting (the nominal level of every axis)
run once and are shared. Conditions that need a differently compiled model (solver
profile, terrain grid, another MJCF of the robot) go to their own batch; all others run
together in one batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from locomotion.config import CONFIG_DIR, config_group


class SuiteError(ValueError):
    """A suite that cannot run: unknown axis, bad level, missing setting."""


@dataclass(frozen=True)
class Axis:
    """One perturbation: its units and which direction makes it harder (for margins)."""

    name: str
    label: str
    unit: str
    harder: str  # up | down | both | none (categorical)
    model: bool = False  # levels need their own compiled model (a separate batch)
    doc: str = ""

    @property
    def categorical(self) -> bool:
        return self.harder == "none"

    def title(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label


AXES: dict[str, Axis] = {a.name: a for a in (
    Axis("push", "push speed", "m/s", "up",
         doc="planar base velocity kick in a random direction at push.time_s"),
    Axis("friction", "ground friction", "", "both",
         doc="sliding friction of the ground and the feet"),
    Axis("payload", "payload", "kg", "up", doc="mass added at the base's centre of mass"),
    Axis("strength", "motor strength", "x nominal", "both",
         doc="PD gains and torque limits scaled together"),
    Axis("latency", "action latency", "ms", "up",
         doc="actions reach the motors this late (whole control steps)"),
    Axis("noise", "sensor noise", "x noise preset", "up",
         doc="uniform observation noise, times the noise preset's amplitudes"),
    Axis("command", "forward speed command", "m/s", "up",
         doc="fixed command (v, 0, 0) instead of the sampled commands"),
    Axis("solver", "solver profile", "", "none", model=True,
         doc="configs/solver option: a differently compiled model"),
    Axis("terrain", "terrain level", "", "up", model=True,
         doc="row of the terrain grid (0 = easiest); the robot spawns at tile centres"),
    Axis("damping", "joint damping", "N m s/rad", "up",
         doc="viscous damping of every actuated joint (the model's: robots/<robot>/*.xml)"),
    Axis("frictionloss", "joint friction loss", "N m", "up",
         doc="dry friction of every actuated joint"),
    Axis("armature", "joint armature", "kg m^2", "up",
         doc="rotor inertia reflected at every actuated joint"),
    Axis("contact", "foot contact time constant", "s", "up",
         doc="solref time constant of the foot-ground contacts (larger: softer)"),
    Axis("robot", "robot model", "", "none", model=True,
         doc="another MJCF of the robot (a path), joints matched by name; its joint "
             "dynamics and contacts are kept, actuators and solver options are the spec's"),
)}

#: Axes that set a joint property on every joint the policy drives (Randomizer event
#: ``joint_dynamics``, in its own units), and the MjModel field each one is.
JOINT_AXES = {"damping": "dof_damping", "frictionloss": "dof_frictionloss",
              "armature": "dof_armature"}

#: A condition: the (axis, level) pairs that differ from nominal, sorted by axis name.
Condition = tuple[tuple[str, float | int | str], ...]
NOMINAL: Condition = ()


@dataclass(frozen=True)
class Sweep:
    """One axis swept over its levels, everything else nominal."""

    name: str
    axis: Axis
    levels: tuple


@dataclass(frozen=True)
class Grid:
    """Two axes crossed: every pair of levels."""

    name: str
    axes: tuple[Axis, Axis]
    levels: tuple[tuple, tuple]


@dataclass(frozen=True)
class Batch:
    """Conditions that share one compiled model: one env batch (solver, terrain or not,
    the robot's MJCF or another)."""

    solver: str
    terrain: bool
    conditions: tuple[Condition, ...]
    robot: str | None = None  # MJCF path (None: the policy's own model)


def unknown_axis_error(names: Iterable[str], where: str) -> SuiteError:
    valid = ", ".join(f"{a.name} ({a.doc})" for a in AXES.values())
    return SuiteError(f"unknown axis {sorted(names)} in {where}; valid axes: {valid}")


def _axis(name: str, where: str) -> Axis:
    if name not in AXES:
        raise unknown_axis_error([name], where)
    return AXES[name]


def _check_solvers(names: list, where: str) -> None:
    valid = sorted(p.stem for p in (CONFIG_DIR / "solver").glob("*.yaml"))
    bad = [v for v in names if v not in valid]
    if bad:
        raise SuiteError(f"{where}: unknown solver profiles {bad}; valid: {valid}")


def _levels(axis: Axis, values, where: str) -> tuple:
    """Validated levels of ``axis``: numbers in range, or solver option names."""
    values = OmegaConf.to_object(values) if OmegaConf.is_config(values) else values
    if not isinstance(values, list | tuple) or not values:
        raise SuiteError(f"{where}: levels must be a non-empty list, got {values!r}")
    if axis.name == "solver":
        _check_solvers(values, where)
        return tuple(values)
    if axis.name == "robot":
        bad = [v for v in values if not Path(str(v)).is_file()]
        if bad:
            raise SuiteError(f"{where}: robot models {bad} do not exist (give MJCF paths)")
        if len(set(values)) != len(values):
            raise SuiteError(f"{where}: repeated robot models {list(values)}")
        return tuple(str(v) for v in values)  # as given: reports hold no machine paths
    try:
        levels = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        raise SuiteError(f"{where}: levels of {axis.name} must be numbers, got {values}") from None
    if not all(math.isfinite(v) for v in levels):
        raise SuiteError(f"{where}: levels must be finite, got {list(levels)}")
    positive = {"friction", "strength", "armature", "contact"}  # command 0: stand still
    low = min(levels)
    if axis.name in positive and low <= 0:
        raise SuiteError(f"{where}: {axis.name} levels must be > 0, got {list(levels)}")
    if low < 0:
        raise SuiteError(f"{where}: {axis.name} levels must be >= 0, got {list(levels)}")
    if len(set(levels)) != len(levels):
        raise SuiteError(f"{where}: repeated levels {list(levels)}")
    if axis.name == "terrain":
        if any(v != int(v) for v in levels):
            raise SuiteError(f"{where}: terrain levels are whole grid rows, got {list(levels)}")
        return tuple(int(v) for v in levels)
    return levels


class Suite:
    """A parsed suite config: its sweeps and grids, and the settings the rollouts use."""

    def __init__(self, cfg: DictConfig, only: Iterable[str] | None = None):
        self.cfg = cfg
        sweeps = cfg.get("sweeps") or {}
        grids = cfg.get("grids") or {}
        self.sweeps = [Sweep(str(name), _axis(str(name), f"suite {cfg.name!r} sweeps"),
                             _levels(AXES[str(name)], levels, f"sweep {name!r}"))
                       for name, levels in sweeps.items()]
        self.grids = []
        for name, spec in grids.items():
            if len(spec) != 2:
                raise SuiteError(f"grid {name!r} must cross exactly two axes, got {list(spec)}")
            axes = tuple(_axis(str(a), f"grid {name!r}") for a in spec)
            levels = tuple(_levels(a, spec[a.name], f"grid {name!r}, {a.name}") for a in axes)
            self.grids.append(Grid(str(name), axes, levels))
        if only is not None:
            self._select(list(only))
        if not self.sweeps and not self.grids:
            raise SuiteError(f"suite {cfg.name!r} has nothing to run (no sweeps or grids)")
        if cfg.get("solver"):
            _check_solvers([cfg.solver], "suite.solver")
        for key in ("episodes_per_level", "max_envs"):
            if int(cfg[key]) < 1:
                raise SuiteError(f"suite.{key} must be >= 1, got {cfg[key]}")
        if not float(cfg.episode_length_s) > float(cfg.push.time_s) >= 0:
            raise SuiteError(f"suite.push.time_s {cfg.push.time_s} must lie in "
                             f"[0, episode_length_s = {cfg.episode_length_s})")
        reach = cfg.get("reach")
        if reach is not None and not float(reach) > 0:
            raise SuiteError(f"suite.reach must be > 0 m or null, got {reach}")
        self.reach = None if reach is None else float(reach)
        self.terrain_types = self._terrain_types(cfg)

    @staticmethod
    def _terrain_types(cfg: DictConfig) -> tuple[str, ...] | None:
        """The terrain types the terrain axis spawns on (None: all), checked against the grid."""
        types = cfg.get("terrain_types")
        if types is None:
            return None
        known = list(config_group("terrain", str(cfg.terrain)).types)
        bad = sorted(set(types) - set(known))
        if bad or not types:
            raise SuiteError(f"suite.terrain_types {list(types)}: unknown {bad}; terrain "
                             f"{cfg.terrain!r} has types {known}")
        return tuple(types)

    def _select(self, only: list[str]) -> None:
        """Keep the sweeps and grids named in ``only`` (axis names or grid names)."""
        known = {s.name for s in self.sweeps} | {g.name for g in self.grids}
        bad = sorted(set(only) - known)
        if bad:
            if set(bad) - set(AXES):
                raise unknown_axis_error(set(bad) - set(AXES), "axes=")
            raise SuiteError(f"axes {bad} are not in suite {self.cfg.name!r}; it has "
                             f"sweeps {[s.name for s in self.sweeps]} and grids "
                             f"{[g.name for g in self.grids]}")
        self.sweeps = [s for s in self.sweeps if s.name in only]
        self.grids = [g for g in self.grids if g.name in only]

    @property
    def axes(self) -> set[str]:
        """Every axis the selected sweeps and grids move."""
        return {s.axis.name for s in self.sweeps} | {a.name for g in self.grids for a in g.axes}

    def levels_of(self, axis: str) -> list:
        """Every level of ``axis`` used anywhere in the suite (sweeps and grids)."""
        out = [v for s in self.sweeps if s.axis.name == axis for v in s.levels]
        out += [v for g in self.grids for a, lv in zip(g.axes, g.levels, strict=True)
                if a.name == axis for v in lv]
        return out

    def conditions(self, nominal: dict[str, object]) -> dict[tuple[str, ...], Condition]:
        """Condition of every sweep level and grid cell, keyed (name, level[, level]).

        ``nominal`` gives each axis's nominal level for the policy at hand (friction of its
        model, the solver it was trained with); a level equal to nominal is dropped.
        """
        def cond(pairs) -> Condition:
            return tuple(sorted((a, v) for a, v in pairs if nominal.get(a) != v))

        out: dict[tuple, Condition] = {}
        for s in self.sweeps:
            for v in s.levels:
                out[(s.name, v)] = cond([(s.axis.name, v)])
        for g in self.grids:
            (a, b), (la, lb) = g.axes, g.levels
            for va in la:
                for vb in lb:
                    out[(g.name, va, vb)] = cond([(a.name, va), (b.name, vb)])
        return out


def plan_batches(conditions: Iterable[Condition], trained_solver: str) -> list[Batch]:
    """Group unique conditions by compiled model, in a fixed order (the main batch first)."""
    groups: dict[tuple[str, bool, str], list[Condition]] = {}
    for c in dict.fromkeys(conditions):  # unique, first-seen order
        d = dict(c)
        key = (str(d.get("solver", trained_solver)), "terrain" in d, str(d.get("robot", "")))
        groups.setdefault(key, []).append(c)
    order = sorted(groups, key=lambda k: (k[0] != trained_solver, k[1], k[2], k[0]))
    return [Batch(solver, terrain, tuple(groups[(solver, terrain, robot)]), robot or None)
            for solver, terrain, robot in order]
