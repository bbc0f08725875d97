"""Robot specs: what a quadruped's MJCF means to the task (joints, pose, gains, feet, contacts).

A spec is a YAML file beside the MJCF (``robots/<name>/spec.yaml``). Per-joint values are
given as ``{regex: value}`` maps, resolved against the joint list; every joint must match
exactly one pattern so that a typo cannot silently leave a joint at zero.

An optional ``mirror`` gives the robot's left-right symmetry (symmetry augmentation):
``swap`` names pairs of name parts that trade places (``{FR_: FL_}``) and ``negate`` a regex
of the joints whose angle changes sign in the mirror (hip abduction).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path

import yaml

from locomotion.robots import ROBOTS_DIR

ACTUATION_MODES = ("pd", "model")


class RobotSpecError(ValueError):
    """A robot spec that names something that does not exist or is malformed."""


@dataclass(frozen=True)
class RobotSpec:
    """Resolved robot spec; per-joint values are tuples in ``joints`` order."""

    name: str
    mjcf: Path
    base_body: str
    joints: tuple[str, ...]
    actuation: str
    actuators: tuple[str, ...]
    default_pose: tuple[float, ...]
    kp: tuple[float, ...]
    kd: tuple[float, ...]
    torque_limits: tuple[float, ...]
    action_scale: float
    init_height: float
    feet: tuple[str, ...]
    terminate_contacts: tuple[str, ...]
    undesired_contacts: tuple[str, ...] = field(default_factory=tuple)
    mirror_swap: tuple[tuple[str, str], ...] = ()   # the spec's mirror (empty: none)
    mirror_negate: str = "$^"

    @property
    def num_actions(self) -> int:
        return len(self.actuators)

    @cached_property
    def mirror_joints(self) -> tuple[int, ...]:
        """Left-right mirror: joint i's mirror is joint ``mirror_joints[i]`` times
        ``mirror_signs[i]``; empty where the spec gives no mirror."""
        if not self.mirror_swap:
            return ()
        out = mirrored_names(self.joints, dict(self.mirror_swap), "joint")
        if any(abs(self.default_pose[m] * sign - q) > 1e-9
               for m, sign, q in zip(out, self.mirror_signs, self.default_pose, strict=True)):
            pose = dict(zip(self.joints, self.default_pose, strict=True))
            raise RobotSpecError(f"mirror: the default pose {pose} is not its own mirror; "
                                 "check swap and negate")
        return out

    @property
    def mirror_signs(self) -> tuple[float, ...]:
        return tuple(-1.0 if re.fullmatch(self.mirror_negate, j) else 1.0 for j in self.joints)

    @cached_property
    def mirror_feet(self) -> tuple[int, ...]:
        """Foot i's mirror is foot ``mirror_feet[i]``."""
        return mirrored_names(self.feet, dict(self.mirror_swap), "foot") if self.mirror_swap \
            else ()


_REQUIRED = ("name", "mjcf", "base_body", "joints", "default_pose", "action_scale",
             "init_height", "feet", "terminate_contacts")
_KNOWN = (*(f.name for f in fields(RobotSpec) if not f.name.startswith("mirror_")), "mirror")
# (mirror: {swap: {part: part}, negate: regex} fills mirror_swap and mirror_negate)


def available_robots() -> list[str]:
    """Names of the robots shipped in ``robots/``."""
    return sorted(p.parent.name for p in ROBOTS_DIR.glob("*/spec.yaml"))


def load_robot_spec(name_or_path: str | os.PathLike) -> RobotSpec:
    """Load a spec by robot name (``go1``) or by the path of a spec YAML file."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = ROBOTS_DIR / str(name_or_path) / "spec.yaml"
        if not path.is_file():
            raise RobotSpecError(
                f"unknown robot {str(name_or_path)!r}; available robots: {available_robots()} "
                "(or give the path of a spec.yaml)"
            )
    elif not path.is_file():
        raise RobotSpecError(f"robot spec file {path} does not exist")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise RobotSpecError(f"robot spec {path} is not valid YAML{where}: "
                             f"{getattr(e, 'problem', None) or e}; fix the file") from None
    if not isinstance(raw, dict):
        raise RobotSpecError(f"robot spec {path} holds a {type(raw).__name__}, not a mapping "
                             "of spec keys (name, mjcf, joints, ...); fix the file")
    try:
        return parse_robot_spec(raw, path.parent)
    except RobotSpecError as e:
        raise RobotSpecError(f"{path}: {e}") from None
    except (TypeError, ValueError, AttributeError) as e:  # e.g. a number where a list goes
        raise RobotSpecError(f"robot spec {path} has a value of the wrong type "
                             f"({type(e).__name__}: {e}); fix the file") from None


def parse_robot_spec(raw: dict, spec_dir: Path) -> RobotSpec:
    """Validate a raw spec mapping and resolve its per-joint patterns."""
    unknown = sorted(set(raw) - set(_KNOWN))
    if unknown:
        raise RobotSpecError(f"unknown robot spec keys {unknown}; valid keys: {sorted(_KNOWN)}")
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise RobotSpecError(f"robot spec {raw.get('name', '?')!r} is missing keys {missing}")
    actuation = raw.get("actuation", "pd")
    if actuation not in ACTUATION_MODES:
        raise RobotSpecError(f"actuation {actuation!r} is not one of {list(ACTUATION_MODES)}")
    joints = tuple(raw["joints"])
    if actuation == "pd":
        if "actuators" in raw:
            raise RobotSpecError("'actuators' is only for actuation: model; pd actuates 'joints'")
        for key in ("kp", "kd", "torque_limits"):
            if key not in raw:
                raise RobotSpecError(f"actuation: pd needs {key!r} in the robot spec")
        actuators = joints
    else:
        if "actuators" not in raw:
            raise RobotSpecError("actuation: model needs the list 'actuators' in the robot spec")
        actuators = tuple(raw["actuators"])

    def per_joint(key: str) -> tuple[float, ...]:
        return resolve_patterns(raw[key], joints, key) if key in raw else ()

    mirror = raw.get("mirror") or {}
    unknown_mirror = sorted(set(mirror) - {"swap", "negate"})
    if unknown_mirror:
        raise RobotSpecError(f"unknown mirror keys {unknown_mirror}; valid: ['negate', 'swap']")

    return RobotSpec(
        name=str(raw["name"]),
        mjcf=resolve_mjcf(str(raw["mjcf"]), spec_dir),
        base_body=str(raw["base_body"]),
        joints=joints,
        actuation=actuation,
        actuators=actuators,
        default_pose=per_joint("default_pose"),
        kp=per_joint("kp"),
        kd=per_joint("kd"),
        torque_limits=per_joint("torque_limits"),
        action_scale=float(raw["action_scale"]),
        init_height=float(raw["init_height"]),
        feet=tuple(raw["feet"]),
        terminate_contacts=tuple(raw["terminate_contacts"]),
        undesired_contacts=tuple(raw.get("undesired_contacts", ())),
        mirror_swap=tuple((str(a), str(b)) for a, b in dict(mirror.get("swap", {})).items()),
        mirror_negate=str(mirror.get("negate", "$^")),
    )


def mirrored_names(names: tuple[str, ...], swap: dict[str, str], what: str) -> tuple[int, ...]:
    """Index of each name's mirror: the name with one ``swap`` part traded for its partner
    (either way); a name without one is its own mirror (a joint on the body's midline)."""
    pairs = {**swap, **{b: a for a, b in swap.items()}}
    out = []
    for name in names:
        parts = [p for p in pairs if p in name]
        if len(parts) > 1:
            raise RobotSpecError(f"mirror: {what} {name!r} holds several swap parts {parts}")
        mirror = name.replace(parts[0], pairs[parts[0]]) if parts else name
        if mirror not in names:
            raise RobotSpecError(f"mirror: {what} {name!r} mirrors to {mirror!r}, which is not "
                                 f"one of {list(names)}")
        out.append(names.index(mirror))
    return tuple(out)


def resolve_patterns(patterns: dict, names: tuple[str, ...], what: str) -> tuple[float, ...]:
    """Map ``{regex: value}`` onto ``names``; each name must match exactly one regex."""
    values = []
    for name in names:
        hits = [p for p in patterns if re.fullmatch(p, name)]
        if len(hits) != 1:
            problem = "no pattern" if not hits else f"several patterns {hits}"
            raise RobotSpecError(
                f"{what}: joint {name!r} matches {problem}; patterns: {list(patterns)}, "
                f"joints: {list(names)}"
            )
        values.append(float(patterns[hits[0]]))
    return tuple(values)


def resolve_mjcf(mjcf: str, spec_dir: Path) -> Path:
    """Resolve ``mjcf`` relative to the spec, to an installed package, or to MuJoCo Menagerie.

    ``dm_control:suite/quadruped.xml`` points into the installed dm-control package;
    ``menagerie:unitree_go1/go1.xml`` into a local Menagerie checkout named by MENAGERIE_ROOT.
    """
    if mjcf.startswith("dm_control:"):
        import dm_control

        path = Path(dm_control.__file__).parent / mjcf.split(":", 1)[1]
    elif mjcf.startswith("menagerie:"):
        root = os.environ.get("MENAGERIE_ROOT")
        if not root:
            raise RobotSpecError(
                f"{mjcf} needs MuJoCo Menagerie on disk: set MENAGERIE_ROOT to a local copy of "
                "mujoco_menagerie (this project never downloads models at run time)"
            )
        path = Path(root) / mjcf.split(":", 1)[1]
    else:
        path = spec_dir / mjcf
    if not path.is_file():
        raise RobotSpecError(f"robot MJCF {path} does not exist")
    return path
