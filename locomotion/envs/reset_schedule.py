"""Reset schedules: where in the episode horizon each env starts.

With synchronized starts every PPO batch of K steps holds the same slice of the horizon H,
so the data cycles through the horizon (cyclical nonstationarity). ``random_counter``
randomizes only the first timeout counter (states still start at t = 0); ``staggered``
spreads B groups evenly over [0, H) and pre-advances each group to its offset, so the
batch holds states from the whole horizon from the first iteration on.

Under ``staggered`` an episode that ends early (a fall) restarts its time-out counter at 0,
so when most robots fall within a few steps of their spawn, as they do early in training,
the counters of the whole batch soon sit near 0 together and the groups' time-outs come in
waves again. ``phase_locked`` starts as ``staggered`` does and keeps each env locked to its
group's phase: a fall respawns the robot but leaves its time-out counter running, so its
next time-out falls where its group's does and only time-outs restart a counter at 0. The
episode that follows a fall thus starts part-way into the horizon with a fresh robot, as
``random_counter``'s first episodes do, and counts as partial.

The warm-up that pre-advances the groups simulates about H/2 steps of the whole batch
before training (``zero`` actions hold the default pose, ``random`` ones shake it,
``policy`` plays the policy being trained); ``none`` skips it and only sets each group's
counter to its offset, so the groups' time-outs are spread from the first iteration while
every robot starts fresh, and the first episodes count as partial.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from locomotion.config_checks import ConfigError

SCHEDULES = ("sync", "random_counter", "staggered", "phase_locked")
STAGGERED = ("staggered", "phase_locked")  # groups at offsets, pre-advanced by a warm-up
WARMUPS = ("zero", "random", "policy", "none")


class ResetSchedule:
    """Start offsets of every env, in control steps into the episode."""

    def __init__(self, schedule: str, num_envs: int, horizon: int, rollout_length: int,
                 num_groups: int | None = None, warmup: str = "zero"):
        if schedule not in SCHEDULES:
            raise ConfigError(f"unknown reset schedule {schedule!r}; valid: {list(SCHEDULES)}")
        if warmup not in WARMUPS:
            raise ConfigError(f"unknown warm-up policy {warmup!r}; valid: {list(WARMUPS)}")
        if rollout_length < 1 or horizon < 1:
            raise ConfigError("horizon and rollout_length must be >= 1")
        self.schedule = schedule
        self.num_envs = num_envs
        self.horizon = horizon
        self.warmup = warmup
        groups = num_groups or math.ceil(horizon / rollout_length)
        self.num_groups = max(1, min(groups, num_envs, horizon))
        # Contiguous groups, largest offset first: while warming up, the envs that have
        # started always form a prefix of the batch, so only that prefix is simulated.
        self.group = (self.num_groups - 1) - torch.arange(num_envs) * self.num_groups // num_envs
        self.group_offsets = (torch.arange(self.num_groups) * horizon) // self.num_groups

    @property
    def prewarm(self) -> bool:
        """Whether states must be advanced before training (the staggered schedules, unless
        their warm-up is ``none``)."""
        return self.schedule in STAGGERED and self.num_groups > 1 and self.warmup != "none"

    def offsets(self) -> torch.Tensor:
        """Target episode step of every env when training starts [N]."""
        if self.schedule in STAGGERED:
            return self.group_offsets[self.group]
        return torch.zeros(self.num_envs, dtype=torch.long)

    def initial_counters(self, generator: torch.Generator) -> torch.Tensor:
        """Episode-length counters at the start of training [N] when nothing is pre-advanced."""
        if self.schedule == "random_counter":
            return torch.randint(0, self.horizon, (self.num_envs,), generator=generator,
                                 device=generator.device)
        return self.offsets()

    def restart_counters(self, counters: torch.Tensor) -> torch.Tensor:
        """Time-out counters for envs whose episodes just ended, from their counters now
        (any shape, any device): 0, or under ``phase_locked`` the counter itself (wrapped at
        H, so a time-out restarts at 0 and a fall keeps the env in its group's phase)."""
        if self.schedule == "phase_locked":
            return counters % self.horizon
        return torch.zeros_like(counters)

    def warm_up(self, reset: Callable[[torch.Tensor], None], step: Callable[[int], None],
                device: torch.device | str = "cpu",
                progress: Callable[[int, int], None] | None = None) -> None:
        """Advance a batch so that group g has lived offset_g steps when training starts.

        ``reset(ids)`` restarts envs; ``step(started)`` takes one control step in which only
        the first ``started`` envs have begun (groups are laid out largest offset first, so
        the envs that have started always form a prefix a backend may step alone).
        ``progress(done, total)`` is called before every step (e.g. to print signs of life).
        """
        offsets = self.offsets().to(device)
        total = int(offsets.max())
        for s in range(total):
            if progress is not None:
                progress(s, total)
            if s > 0:
                starting = (offsets == total - s).nonzero().squeeze(1)
                if len(starting):
                    reset(starting)
            step(int((offsets >= total - s).sum()))
        reset((offsets == 0).nonzero().squeeze(1))

    def warmup_actions(self, obs: dict[str, torch.Tensor], shape: tuple[int, int],
                       generator: torch.Generator,
                       policy: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None,
                       ) -> torch.Tensor:
        """Actions of the configured warm-up policy: zeros (default pose), noise, or ``policy``."""
        if self.warmup == "zero":
            return torch.zeros(shape, device=generator.device)
        if self.warmup == "random":
            return torch.randn(shape, generator=generator, device=generator.device)
        if policy is None:
            raise ValueError("reset.warmup=policy needs a warm-up policy passed to reset()")
        return policy(obs)

    def state_dict(self) -> dict:
        return {"schedule": self.schedule, "num_groups": self.num_groups,
                "horizon": self.horizon, "group": self.group.clone()}

    def load_state_dict(self, state: dict) -> None:
        if state["schedule"] != self.schedule or state["horizon"] != self.horizon:
            raise ValueError(
                f"checkpoint reset schedule {state['schedule']!r} (H={state['horizon']}) does not "
                f"match the configured {self.schedule!r} (H={self.horizon})"
            )
        self.num_groups = state["num_groups"]
        self.group = state["group"].clone()
        self.group_offsets = (torch.arange(self.num_groups) * self.horizon) // self.num_groups


class PhaseHistogram:
    """Histogram of episode phase (step / H) over the env steps of one batch."""

    def __init__(self, num_bins: int = 20, device: torch.device | str = "cpu"):
        self.num_bins = num_bins
        self.counts = torch.zeros(num_bins, dtype=torch.long, device=device)

    def record(self, episode_length: torch.Tensor, horizon: int) -> None:
        """Count one step of the batch (no host read: ``bincount`` would read its range)."""
        bins = (episode_length * self.num_bins // horizon).clamp(0, self.num_bins - 1)
        self.counts.index_add_(0, bins, torch.ones_like(bins))

    def pop(self) -> tuple[torch.Tensor, float]:
        """The normalized histogram since the last pop, and its uniformity in [0, 1].

        Uniformity is the entropy of the histogram over log(bins): 1 when every phase of
        the horizon is equally present, 0 when the whole batch sits in one slice.
        """
        counts = self.counts.cpu()
        total = counts.sum().clamp(min=1)
        p = counts.double() / total
        nz = p[p > 0]
        uniformity = float(-(nz * nz.log()).sum() / math.log(self.num_bins))
        self.counts.zero_()
        return p, uniformity
