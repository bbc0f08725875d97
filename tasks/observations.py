"""Observation terms by name: ``task.observations.<group>`` in config lists them with scales.

A term maps (task, world, actions, rows) to [n, size] values in physical units; the task
scales and concatenates the terms of each group (``policy``, ``critic``). ``rows`` is
``slice(None)`` for the whole batch or the env ids being observed. ``@observation_term``
registers a new one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from locomotion.config_checks import ConfigError
from locomotion.tasks.registry import registrar
from locomotion.tasks.world import World

if TYPE_CHECKING:
    from locomotion.tasks.velocity import VelocityTask

Rows = slice | torch.Tensor
ObservationTerm = Callable[["VelocityTask", World, torch.Tensor, Rows], torch.Tensor]
OBSERVATION_TERMS: dict[str, ObservationTerm] = {}
observation_term = registrar(OBSERVATION_TERMS, "observation")
"""``@observation_term("name")`` registers a observation term under ``name``."""


@observation_term("base_lin_vel")
def base_lin_vel(task: VelocityTask, w: World, actions: torch.Tensor, rows: Rows):
    return w.base_lin_vel


@observation_term("base_ang_vel")
def base_ang_vel(task: VelocityTask, w: World, actions: torch.Tensor, rows: Rows):
    return w.base_ang_vel


@observation_term("projected_gravity")
def projected_gravity(task: VelocityTask, w: World, actions: torch.Tensor, rows: Rows):
    return w.gravity


@observation_term("commands")
def commands(task: VelocityTask, w: World, actions: torch.Tensor, rows: Rows):
    return task.commands[rows]


@observation_term("joint_pos")
def joint_pos(task: VelocityTask, w: World, actions: torch.Tensor, rows: Rows):
    """Joint angles relative to the default standing pose."""
    return w.joint_pos - task.default_pose


@observation_term("joint_vel")
def joint_vel(task: VelocityTask, w: World, actions: torch.Tensor, rows: Rows):
    return w.joint_vel


@observation_term("actions")
def last_actions(task: VelocityTask, w: World, actions: torch.Tensor, rows: Rows):
    return actions[rows]


@observation_term("foot_contact")
def foot_contact(task: VelocityTask, w: World, actions: torch.Tensor, rows: Rows):
    return w.foot_contact.float()


@observation_term("base_height")
def base_height(task: VelocityTask, w: World, actions: torch.Tensor, rows: Rows):
    """Base height above the ground beneath it [n, 1]."""
    return task.base_height(w)


@observation_term("height_scan")
def height_scan(task: VelocityTask, w: World, actions: torch.Tensor, rows: Rows):
    """Base z minus ground z at the scan points around the base, clipped [n, P]."""
    return task.height_scan(w)


@observation_term("gait")
def gait(task: VelocityTask, w: World, actions: torch.Tensor, rows: Rows):
    """Each foot's gait clock (sin, cos) and the stepping frequency; zeros without a gait."""
    return task.gait.observation(rows)


@observation_term("subtask")
def subtask(task: VelocityTask, w: World, actions: torch.Tensor, rows: Rows):
    """One-hot of each env's subtask (multitask runs)."""
    if task.subtask_onehot is None:
        raise ConfigError("observation term 'subtask' needs subtasks: choose task=multitask "
                          "or a multitask config with subtasks")
    return task.subtask_onehot[rows]
