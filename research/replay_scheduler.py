"""Replay a multitask study curve through the scheduler: the progress it would see.

    python -m research.replay_scheduler research/results/multitask/curves/uniform_s0.csv.xz \
        [--windows 200:700,1300:1500] [multitask.noise=0 multitask.fast=0.3 ...]

Feeds each iteration's successes and episodes per subtask (as the study logged them) into
a ``Scheduler`` built from ``research/configs/multitask_study.yaml`` plus the given overrides, and
prints, per subtask, the mean learning progress over each iteration window, the windowed
success rate at its ends and the mean share of slots the scheduler would have set there.
On a uniform run's curve, a window where success is flat shows how much of the progress
signal is sampling noise: with ``multitask.noise=0`` it is the raw gap of the two success
averages. The replay does not feed back: the allocation it would have made does not change
the episodes it reads, and the shares are targets, which envs adopt at their next reset.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from locomotion.multitask.scheduler import Scheduler, SchedulerConfig
from research.study import load_config, read_csv


def replay(curve: dict[str, np.ndarray], cfg: SchedulerConfig
           ) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Subtask names, and after every iteration the progress and the target share of slots
    (each [iterations, subtasks]), re-allocated every ``cfg.every`` iterations."""
    names = [k.split("/", 1)[1] for k in curve if k.startswith("episodes/")]
    episodes = np.stack([curve[f"episodes/{n}"] for n in names], 1)
    successes = np.nan_to_num(np.stack([curve[f"success/{n}"] for n in names], 1)) * episodes
    scheduler = Scheduler(names, int(episodes.shape[1]) * 100, cfg)
    progress, shares = [], []
    for it, (s, e) in enumerate(zip(successes, episodes, strict=True), start=1):
        scheduler.update(torch.from_numpy(s), torch.from_numpy(e))
        progress.append(scheduler.progress.numpy().copy())
        if it % cfg.every == 0:
            scheduler.allocate()
        shares.append(scheduler.allocation.numpy() / scheduler.num_slots)
    return names, np.stack(progress), np.stack(shares)


def window_rate(curve: dict[str, np.ndarray], name: str, first: int, last: int) -> float:
    """Episode-weighted success of ``name`` over iterations ``first``..``last`` (1-based)."""
    e = curve[f"episodes/{name}"][first - 1:last]
    s = np.nan_to_num(curve[f"success/{name}"][first - 1:last]) * e
    return float(s.sum() / max(e.sum(), 1))


def windows(text: str) -> list[tuple[int, int]]:
    """``first:last,...`` as iteration windows (1-based, inclusive)."""
    try:
        spans = [tuple(int(x) for x in w.split(":")) for w in text.split(",")]
    except ValueError:
        spans = []
    if not spans or any(len(w) != 2 or not 1 <= w[0] <= w[1] for w in spans):
        raise argparse.ArgumentTypeError(f"{text!r} is not first:last[,first:last...] with "
                                         "1 <= first <= last")
    return spans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("curve", type=Path)
    parser.add_argument("--windows", type=windows, default=windows("200:700,1300:1500"),
                        help="iteration windows first:last,... (1-based, inclusive)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. multitask.noise=0")
    args = parser.parse_intermixed_args()
    cfg = SchedulerConfig.from_config(load_config("multitask_study", args.overrides).multitask)
    curve = read_csv(args.curve)
    names, progress, shares = replay(curve, cfg)
    head = " | ".join(f"it {a}-{b}: progress (success {a}→{b}) share" for a, b in args.windows)
    print(f"| subtask | {head} |\n|---|" + "---|" * len(args.windows))
    for i, n in enumerate(names):
        cells = []
        for a, b in args.windows:
            edge = max(1, min(50, (b - a) // 4))
            cells.append(f"{progress[a - 1:b, i].mean():.3f} "
                         f"({window_rate(curve, n, a, a + edge):.2f}→"
                         f"{window_rate(curve, n, b - edge, b):.2f}) "
                         f"{100 * shares[a - 1:b, i].mean():.1f} %")
        print(f"| {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
