"""A physics-free horizon toy where cyclical nonstationarity is plain: phase-target tracking.

A point ``x`` in the plane must follow a fixed closed path ``c(phase)`` with
``phase = step / H``. The path is hidden: the agent observes only ``x`` and the phase (as
cos/sin of its first F harmonics), so the right action ``(c(phase') - x) / step_size`` is a
different function in every part of the episode, and the reward weight ``w(phase)`` (mean 1)
makes the values differ too.

Why it exposes the effect: with synchronized resets and K << H, iteration j trains actor and
critic only on phases [(j-1)K, jK) / H. Nothing in the batch pins down what the networks do
at the other phases (the KL and clip limits are measured on the batch only), and the phase
features are global, so fitting the current slice moves the functions at every other phase:
what was learned there is forgotten and the full-episode return keeps falling back. When
every batch covers the whole horizon, each update fits all phases at once. The return of an
episode is the mean over its steps of ``w * exp(-(|x - c| / tol)^2)``: 1 is perfect tracking
of the whole path, so a threshold reads as a share of the best.

Because the phase is read from the episode counter, ``random_counter`` desynchronizes the
data from the first step as well; it differs from ``staggered`` only in that ``x`` starts at
its reset value at a random phase instead of having been stepped to that phase.
The API (``reset(warmup_policy)``, ``step``, ``obs``, ``phase``, ``state_dict``...) is the one
of ``LocomotionEnv``, so ``locomotion.rl.runner.Runner`` trains on it unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from omegaconf import DictConfig

from locomotion.envs.reset_schedule import PhaseHistogram, ResetSchedule

Obs = dict[str, torch.Tensor]


@dataclass(frozen=True)
class ToySpec:
    """The part of a robot spec that ``Runner`` reads: the name checkpoints are matched on."""

    name: str


class PhasePath:
    """A closed path ``c(phase)`` in ``dim`` dimensions: a random Fourier series.

    Coefficients decay as 1/m so the path is smooth; the path is scaled so that its fastest
    displacement per control step is ``speed`` (the agent can move ``step_size`` per step).
    """

    def __init__(self, dim: int, harmonics: int, horizon: int, speed: float, seed: int):
        gen = torch.Generator().manual_seed(seed)
        m = torch.arange(1, harmonics + 1, dtype=torch.float32)
        self.freqs = 2.0 * math.pi * m
        coeffs = torch.randn(2, harmonics, dim, generator=gen) / m[:, None]
        self.coeffs = coeffs
        fine = torch.arange(16 * horizon + 1) / (16 * horizon)
        per_step = (self(fine[16:]) - self(fine[:-16])).norm(dim=1).max()
        self.coeffs = coeffs * (speed / per_step)

    def __call__(self, phase: torch.Tensor) -> torch.Tensor:
        """Path points [n, dim] at ``phase`` [n] (period 1)."""
        angle = phase[:, None] * self.freqs
        return angle.cos() @ self.coeffs[0] + angle.sin() @ self.coeffs[1]


class PhaseTrackingEnv:
    """N envs tracking the hidden path; no terminations, time-out at H, autoreset."""

    multitask = None  # one task: nothing for the runner's scheduler to size

    def __init__(self, cfg: DictConfig):
        if cfg.num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {cfg.num_envs}")
        task = cfg.task
        self.num_envs = int(cfg.num_envs)
        self.num_actions = int(task.dim)
        self.max_episode_length = int(task.horizon)
        self.spec = ToySpec(str(task.name))
        self.device = torch.device("cpu")
        self.step_size = float(task.step_size)
        self.tolerance = float(task.tolerance)
        self.reward_amplitude = float(task.reward_amplitude)
        self.init_noise = float(task.init_noise)
        self.phase_freqs = 2.0 * math.pi * torch.arange(1, int(task.phase_features) + 1)
        self.path = PhasePath(self.num_actions, int(task.harmonics), self.max_episode_length,
                              float(task.path_speed) * self.step_size, int(task.path_seed))
        self.gen = torch.Generator().manual_seed(int(cfg.seed))
        self.schedule = ResetSchedule(cfg.reset.schedule, self.num_envs, self.max_episode_length,
                                      int(cfg.rollout_length), cfg.reset.get("num_groups"),
                                      cfg.reset.get("warmup", "zero"))
        self.phase = PhaseHistogram(int(task.phase_bins))
        self.diverged_count = 0
        self.x = torch.zeros(self.num_envs, self.num_actions)
        self.episode_length = torch.zeros(self.num_envs, dtype=torch.long)
        self._episode_sums = {k: torch.zeros(self.num_envs) for k in ("return", "tracking_error")}
        self.obs: Obs = {}
        self._reset_envs(torch.arange(self.num_envs))  # observations exist from the start

    # ------------------------------------------------------------------ api
    @property
    def observation_sizes(self) -> dict[str, int]:
        return {k: v.shape[1] for k, v in self.obs.items()}

    def reward_weight(self, phase: torch.Tensor) -> torch.Tensor:
        """How much tracking counts at ``phase``: ``1 + a sin(2 pi phase)``, mean 1 over H."""
        return 1.0 + self.reward_amplitude * torch.sin(2.0 * math.pi * phase)

    def optimal_actions(self) -> torch.Tensor:
        """The actions that land every env on the path at its next step [N, dim]."""
        target = self.path((self.episode_length + 1) / self.max_episode_length)
        return ((target - self.x) / self.step_size).clamp(-1.0, 1.0)

    def reset(self, warmup_policy: Callable[[Obs], torch.Tensor] | None = None) -> Obs:
        """Reset every env and apply the reset schedule; returns the first observation.

        As in ``LocomotionEnv``, ``staggered`` steps the batch (with the schedule's warm-up
        actions) so that each group enters training ``offset`` steps into an episode.
        """
        self.obs = {}
        self._reset_envs(torch.arange(self.num_envs))
        if self.schedule.prewarm:
            self._prewarm(warmup_policy)
        else:
            self.episode_length[:] = self.schedule.initial_counters(self.gen)
            self.obs = self._observe({})
        for v in self._episode_sums.values():
            v.zero_()
        self.phase.pop()
        return self.obs

    def step(self, actions: torch.Tensor):
        """Move every point by ``step_size * clip(action, -1, 1)``; autoreset at the time-out.

        Unlike ``LocomotionEnv``, the returned observation dict is new at every step and never
        written to afterwards, so a learner may keep the observation an action was taken on.
        """
        actions = torch.as_tensor(actions, dtype=torch.float32)
        if actions.shape != (self.num_envs, self.num_actions):
            raise ValueError(f"actions must have shape ({self.num_envs}, {self.num_actions}) "
                             f"(num_envs, num_actions), got {tuple(actions.shape)}")
        if not torch.isfinite(actions).all():
            raise ValueError("actions contain NaN or inf")
        self.x += self.step_size * actions.clamp(-1.0, 1.0)
        self.episode_length += 1
        self.phase.record(self.episode_length - 1, self.max_episode_length)
        phase = self.episode_length / self.max_episode_length
        error = (self.x - self.path(phase)).norm(dim=1)
        closeness = torch.exp(-(error / self.tolerance) ** 2)
        reward = self.reward_weight(phase) * closeness / self.max_episode_length
        self._episode_sums["return"] += reward
        self._episode_sums["tracking_error"] += error
        terminated = torch.zeros(self.num_envs, dtype=torch.bool)
        truncated = self.episode_length >= self.max_episode_length
        obs = self._observe({})
        info: dict = {}
        done_ids = truncated.nonzero().squeeze(1)
        if len(done_ids):
            info["final_obs"] = {k: v.clone() for k, v in obs.items()}
            info["episode"] = self._finish_episodes(done_ids)
            self._reset_envs(done_ids, obs)
        self.obs = obs
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        """Nothing to release; present for API parity with ``LocomotionEnv``."""

    def state_dict(self) -> dict:
        """Everything needed to continue this batch exactly."""
        return {
            "num_envs": self.num_envs,
            "robot": self.spec.name,
            "x": self.x.clone(),
            "episode_length": self.episode_length.clone(),
            "obs": {k: v.clone() for k, v in self.obs.items()},
            "episode_sums": {k: v.clone() for k, v in self._episode_sums.items()},
            "schedule": self.schedule.state_dict(),
            "generator": self.gen.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        if state["num_envs"] != self.num_envs or state["robot"] != self.spec.name:
            raise ValueError(
                f"env state is for {state['num_envs']} envs of {state['robot']!r}; this env "
                f"has {self.num_envs} envs of {self.spec.name!r}"
            )
        self.x.copy_(state["x"])
        self.episode_length.copy_(state["episode_length"])
        self.obs = {k: v.clone() for k, v in state["obs"].items()}
        for k, v in state["episode_sums"].items():
            self._episode_sums[k].copy_(v)
        self.schedule.load_state_dict(state["schedule"])
        self.gen.set_state(state["generator"])

    # ------------------------------------------------------------------ internals
    def _observe(self, obs: Obs, env_ids: torch.Tensor | None = None) -> Obs:
        """Write ``[x, cos 2 pi m phase, sin 2 pi m phase (m = 1..F)]`` of ``env_ids`` into obs."""
        ids = slice(None) if env_ids is None else env_ids
        angle = (self.episode_length[ids] / self.max_episode_length)[:, None] * self.phase_freqs
        fresh = torch.cat((self.x[ids], angle.cos(), angle.sin()), dim=1)
        for group in ("policy", "critic"):
            if group not in obs:
                obs[group] = torch.zeros(self.num_envs, fresh.shape[1])
            obs[group][ids] = fresh
        return obs

    def _reset_envs(self, env_ids: torch.Tensor, obs: Obs | None = None) -> None:
        """Restart ``env_ids`` near the path start and write their first observation."""
        start = self.path(torch.zeros(len(env_ids)))
        noise = torch.randn(len(env_ids), self.num_actions, generator=self.gen)
        self.x[env_ids] = start + self.init_noise * noise
        self.episode_length[env_ids] = 0
        self._observe(self.obs if obs is None else obs, env_ids)

    def _prewarm(self, warmup_policy: Callable[[Obs], torch.Tensor] | None) -> None:
        """Run the reset schedule's warm-up (every env is stepped; steps cost microseconds)."""
        shape = (self.num_envs, self.num_actions)
        self.schedule.warm_up(self._reset_envs, lambda started: self.step(
            self.schedule.warmup_actions(self.obs, shape, self.gen, warmup_policy)))

    def _finish_episodes(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-episode statistics of the envs ``ids`` that just ended ([len(ids)] each)."""
        length = self.episode_length[ids].float()
        out = {"length": length, "timeout": torch.ones(len(ids)),
               "return": self._episode_sums["return"][ids].clone(),
               "tracking_error": self._episode_sums["tracking_error"][ids] / length}
        for v in self._episode_sums.values():
            v[ids] = 0.0
        return out
