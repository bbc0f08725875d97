"""What a slot of each subtask costs: physics seconds per env step, timed per subtask.

``multitask.allocation=progress_per_cost`` prices a subtask's learning progress by what its
slots cost, so it needs that cost on one process, where nothing measures it today: the
batched step advances every world in one ``mujoco.rollout`` call, and its time is the
batch's. Three ways to split it were weighed:

- regressing batch times on slot counts (what the ranks' balance does across ranks,
  ``driver.py``): on one process the mix changes only when the scheduler moves slots, and
  then together with a policy that learns (falls, gaits, contacts all change), so the fit
  would credit that drift to whichever subtask grew, and under uniform slots it sees no
  change at all;
- counting contacts or constraint rows per world: deterministic, but a proxy, whose seconds
  per contact depend on what touches what (a sphere on a heightfield, on a box, on a plane);
- timing a few of each subtask's worlds: what the allocation pays for, measured directly.

This module does the last. Every re-allocation it steps copies of up to ``worlds`` of each
subtask's worlds, from their current states and controls, for one env step in one thread
(``NativeBackend.time_step``), so training is untouched; subtasks take turns within each of
``repeats`` rounds and the fastest round counts, so a slow spell of a shared machine hits
every subtask alike and drops out. The estimate folds each measurement in with weight
``decay``. It costs about ``subtasks x worlds x repeats`` world steps per re-allocation
(9 x 16 x 3, under half a batch step of 1,024 envs, against 240 batch steps between
re-allocations), but timings are not reproducible: a run that uses them is not repeatable
row for row the way the other allocations are.
"""

from __future__ import annotations

import math

import torch

from locomotion.config_checks import ConfigError


class PhysicsCost:
    """Smoothed physics seconds per env step of one world of each subtask."""

    def __init__(self, sim, num_subtasks: int, nsubsteps: int, worlds: int, repeats: int,
                 decay: float):
        if not hasattr(sim, "time_step"):
            raise ConfigError("multitask.allocation=progress_per_cost times each subtask's "
                              "worlds on the CPU backend (sim=native); MuJoCo Warp "
                              "steps all worlds together and gives no time per world")
        if worlds < 1 or repeats < 1 or not 0.0 < decay <= 1.0:
            raise ConfigError(f"multitask.cost_probe needs worlds >= 1, repeats >= 1 and "
                              f"0 < decay <= 1, got {worlds}, {repeats} and {decay}")
        self.sim = sim
        self.nsubsteps = nsubsteps
        self.worlds, self.repeats, self.decay = worlds, repeats, decay
        self.seconds = torch.full((num_subtasks,), math.nan, dtype=torch.float64)

    def measure(self, current: torch.Tensor) -> torch.Tensor:
        """[S] seconds per env step of one world of each subtask now, from the subtask of
        every slot (``current`` [N]); NaN for a subtask without slots here."""
        current = current.cpu()
        groups = []
        for s in range(len(self.seconds)):
            ids = torch.nonzero(current == s).squeeze(1)
            if len(ids) > self.worlds:  # evenly over its slots, no random draw
                ids = ids[torch.linspace(0, len(ids) - 1, self.worlds).round().long()]
            groups.append(ids)
        best = torch.full_like(self.seconds, math.inf)
        for _ in range(self.repeats):
            for s, ids in enumerate(groups):
                if len(ids):
                    per_world = self.sim.time_step(ids, self.nsubsteps) / len(ids)
                    best[s] = min(float(best[s]), per_world)
        return torch.where(best.isinf(), math.nan, best)

    def update(self, measured: torch.Tensor) -> torch.Tensor:
        """Fold ``measured`` ([S], NaN where nothing was timed) into the estimate; return
        the cost per slot to allocate by (a subtask never timed: the mean of the others)."""
        blend = torch.where(self.seconds.isnan(), measured,
                            (1 - self.decay) * self.seconds + self.decay * measured)
        self.seconds = torch.where(measured.isnan(), self.seconds, blend)
        known = ~self.seconds.isnan()
        fill = self.seconds[known].mean() if known.any() else torch.tensor(1.0)
        return torch.where(known, self.seconds, fill.to(self.seconds))
