"""Termination terms by name: what ends an episode as a failure (time-outs are apart).

A term maps (task, world) to a bool per env [n]; ``task.terminations`` in config switches
them on (``max_tilt`` sets ``tilt``, ``base_contact: true`` adds ``base_contact``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from locomotion.tasks.registry import registrar
from locomotion.tasks.world import World

if TYPE_CHECKING:
    from locomotion.tasks.velocity import VelocityTask

TerminationTerm = Callable[["VelocityTask", World], torch.Tensor]
TERMINATION_TERMS: dict[str, TerminationTerm] = {}
termination_term = registrar(TERMINATION_TERMS, "termination")
"""``@termination_term("name")`` registers a termination term under ``name``."""


@termination_term("tilt")
def tilt(task: VelocityTask, w: World) -> torch.Tensor:
    """The base tipped further than ``max_tilt`` (rad) from upright."""
    return w.tilt > task.max_tilt


@termination_term("base_contact")
def base_contact(task: VelocityTask, w: World) -> torch.Tensor:
    """A body of the spec's ``terminate_contacts`` touched something."""
    return w.bad_contact
