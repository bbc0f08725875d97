"""Multitask allocation study: learning-progress scheduling vs uniform slots, over seeds.

Every run trains the shared multitask policy (``task=multitask``) for the same number of
iterations with one allocation and one seed, and writes per iteration each subtask's success
rate, episode count and share of env slots to ``<out_dir>/curves/<allocation>_s<seed>.csv.xz``.
Runs whose CSV exists are skipped, so an interrupted study resumes; the settings each run was
trained with are kept beside its CSV, and a study asked for other settings stops there. The
scheduler's knobs do not enter a uniform run's settings, so the uniform curves (CSV and
settings) can be shared with a study that changes only them: listed in its
``curves/shared.txt``, they are read where they are kept (``research.study.curve_path``).
Then the summary (env steps until each subtask reaches its success threshold), the primary
measure and the figures are (re)drawn.

    python -m research.multitask_study                      # 2 allocations x 7 seeds
    python -m research.multitask_study jobs=2 seeds=[0]     # one seed, both runs at once
    python -m research.multitask_study seed_set=fresh       # the shipped one on seeds 10-14
    python -m research.multitask_study report_only=true     # summary of the finished runs

A subtask counts as reached at the first iteration where its success rate over the last
``window`` iterations (episode-weighted, at least ``min_episodes`` episodes) is at least
``success_threshold``; a subtask that never gets there counts as never reached. The
primary measure (``primary.md``) is the env steps and wall-clock until every subtask is
there at the same time, a run that never gets there censored at its budget; secondary are
the subtasks there and the worst subtask's success at the budget. Both are paired per
seed, the first allocation against each of the others (one table each), with a sign test
and the mean ln ratio.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import hydra
import numpy as np
import torch
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from locomotion.multitask import training_hooks
from locomotion.rl.checkpoint import load_checkpoint
from locomotion.rl.runner import Runner
from locomotion.tasks import make_env, subtasks_of
from locomotion.tasks.subtasks import FLAT
from research.study import (
    changed_settings,
    curve_path,
    finished,
    mean_band,
    read_csv,
    run_jobs,
    run_settings,
    write_csv,
    write_curve,
)

COLORS = {"learning_progress": "tab:blue", "progress_per_cost": "tab:orange",
          "fixed": "tab:green", "uniform": "tab:gray"}
# Scheduler knobs that leave uniform slots as they are: one uniform curve serves them all.
UNIFORM_IGNORES = ("every", "keep", "stalled", "fast", "slow", "noise", "mastered", "hopeless",
                   "patience", "temperature")
COST_KNOBS = ("cost_probe",)  # read by progress_per_cost only


# Settings an allocation does not read, left out of its curve's settings (and so curves
# recorded before such a knob existed still match).
IGNORED_BY = {"uniform": (*UNIFORM_IGNORES, "weights", *COST_KNOBS),
              "learning_progress": COST_KNOBS, "fixed": COST_KNOBS}


def run_name(allocation: str, seed: int) -> str:
    return f"{allocation}_s{seed}"


def run_config(cfg: DictConfig, allocation: str, seed: int) -> DictConfig:
    return OmegaConf.merge(cfg, {"seed": seed, "multitask": {"allocation": allocation}})


def curve_settings(run_cfg: DictConfig) -> dict:
    """What a run's curve depends on; a finished curve is reused only for the same."""
    settings = run_settings(run_cfg)
    ignored = IGNORED_BY.get(run_cfg.multitask.allocation, ())
    # Unset knobs are left out too, so curves recorded before a knob was read still match.
    settings["multitask"] = {k: v for k, v in settings["multitask"].items()
                             if k not in ignored and v not in (None, {})}
    return settings


def curve_row(runner: Runner, stats: dict, names: list[str], start: float) -> dict:
    """One CSV row: per subtask its success rate (NaN without episodes), episodes, share,
    and for a subtask off flat ground the mean terrain level its slots hold."""
    mt = stats["hooks"]  # the scheduler's statistics
    sub, curriculum = subtasks_of(runner.env), runner.env.curriculum
    counts = sub.slots.counts("current", len(names)).double()
    shares = counts / counts.sum()
    row = {"iteration": stats["iteration"], "env_steps": stats["env_steps"],
           "wall_s": time.perf_counter() - start}
    if curriculum is not None:
        levels = torch.bincount(sub.slots.current.cpu(), weights=curriculum.levels.cpu().double(),
                                minlength=len(names)) / counts.clamp(min=1)
    for i, n in enumerate(names):
        row[f"success/{n}"] = mt.get(f"multitask/success/{n}", math.nan)
        row[f"episodes/{n}"] = mt.get(f"multitask/episodes/{n}", 0.0)
        row[f"share/{n}"] = float(shares[i])
        if curriculum is not None and sub.subtasks[i].terrain != (FLAT,):
            row[f"level/{n}"] = float(levels[i])
    return row


def run_one(job: tuple[DictConfig, str, int, Path, Path]) -> tuple[str, float]:
    """Train one (allocation, seed) run and write its curve; return its name and seconds.

    A run interrupted part-way (a killed study, a session that ended) continues from its
    checkpoint: its curve so far is kept next to the checkpoint, rewritten every iteration
    (a small file), and cut back to the checkpoint's iteration on resume.
    """
    cfg, allocation, seed, out_dir, runs_dir = job
    name = run_name(allocation, seed)
    run_cfg = run_config(cfg, allocation, seed)
    env = make_env(run_cfg)
    runner = Runner(env, run_cfg, log_dir=runs_dir / name,
                    hooks=training_hooks(env, run_cfg))
    names = subtasks_of(env).names
    partial = runs_dir / name / "curve_so_far.csv"
    rows = resumed_rows(runner, partial, int(cfg.iterations))
    start = time.perf_counter() - (rows[-1]["wall_s"] if rows else 0.0)

    def record(r: Runner, stats: dict) -> bool:
        rows.append(curve_row(r, stats, names, start))
        write_csv(partial, rows)
        return False  # never stop early: every run gets the whole budget

    try:
        runner.learn(int(cfg.iterations) - runner.iteration, should_stop=record)
    finally:
        env.close()
    write_curve(curve_path(out_dir, name), rows, curve_settings(run_cfg))
    return name, time.perf_counter() - start


def resumed_rows(runner: Runner, partial: Path, iterations: int) -> list[dict]:
    """Load the run's checkpoint if it has one; its curve rows up to that iteration."""
    if not runner.checkpoint_path.is_file():
        return []
    if not partial.exists():  # a checkpoint of a run that kept no curve: cannot be rebuilt
        print(f"{partial.parent.name}: checkpoint without a curve so far, starting over",
              flush=True)
        return []
    saved = load_checkpoint(runner.checkpoint_path)["config"]
    changed = changed_settings(curve_settings(OmegaConf.create(saved)),
                               curve_settings(runner.cfg))
    if changed:
        raise ValueError(f"{runner.checkpoint_path} was trained with other {changed} than "
                         "this study asks: remove it or pick another runs_dir")
    runner.load(runner.checkpoint_path)
    if runner.iteration > iterations:
        raise ValueError(f"{runner.checkpoint_path} is at iteration {runner.iteration}, past "
                         f"the study's {iterations}: remove it or pick another runs_dir")
    curve = read_csv(partial)
    if curve["iteration"][-1] < runner.iteration:  # killed between checkpoint and curve
        print(f"{partial.parent.name}: the curve lacks iteration {runner.iteration}", flush=True)
    keep = curve["iteration"] <= runner.iteration
    rows = [{k: float(v[i]) for k, v in curve.items()} for i in np.flatnonzero(keep)]
    for row in rows:
        row["iteration"], row["env_steps"] = int(row["iteration"]), int(row["env_steps"])
    print(f"{partial.parent.name}: resumed at iteration {runner.iteration}", flush=True)
    return rows


def pending(cfg: DictConfig, out_dir: Path) -> list[tuple[str, int]]:
    """The (allocation, seed) runs without a finished curve, seed by seed; finished ones
    must have run the study's budget and settings."""
    runs = [(str(allocation), int(seed)) for seed in cfg.seeds for allocation in cfg.allocations]
    return [(a, seed) for a, seed in runs if not finished(
        curve_path(out_dir, run_name(a, seed)), "iteration", int(cfg.iterations), "iterations",
        curve_settings(run_config(cfg, a, seed)))]


def run_study(cfg: DictConfig, out_dir: Path, runs_dir: Path, jobs: int = 1) -> list[str]:
    """Run every (allocation, seed) without a curve yet; return the names run now."""
    if not OmegaConf.select(cfg, "multitask.subtasks"):
        raise ValueError("the multitask study needs subtasks: use task=multitask "
                         f"(got task={cfg.task.name})")
    work = [(cfg, allocation, seed, out_dir, runs_dir)
            for allocation, seed in pending(cfg, out_dir)]
    ran = []
    for name, seconds in run_jobs(run_one, work, jobs):
        print(f"{name}: {seconds:.0f} s", flush=True)
        ran.append(name)
    return ran


# ---------------------------------------------------------------------- summary
def subtask_names(curve: dict[str, np.ndarray]) -> list[str]:
    return [k.split("/", 1)[1] for k in curve if k.startswith("success/")]


def windowed_success(curve: dict[str, np.ndarray], name: str, window: int,
                     min_episodes: float) -> np.ndarray:
    """Episode-weighted success rate over the last ``window`` iterations (NaN if too few)."""
    episodes = curve[f"episodes/{name}"]
    wins = np.nan_to_num(curve[f"success/{name}"]) * episodes
    kernel = np.ones(window)
    e = np.convolve(episodes, kernel)[:len(episodes)]
    w = np.convolve(wins, kernel)[:len(episodes)]
    return np.where(e >= min_episodes, w / np.maximum(e, 1e-9), np.nan)


def hold_last(values: np.ndarray) -> np.ndarray:
    """Each NaN replaced by the last value before it (leading NaNs stay)."""
    last = np.maximum.accumulate(np.where(np.isnan(values), 0, np.arange(len(values))))
    return values[last]


def steps_to_threshold(curve: dict[str, np.ndarray], cfg: DictConfig) -> dict[str, float]:
    """Env steps until each subtask first reaches the threshold (NaN: never), and 'all'."""
    out = {}
    for name in subtask_names(curve):
        rate = windowed_success(curve, name, int(cfg.window), float(cfg.min_episodes))
        hit = np.flatnonzero(rate >= float(cfg.success_threshold))
        out[name] = float(curve["env_steps"][hit[0]]) if len(hit) else math.nan
    out["all subtasks"] = max(out.values()) if not any(map(math.isnan, out.values())) \
        else math.nan
    return out


def mean_share(curve: dict[str, np.ndarray], name: str, until: float) -> float:
    """A subtask's mean share of slots up to env step ``until`` (NaN: the whole run)."""
    return float(curve[f"share/{name}"][curve["env_steps"]
                                        <= np.nan_to_num(until, nan=np.inf)].mean())


def shares_until_reached(curve: dict[str, np.ndarray], reached: dict[str, float]
                         ) -> dict[str, float]:
    """Each subtask's mean share of slots up to the step it reached the threshold (the whole
    run if it never did): the experience the allocation gave it while it learned."""
    return {n: mean_share(curve, n, reached[n]) for n in subtask_names(curve)}


def fmt_steps(values: list[float]) -> str:
    if not values:
        return "not run yet"
    reached = [v for v in values if not math.isnan(v)]
    if not reached:
        return f"never (0/{len(values)})"
    spread = f" ± {np.std(reached) / 1e6:.1f}M" if len(reached) > 1 else ""
    return f"{np.mean(reached) / 1e6:.1f}M{spread} ({len(reached)}/{len(values)})"


def faster(x: float, y: float) -> bool:
    """Whether env steps ``x`` beat ``y``, where NaN (never reached) loses to anything."""
    return not math.isnan(x) and (math.isnan(y) or x < y)


def summary_table(steps: dict[tuple[str, int], dict[str, float]], cfg: DictConfig) -> str:
    """Markdown: per subtask, env steps to threshold per allocation and paired seed wins."""
    allocations = [str(a) for a in cfg.allocations]
    seeds = sorted({seed for _, seed in steps})
    rows = list(next(iter(steps.values())))
    lines = [f"Env steps until the success rate reaches {cfg.success_threshold} (mean ± std "
             f"over the seeds that reached it; reached/seeds)", "",
             "| subtask | " + " | ".join(allocations) + " | seeds where "
             f"{allocations[0]} is faster |", "|---|" + "---|" * (len(allocations) + 1)]
    paired = [s for s in seeds if all((a, s) in steps for a in allocations[:2])] \
        if len(allocations) > 1 else []
    for row in rows:
        cells = [fmt_steps([steps[(a, s)][row] for s in seeds if (a, s) in steps])
                 for a in allocations]
        wins = sum(faster(steps[(allocations[0], s)][row], steps[(allocations[1], s)][row])
                   for s in paired)
        lines.append(f"| {row} | " + " | ".join(cells) + f" | {wins}/{len(paired)} |")
    if paired:
        lines += ["", tally(steps, allocations[:2], paired)]
    return "\n".join(lines) + "\n"


def tally(steps: dict[tuple[str, int], dict[str, float]], allocations: list[str],
          seeds: list[int]) -> str:
    """Over every subtask and seed, how often each of two allocations got there first."""
    pairs = [(steps[(allocations[0], s)][n], steps[(allocations[1], s)][n])
             for s in seeds for n in steps[(allocations[0], s)] if n != "all subtasks"]
    first = sum(faster(x, y) for x, y in pairs)
    second = sum(faster(y, x) for x, y in pairs)
    return (f"Over {len(pairs)} subtask-seeds: {allocations[0]} first on {first}, "
            f"{allocations[1]} first on {second}, tied or neither reached on "
            f"{len(pairs) - first - second}.")


def seed_table(steps: dict[tuple[str, int], dict[str, float]],
               shares: dict[tuple[str, int], dict[str, float]], cfg: DictConfig) -> str:
    """Markdown: per subtask and seed, env steps to threshold under each allocation and,
    in brackets, the first allocation's mean share of env slots until then."""
    allocations = [str(a) for a in cfg.allocations]
    seeds = sorted({seed for _, seed in steps})
    rows = list(next(iter(steps.values())))

    def cell(a: str, seed: int, row: str) -> str:
        v = steps.get((a, seed), {}).get(row)
        return "-" if v is None else "never" if math.isnan(v) else f"{v / 1e6:.1f}M"

    lines = [f"Per seed: env steps until {cfg.success_threshold}, " + " / ".join(allocations)
             + f" (mean share of slots under {allocations[0]} until then)", "",
             "| subtask | " + " | ".join(f"seed {s}" for s in seeds) + " |",
             "|---|" + "---|" * len(seeds)]
    for row in rows:
        cells = []
        for s in seeds:
            share = shares.get((allocations[0], s), {}).get(row)
            cells.append(" / ".join(cell(a, s, row) for a in allocations)
                         + (f" ({100 * share:.1f} %)" if share is not None else ""))
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def experience_table(steps: dict[tuple[str, int], dict[str, float]],
                     curves: dict[tuple[str, int], dict[str, np.ndarray]],
                     cfg: DictConfig) -> str:
    """Markdown: who got there first, grouped by how much experience the first allocation
    gave a subtask relative to the second while both were still short of the threshold
    (mean share of slots until the earlier of the two got there, one run over the other).
    A subtask whose experience the allocation barely changed shows the spread of training
    itself; only the groups with more (or less) experience show the allocation's effect."""
    first, second = [str(a) for a in cfg.allocations[:2]]
    edges = [float(e) for e in cfg.experience_bins]
    if not edges or edges != sorted(set(edges)):
        raise ValueError(f"experience_bins must be increasing ratios, got {edges}")
    inner = [f"{lo:g}-{hi:g}" for lo, hi in zip(edges, edges[1:], strict=False)]
    labels = [f"< {edges[0]:g}", *inner, f"≥ {edges[-1]:g}"]
    groups: list[list[tuple[str, int, float, float]]] = [[] for _ in labels]
    for (a, seed), reached in sorted(steps.items()):
        if a != first or (second, seed) not in steps:
            continue
        other = steps[(second, seed)]
        for name, x in reached.items():
            y = other[name]
            if name == "all subtasks" or (math.isnan(x) and math.isnan(y)):
                continue
            until = min(v for v in (x, y) if not math.isnan(v))
            mine, theirs = (mean_share(curves[(alloc, seed)], name, until)
                            for alloc in (a, second))
            groups[int(np.searchsorted(edges, mine / theirs, side="right"))].append(
                (name, seed, x, y))
    lines = [f"Who got there first, by the experience {first} gave the subtask relative to "
             f"{second} until the first of the two got there", "",
             f"| relative experience | subtask-seeds | {first} first | env steps, {first} / "
             f"{second} (both reached) | subtasks |", "|---|---|---|---|---|"]
    for label, group in zip(labels, groups, strict=True):
        if not group:
            continue
        wins = sum(faster(x, y) for _, _, x, y in group)
        ratios = [x / y for _, _, x, y in group if not (math.isnan(x) or math.isnan(y))]
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-"
        names = ", ".join(dict.fromkeys(n for n, *_ in group))
        lines.append(f"| {label} | {len(group)} | {wins} | {spread} | {names} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- primary measure
def held_success(curve: dict[str, np.ndarray], cfg: DictConfig) -> np.ndarray:
    """[subtasks, iterations] windowed success rates; a window with too few episodes holds
    the subtask's last measured rate (as the figures do), none measured yet is NaN."""
    return np.stack([hold_last(windowed_success(curve, n, int(cfg.window),
                                                float(cfg.min_episodes)))
                     for n in subtask_names(curve)])


def all_at_threshold(curve: dict[str, np.ndarray], cfg: DictConfig) -> dict:
    """The primary measure of one run: env steps and wall-clock seconds until every subtask
    is at or above the threshold at the same time (not each at its own time: one that got
    there and fell back does not count). A run that never gets there is censored at its
    budget, its last row, and says so: it stays in every comparison as not there yet."""
    together = (held_success(curve, cfg) >= float(cfg.success_threshold)).all(0)
    hit = np.flatnonzero(together)
    row = int(hit[0]) if len(hit) else -1
    return {"env_steps": float(curve["env_steps"][row]), "wall_s": float(curve["wall_s"][row]),
            "censored": not len(hit)}


def at_budget(curve: dict[str, np.ndarray], cfg: DictConfig) -> dict:
    """The secondary measures, at the run's budget (its last row): how many subtasks are at
    or above the threshold, and the worst subtask's success (one never measured: 0)."""
    last = np.nan_to_num(held_success(curve, cfg)[:, -1], nan=0.0)
    return {"mastered": int((last >= float(cfg.success_threshold)).sum()),
            "worst": float(last.min())}


def paired_seeds(curves: dict[tuple[str, int], dict[str, np.ndarray]], cfg: DictConfig,
                 second: str | None = None) -> tuple[str, str, list[int]]:
    """The first allocation, ``second`` (by default the second allocation) and the seeds
    with a run of both, in order."""
    first, second = str(cfg.allocations[0]), second or str(cfg.allocations[1])
    return first, second, sorted(s for a, s in curves if a == first and (second, s) in curves)


def no_pair(first: str, second: str) -> str:
    return f"No seed has both a {first} and a {second} run yet.\n"


def seeds_word(n: int) -> str:
    return "seed" if n == 1 else "seeds"


def paired_mean_table(curves: dict[tuple[str, int], dict[str, np.ndarray]], cfg: DictConfig,
                      what: str, per_run) -> str:
    """Markdown: per subtask, a run's mean of something over the run (``per_run(curve)``:
    subtask names and one value each), first and second allocation paired per seed."""
    first, second, seeds = paired_seeds(curves, cfg)
    if not seeds:
        return no_pair(first, second)
    names = per_run(curves[(first, seeds[0])])[0]
    mine, theirs = (np.stack([per_run(curves[(a, s)])[1] for s in seeds])
                    for a in (first, second))
    diff = mine - theirs
    lines = [f"{what}, {first} / {second} (mean over seeds "
             f"{', '.join(map(str, seeds))}), and {first} minus {second} per seed", "",
             f"| subtask | {first} / {second} | difference | per seed | seeds where "
             f"{first} is higher |", "|---|---|---|---|---|"]
    for j, name in enumerate(names):
        per_seed = ", ".join(f"{d:+.3f}" for d in diff[:, j])
        lines.append(f"| {name} | {mine[:, j].mean():.3f} / {theirs[:, j].mean():.3f} | "
                     f"{diff[:, j].mean():+.3f} | "
                     f"{per_seed} | {int((diff[:, j] > 0).sum())}/{len(seeds)} |")
    return "\n".join(lines) + "\n"


def mean_success_table(curves: dict[tuple[str, int], dict[str, np.ndarray]],
                       cfg: DictConfig) -> str:
    """Each subtask's windowed success averaged over the whole run (the area under its
    curve over the budget; 0 before its first measured window), paired per seed. Unlike
    the env steps to the threshold, a subtask that hovers just under the threshold for
    millions of env steps shows here by its level, not by when noise first lifts it over."""
    return paired_mean_table(curves, cfg, "Mean success over the run", lambda c: (
        subtask_names(c), np.nan_to_num(held_success(c, cfg), nan=0.0).mean(1)))


def level_names(curve: dict[str, np.ndarray]) -> list[str]:
    return [k.split("/", 1)[1] for k in curve if k.startswith("level/")]


def mean_level_table(curves: dict[tuple[str, int], dict[str, np.ndarray]],
                     cfg: DictConfig) -> str:
    """The terrain subtasks' mean slot level over the run, paired per seed: which levels
    an allocation's slots walk, since success on a subtask is judged at the levels its
    slots hold."""
    return paired_mean_table(curves, cfg, "Mean terrain level of the slots over the run",
                             lambda c: (level_names(c), np.stack(
                                 [c[f"level/{n}"] for n in level_names(c)]).mean(1)))


def sooner(x: dict, y: dict, key: str) -> int:
    """+1 where run ``x`` got every subtask there first by ``key`` (env steps or wall
    seconds), -1 where ``y`` did, 0 where both got there at once or neither did."""
    if x["censored"] or y["censored"]:
        return int(y["censored"]) - int(x["censored"])
    return int(np.sign(y[key] - x[key]))


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test: the chance that fair coin flips split the untied pairs
    at least this unevenly (1 without untied pairs)."""
    n, k = wins + losses, min(wins, losses)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n) if n else 1.0


def tally_line(what: str, signs: list[int], names: tuple[str, str], ties: str) -> str:
    """``what``: first better in w seeds, second in l, ``ties`` in t; the sign test."""
    wins, losses = signs.count(1), signs.count(-1)
    return (f"{what}: {names[0]} in {wins} {seeds_word(wins)}, {names[1]} in {losses}, {ties} in "
            f"{len(signs) - wins - losses}; sign test p = {sign_test(wins, losses):.3f}")


def primary_table(curves: dict[tuple[str, int], dict[str, np.ndarray]], cfg: DictConfig,
                  second: str | None = None) -> str:
    """Markdown: the primary and secondary measures of the first allocation against
    ``second`` (by default the second allocation), paired per seed (the seeds with both
    runs), with sign tests and mean ln ratios."""
    first, second, seeds = paired_seeds(curves, cfg, second)
    if not seeds:
        return no_pair(first, second)
    reach = {key: all_at_threshold(c, cfg) for key, c in curves.items()}
    final = {key: at_budget(c, cfg) for key, c in curves.items()}

    def cell(r: dict, key: str, scale: float, unit: str) -> str:
        return ("> " if r["censored"] else "") + f"{r[key] / scale:.1f}{unit}"

    thr = cfg.success_threshold
    lines = [f"Primary: env steps and wall-clock until every subtask is at {thr} at once "
             f"(\"> \": never, censored at the budget), {first} / {second}; ln ratio = "
             f"ln({second} / {first}), positive where {first} is sooner. Secondary, at the "
             f"budget: subtasks at {thr}, and the worst subtask's success.", "",
             "| seed | env steps | ln ratio | wall-clock | ln ratio | subtasks at "
             f"{thr} | worst success |", "|---|---|---|---|---|---|---|"]
    ratio = {"env_steps": [], "wall_s": []}
    for seed in seeds:
        x, y = reach[(first, seed)], reach[(second, seed)]
        for key in ratio:
            ratio[key].append(math.log(y[key] / x[key]))
        fx, fy = final[(first, seed)], final[(second, seed)]
        lines.append(f"| {seed} | {cell(x, 'env_steps', 1e6, 'M')} / "
                     f"{cell(y, 'env_steps', 1e6, 'M')} | {ratio['env_steps'][-1]:+.2f} | "
                     f"{cell(x, 'wall_s', 3600, ' h')} / {cell(y, 'wall_s', 3600, ' h')} | "
                     f"{ratio['wall_s'][-1]:+.2f} | {fx['mastered']} / {fy['mastered']} | "
                     f"{fx['worst']:.2f} / {fy['worst']:.2f} |")
    pairs = [(reach[(first, s)], reach[(second, s)]) for s in seeds]
    censored = sum(x["censored"] or y["censored"] for x, y in pairs)
    names = (first, second)
    lines += [""]
    for key, what in (("env_steps", "env steps"), ("wall_s", "wall-clock")):
        signs = [sooner(x, y, key) for x, y in pairs]
        lines.append("- " + tally_line(f"Sooner by {what}", signs, names,
                                       "tied or neither got there")
                     + f"; mean ln ratio {np.mean(ratio[key]):+.3f} over {len(seeds)} "
                     f"{seeds_word(len(seeds))}.")
    lines.append(f"- {censored} of {len(seeds)} pairs hold a censored run, counted at its "
                 "budget: its ln ratio is a bound (the censored run would take longer).")
    for key, what in (("mastered", f"More subtasks at {thr} at the budget"),
                      ("worst", "Higher worst-subtask success at the budget")):
        diff = [final[(first, s)][key] - final[(second, s)][key] for s in seeds]
        lines.append("- " + tally_line(what, [int(np.sign(d)) for d in diff], names, "equal")
                     + f"; mean difference {np.mean(diff):+.2f}.")
    lines.append("- Wall-clock compares only runs trained side by side on one machine.")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- figures
def plot_success(curves: dict[tuple[str, int], dict], cfg: DictConfig, path: Path) -> None:
    """Windowed success rate vs env steps: one panel per subtask, one band per allocation.

    A window with fewer than ``min_episodes`` episodes (a subtask held at its floor share)
    holds that seed's last measured rate instead of dropping to zero, and the band starts
    where every seed has a rate, so the mean never switches between subsets of seeds."""
    import matplotlib.pyplot as plt

    names = subtask_names(next(iter(curves.values())))
    cols = 4
    fig, axes = plt.subplots(math.ceil(len(names) / cols), cols, squeeze=False, sharey=True,
                             figsize=(3.6 * cols, 2.8 * math.ceil(len(names) / cols)))
    for i, name in enumerate(names):
        ax = axes[i // cols][i % cols]
        for allocation in cfg.allocations:
            runs = [{"env_steps": c["env_steps"], "rate": hold_last(windowed_success(
                c, name, int(cfg.window), float(cfg.min_episodes)))}
                for (a, _), c in sorted(curves.items()) if a == allocation]
            if not runs:
                continue
            x, mean, low, high = mean_band(runs, "env_steps", "rate", fill=None)
            ax.plot(x, mean, color=COLORS.get(allocation), label=allocation)
            ax.fill_between(x, low, high, color=COLORS.get(allocation), alpha=0.2, linewidth=0)
        ax.axhline(float(cfg.success_threshold), color="k", linestyle=":", linewidth=0.8)
        ax.set_title(name)
        ax.set_ylim(0, 1)
    for ax in axes.flat[len(names):]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("success rate")
    for ax in axes[-1]:
        ax.set_xlabel("env steps")
    axes[0][0].legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_allocation(curve: dict[str, np.ndarray], title: str, path: Path) -> None:
    """Share of env slots per subtask over training (stacked)."""
    import matplotlib.pyplot as plt

    names = subtask_names(curve)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.stackplot(curve["env_steps"], *[curve[f"share/{n}"] for n in names], labels=names)
    ax.set_xlabel("env steps")
    ax.set_ylabel("share of env slots")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(cfg: DictConfig, out_dir: Path) -> None:
    """summary.md and the figures from every curve of the study in ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg")
    curves = {}
    for allocation in cfg.allocations:
        for seed in cfg.seeds:
            path = curve_path(out_dir, run_name(allocation, int(seed)))
            if path.exists():
                curves[(str(allocation), int(seed))] = read_csv(path)
    if not curves:
        raise ValueError(f"no finished runs in {out_dir / 'curves'}")
    steps = {key: steps_to_threshold(c, cfg) for key, c in curves.items()}
    shares = {key: shares_until_reached(c, steps[key]) for key, c in curves.items()}
    tables = [summary_table(steps, cfg), seed_table(steps, shares, cfg)]
    if len(cfg.allocations) > 1:
        tables += [experience_table(steps, curves, cfg), mean_success_table(curves, cfg)]
        if all(level_names(c) for c in curves.values()):  # recorded since seed_set=entry
            tables.append(mean_level_table(curves, cfg))
    (out_dir / "summary.md").write_text("\n".join(tables))
    if len(cfg.allocations) > 1:
        (out_dir / "primary.md").write_text("\n".join(
            primary_table(curves, cfg, str(other)) for other in cfg.allocations[1:]))
    plot_success(curves, cfg, out_dir / "success_vs_env_steps.png")
    first = min(curves)
    plot_allocation(curves[first], f"{first[0]}, seed {first[1]}", out_dir / "allocation.png")


@hydra.main(config_path="configs", config_name="multitask_study", version_base="1.3")
def main(cfg: DictConfig) -> None:
    out_dir = Path(to_absolute_path(cfg.out_dir))
    if not cfg.report_only:
        start = time.perf_counter()
        ran = run_study(cfg, out_dir, Path(to_absolute_path(cfg.runs_dir)), int(cfg.jobs))
        print(f"ran {len(ran)} runs in {time.perf_counter() - start:.0f} s")
    report(cfg, out_dir)
    print(f"figures and summary in {out_dir}")


if __name__ == "__main__":
    main()
