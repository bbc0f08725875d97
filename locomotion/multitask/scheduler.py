"""The compute scheduler: how many env slots each subtask gets, from its learning progress.

Every ``every`` iterations the scheduler looks at each subtask's success rate over a
recent and a long horizon (exponentially decayed counts of successes and episodes). Their
gap is the subtask's learning progress, counted only where it exceeds the gap that sampling
noise alone would make: a subtask sees a few episodes per iteration, so the raw gap of two
averages is mostly noise. Slots are then set in four classes:

- mastered (recent success above ``mastered`` beyond noise) and hopeless (still failing after
  ``patience`` episodes): the floor only, which keeps them in the batch against forgetting
  and retries a hopeless one as the policy improves;
- exploring (no success yet, fewer than ``patience`` episodes): its base share, since a
  subtask that has not succeeded yet shows no progress to follow;
- learning (the rest): ``keep`` of its base share, plus the slots left over, shared in
  proportion to progress. With ``keep`` = 1 no subtask gets less than its base share before
  it is mastered or hopeless; the compute freed from those goes to the ones that progress.
  A learning subtask whose progress is within noise keeps only ``stalled`` of its base
  share (if that is less) while another one progresses: below 1 it lends slots to the
  subtasks whose success rises now (early on, the fast learners) and gets them back once
  those are mastered.

A subtask's base share is the floor plus the slots the floors leave, in proportion to
``weights`` (1 for a subtask not named): equal by default, or a prior set by hand, as
terrain proportions are. ``uniform`` gives every subtask the same share, the baseline to
compare against. ``fixed`` keeps shares in proportion to ``weights`` (no floor); it
measures what a given split of the compute buys.

``progress_per_cost`` is learning progress with the slots left over shared in proportion
to progress per unit of step cost (``allocate``'s ``cost``, measured by ``cost.py``): it
divides the compute those slots take by progress, not their count, so a subtask whose
slots cost 1.5 times as much gets two thirds as many of them as one with the same
progress. The minimums (floors, base shares) stay counted in slots, and with equal costs
it allocates exactly as ``learning_progress``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from locomotion.config_checks import ConfigError

ALLOCATIONS = ("learning_progress", "progress_per_cost", "uniform", "fixed")
_STATE = ("recent_successes", "recent_episodes", "long_successes", "long_episodes",
          "episodes", "allocation")


@dataclass(frozen=True)
class SchedulerConfig:
    """Knobs of the learning-progress allocation (``configs/multitask/*.yaml``)."""

    allocation: str = "learning_progress"
    every: int = 10             # iterations between re-allocations
    floor: float = 0.05         # share of all slots every subtask keeps, at least one slot
    keep: float = 1.0           # share of its uniform slots a learning subtask keeps ...
    stalled: float = 1.0        # ... and one whose progress is within noise (if less)
    fast: float = 0.04          # per-iteration decay of the recent success counts ...
    slow: float = 0.01          # ... and of the long ones
    noise: float = 1.0          # progress counts beyond this many standard errors
    mastered: float = 0.8       # recent success above this: the floor only
    hopeless: float = 0.05      # recent success below this after `patience` episodes: floor
    patience: int = 1500        # episodes before a subtask without success counts as hopeless
    temperature: float = 1.0    # progress ** (1 / temperature): > 1 flattens the shares
    weights: Mapping[str, float] = field(default_factory=dict)  # base shares: subtask -> weight

    @classmethod
    def from_config(cls, multitask) -> SchedulerConfig:
        """The scheduler's knobs out of a ``multitask`` config group (subtasks etc. left out)."""
        knobs = {k: v for k, v in multitask.items() if k in cls.__dataclass_fields__}
        knobs["weights"] = {str(k): float(v) for k, v in (knobs.get("weights") or {}).items()}
        return cls(**knobs)

    def __post_init__(self) -> None:
        if self.allocation not in ALLOCATIONS:
            raise ConfigError(f"multitask.allocation {self.allocation!r} is not one of "
                              f"{list(ALLOCATIONS)}")
        if self.every < 1:
            raise ConfigError(f"multitask.every must be >= 1, got {self.every}")
        for name in ("floor", "keep", "stalled", "mastered", "hopeless"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"multitask.{name} must lie in [0, 1], got "
                                  f"{getattr(self, name)}")
        if not 0.0 < self.slow < self.fast <= 1.0:
            raise ConfigError(f"need 0 < slow < fast <= 1, got slow={self.slow}, "
                              f"fast={self.fast}")
        if any(w < 0 for w in self.weights.values()):
            raise ConfigError(f"multitask.weights must be >= 0, got {self.weights}")
        if self.noise < 0 or self.patience < 0:
            raise ConfigError(f"multitask.noise and multitask.patience must be >= 0, got "
                              f"{self.noise} and {self.patience}")


def _variance(successes: torch.Tensor, episodes: torch.Tensor) -> torch.Tensor:
    """Per-episode success variance p(1 - p), with p smoothed by one success and one
    failure so that a rate of 0 or 1 from few episodes does not claim zero noise."""
    p = (successes + 1) / (episodes + 2)
    return p * (1 - p)


def split_slots(weights: torch.Tensor, total: int, minimum: torch.Tensor) -> torch.Tensor:
    """Integer slots per subtask summing to ``total``: ``minimum`` each, the rest in
    proportion to ``weights`` (largest remainders get the leftover slots)."""
    minimum = minimum.long()
    spare = total - int(minimum.sum())
    if spare < 0:
        raise ConfigError(f"the floors need {int(minimum.sum())} slots but only {total} exist")
    w = weights.double().clamp(min=0)
    w = w / w.sum() if w.sum() > 0 else torch.full_like(w, 1.0 / len(w))
    exact = w * spare
    counts = exact.floor().long()
    leftover = spare - int(counts.sum())
    if leftover:
        counts[torch.argsort(exact - counts, descending=True, stable=True)[:leftover]] += 1
    return minimum + counts


def split_across_ranks(counts: torch.Tensor, cost: torch.Tensor, num_ranks: int,
                       per_rank: int) -> torch.Tensor:
    """[ranks, subtasks] slot counts: every rank gets ``per_rank`` slots and an equal part
    of each subtask, so expensive subtasks are spread, not piled on one rank; the
    remainders go one by one to the rank with the lowest total step cost so far."""
    if int(counts.sum()) != num_ranks * per_rank:
        raise ValueError(f"{int(counts.sum())} slots cannot fill {num_ranks} ranks of "
                         f"{per_rank}")
    out = (counts // num_ranks).repeat(num_ranks, 1)
    rest = counts - out.sum(0)
    load = (out.double() * cost.double()).sum(1)
    for s in torch.argsort(cost, descending=True).tolist():  # costly remainders first
        for _ in range(int(rest[s])):
            free = out.sum(1) < per_rank
            r = int(torch.where(free, load, torch.inf).argmin())
            out[r, s] += 1
            load[r] += float(cost[s])
    return out


class Scheduler:
    """Allocates ``num_slots`` env slots among subtasks from their success counts."""

    def __init__(self, names: list[str], num_slots: int, cfg: SchedulerConfig):
        if not names:
            raise ConfigError("the scheduler needs at least one subtask")
        self.names = list(names)
        self.cfg = cfg
        self.num_slots = num_slots
        s = len(names)
        self.min_slots = max(1, round(cfg.floor * num_slots))
        if self.min_slots * s > num_slots:
            raise ConfigError(f"{num_slots} env slots cannot give {s} subtasks "
                              f"{self.min_slots} slots each (multitask.floor={cfg.floor})")
        unknown = sorted(set(cfg.weights) - set(names))
        if unknown:
            raise ConfigError(f"multitask.weights names unknown subtasks {unknown}; the "
                              f"subtasks are {self.names}")
        self.weights = torch.tensor([float(cfg.weights.get(n, 1.0)) for n in names])
        if self.weights.sum() <= 0:
            raise ConfigError(f"multitask.weights gives every subtask weight 0: {cfg.weights}")
        spare = num_slots - self.min_slots * s
        self.base_share = self.min_slots + (spare * self.weights / self.weights.sum()).floor()
        for name in _STATE[:-1]:
            setattr(self, name, torch.zeros(s, dtype=torch.float64))
        self.allocation = split_slots(torch.ones(s), num_slots, torch.zeros(s))

    def update(self, successes: torch.Tensor, episodes: torch.Tensor) -> None:
        """Fold in one iteration's successful and ended episodes per subtask ([S] each)."""
        for (succ, eps), decay in (((self.recent_successes, self.recent_episodes),
                                    self.cfg.fast),
                                   ((self.long_successes, self.long_episodes), self.cfg.slow)):
            succ.mul_(1 - decay).add_(successes.double())
            eps.mul_(1 - decay).add_(episodes.double())
        self.episodes += episodes.double()

    @property
    def recent(self) -> torch.Tensor:
        """Success rate over the recent horizon (0 before any episode)."""
        return self.recent_successes / self.recent_episodes.clamp(min=1e-9)

    @property
    def progress(self) -> torch.Tensor:
        """|recent - long| success rate beyond ``noise`` standard errors of that gap
        (approximate: the long counts include the recent ones); 0 when mastered."""
        long = self.long_successes / self.long_episodes.clamp(min=1e-9)
        var = _variance(self.long_successes, self.long_episodes)
        stderr = (var * (1 / self.recent_episodes.clamp(min=1e-9)
                         + 1 / self.long_episodes.clamp(min=1e-9))).sqrt()
        lp = ((self.recent - long).abs() - self.cfg.noise * stderr).clamp(min=0)
        return torch.where(self._mastered(), 0.0, lp)

    def _mastered(self) -> torch.Tensor:
        """Recent success above ``mastered`` by ``noise`` standard errors."""
        var = _variance(self.recent_successes, self.recent_episodes)
        stderr = (var / self.recent_episodes.clamp(min=1e-9)).sqrt()
        return self.recent - self.cfg.noise * stderr >= self.cfg.mastered

    def classes(self) -> dict[str, torch.Tensor]:
        """Masks of the mastered, hopeless, exploring and learning subtasks."""
        failing = self.recent < self.cfg.hopeless
        mastered = self._mastered()
        hopeless = failing & (self.episodes >= self.cfg.patience)
        exploring = failing & ~hopeless
        return {"mastered": mastered, "hopeless": hopeless, "exploring": exploring,
                "learning": ~(mastered | failing)}

    def allocate(self, cost: torch.Tensor | None = None) -> torch.Tensor:
        """New slot counts per subtask (sum = num_slots); also kept as ``allocation``.

        ``cost`` [S]: what a slot of each subtask costs (any unit), read by
        ``progress_per_cost`` only.
        """
        s = len(self.names)
        minimum = torch.full((s,), self.min_slots)
        if self.cfg.allocation == "uniform":
            weights = torch.ones(s)
        elif self.cfg.allocation == "fixed":
            weights, minimum = self.weights, torch.zeros(s)
        else:
            c = self.classes()
            progress = self.progress
            stalled = min(self.cfg.keep, self.cfg.stalled)
            for cls, part in ((c["exploring"], 1.0), (c["learning"], self.cfg.keep),
                              (c["learning"] & (progress <= 0), stalled)):
                minimum[cls] = (part * self.base_share[cls]).long().clamp(min=self.min_slots)
            gain = progress ** (1.0 / self.cfg.temperature)
            if self.cfg.allocation == "progress_per_cost":
                gain = gain / self._relative_cost(cost)
            weights = torch.where(c["learning"], gain, 0.0)
            if weights.max() <= 0:  # no progress beyond noise: the floors, the rest by weight
                floored = c["mastered"] | c["hopeless"]
                if floored.all():
                    floored = torch.zeros_like(floored)
                minimum = torch.full((s,), self.min_slots)
                weights = (~floored) * self.weights
        self.allocation = split_slots(weights, self.num_slots, minimum)
        return self.allocation

    def _relative_cost(self, cost: torch.Tensor | None) -> torch.Tensor:
        """``cost`` over the cheapest subtask's: exactly 1 everywhere for equal costs, so
        dividing by it leaves the learning-progress weights bit for bit."""
        if cost is None or cost.shape != (len(self.names),) or not (
                torch.isfinite(cost).all() and (cost > 0).all()):
            raise ValueError(f"progress_per_cost needs a positive, finite cost per subtask "
                             f"({len(self.names)}), got {cost}")
        cost = cost.double()
        return cost / cost.min()

    def state_dict(self) -> dict:
        return {k: getattr(self, k).clone() for k in _STATE}

    def load_state_dict(self, state: dict) -> None:
        missing = [k for k in _STATE if k not in state]
        if missing:
            raise ValueError(f"scheduler state lacks {missing} (saved by an older scheduler "
                             f"that tracked {sorted(state)}); resume it with that version")
        for k in _STATE:
            getattr(self, k).copy_(state[k])
