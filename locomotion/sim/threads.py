"""How many threads the physics and torch get: never more busy threads than usable cores.

The native backend's thread pool and torch's intra-op threads take turns (physics, then the
policy and the learner), but torch's OpenMP workers keep spinning for a while after each op:
beside a physics pool that already fills the cores, more than one torch thread steals their
time (measured on a busy 2-core machine: 500-950 env steps/s and 10-19 s per PPO update with
torch's default, about 4,000 env steps/s and 1 s per update with one torch thread). So the
physics takes the usable cores (the process's CPU affinity, not the machine's count) and
torch the cores the physics leaves, at least one. The learner runs while the pool is idle
(between rollouts), so it takes every usable core unless ``torch_threads`` or
``learner_threads`` says otherwise (on 2 cores, 0.29 of an iteration instead of 0.40 on one
thread). A fixed count keeps a run repeating bit for bit on its machine whatever else the
machine runs (torch's kernels round differently on other thread counts); on a 2-core
machine busy with two other runs, two learner threads still took 0.53 s per update against
0.72 s on one. ``learner_threads=auto`` instead takes as many as the cores the process kept
busy during the rollout it learns from (its CPU time over the rollout's wall-clock), for
machines shared with jobs that suffer from spinning torch workers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS tells)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class ThreadPlan:
    physics: int  # native MuJoCo threads (0: the physics runs elsewhere, e.g. on a GPU)
    torch: int
    learner: int | None  # torch threads of the PPO update, which never runs beside the
                         # physics (None: auto, ``learner_for`` the rollout's use of the cores)
    cores: int
    warning: str | None  # set when the user's own settings oversubscribe the cores

    def learner_for(self, rollout_cpu_share: float) -> int:
        """The update's torch threads after a rollout that kept ``rollout_cpu_share`` cores
        busy (process CPU time over wall-clock): the set count, or as many cores as the
        rollout got, no fewer than torch's threads and no more than the usable cores."""
        if self.learner is not None:
            return self.learner
        return min(self.cores, max(self.torch, round(rollout_cpu_share)))

    def describe(self) -> str:
        physics = f"{self.physics} physics threads, " if self.physics else ""
        learner = f", {self.learner} learning" if self.learner not in (None, self.torch) else ""
        line = f"{physics}{self.torch} torch threads{learner} on {self.cores} usable cores"
        if self.learner is None and self.torch < self.cores:
            line += f", learning on up to {self.cores}"
        return line


def plan_threads(physics: int | None, torch_threads: int | None, cpu_physics: bool,
                 cores: int | None = None,
                 learner_threads: int | str | None = None) -> ThreadPlan:
    """Thread counts for ``physics`` / ``torch_threads`` / ``learner_threads`` settings
    (None: choose; ``learner_threads`` None takes every core, or torch's count where
    ``torch_threads`` is set; ``"auto"`` follows the load)."""
    cores = cores or usable_cores()
    for name, value in (("sim.nthread", physics), ("torch_threads", torch_threads),
                        ("learner_threads", learner_threads)):
        if value is None or (name == "learner_threads" and value == "auto"):
            continue
        if type(value) is not int or value < 1:
            extra = ", auto" if name == "learner_threads" else ""
            raise ValueError(f"{name} must be a whole number >= 1{extra} or null (choose from "
                             f"the usable cores), got {value!r}")
    sim = (physics or cores) if cpu_physics else 0
    torch = torch_threads or max(1, cores - sim)
    warning = None
    if sim > cores or torch > cores or (torch > 1 and sim + torch > cores):
        warning = (f"{sim} physics threads and {torch} torch threads oversubscribe the "
                   f"{cores} usable cores and can run several times slower; leave sim.nthread "
                   f"and torch_threads at null or keep their sum within {cores}")
    learner = None if learner_threads == "auto" else learner_threads or torch_threads or cores
    return ThreadPlan(sim, torch, learner, cores, warning)
