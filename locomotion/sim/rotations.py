"""Batched quaternion helpers (MuJoCo's w-x-y-z order)."""

from __future__ import annotations

import torch


def quat_rotate_inverse(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Express world-frame vectors ``v`` [N, 3] in the frames of unit quaternions ``q`` [N, 4]."""
    w, xyz = q[:, :1], q[:, 1:]
    t = 2.0 * torch.cross(xyz, v, dim=1)
    return v - w * t + torch.cross(xyz, t, dim=1)


def projected_gravity(q: torch.Tensor) -> torch.Tensor:
    """World -z axis in the body frame: (0, 0, -1) when upright; its xy part measures tilt."""
    w, x, y, z = q.unbind(1)
    return torch.stack((2 * (w * y - x * z), -2 * (w * x + y * z),
                        -(w * w - x * x - y * y + z * z)), dim=1)


def yaw_quat(yaw: torch.Tensor) -> torch.Tensor:
    """Unit quaternions of rotations by ``yaw`` [N] about world z."""
    half = 0.5 * yaw
    zero = torch.zeros_like(half)
    return torch.stack((half.cos(), zero, zero, half.sin()), dim=1)


def heading(q: torch.Tensor) -> torch.Tensor:
    """Yaw [N] of unit quaternions ``q`` [N, 4]: the direction the body's x axis points."""
    w, x, y, z = q.unbind(1)
    return torch.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def wrap_angle(a: torch.Tensor) -> torch.Tensor:
    """Angles mapped to [-pi, pi)."""
    return torch.remainder(a + torch.pi, 2 * torch.pi) - torch.pi


def quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton products ``a * b`` of quaternions [N, 4] (rotation ``b`` then ``a``)."""
    aw, ax, ay, az = a.unbind(1)
    bw, bx, by, bz = b.unbind(1)
    return torch.stack((aw * bw - ax * bx - ay * by - az * bz,
                        aw * bx + ax * bw + ay * bz - az * by,
                        aw * by - ax * bz + ay * bw + az * bx,
                        aw * bz + ax * by - ay * bx + az * bw), dim=1)
