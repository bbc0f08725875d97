"""A physics-free horizon toy where cyclical nonstationarity is plain: a phase-dependent target.

At every step the agent must output the action ``a*(phase)``, a fixed smooth closed curve of
the episode phase ``phase = step / H``; it observes only the phase (as cos/sin of its first F
harmonics). The reward is ``w(phase) * exp(-(|a - a*(phase)| / tol)^2) / H`` with a weight
``w`` of mean 1, so the values differ along the horizon too, and an episode's return reads
as a share of the best (1).

Why it exposes the effect: with synchronized resets and K << H, iteration j trains actor and
critic only on phases [(j-1)K, jK) / H. Nothing in the batch pins down what the networks do
at the other phases (the KL and clip limits are measured on the batch only), and the phase
features are global, so fitting the current slice moves the functions at every other phase:
what was learned there is forgotten by the time the slice comes round again, and the
full-episode return climbs slowly. When every batch covers the whole horizon, each update
fits all phases at once. The env has no state besides the phase, so the task itself is a
plain regression that PPO solves reliably; any gap between schedules is the schedule's.

For the same reason ``random_counter`` and ``staggered`` differ here only in their first
episode: an env holds nothing that a warm-up could advance, so a staggered start sets the
counter and nothing else. What a staggered warm-up adds (states an env has really reached
by that phase) is measured on the quadruped.
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


class PhaseCurve:
    """A closed curve ``c(phase)`` in ``dim`` dimensions: a random Fourier series.

    Coefficients decay as 1/m so the curve is smooth; it is scaled so that its largest
    coordinate is ``peak``, inside the action range [-1, 1].
    """

    def __init__(self, dim: int, harmonics: int, peak: float, seed: int):
        gen = torch.Generator().manual_seed(seed)
        m = torch.arange(1, harmonics + 1, dtype=torch.float32)
        self.freqs = 2.0 * math.pi * m
        self.coeffs = torch.randn(2, harmonics, dim, generator=gen) / m[:, None]
        self.coeffs *= peak / self(torch.arange(1024) / 1024).abs().max()

    def __call__(self, phase: torch.Tensor) -> torch.Tensor:
        """Curve points [n, dim] at ``phase`` [n] (period 1)."""
        angle = phase[:, None] * self.freqs
        return angle.cos() @ self.coeffs[0] + angle.sin() @ self.coeffs[1]


class PhaseTargetEnv:
    """N envs that must act ``a*(phase)``; no terminations, time-out at H, autoreset."""

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
        self.tolerance = float(task.tolerance)
        self.reward_amplitude = float(task.reward_amplitude)
        self.phase_freqs = 2.0 * math.pi * torch.arange(1, int(task.phase_features) + 1)
        self.target = PhaseCurve(self.num_actions, int(task.harmonics), float(task.target_peak),
                                 int(task.target_seed))
        self.gen = torch.Generator().manual_seed(int(cfg.seed))
        self.schedule = ResetSchedule(cfg.reset.schedule, self.num_envs, self.max_episode_length,
                                      int(cfg.rollout_length), cfg.reset.get("num_groups"),
                                      cfg.reset.get("warmup", "zero"))
        self.phase = PhaseHistogram(int(task.phase_bins))
        self.diverged_count = 0
        self.episode_length = torch.zeros(self.num_envs, dtype=torch.long)
        self._episode_sums = {k: torch.zeros(self.num_envs) for k in ("return", "action_error")}
        self.obs: Obs = self._observe()

    # ------------------------------------------------------------------ api
    @property
    def observation_sizes(self) -> dict[str, int]:
        return {k: v.shape[1] for k, v in self.obs.items()}

    def reward_weight(self, phase: torch.Tensor) -> torch.Tensor:
        """How much the action counts at ``phase``: ``1 + a sin(2 pi phase)``, mean 1 over H."""
        return 1.0 + self.reward_amplitude * torch.sin(2.0 * math.pi * phase)

    def optimal_actions(self) -> torch.Tensor:
        """The right action of every env at its current phase [N, dim]."""
        return self.target(self.episode_length / self.max_episode_length)

    def reset(self, warmup_policy: Callable[[Obs], torch.Tensor] | None = None,
              progress: Callable[[int, int], None] | None = None) -> Obs:
        """Reset every env and start it where the reset schedule says.

        ``warmup_policy`` and ``progress`` are accepted for API parity and unused: there is no
        state to advance, so a staggered group starts by setting its counter to its offset.
        """
        self.episode_length[:] = self.schedule.initial_counters(self.gen)
        for v in self._episode_sums.values():
            v.zero_()
        self.phase.pop()
        self.obs = self._observe()
        return self.obs

    def step(self, actions: torch.Tensor):
        """Reward the actions (clipped to [-1, 1]) against the target; autoreset at the time-out.

        Unlike ``LocomotionEnv``, the returned observation dict is new at every step and never
        written to afterwards, so a learner may keep the observation an action was taken on.
        """
        actions = torch.as_tensor(actions, dtype=torch.float32)
        if actions.shape != (self.num_envs, self.num_actions):
            raise ValueError(f"actions must have shape ({self.num_envs}, {self.num_actions}) "
                             f"(num_envs, num_actions), got {tuple(actions.shape)}")
        if not torch.isfinite(actions).all():
            raise ValueError("actions contain NaN or inf")
        phase = self.episode_length / self.max_episode_length
        error = (actions.clamp(-1.0, 1.0) - self.target(phase)).norm(dim=1)
        closeness = torch.exp(-(error / self.tolerance) ** 2)
        reward = self.reward_weight(phase) * closeness / self.max_episode_length
        self.episode_length += 1
        self.phase.record(self.episode_length - 1, self.max_episode_length)
        self._episode_sums["return"] += reward
        self._episode_sums["action_error"] += error
        terminated = torch.zeros(self.num_envs, dtype=torch.bool)
        truncated = self.episode_length >= self.max_episode_length
        info: dict = {}
        done_ids = truncated.nonzero().squeeze(1)
        if len(done_ids):
            info["final_obs"] = self._observe()
            info["episode"] = self._finish_episodes(done_ids)
            self.episode_length[done_ids] = 0
        self.obs = self._observe()
        return self.obs, reward, terminated, truncated, info

    def close(self) -> None:
        """Nothing to release; present for API parity with ``LocomotionEnv``."""

    def state_dict(self) -> dict:
        """Everything needed to continue this batch exactly."""
        return {
            "num_envs": self.num_envs,
            "robot": self.spec.name,
            "episode_length": self.episode_length.clone(),
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
        self.episode_length.copy_(state["episode_length"])
        for k, v in state["episode_sums"].items():
            self._episode_sums[k].copy_(v)
        self.schedule.load_state_dict(state["schedule"])
        self.gen.set_state(state["generator"])
        self.obs = self._observe()

    # ------------------------------------------------------------------ internals
    def _observe(self) -> Obs:
        """``[cos 2 pi m phase, sin 2 pi m phase (m = 1..F)]`` for both observation groups."""
        angle = (self.episode_length / self.max_episode_length)[:, None] * self.phase_freqs
        features = torch.cat((angle.cos(), angle.sin()), dim=1)
        return {"policy": features, "critic": features.clone()}

    def _finish_episodes(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-episode statistics of the envs ``ids`` that just ended ([len(ids)] each)."""
        length = self.episode_length[ids].float()
        out = {"length": length, "timeout": torch.ones(len(ids)),
               "return": self._episode_sums["return"][ids].clone(),
               "action_error": self._episode_sums["action_error"][ids] / length}
        for v in self._episode_sums.values():
            v[ids] = 0.0
        return out
