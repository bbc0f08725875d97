"""How often a study's paired runs would show an allocation sooner on every subtask.

    python -m research.multitask_power research/results/multitask [--seeds 3] [--effects 0,0.1,0.2]

Per seed of the study with both curves (``learning_progress_s<seed>.csv``,
``uniform_s<seed>.csv``; ``seeds=[...]`` and the study's other settings as overrides) and
per subtask, ``d = ln(uniform steps / learning-progress steps)`` until the success threshold
(``research/configs/multitask_study.yaml``; a subtask never reached counts as reached at the run's
last env step, which understates the gap where only one run got there). ``d`` is split into
a mean per subtask (the allocation's measured effect), an effect shared by the subtasks of
one seed (a pair whose runs part into a better and a worse policy) and the rest.

For an allocation that made every subtask reach the threshold ``exp(-effect)`` times the env
steps, with the chance of the measured pairs unchanged, the table gives how many of the
study's seeds would be sooner on all subtasks, and so the chance that ``--seeds`` seeds
drawn from them all are; and the same from a normal model with the measured spread. A
seed's pair is sooner on all subtasks for every effect above ``max(mean - d)`` over its
subtasks, the effect it "needs".

With ``--floor F`` the table is instead the chance that no subtask's mean ``d`` over
``--seeds`` seeds is below ``F`` (a bar that no subtask be sacrificed), from the normal
model with the measured spread.

    python -m research.multitask_power research/results/multitask_entry_levels \
        seed_set=entry --seeds 5 --floor -0.10
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from research.multitask_study import run_name, steps_to_threshold
from research.study import curve_path, load_config, read_csv


def paired_log_ratios(study: Path, cfg, min_seeds: int = 2
                      ) -> tuple[list[str], list[int], np.ndarray]:
    """Subtask names, the study's seeds with a curve of both allocations (the first two of
    ``cfg.allocations``), and ``d`` as [seeds, subtasks]."""
    pair = [str(a) for a in cfg.allocations[:2]]
    seeds = [int(s) for s in cfg.seeds
             if all(curve_path(study, run_name(a, int(s))).exists() for a in pair)]
    if len(seeds) < min_seeds:
        raise ValueError(f"{study / 'curves'} holds {len(seeds)} seeds with both "
                         f"{' and '.join(pair)} curves; need at least {min_seeds}")
    rows, names = [], []
    for seed in seeds:
        first, second = (read_csv(curve_path(study, run_name(a, seed))) for a in pair)
        steps = [steps_to_threshold(c, cfg) for c in (first, second)]
        names = [n for n in steps[0] if n != "all subtasks"]
        last = [float(c["env_steps"][-1]) for c in (first, second)]
        reached = [np.array([np.nan_to_num(s[n], nan=end) for n in names])
                   for s, end in zip(steps, last, strict=True)]
        rows.append(np.log(reached[1] / reached[0]))
    return names, seeds, np.stack(rows)


def spread(d: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Per-subtask mean effect, and the standard deviations of the per-seed shared effect
    and of the rest (two-way layout without interaction, method of moments)."""
    seeds, subtasks = d.shape
    effect = d.mean(0)
    shared = (d - effect).mean(1, keepdims=True)
    rest = d - effect - shared
    rest_var = float((rest ** 2).sum() / ((seeds - 1) * (subtasks - 1)))
    shared_var = max(float(shared.var(ddof=1)) - rest_var / subtasks, 0.0)
    return effect, math.sqrt(shared_var), math.sqrt(rest_var)


def needed_effect(d: np.ndarray) -> np.ndarray:
    """Per seed, the effect on every subtask above which its pair, with its chance as
    measured, would have been sooner on all subtasks."""
    return (d.mean(0) - d).max(1)


def chance_all_above(effect: np.ndarray, shared_sd: float, rest_sd: float, seeds: int = 1,
                     floor: float = 0.0, draws: int = 200_000, seed: int = 0) -> float:
    """Normal model: fraction of simulated studies of ``seeds`` pairs in which every
    subtask's mean ``d`` over the pairs is above ``floor`` (one pair, floor 0: the pair is
    sooner on every subtask)."""
    rng = np.random.default_rng(seed)
    scale = 1 / math.sqrt(seeds)  # a mean over independent pairs
    d = effect + rng.normal(0, shared_sd * scale, (draws, 1)) + rng.normal(
        0, rest_sd * scale, (draws, len(effect)))
    return float((d > floor).all(1).mean())


def effects(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of "
                                         "numbers") from None


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seeds >= 1")
    return int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("study", type=Path,
                        help="a study's out_dir, e.g. research/results/multitask")
    parser.add_argument("--seeds", type=positive, default=3, metavar="K",
                        help="seeds of a study: all sooner, or averaged with --floor")
    parser.add_argument("--effects", type=effects,
                        default=effects("0,0.05,0.1,0.2,0.3,0.4,0.5,0.6"),
                        help="effects to simulate, ln(uniform steps / allocation's steps)")
    parser.add_argument("--floor", type=float, default=None, metavar="F",
                        help="instead: the chance that no subtask's mean over K seeds is "
                             "below F, e.g. -0.10")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. window=40")
    args = parser.parse_intermixed_args()
    cfg = load_config("multitask_study", args.overrides)
    names, seeds, d = paired_log_ratios(args.study, cfg)
    effect, shared_sd, rest_sd = spread(d)
    needed = needed_effect(d)
    observed = int((d > 0).all(1).sum())
    print(f"{len(seeds)} seeds ({', '.join(map(str, seeds))}), {len(names)} subtasks. "
          "Measured effect per subtask: " + ", ".join(
              f"{n} {e:+.2f}" for n, e in zip(names, effect, strict=True))
          + f". Spread: per seed {shared_sd:.2f}, per subtask and seed {rest_sd:.2f}. "
          f"Sooner on every subtask: {observed} of {len(seeds)} seeds (normal model: "
          f"{chance_all_above(effect, shared_sd, rest_sd):.2f} per seed). Effect each "
          "seed needs: " + ", ".join(f"{s} {n:.2f}" for s, n in zip(seeds, needed,
                                                                   strict=True)) + ".\n")
    k = args.seeds
    if args.floor is not None:
        print(f"| effect on every subtask | steps, allocation / uniform | normal model: no "
              f"subtask's mean over {k} seeds below {args.floor:+.2f} |\n|---|---|---|")
        for e in args.effects:
            p = chance_all_above(np.full(len(names), e), shared_sd, rest_sd, k, args.floor)
            print(f"| {e:+.2f} | {math.exp(-e):.2f} | {p:.3f} |")
        return
    print(f"| effect on every subtask | steps, allocation / uniform | seeds sooner on all "
          f"| chance for {k} of them | normal model: per seed | {k} seeds |\n"
          "|---|---|---|---|---|---|")
    for e in args.effects:
        m = int((needed < e).sum())
        p = chance_all_above(np.full(len(names), e), shared_sd, rest_sd)
        drawn = f"{math.comb(m, k) / math.comb(len(seeds), k):.2f}" if k <= len(seeds) else "-"
        print(f"| {e:+.2f} | {math.exp(-e):.2f} | {m} of {len(seeds)} | {drawn} | {p:.3f} | "
              f"{p ** k:.4f} |")


if __name__ == "__main__":
    main()
