"""Reward terms by name: ``task.rewards.weights`` in config picks them and weighs them.

A term maps a ``RewardContext`` to one value per env [N]; the task multiplies it by its
weight and the control step and logs each term on its own. ``@reward_term("name")``
registers a new one (docs/adding_a_task.md, "Adding a reward term").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from locomotion.tasks.registry import registrar
from locomotion.tasks.world import World

if TYPE_CHECKING:
    from locomotion.tasks.velocity import VelocityTask


@dataclass
class RewardContext:
    """What a reward term may read: the world after the step, the task (commands, gait,
    trackers), this step's and the last step's actions, feet touching down this step."""

    w: World
    task: VelocityTask
    actions: torch.Tensor
    last_actions: torch.Tensor
    first_contact: torch.Tensor


RewardTerm = Callable[[RewardContext], torch.Tensor]
REWARD_TERMS: dict[str, RewardTerm] = {}
reward_term = registrar(REWARD_TERMS, "reward")
"""``@reward_term("name")`` registers a reward term under ``name``."""


@reward_term("track_lin_vel")
def track_lin_vel(c: RewardContext) -> torch.Tensor:
    err = (c.task.commands[:, :2] - c.w.base_lin_vel[:, :2]).square().sum(1)
    return torch.exp(-err / c.task.tracking_sigma)


@reward_term("track_ang_vel")
def track_ang_vel(c: RewardContext) -> torch.Tensor:
    err = (c.task.commands[:, 2] - c.w.base_ang_vel[:, 2]).square()
    return torch.exp(-err / c.task.tracking_sigma)


@reward_term("lin_vel_z")
def lin_vel_z(c: RewardContext) -> torch.Tensor:
    return c.w.base_lin_vel[:, 2].square()


@reward_term("ang_vel_xy")
def ang_vel_xy(c: RewardContext) -> torch.Tensor:
    return c.w.base_ang_vel[:, :2].square().sum(1)


@reward_term("orientation")
def orientation(c: RewardContext) -> torch.Tensor:
    return c.w.gravity[:, :2].square().sum(1)


@reward_term("fallen")
def fallen(c: RewardContext) -> torch.Tensor:
    """1 while the robot is down (``VelocityTask.fallen``). Where falls do not end the
    episode, this stands in for the reward a termination forfeits; ``orientation`` alone
    reads 0 for a robot on its back."""
    return c.task.fallen(c.w).float()


@reward_term("torques")
def torques(c: RewardContext) -> torch.Tensor:
    return c.w.torques.square().sum(1)


@reward_term("joint_acc")
def joint_acc(c: RewardContext) -> torch.Tensor:
    return ((c.w.joint_vel - c.task.last_joint_vel) / c.task.dt).square().sum(1)


@reward_term("action_rate")
def action_rate(c: RewardContext) -> torch.Tensor:
    return (c.actions - c.last_actions).square().sum(1)


@reward_term("feet_air_time")
def feet_air_time(c: RewardContext) -> torch.Tensor:
    """Long swings while moving; not for envs with a gait command, whose schedule sets the
    swing time (0.5 s of air at 2 Hz would fight the schedule)."""
    moving = c.task.commands[:, :2].norm(dim=1) > 0.1
    if c.task.gait is not None:
        moving = moving & ~c.task.gait.active
    return ((c.task.air_time - c.task.air_time_target) * c.first_contact).sum(1) * moving


@reward_term("undesired_contacts")
def undesired_contacts(c: RewardContext) -> torch.Tensor:
    return c.w.undesired_contacts


@reward_term("joint_limits")
def joint_limits(c: RewardContext) -> torch.Tensor:
    low, high = c.task.soft_limits[:, 0], c.task.soft_limits[:, 1]
    q = c.w.joint_pos
    return ((low - q).clamp(min=0) + (q - high).clamp(min=0)).sum(1)


@reward_term("base_height")
def base_height(c: RewardContext) -> torch.Tensor:
    """Squared shortfall of the base's height above the ground below
    ``rewards.base_height_target``: a policy trained under heavy joint damping otherwise
    learns to crouch and shuffle with its belly a few cm off the floor. One-sided, so
    jumps and pronking are not penalized."""
    target = float(c.task.base_height_target)
    return (target - c.task.base_height(c.w)[:, 0]).clamp(min=0.0).square()


@reward_term("gait_contact")
def gait_contact(c: RewardContext) -> torch.Tensor:
    return c.task.gait.contact_match(c.w.foot_contact)
