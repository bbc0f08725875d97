"""Drives the scheduler from the training loop, on one process or across ranks.

Each iteration the driver counts finished episodes and successes per subtask. Every
``every`` iterations it sums those counts over all ranks, lets the scheduler pick new
slot counts for the whole job, splits them over the ranks so that every rank's rollout
costs about the same, and retargets this rank's env slots (they switch at their next
reset). Every rank computes the same decision from the same all-reduced numbers, which
is what a decision on rank 0 followed by a broadcast would give, with one collective
fewer. Per-subtask step cost is estimated from the ranks' measured rollout times for the
balance across ranks; ``progress_per_cost`` times each subtask's physics (``cost.py``),
every rank its own worlds, and allocates by the mean over ranks.
"""

from __future__ import annotations

import logging
from collections import deque

import torch

from locomotion.config_checks import ConfigError
from locomotion.multitask.cost import PhysicsCost
from locomotion.multitask.scheduler import Scheduler, SchedulerConfig, split_across_ranks
from locomotion.tasks import subtasks_of
from locomotion.tasks.subtasks import CHECKS

log = logging.getLogger(__name__)

_COST_WINDOW = 20  # iterations of (slot mix, rollout time) kept for the cost estimate
_COST_RIDGE = 1.0  # pull toward equal costs unless the ranks' mixes clearly tell them apart


def training_hooks(env, cfg, dist=None) -> dict[str, SchedulerDriver]:
    """The runner's hooks for ``env``: the scheduler when it runs subtasks (task=multitask)."""
    return {"scheduler": SchedulerDriver(env, cfg.multitask, dist)} if subtasks_of(env) else {}


class SchedulerDriver:
    """Feeds episode outcomes to a ``Scheduler`` and applies its allocations to the env
    (a training hook of the runner)."""

    episode_keys = ("subtask", "checks", "gait_match")  # per subtask, not batch statistics

    def __init__(self, env, cfg, dist=None):
        """``dist``: this rank's ``Distributed`` under torchrun, None for one process."""
        self.env = env
        self.dist = dist
        self.subtasks = subtasks_of(env)
        if self.subtasks is None:
            raise ConfigError("the multitask scheduler needs an env with subtasks "
                              "(multitask.subtasks)")
        self.cfg = SchedulerConfig.from_config(cfg)
        self.rank = dist.rank if dist else 0
        self.world = dist.world_size if dist else 1
        self.names = self.subtasks.names
        self.scheduler = Scheduler(self.names, env.num_envs * self.world, self.cfg)
        s = len(self.names)
        self._episodes = torch.zeros(s, dtype=torch.float64)
        self._successes = torch.zeros(s, dtype=torch.float64)
        self._checks = torch.zeros(s, len(CHECKS), dtype=torch.float64)
        self._match = torch.zeros(s, dtype=torch.float64)
        self._on_device: torch.Tensor | None = None  # masked steps' counts, not yet read
        self._history: deque[torch.Tensor] = deque(maxlen=_COST_WINDOW)
        self.cost = torch.ones(s, dtype=torch.float64)
        self.physics = PhysicsCost(env.sim, s, env.decimation, **cfg.cost_probe) \
            if self.cfg.allocation == "progress_per_cost" else None

    def record(self, episode: dict) -> None:
        """Count one step's finished episodes (``info["episode"]``) per subtask: how many,
        how many succeeded, how many passed each check of a success, and their summed
        share of foot contacts on the gait schedule.

        Partial episodes (begun before training by a staggered or random start) are left
        out: a few steps that happened to end in a time-out are no success. A masked step's
        ``EpisodeBatch`` is counted on the device and read at ``end_iteration``.
        """
        if hasattr(episode, "mask"):
            self._record_where(episode.values, episode.mask)
            return
        whole = episode["partial"].cpu() == 0
        sub = episode["subtask"].cpu()[whole]
        s = len(self.names)
        self._episodes += torch.bincount(sub, minlength=s).double()
        self._successes += torch.bincount(sub, weights=episode["success"].cpu()[whole].double(),
                                          minlength=s)
        self._checks.index_add_(0, sub, episode["checks"].cpu()[whole].double())
        self._match += torch.bincount(sub, weights=episode["gait_match"].cpu()[whole].double(),
                                      minlength=s)

    def _record_where(self, values: dict, mask: torch.Tensor) -> None:
        """``record`` of every env's rows [N] where ``mask`` is set (no host read)."""
        whole = mask & (values["partial"] == 0)

        def kept(x: torch.Tensor) -> torch.Tensor:
            x = x.double().reshape(len(whole), -1)
            return torch.where(whole[:, None], x, 0.0)

        rows = torch.cat((kept(whole), kept(values["success"]), kept(values["checks"]),
                          kept(values["gait_match"])), dim=1)
        counts = rows.new_zeros(len(self.names), rows.shape[1]).index_add_(
            0, values["subtask"], rows)
        self._on_device = counts if self._on_device is None else self._on_device + counts

    def _fold_device_counts(self) -> None:
        if self._on_device is not None:
            counts, c = self._on_device.cpu(), len(CHECKS)
            self._episodes += counts[:, 0]
            self._successes += counts[:, 1]
            self._checks += counts[:, 2:2 + c]
            self._match += counts[:, 2 + c]
            self._on_device = None

    def end_iteration(self, iteration: int, rollout_s: float) -> dict[str, float]:
        """Fold in this iteration's outcomes; re-allocate every ``every`` iterations.

        Returns the scalars to log: per-subtask success rate, episode count and the share
        of episodes passing each check (survived, tracked, on gait), the mean share of foot
        contacts on schedule of gait subtasks, and on re-allocation the progress, the new
        slot shares and each rank's rollout time.
        """
        self._fold_device_counts()
        s, c = len(self.names), len(CHECKS)
        local = self.subtasks.slots.counts("current", s).double()
        stats = torch.cat((self._episodes, self._successes, self._checks.flatten(),
                           self._match, local, torch.tensor([rollout_s], dtype=torch.float64)))
        gathered = self.dist.all_gather(stats) if self.dist else stats[None]  # [ranks, ...]
        episodes, successes = gathered[:, :s].sum(0), gathered[:, s:2 * s].sum(0)
        checks = gathered[:, 2 * s:(2 + c) * s].sum(0).view(s, c)
        match = gathered[:, (2 + c) * s:(3 + c) * s].sum(0)
        self._history.extend(gathered[:, (3 + c) * s:])  # slot mix and rollout time
        for counts in (self._episodes, self._successes, self._checks, self._match):
            counts.zero_()
        rate = successes / episodes.clamp(min=1)
        self.scheduler.update(successes, episodes)
        out = {}
        for i, (n, r, e) in enumerate(zip(self.names, rate, episodes, strict=True)):
            if e > 0:
                out[f"multitask/success/{n}"] = float(r)
                out[f"multitask/episodes/{n}"] = float(e)
                for j, check in enumerate(CHECKS):
                    out[f"multitask/{check}/{n}"] = float(checks[i, j] / e)
                if self.subtasks.has_gait[i]:
                    out[f"multitask/gait_match/{n}"] = float(match[i] / e)
        rollout = gathered[:, -1]
        out["multitask/rollout_s_max_over_min"] = float(rollout.max() / rollout.min().clamp(
            min=1e-9))
        if (iteration + 1) % self.cfg.every == 0:
            if self.world > 1:  # one rank: nothing to balance
                self.cost = self._estimate_cost()
            physics = self._physics_cost()
            total = self.scheduler.allocate(physics)
            per_rank = split_across_ranks(total, self.cost, self.world, self.env.num_envs)
            self.subtasks.slots.retarget(per_rank[self.rank])
            for n, c, p in zip(self.names, total, self.scheduler.progress, strict=True):
                out[f"multitask/share/{n}"] = float(c) / float(total.sum())
                out[f"multitask/progress/{n}"] = float(p)
                if self.world > 1:
                    out[f"multitask/cost/{n}"] = float(self.cost[self.names.index(n)])
            if physics is not None:
                out.update({f"multitask/physics_us/{n}": 1e6 * float(c)
                            for n, c in zip(self.names, physics, strict=True)})
            if self.rank == 0:
                log.info("multitask slots at iteration %d: %s", iteration + 1, ", ".join(
                    f"{n} {int(c)} (success {float(r):.2f})"
                    for n, c, r in zip(self.names, total, self.scheduler.recent, strict=True)))
        return out

    def _physics_cost(self) -> torch.Tensor | None:
        """Seconds per env step of one world of each subtask, timed now on every rank and
        averaged over them (None unless the allocation prices progress by it)."""
        if self.physics is None:
            return None
        measured = self.physics.measure(self.subtasks.slots.current)
        if self.dist:
            measured = self.dist.all_gather(measured).nanmean(0)
        return self.physics.update(measured)

    def _estimate_cost(self) -> torch.Tensor:
        """Rollout seconds per env slot of each subtask: ridge regression of the ranks'
        rollout times on their slot mixes, pulled toward one common cost per slot."""
        rows = torch.stack(list(self._history))
        a, t = rows[:, :-1], rows[:, -1]
        mean = (t / a.sum(1).clamp(min=1)).mean()
        lam = _COST_RIDGE * float((a * a).sum() / max(a.shape[1], 1))
        lhs = a.T @ a + lam * torch.eye(a.shape[1], dtype=a.dtype)
        rhs = a.T @ t + lam * mean
        return torch.linalg.solve(lhs, rhs).clamp(min=0.1 * float(mean))

    def state_dict(self) -> dict:
        return {"scheduler": self.scheduler.state_dict(), "cost": self.cost.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.scheduler.load_state_dict(state["scheduler"])
        self.cost.copy_(state["cost"])
