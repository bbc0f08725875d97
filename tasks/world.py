"""What a task knows of a batch of envs after a step, read from state and sensors only."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class World:
    """The batch's (or some envs') state in the task's terms (all [n, ...])."""

    base_pos: torch.Tensor
    base_quat: torch.Tensor
    base_lin_vel: torch.Tensor  # body frame
    base_ang_vel: torch.Tensor  # body frame
    gravity: torch.Tensor  # projected gravity, body frame
    joint_pos: torch.Tensor
    joint_vel: torch.Tensor
    foot_contact: torch.Tensor  # bool, any contact during the control step
    torques: torch.Tensor
    bad_contact: torch.Tensor  # bool, a terminating body touched something
    undesired_contacts: torch.Tensor  # number of undesired bodies in contact

    @property
    def tilt(self) -> torch.Tensor:
        """Angle between the base's z axis and the world's (rad) [n]: 0 upright, pi on its
        back, where the projected gravity's xy part (``orientation``) reads 0 again."""
        return torch.acos((-self.gravity[:, 2]).clamp(-1.0, 1.0))
