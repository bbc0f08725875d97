"""The interface every physics backend implements, so envs never touch MuJoCo structs."""

from __future__ import annotations

from typing import Protocol

import torch
from omegaconf import DictConfig

from locomotion.config_checks import ConfigError
from locomotion.sim.native import NativeBackend

BACKENDS = ("native", "warp")


class SimBackend(Protocol):
    """N worlds of one model, stepped together; state and sensors as [N, ...] tensors.

    ``qpos``, ``qvel`` and ``sensordata`` reflect the last ``step`` or ``reset``;
    ``substep_sensordata`` holds the sensors after every physics substep of the last
    step ([N, substeps, nsensordata]) so contact events shorter than a control step count.
    ``diverged`` flags worlds whose physics went non-finite or were reset by MuJoCo's own
    instability guard during the last step (on Warp also worlds that ran out of contact or
    constraint room since their reset). ``device`` is where these tensors live and where
    ``step`` wants its controls. ``apply_force`` holds a world-frame wrench on a body (at its
    center of mass) until it is changed or the world is reset. ``warnings`` (optional)
    counts the physics engine's warnings by kind. The ``*_where`` methods take a mask [N]
    and rows for every world, so a GPU env resets worlds without reading which ones back.
    """

    num_envs: int
    device: torch.device
    timestep: float

    @property
    def qpos(self) -> torch.Tensor: ...

    @property
    def qvel(self) -> torch.Tensor: ...

    @property
    def sensordata(self) -> torch.Tensor: ...

    @property
    def substep_sensordata(self) -> torch.Tensor: ...

    @property
    def diverged(self) -> torch.Tensor: ...

    def step(self, ctrl: torch.Tensor, nsubsteps: int, count: int | None = None) -> None:
        """Advance the worlds; with ``count``, only the first ``count`` need to be stepped."""

    def reset(self, env_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None: ...

    def reset_where(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """``reset`` of the worlds where ``mask`` [N] is set, from those rows of [N, ...]."""

    def set_params(self, env_ids: torch.Tensor, field: str, values: torch.Tensor) -> None: ...

    def apply_force(self, env_ids: torch.Tensor, body: int | str,
                    wrench: torch.Tensor) -> None: ...

    def apply_force_where(self, mask: torch.Tensor, body: int | str,
                          wrench: torch.Tensor) -> None:
        """``apply_force`` on the worlds where ``mask`` [N] is set, from rows of [N, 6]."""

    def close(self) -> None: ...


def make_backend(cfg: DictConfig, model, num_envs: int, device: torch.device | str = "cpu",
                 nthread: int | None = None) -> SimBackend:
    """The physics backend named by ``cfg.backend``, holding its state on ``device``;
    ``nthread`` (native) overrides ``cfg.nthread``."""
    if cfg.backend == "native":
        if torch.device(device).type != "cpu":
            raise ConfigError(f"sim=native runs on the CPU, not device={device}; use sim=warp")
        return NativeBackend(model, num_envs, nthread=nthread or cfg.get("nthread"))
    if cfg.backend == "warp":
        from locomotion.sim.warp_backend import WarpBackend  # imports Warp: seconds

        return WarpBackend(model, num_envs, device, nconmax=cfg.get("nconmax"),
                           njmax=cfg.get("njmax"), graph=cfg.get("graph", True))
    raise ConfigError(f"unknown sim backend {cfg.backend!r}; valid: {list(BACKENDS)}")


def resolve_device(name: str | torch.device) -> torch.device:
    """The torch device ``name`` names, with the current CUDA device filled in for "cuda"."""
    device = torch.device(name)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device
