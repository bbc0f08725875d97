"""Gait commands: a phase clock per env and the foot-contact schedule it asks for.

A gait is one phase offset per foot (in the robot spec's foot order) and a stepping
frequency: foot i should be in stance while ``(phase + offset_i) mod 1 < duty``. Trot,
pace, bound and pronk differ only in their offsets. The policy sees each foot's clock as
(sin, cos) plus the frequency, so one network can be conditioned on any of them; an env
without a gait command ("free") sees zeros and is not rewarded for any schedule.
"""

from __future__ import annotations

import math

import torch

from locomotion.config_checks import ConfigError

FREE = -1  # gait index of an env that walks as it likes
DRAW = -2  # an env whose gait is drawn from ``sample`` at each reset


class GaitClock:
    """Per-env gait index, frequency and phase; desired contacts and clock observations."""

    def __init__(self, cfg, num_feet: int, num_envs: int, generator: torch.Generator,
                 device: torch.device | str = "cpu"):
        self.names = list(cfg.offsets)
        offsets = [list(cfg.offsets[n]) for n in self.names]
        bad = [n for n, o in zip(self.names, offsets, strict=True) if len(o) != num_feet]
        if bad:
            raise ConfigError(f"gait offsets of {bad} need one value per foot ({num_feet})")
        self.offsets = torch.tensor(offsets, dtype=torch.float32, device=device)
        self.frequency_range = tuple(float(f) for f in cfg.frequency)
        self.duty = float(cfg.duty)
        self.sampled = [self.index(n) for n in cfg.get("sample", self.names)]
        self.gen = generator
        self.device = device
        self.gait = torch.full((num_envs,), FREE, dtype=torch.long, device=device)
        self.assigned = torch.full((num_envs,), DRAW, dtype=torch.long,
                                   device=device)  # set by subtasks
        self._sampled = torch.tensor(self.sampled, dtype=torch.long, device=device)
        self.frequency = torch.zeros(num_envs, device=device)
        self.phase = torch.zeros(num_envs, device=device)

    def index(self, name: str) -> int:
        """Index of gait ``name`` ("free" = FREE); an unknown name lists the valid ones."""
        if name == "free":
            return FREE
        if name not in self.names:
            raise ConfigError(f"unknown gait {name!r}; valid: {['free', *self.names]}")
        return self.names.index(name)

    def assign(self, env_ids: torch.Tensor, gaits: torch.Tensor) -> None:
        """Give ``env_ids`` these gait indices (FREE, DRAW or a gait) from their next reset."""
        self.assigned[env_ids] = gaits.to(self.assigned.device)

    def switch(self, env_ids: torch.Tensor, gait: int) -> None:
        """Run gait index ``gait`` in ``env_ids`` now and after their resets (a viewer's
        gait command); frequency and phase run on, so the feet change step smoothly."""
        self.assigned[env_ids] = gait
        self.gait[env_ids] = gait

    def reset(self, env_ids: torch.Tensor) -> None:
        """New gait (``assigned``, else drawn from ``sample``), frequency and phase."""
        n, dev = len(env_ids), self.gen.device
        pick = torch.randint(len(self.sampled), (n,), generator=self.gen, device=dev)
        gaits = self.assigned[env_ids]
        gaits = torch.where(gaits == DRAW, self._sampled[pick], gaits)
        low, high = self.frequency_range
        self.gait[env_ids] = gaits
        self.frequency[env_ids] = low + (high - low) * torch.rand(n, generator=self.gen,
                                                                  device=dev)
        self.phase[env_ids] = torch.rand(n, generator=self.gen, device=dev)

    def reset_where(self, mask: torch.Tensor) -> None:
        """``reset`` of the envs where ``mask`` [N] is set, drawn for every env (no host
        read)."""
        n, dev = len(mask), self.gen.device
        pick = torch.randint(len(self.sampled), (n,), generator=self.gen, device=dev)
        gaits = torch.where(self.assigned == DRAW, self._sampled[pick], self.assigned)
        low, high = self.frequency_range
        frequency = low + (high - low) * torch.rand(n, generator=self.gen, device=dev)
        phase = torch.rand(n, generator=self.gen, device=dev)
        self.gait.copy_(torch.where(mask, gaits, self.gait))
        self.frequency.copy_(torch.where(mask, frequency, self.frequency))
        self.phase.copy_(torch.where(mask, phase, self.phase))

    def assign_where(self, mask: torch.Tensor, gaits: torch.Tensor) -> None:
        """``assign`` to the envs where ``mask`` [N] is set, from rows of ``gaits`` [N]."""
        self.assigned.copy_(torch.where(mask, gaits, self.assigned))

    def advance(self, dt: float) -> None:
        self.phase = (self.phase + self.frequency * dt) % 1.0

    @property
    def active(self) -> torch.Tensor:
        return self.gait != FREE

    def _foot_phase(self, idx=slice(None)) -> torch.Tensor:
        offsets = self.offsets[self.gait[idx].clamp(min=0)]
        return (self.phase[idx, None] + offsets) % 1.0

    def desired_contact(self) -> torch.Tensor:
        """[N, feet] True where a foot should be on the ground now."""
        return self._foot_phase() < self.duty

    def observation(self, idx=slice(None)) -> torch.Tensor:
        """[n, 2 feet + 1]: each foot's clock as (sin, cos), then the frequency; 0 if free."""
        angle = 2 * math.pi * self._foot_phase(idx)
        obs = torch.cat((angle.sin(), angle.cos(), self.frequency[idx, None]), dim=1)
        return obs * self.active[idx, None]

    def contact_match(self, contact: torch.Tensor) -> torch.Tensor:
        """Share of feet whose contact follows the schedule [N]; 0 for free envs."""
        match = (contact == self.desired_contact()).float().mean(1)
        return match * self.active

    _STATE = ("gait", "assigned", "frequency", "phase")

    def state_dict(self) -> dict:
        return {k: getattr(self, k).clone() for k in self._STATE}

    def load_state_dict(self, state: dict) -> None:
        for k in self._STATE:
            getattr(self, k).copy_(state[k])
