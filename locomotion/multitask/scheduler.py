"""The compute scheduler: how many env slots each subtask gets, from its learning progress.

Every ``every`` iterations the scheduler looks at each subtask's success rate, tracked as
a fast and a slow moving average. Their gap is the subtask's learning progress: large
while the policy is getting better at it, near zero once it is mastered or while it is
still out of reach. Slots above a per-subtask floor are shared in proportion to progress,
so compute follows what is being learned now; the floor keeps every subtask in the
batch (no forgetting, and a hopeless subtask is retried as the policy improves).
``uniform`` gives every subtask the same share, the baseline to compare against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ALLOCATIONS = ("learning_progress", "uniform")


@dataclass(frozen=True)
class SchedulerConfig:
    """Knobs of the learning-progress allocation (``configs/multitask/*.yaml``)."""

    allocation: str = "learning_progress"
    every: int = 10             # iterations between re-allocations
    floor: float = 0.05         # share of all slots every subtask keeps, at least one slot
    fast: float = 0.3           # moving-average rates of the success signal
    slow: float = 0.05
    mastered: float = 0.95      # success above this counts as mastered: floor only
    temperature: float = 1.0    # progress ** (1 / temperature): > 1 flattens the shares

    def __post_init__(self) -> None:
        if self.allocation not in ALLOCATIONS:
            raise ValueError(f"multitask.allocation {self.allocation!r} is not one of "
                             f"{list(ALLOCATIONS)}")
        if self.every < 1:
            raise ValueError(f"multitask.every must be >= 1, got {self.every}")
        if not 0.0 <= self.floor <= 1.0:
            raise ValueError(f"multitask.floor must lie in [0, 1], got {self.floor}")
        if not 0.0 < self.slow < self.fast <= 1.0:
            raise ValueError(f"need 0 < slow < fast <= 1, got slow={self.slow}, "
                             f"fast={self.fast}")


def split_slots(weights: torch.Tensor, total: int, minimum: torch.Tensor) -> torch.Tensor:
    """Integer slots per subtask summing to ``total``: ``minimum`` each, the rest in
    proportion to ``weights`` (largest remainders get the leftover slots)."""
    minimum = minimum.long()
    spare = total - int(minimum.sum())
    if spare < 0:
        raise ValueError(f"the floors need {int(minimum.sum())} slots but only {total} exist")
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
    """Allocates ``num_slots`` env slots among subtasks from their success rates."""

    def __init__(self, names: list[str], num_slots: int, cfg: SchedulerConfig):
        if not names:
            raise ValueError("the scheduler needs at least one subtask")
        self.names = list(names)
        self.cfg = cfg
        self.num_slots = num_slots
        s = len(names)
        self.min_slots = max(1, round(cfg.floor * num_slots))
        if self.min_slots * s > num_slots:
            raise ValueError(f"{num_slots} env slots cannot give {s} subtasks "
                             f"{self.min_slots} slots each (multitask.floor={cfg.floor})")
        self.fast = torch.zeros(s, dtype=torch.float64)
        self.slow = torch.zeros(s, dtype=torch.float64)
        self.seen = torch.zeros(s, dtype=torch.bool)
        self.allocation = split_slots(torch.ones(s), num_slots, torch.zeros(s))

    def update(self, success: torch.Tensor, episodes: torch.Tensor) -> None:
        """Fold in one iteration's success rate per subtask ([S]; only where episodes > 0)."""
        ended = episodes > 0
        first = ended & ~self.seen
        rate = success.double()
        self.fast[first] = self.slow[first] = rate[first]
        again = ended & self.seen
        self.fast[again] += self.cfg.fast * (rate[again] - self.fast[again])
        self.slow[again] += self.cfg.slow * (rate[again] - self.slow[again])
        self.seen |= ended

    @property
    def progress(self) -> torch.Tensor:
        """Learning progress per subtask: |fast - slow| success average, 0 when mastered."""
        lp = (self.fast - self.slow).abs()
        return torch.where(self.fast >= self.cfg.mastered, 0.0, lp)

    def allocate(self) -> torch.Tensor:
        """New slot counts per subtask (sum = num_slots); also kept as ``allocation``."""
        s = len(self.names)
        if self.cfg.allocation == "uniform":
            weights = torch.ones(s)
        else:
            weights = self.progress ** (1.0 / self.cfg.temperature)
            if weights.max() <= 0:  # no progress signal anywhere yet: share evenly
                weights = torch.ones(s, dtype=torch.float64)
            weights[~self.seen] = weights.max()  # untried subtasks count as promising
        self.allocation = split_slots(weights, self.num_slots,
                                      torch.full((s,), self.min_slots))
        return self.allocation

    def state_dict(self) -> dict:
        return {k: getattr(self, k).clone() for k in ("fast", "slow", "seen", "allocation")}

    def load_state_dict(self, state: dict) -> None:
        for k, v in state.items():
            getattr(self, k).copy_(v)
