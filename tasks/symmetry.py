"""Left-right mirror of observations and actions (symmetry augmentation).

Every observation term has a rule that maps its columns onto their mirror: which column
each one comes from and its sign. The base frame's axes give the rules of base terms (x
forward, y left, z up: the mirror flips lateral velocity and gravity, roll and yaw rates,
and the lateral and yaw commands); the robot spec's ``mirror`` gives those of joints and feet.
Scales are per term and the rules only permute columns of one kind inside a term, so the
scaled observation mirrors as the physical one does.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from locomotion.config_checks import ConfigError
from locomotion.sim.robot_spec import RobotSpec
from locomotion.tasks.registry import registrar

TermMirror = Callable[[RobotSpec, int], tuple[list[int], list[float]]]
OBSERVATION_MIRRORS: dict[str, TermMirror] = {}
observation_mirror = registrar(OBSERVATION_MIRRORS, "observation mirror")
"""``@observation_mirror("term")`` registers the mirror rule of observation term ``term``."""


def _axes(*signs: float) -> TermMirror:
    def rule(spec: RobotSpec, size: int) -> tuple[list[int], list[float]]:
        return list(range(len(signs))), list(signs)
    return rule


for _term, _signs in (("base_lin_vel", (1.0, -1.0, 1.0)), ("base_ang_vel", (-1.0, 1.0, -1.0)),
                      ("projected_gravity", (1.0, -1.0, 1.0)), ("commands", (1.0, -1.0, -1.0)),
                      ("base_height", (1.0,))):
    observation_mirror(_term)(_axes(*_signs))


def joints(spec: RobotSpec, size: int) -> tuple[list[int], list[float]]:
    return list(spec.mirror_joints), list(spec.mirror_signs)


for _term in ("joint_pos", "joint_vel", "actions"):
    observation_mirror(_term)(joints)


@observation_mirror("foot_contact")
def feet(spec: RobotSpec, size: int) -> tuple[list[int], list[float]]:
    return list(spec.mirror_feet), [1.0] * len(spec.mirror_feet)


@observation_mirror("gait")
def gait_clock(spec: RobotSpec, size: int) -> tuple[list[int], list[float]]:
    """Each foot's (sin, cos) clock goes to its mirror foot; the frequency stays."""
    n = len(spec.mirror_feet)
    return [*spec.mirror_feet, *(n + i for i in spec.mirror_feet), 2 * n], [1.0] * (2 * n + 1)


class Mirror:
    """Mirrors batches of observations (per group) and actions of one env's layout."""

    def __init__(self, spec: RobotSpec, layout: dict[str, dict[str, slice]],
                 device: torch.device | str = "cpu"):
        """``layout``: each group's columns per term (``VelocityTask.observation_layout``)."""
        if not spec.mirror_joints:
            raise ConfigError(f"robot {spec.name!r} has no mirror in its spec: symmetry needs "
                              "mirror: {swap: ..., negate: ...} (see robots/go1/spec.yaml)")
        missing = sorted({t for terms in layout.values() for t in terms} - set(OBSERVATION_MIRRORS))
        if missing:
            raise ConfigError(f"observation terms {missing} have no mirror rule, so symmetry "
                              f"cannot be used with them; terms with one: "
                              f"{sorted(OBSERVATION_MIRRORS)}")
        self._obs = {}
        for group, terms in layout.items():
            index, sign = [], []
            for term, cols in terms.items():
                size = cols.stop - cols.start
                idx, sgn = OBSERVATION_MIRRORS[term](spec, size)
                if len(idx) != size:
                    raise ConfigError(f"observation term {term!r} has {size} columns; its "
                                      f"mirror rule gives {len(idx)}")
                index += [cols.start + i for i in idx]
                sign += sgn
            self._obs[group] = (torch.tensor(index, device=device),
                                torch.tensor(sign, device=device))
        self._actions = (torch.tensor(spec.mirror_joints, device=device),
                         torch.tensor(spec.mirror_signs, device=device))

    def observations(self, group: str, x: torch.Tensor) -> torch.Tensor:
        index, sign = self._obs[group]
        return x[:, index] * sign

    def actions(self, x: torch.Tensor) -> torch.Tensor:
        index, sign = self._actions
        return x[:, index] * sign
