"""Reset-schedule study: sync vs random_counter vs staggered vs phase_locked over K, N and
seeds.

Every run (a cell of the grid) trains with ``Runner`` for the same number of env steps and
writes its curve to ``<out_dir>/curves/<cell>.csv.xz``; cells whose curve exists are skipped, so
an interrupted grid resumes where it stopped. Then the figures and the summary tables are
(re)drawn from the curves of every cell of the grid.

    python -m research.stagger_study                       # the toy grid (task=toy)
    python -m research.stagger_study task=flat_velocity jobs=2   # the quadruped grid (~2 h)
    python -m research.stagger_study task=gaits jobs=2      # gait-conditioned walking
    python -m research.stagger_study grid.rollout_lengths=[8] study.toy.seeds=[0,1,2]
    python -m research.stagger_study task=flat_velocity entry=flat_core report_only=true

The settings of a study (budget, N values, seeds, schedules, what counts as learned) are
the entry ``study.<entry>`` of its config, by default the task's; an entry may run its task
with other settings (``entry=flat_no_termination``: flat walking without early
terminations). What counts as learned is the windowed mean episode ``return``, or for
gait tasks the ``success`` rate: the share of episodes that survive, track the command and
keep the gait schedule, as the multitask subtasks judge them.

``jobs=J`` trains J cells at once, each process pinned to its own core (Linux), so runs
do not share a core and their wall-clock curves stay comparable; ``report_only=true``
redraws the tables and figures from the cells finished so far.

The return (and success rate) of a point is the mean over the whole episodes that ended in
the last ceil(H / K) iterations: under sync every episode ends in the same iteration, and
this window gives each schedule about one episode per env per point. The summary also gives
the phase uniformity of the batches (logged every iteration) over training: its mean and
its lowest value, which shows where falls re-synchronized a schedule's episodes.
"""

from __future__ import annotations

import csv
import math
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import hydra
import numpy as np
import torch
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf, open_dict

from locomotion import tasks
from locomotion.evaluation import evaluate_episodes
from locomotion.rl.runner import Runner
from locomotion.tasks.subtasks import episode_checks
from research.study import (
    curve_path,
    finished,
    mean_band,
    read_csv,
    run_jobs,
    run_settings,
    write_curve,
)
from research.toy_horizon import PhaseTargetEnv

if TYPE_CHECKING:
    from locomotion.envs import LocomotionEnv

COLORS = {"sync": "tab:red", "random_counter": "tab:orange", "staggered": "tab:blue",
          "phase_locked": "tab:green", "staggered-random": "tab:purple",
          "staggered-policy": "tab:cyan", "staggered-none": "tab:brown",
          "phase_locked-none": "tab:olive"}
LINESTYLES = ("-", "--", ":", "-.")


@dataclass(frozen=True)
class Cell:
    """One run of the grid."""

    schedule: str
    rollout_length: int
    num_envs: int
    seed: int

    @property
    def name(self) -> str:
        return f"{self.schedule}_K{self.rollout_length}_N{self.num_envs}_s{self.seed}"

    @property
    def group(self) -> tuple[str, int, int]:
        """The cell without its seed: what the seeds are averaged over."""
        return self.schedule, self.rollout_length, self.num_envs


def study_settings(cfg: DictConfig) -> DictConfig:
    """The study's entry ``cfg.entry`` (N values, budget, schedules, metric and threshold,
    config overrides), checked to be one for the configured task."""
    if cfg.entry not in cfg.study:
        raise ValueError(f"no study settings {cfg.entry!r}; valid: {sorted(cfg.study)}")
    study = cfg.study[cfg.entry]
    task = study.get("task", cfg.entry)
    if task != cfg.task.name:
        raise ValueError(f"study entry {cfg.entry!r} runs task={task}, not "
                         f"task={cfg.task.name}")
    return study


def metric_of(study: DictConfig) -> str:
    """What the entry counts as learned: ``return`` or ``success`` (``SuccessRate``)."""
    metric = study.get("metric", "return")
    if metric not in ("return", "success"):
        raise ValueError(f"unknown study metric {metric!r}; valid: ['return', 'success']")
    return metric


def cell_budget(study: DictConfig, cell: Cell) -> int:
    """The env steps of one cell: the entry's ``env_steps``, or ``iterations`` updates of
    N * K steps where the entry fixes the number of updates."""
    if "iterations" in study:
        return int(study.iterations) * cell.num_envs * cell.rollout_length
    return int(study.env_steps)


def grid_cells(cfg: DictConfig) -> list[Cell]:
    """Every cell of the grid, seed by seed: the cells compared within a seed run next to
    each other, so their wall-clock comes from one sitting of the machine even when the
    grid spreads over several. Checks that each cell gets exactly the env-step budget."""
    study = study_settings(cfg)
    cells = [Cell(s, int(k), int(n), int(seed)) for seed in study.seeds
             for k in cfg.grid.rollout_lengths for n in study.num_envs
             for s in cfg.grid.schedules]
    for c in cells:
        if cell_budget(study, c) % (c.num_envs * c.rollout_length):
            raise ValueError(f"env_steps {study.env_steps} is not a multiple of N * K = "
                             f"{c.num_envs} * {c.rollout_length}: budgets would differ")
    return cells


def cell_config(cfg: DictConfig, cell: Cell) -> DictConfig:
    """The training config of one cell: the task's overrides, then the cell's values (a
    schedule named ``<schedule>-<warmup>`` also sets the warm-up policy)."""
    schedule, _, warmup = cell.schedule.partition("-")
    reset = {"schedule": schedule, **({"warmup": warmup} if warmup else {})}
    return OmegaConf.merge(cfg, study_settings(cfg).config, {
        "num_envs": cell.num_envs, "seed": cell.seed,
        "algo": {"num_steps": cell.rollout_length}, "reset": reset})


def make_env(cfg: DictConfig) -> PhaseTargetEnv | LocomotionEnv:
    """The toy for ``task=toy``, the quadruped env for every other task."""
    return PhaseTargetEnv(cfg) if cfg.task.name == "toy" else tasks.make_env(cfg)


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns): the share of the GAE targets the critic saw
    coming (1 perfect, 0 no better than a constant, < 0 worse)."""
    var = returns.var()
    return float(1.0 - (returns - values).var() / var) if var > 0 else math.nan


class SuccessRate:
    """A training hook that judges every whole episode as the multitask subtasks do
    (``episode_checks``: survived to the time-out, mean planar tracking error at most
    ``max_lin_vel_error``, share of foot contacts on the gait schedule at least
    ``min_gait_match``) and gives each iteration's share of successes."""

    episode_keys = ()  # it only reads the episodes: no statistic is its alone

    def __init__(self, cfg: DictConfig):
        self.max_lin_vel_error = float(cfg.max_lin_vel_error)
        self.min_gait_match = float(cfg.min_gait_match)
        self.successes = self.episodes = 0

    def record(self, episode) -> None:
        if "gait_match" not in episode:
            raise ValueError("the success metric needs gait commands (a task with task.gaits, "
                             "e.g. task=gaits)")
        whole = episode["partial"] == 0
        checks = episode_checks({k: episode[k][whole] for k in
                                 ("timeout", "lin_vel_error", "gait_match")},
                                self.max_lin_vel_error, self.min_gait_match)
        self.successes += int(checks.min(dim=1).values.sum())
        self.episodes += int(whole.sum())

    def end_iteration(self, iteration: int, rollout_s: float) -> dict[str, float]:
        rate = self.successes / self.episodes if self.episodes else math.nan
        self.successes = self.episodes = 0
        return {"success": rate}

    def state_dict(self) -> dict:
        return {"successes": self.successes, "episodes": self.episodes}

    def load_state_dict(self, state: dict) -> None:
        self.successes, self.episodes = state["successes"], state["episodes"]


class EpisodeWindow:
    """Mean of a per-episode value over the episodes that ended within the last
    ``iterations`` iterations, from each iteration's mean and episode count."""

    def __init__(self, iterations: int):
        self.entries: deque[tuple[float, float]] = deque(maxlen=iterations)

    def add(self, mean: float, count: float) -> tuple[float, float]:
        """Add one iteration's mean over ``count`` episodes (NaN or anything when none
        ended); return (the windowed mean, its episodes)."""
        self.entries.append((mean * count if count else 0.0, count))
        total = sum(c for _, c in self.entries)
        return (sum(s for s, _ in self.entries) / total if total else math.nan), total


def curve_row(runner: Runner, stats: dict, windows: dict[str, EpisodeWindow],
              wall_s: float) -> dict:
    """One CSV row of a run's curve; ``windows`` has a ``return`` window, and a
    ``success`` one where a ``SuccessRate`` hook judges the episodes."""
    episodes = stats["episodes"]
    count = episodes.get("count", 0.0)
    ret, count_in_window = windows["return"].add(episodes.get("return", 0.0), count)
    judged = {k: windows[k].add(stats["hooks"][k], count)[0] for k in windows if k != "return"}
    losses = stats["losses"]
    storage = runner.storage  # clear() only rewinds: the last batch's targets are still there
    return {
        "iteration": stats["iteration"], "env_steps": stats["env_steps"], "wall_s": wall_s,
        "return": ret, **judged, "episodes": count_in_window,
        "value_loss": losses["value_loss"],
        "explained_variance": explained_variance(storage.values, storage.returns),
        "phase_uniformity": stats["phase_uniformity"], "learning_rate": losses["learning_rate"],
        "action_std": losses["action_std"], "kl": losses["kl"],
        **{f"phase_{i:02d}": float(p) for i, p in enumerate(stats["phase_histogram"])},
    }


CHECK_METRICS = ("tracking_error", "survival", "gait_match", "no_fall")
"""What the deterministic-policy checks write to a curve (``check_<metric>``)."""


class PolicyChecks:
    """Deterministic-policy checks during a run: the mean action for one whole episode in
    each of ``evaluation.envs`` separate envs (synchronized start, seed + 1000), every
    ``evaluation.every`` env steps and, with ``final_envs`` episodes, at the end.

    ``no_fall`` is the share of episodes in which the robot never fell as the task's
    ``fallen`` reads it; it reads every step of the checked episodes, so it is only
    meaningful where falls do not end episodes (as in the entries that ask for it).
    """

    def __init__(self, run_cfg: DictConfig, evaluation: DictConfig, criterion: DictConfig):
        bad = [k for k in criterion
               if k.partition("_")[0] not in ("min", "max") or k[4:] not in CHECK_METRICS]
        if bad:
            raise ValueError(f"unknown criterion bounds {bad}; valid: min_ or max_ of "
                             f"{list(CHECK_METRICS)}")
        self.criterion = {k: float(v) for k, v in criterion.items()}
        self.every, self.envs = int(evaluation.every), int(evaluation.envs)
        self.rounds = max(1, int(evaluation.final_envs) // self.envs)
        check_cfg = run_cfg.copy()
        with open_dict(check_cfg):
            check_cfg.num_envs = self.envs
            check_cfg.seed = int(run_cfg.seed) + 1000
            check_cfg.reset = {"schedule": "sync", "num_groups": None, "warmup": "zero"}
        self.env = tasks.make_env(check_cfg)
        self.checked = 0  # env steps of the last check

    def due(self, env_steps: int, last: bool) -> bool:
        return last or env_steps // self.every > self.checked // self.every

    def __call__(self, act, env_steps: int, last: bool) -> dict[str, float]:
        """The check's means over ``envs`` episodes (``final_envs`` when ``last``) and
        whether they meet the criterion (``passed``: 1 or 0)."""
        self.checked = env_steps
        rounds = [self._episodes(act) for _ in range(self.rounds if last else 1)]
        means = {k: float(np.mean([r[k] for r in rounds])) for k in rounds[0]}
        passed = all(means[k[4:]] >= v if k.startswith("min_") else means[k[4:]] <= v
                     for k, v in self.criterion.items())
        return {**means, "passed": float(passed), "episodes": float(self.envs * len(rounds))}

    def _episodes(self, act) -> dict[str, float]:
        fell = torch.zeros(self.envs, dtype=torch.bool)

        def count_falls(env) -> None:
            fell.logical_or_(env.task.fallen(env.task.world(env.sim)))

        metrics = evaluate_episodes(self.env, act, on_step=count_falls)
        return {"tracking_error": metrics["tracking_error"], "survival": metrics["survival"],
                "gait_match": metrics.get("gait_match", math.nan),
                "no_fall": 1.0 - float(fell.float().mean())}

    def close(self) -> None:
        self.env.close()


def policy_checks(cfg: DictConfig, run_cfg: DictConfig) -> PolicyChecks | None:
    """The checks of an entry with a ``criterion``; None for one judged by training curves.
    The entry's ``evaluation`` keys, if any, override the study's."""
    study = study_settings(cfg)
    if "criterion" not in study:
        return None
    return PolicyChecks(run_cfg, OmegaConf.merge(cfg.evaluation, study.get("evaluation", {})),
                        study.criterion)


def run_cell(cfg: DictConfig, cell: Cell, path: Path) -> float:
    """Train one cell for its env-step budget, write its curve to ``path`` and return its
    final return (or success rate). Checks of the policy, where the entry asks for them,
    add ``check_*`` columns (NaN between checks) and stay out of ``wall_s``."""
    run_cfg, study = cell_config(cfg, cell), study_settings(cfg)
    metric = metric_of(study)
    env = make_env(run_cfg)
    checks = policy_checks(cfg, run_cfg)
    runner = Runner(env, run_cfg,
                    hooks={"success": SuccessRate(study.success)} if metric == "success" else None)
    iterations = math.ceil(env.max_episode_length / cell.rollout_length)
    windows = {k: EpisodeWindow(iterations) for k in dict.fromkeys(("return", metric))}
    total = cell_budget(study, cell) // (cell.num_envs * cell.rollout_length)
    rows: list[dict] = []
    start = time.perf_counter()
    checks_s = 0.0

    def record(r: Runner, stats: dict) -> bool:
        nonlocal checks_s
        row = curve_row(r, stats, windows, time.perf_counter() - start - checks_s)
        if checks is not None:
            last = r.iteration >= total
            t0 = time.perf_counter()
            result = (checks(r.policy.act_inference, r.env_steps, last)
                      if checks.due(r.env_steps, last) else {})
            checks_s += time.perf_counter() - t0
            row.update({f"check_{k}": result.get(k, math.nan)
                        for k in (*CHECK_METRICS, "passed", "episodes")})
        rows.append(row)
        return False

    try:
        runner.learn(total, should_stop=record)
    finally:
        env.close()
        if checks is not None:
            checks.close()
    write_curve(path, rows, run_settings(run_cfg))
    return float(rows[-1][metric])


def pending_cells(cfg: DictConfig, out_dir: Path) -> list[Cell]:
    """The cells without a finished curve (finished ones must have run the study's budget and
    settings)."""
    study = study_settings(cfg)
    return [cell for cell in grid_cells(cfg) if not finished(
        curve_path(out_dir, cell.name), "env_steps", cell_budget(study, cell), "env steps",
        run_settings(cell_config(cfg, cell)))]


def timed_cell(job: tuple[DictConfig, Cell, Path]) -> tuple[Cell, str, float, float]:
    """Run one cell (config, cell, out_dir); return it, its metric's name and final value,
    and its wall seconds."""
    cfg, cell, out_dir = job
    start = time.perf_counter()
    final = run_cell(cfg, cell, curve_path(out_dir, cell.name))
    return cell, metric_of(study_settings(cfg)), final, time.perf_counter() - start


def run_grid(cfg: DictConfig, out_dir: Path, jobs: int = 1) -> list[Cell]:
    """Run every cell that has no curve yet, ``jobs`` at a time; return the cells run now."""
    work = [(cfg, cell, out_dir) for cell in pending_cells(cfg, out_dir)]
    return [report_cell(*result) for result in run_jobs(timed_cell, work, jobs)]


def report_cell(cell: Cell, metric: str, final: float, wall_s: float) -> Cell:
    """Print one finished cell's line of the study's log."""
    print(f"{cell.name}: final {metric} {final:.3f}, {wall_s:.0f} s", flush=True)
    return cell


# ---------------------------------------------------------------------- summary
def first_crossing(curve: dict[str, np.ndarray], threshold: float, num_envs: int,
                   metric: str = "return") -> tuple[float, float]:
    """(env steps, wall s) of the first point whose ``metric`` reaches ``threshold``, else
    NaN.

    Only points whose window holds at least ``num_envs / 2`` episodes count: early on a
    window can hold a handful of episodes that ended by falling, whose mean says nothing
    about the policy.
    """
    hit = np.flatnonzero((curve[metric] >= threshold) & (curve["episodes"] >= num_envs / 2))
    if not len(hit):
        return math.nan, math.nan
    return float(curve["env_steps"][hit[0]]), float(curve["wall_s"][hit[0]])


def summarize(curves: dict[Cell, dict[str, np.ndarray]], threshold: float,
              metric: str = "return") -> list[dict]:
    """Per (schedule, K, N): steps/wall to threshold and the final ``metric`` over seeds,
    and the phase uniformity over training (mean over seeds of each run's mean; the lowest
    of any iteration of any seed)."""
    groups: dict[tuple[str, int, int], list[Cell]] = {}
    for cell in curves:
        groups.setdefault(cell.group, []).append(cell)
    rows = []
    order = list(COLORS)
    for (schedule, k, n), cells in sorted(groups.items(),
                                          key=lambda g: (g[0][1], g[0][2], order.index(g[0][0]))):
        steps, wall = zip(*(first_crossing(curves[c], threshold, c.num_envs, metric)
                            for c in cells), strict=True)
        reached = [s for s in steps if not math.isnan(s)]
        final = [float(curves[c][metric][-1]) for c in cells]
        uniformity = [curves[c]["phase_uniformity"] for c in cells]
        rows.append({
            "schedule": schedule, "K": k, "N": n, "seeds": len(cells), "reached": len(reached),
            "steps_to_threshold_mean": np.mean(reached) if reached else math.nan,
            "steps_to_threshold_std": np.std(reached) if reached else math.nan,
            "wall_s_to_threshold_mean": np.nanmean(wall) if reached else math.nan,
            f"final_{metric}_mean": np.mean(final), f"final_{metric}_std": np.std(final),
            "steps_to_threshold_per_seed": " ".join(
                f"s{c.seed}:{'-' if math.isnan(s) else int(s)}"
                for c, s in zip(cells, steps, strict=True)),
            "phase_uniformity_mean": np.mean([u.mean() for u in uniformity]),
            "phase_uniformity_min": min(u.min() for u in uniformity) + 0.0,  # -0 reads 0
        })
    return rows


def markdown_table(rows: list[dict], threshold: float, budget: int,
                   metric: str = "return") -> str:
    """The summary as a markdown table; '-' marks seeds that never reached the threshold."""
    lines = [f"Threshold: {metric} >= {threshold}; budget {budget:,} env steps per run; "
             "mean ± std over the seeds that reached it (reached / seeds).", "",
             f"| K | N | schedule | env steps to threshold | reached | final {metric} |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        steps = ("never" if not r["reached"] else
                 f"{r['steps_to_threshold_mean'] / 1e3:.0f}k ± "
                 f"{r['steps_to_threshold_std'] / 1e3:.0f}k")
        lines.append(f"| {r['K']} | {r['N']} | {r['schedule']} | {steps} | "
                     f"{r['reached']}/{r['seeds']} | "
                     f"{r[f'final_{metric}_mean']:.3f} ± {r[f'final_{metric}_std']:.3f} |")
    return "\n".join(lines) + "\n"


def uniformity_table(rows: list[dict]) -> str:
    """Phase uniformity of the batches over training, per K, N and schedule."""
    lines = ["Phase uniformity of every iteration's batch (1: the batch covers the horizon "
             "evenly): mean over training (mean over seeds) and the lowest of any iteration "
             "and seed.", "",
             "| K | N | schedule | phase uniformity, mean | lowest |", "|---|---|---|---|---|"]
    lines += [f"| {r['K']} | {r['N']} | {r['schedule']} | {r['phase_uniformity_mean']:.3f} | "
              f"{r['phase_uniformity_min']:.3f} |" for r in rows]
    return "\n".join(lines) + "\n"


def paired_wins(curves: dict[Cell, dict[str, np.ndarray]], threshold: float,
                metric: str = "return") -> str:
    """Per (K, N), in how many seeds each schedule reached the threshold in fewer env steps
    than sync with the same seed (a run that never reaches it counts as infinitely slow)."""
    def steps(cell: Cell) -> float:
        s = first_crossing(curves[cell], threshold, cell.num_envs, metric)[0] \
            if cell in curves else math.nan
        return math.inf if math.isnan(s) else s

    lines = ["| K | N | schedule | seeds faster than sync (same seed) |", "|---|---|---|---|"]
    for k, n in sorted({(c.rollout_length, c.num_envs) for c in curves}):
        seeds = sorted({c.seed for c in curves if c.group == ("sync", k, n)})
        for schedule in [s for s in COLORS if s != "sync"]:
            pairs = [(Cell(schedule, k, n, seed), Cell("sync", k, n, seed)) for seed in seeds]
            pairs = [(a, b) for a, b in pairs if a in curves]
            if pairs:
                wins = sum(steps(a) < steps(b) for a, b in pairs)
                lines.append(f"| {k} | {n} | {schedule} | {wins}/{len(pairs)} |")
    return "\n".join(lines) + "\n"


def write_summary(curves: dict[Cell, dict[str, np.ndarray]], rows: list[dict], out_dir: Path,
                  threshold: float, budget: int, metric: str = "return") -> None:
    """summary.csv (one row per schedule, K, N) and summary.md (the tables)."""
    with (out_dir / "summary.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (out_dir / "summary.md").write_text(
        markdown_table(rows, threshold, budget, metric) + "\n"
        + paired_wins(curves, threshold, metric) + "\n" + uniformity_table(rows))


# ---------------------------------------------------------------------- policy checks
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
"""Student's t quantile 0.975 for 1..10 degrees of freedom (95 % two-sided intervals)."""


def ci95(values) -> str:
    """``mean ± half-width`` of a 95 % t interval over seeds (the mean alone for one)."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return f"{v.mean():.3g}"
    t = T_975[min(len(v) - 1, len(T_975)) - 1]
    return f"{v.mean():.3g} ± {t * v.std(ddof=1) / math.sqrt(len(v)):.2g}"


def checks_of(curve: dict[str, np.ndarray]) -> np.ndarray:
    """Row indices of a curve's policy checks."""
    return np.flatnonzero(~np.isnan(curve["check_passed"]))


def training_time(curve: dict[str, np.ndarray]) -> np.ndarray:
    """A run's wall-clock at each row in env steps of its own training speed: wall seconds
    over its median seconds per iteration, times the env steps of one iteration.

    A cell's speed moved with the machine's between sittings (2.3k to 8.9k env steps/s),
    more than it differs between schedules in one sitting, so raw seconds compare only runs
    that trained side by side. In this unit a run without a warm-up reads about its env
    steps, and a staggered start adds its warm-up, counted in iterations of training.
    """
    per_iteration = np.median(np.diff(curve["wall_s"]))
    return curve["wall_s"] / per_iteration * np.median(np.diff(curve["env_steps"]))


def first_pass(curve: dict[str, np.ndarray]) -> int | None:
    """Row of the first check that met the criterion; None if none did."""
    return next((i for i in checks_of(curve) if curve["check_passed"][i] == 1.0), None)


def at_criterion(curve: dict[str, np.ndarray]) -> tuple[float, float]:
    """(env steps, training time) of the first check that met the criterion; inf if none
    did (a censored run: it counts as later than any run that got there)."""
    i = first_pass(curve)
    if i is None:
        return math.inf, math.inf
    return float(curve["env_steps"][i]), float(training_time(curve)[i])


def checks_tables(curves: dict[Cell, dict[str, np.ndarray]], study: DictConfig) -> str:
    """The checks' tables: per (K, N, schedule) at equal env steps and at equal training
    time, seeds ahead of sync paired, and every run on its own."""
    bounds = dict(study.criterion)
    shown = ["tracking_error", *(k[4:] for k in bounds if k[4:] != "tracking_error")]
    groups = by_group(curves)
    crit = ", ".join(f"{k[4:]} {'>=' if k.startswith('min') else '<='} {v}"
                     for k, v in bounds.items())
    return "\n".join([
        f"Criterion of the deterministic-policy checks: {crit}. Intervals: 95 % t over "
        "seeds; a run that never met the criterion enters at its budget (>=). Training "
        "time: a run's wall-clock in env steps of its own training speed (its seconds over "
        "its median seconds per iteration, times the env steps of an iteration), which "
        "counts a staggered start's warm-up and not the machine's speed.", "",
        equal_steps_table(groups, shown), equal_time_table(groups, shown),
        paired_table(curves, groups), per_run_table(curves, shown)])


def equal_steps_table(groups: dict[tuple[str, int, int], list[dict]], shown: list[str]) -> str:
    """Per (K, N, schedule): seeds at the criterion, env steps and training time to it, the
    final check's means and the phase uniformity over training."""
    head = " | ".join(shown)
    lines = ["At equal env steps:", "",
             f"| K | N | schedule | at criterion | env steps to it | training time to it | "
             f"final {head} | phase uniformity mean / lowest |",
             "|---|---|---|---|---|---|" + "---|" * len(shown) + "---|"]
    for (schedule, k, n), runs in groups.items():
        to = [at_criterion(r) for r in runs]
        mark = ">= " if any(math.isinf(s) for s, _ in to) else ""
        steps = [s if not math.isinf(s) else float(r["env_steps"][-1])
                 for (s, _), r in zip(to, runs, strict=True)]
        times = [t if not math.isinf(t) else float(training_time(r)[-1])
                 for (_, t), r in zip(to, runs, strict=True)]
        final = [ci95([r[f"check_{m}"][checks_of(r)[-1]] for r in runs]) for m in shown]
        uniformity = [r["phase_uniformity"] for r in runs]
        lines.append(
            f"| {k} | {n} | {schedule} | {sum(not math.isinf(s) for s, _ in to)}/{len(runs)} | "
            f"{mark}{ci95(np.array(steps) / 1e6)}M | {mark}{ci95(np.array(times) / 1e6)}M | "
            + " | ".join(final) + f" | {np.mean([u.mean() for u in uniformity]):.3f} / "
            f"{min(u.min() for u in uniformity) + 0.0:.3f} |")  # + 0.0: no "-0.000"
    return "\n".join(lines) + "\n"


def equal_time_table(groups: dict[tuple[str, int, int], list[dict]], shown: list[str]) -> str:
    """Per (K, N, schedule): the checks' means at the shortest run's training time at that
    K and N (each run's last check within it)."""
    budget: dict[tuple[int, int], float] = {}
    for (_, k, n), runs in groups.items():
        budget[k, n] = min(budget.get((k, n), math.inf),
                           *(float(training_time(r)[-1]) for r in runs))
    lines = ["At equal training time (the last check within the shortest run's training "
             "time at that K and N):", "",
             f"| K | N | schedule | training time | at criterion by then | "
             f"{' | '.join(shown)} |", "|---|---|---|---|---|" + "---|" * len(shown)]
    for (schedule, k, n), runs in groups.items():
        within = budget[k, n]
        last = [max((i for i in checks_of(r) if t[i] <= within), default=checks_of(r)[0])
                for r, t in ((r, training_time(r)) for r in runs)]
        met = sum(at_criterion(r)[1] <= within for r in runs)
        lines.append(f"| {k} | {n} | {schedule} | {within / 1e6:.2f}M | {met}/{len(runs)} | "
                     + " | ".join(ci95([r[f"check_{m}"][i] for r, i in zip(runs, last,
                                                                           strict=True)])
                                  for m in shown) + " |")
    return "\n".join(lines) + "\n"


def paired_table(curves: dict[Cell, dict[str, np.ndarray]],
                 groups: dict[tuple[str, int, int], list[dict]]) -> str:
    """Per (K, N, schedule), against sync with the same seed: seeds that met the criterion
    sooner, and the final tracking error, both as a count of seeds and as the paired
    difference (the final check decides where few runs meet the criterion in the budget)."""
    lines = ["Against sync with the same seed (a censored run is later than any other; ties "
             "are neither; the final difference is the schedule's minus sync's):", "",
             "| K | N | schedule | sooner in env steps | sooner in training time | final "
             "tracking_error lower | final tracking_error difference |",
             "|---|---|---|---|---|---|---|"]
    for schedule, k, n in groups:
        pairs = [(curves[c], curves[sync]) for c in curves if c.group == (schedule, k, n)
                 and schedule != "sync" and (sync := Cell("sync", k, n, c.seed)) in curves]
        if pairs:
            won = [sum(at_criterion(a)[j] < at_criterion(b)[j] for a, b in pairs)
                   for j in (0, 1)]
            diff = np.array([a["check_tracking_error"][checks_of(a)[-1]]
                             - b["check_tracking_error"][checks_of(b)[-1]] for a, b in pairs])
            lines.append(f"| {k} | {n} | {schedule} | {won[0]}/{len(pairs)} | "
                         f"{won[1]}/{len(pairs)} | {int((diff < 0).sum())}/{len(pairs)} | "
                         f"{ci95(diff)} |")
    return "\n".join(lines) + "\n"


def per_run_table(curves: dict[Cell, dict[str, np.ndarray]], shown: list[str]) -> str:
    """Every run: its first check at the criterion in env steps, seconds and training time,
    its speed, the final check's means and its phase uniformity over training."""
    lines = ["Every run (seconds compare only runs that trained side by side):", "",
             f"| K | N | schedule | seed | env steps to it | wall-clock to it (s) | training "
             f"time to it | env steps/s | final {' | '.join(shown)} | phase uniformity mean "
             "/ lowest |", "|---|---|---|---|---|---|---|---|" + "---|" * len(shown) + "---|"]
    for cell in sorted(curves, key=lambda c: (c.rollout_length, c.num_envs, c.seed,
                                              list(COLORS).index(c.schedule))):
        r = curves[cell]
        i = first_pass(r)
        to = (f"{r['env_steps'][i] / 1e6:.2f}M | {r['wall_s'][i]:,.0f} | "
              f"{training_time(r)[i] / 1e6:.2f}M" if i is not None else "never | - | -")
        speed = np.median(np.diff(r["env_steps"])) / np.median(np.diff(r["wall_s"]))
        final = " | ".join(f"{r[f'check_{m}'][checks_of(r)[-1]]:.3f}" for m in shown)
        u = r["phase_uniformity"]
        lines.append(f"| {cell.rollout_length} | {cell.num_envs} | {cell.schedule} | "
                     f"{cell.seed} | {to} | {speed:,.0f} | {final} | {u.mean():.3f} / "
                     f"{u.min() + 0.0:.3f} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- figures
def by_group_cells(curves: dict[Cell, dict]) -> dict[tuple[str, int, int], list[Cell]]:
    """Cells by (schedule, K, N), ordered by K, N and schedule, seeds in order."""
    groups: dict[tuple[str, int, int], list[Cell]] = {}
    order = list(COLORS)
    for cell in sorted(curves, key=lambda c: (c.rollout_length, c.num_envs,
                                              order.index(c.schedule), c.seed)):
        groups.setdefault(cell.group, []).append(cell)
    return groups


def by_group(curves: dict[Cell, dict]) -> dict[tuple[str, int, int], list[dict]]:
    return {g: [curves[c] for c in cells] for g, cells in by_group_cells(curves).items()}


def plot_metric(curves: dict[Cell, dict], x: str, threshold: float, path: Path,
                 metric: str = "return") -> None:
    """``metric`` (the return, or the success rate) vs ``x`` (env_steps or training_time):
    one panel per (K, N), one band per schedule."""
    import matplotlib.pyplot as plt

    groups = by_group(curves)
    ks = sorted({k for _, k, _ in groups})
    ns = sorted({n for _, _, n in groups})
    fig, axes = plt.subplots(len(ks), len(ns), figsize=(4 * len(ns), 3 * len(ks)),
                             squeeze=False, sharey=True)
    for (schedule, k, n), runs in groups.items():
        ax = axes[ks.index(k)][ns.index(n)]
        grid, mean, low, high = mean_band(runs, x, metric)
        ax.plot(grid, mean, color=COLORS[schedule], label=schedule)
        ax.fill_between(grid, low, high, color=COLORS[schedule], alpha=0.2, linewidth=0)
        ax.axhline(threshold, color="k", linestyle=":", linewidth=0.8)
        ax.set_title(f"K = {k}, N = {n}")
    label = x.replace("_", " ")
    for ax in axes[-1]:
        ax.set_xlabel(label if x == "env_steps" else f"{label} (env steps)")
    for row in axes:
        row[0].set_ylabel(f"episode {metric}")
    axes[0][0].legend(loc="lower right", fontsize="small")
    fig.suptitle(f"{metric.capitalize()} vs {label}: mean over seeds, band = min..max")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_phase_histograms(curves: dict[Cell, dict], iterations: int, path: Path) -> None:
    """Episode-phase histogram of every batch over the first iterations, per schedule."""
    import matplotlib.pyplot as plt

    k, n = min(c.rollout_length for c in curves), min(c.num_envs for c in curves)
    seed = min(c.seed for c in curves)
    cells = sorted((c for c in curves if (c.rollout_length, c.num_envs, c.seed) == (k, n, seed)),
                   key=lambda c: list(COLORS).index(c.schedule))
    fig, axes = plt.subplots(1, len(cells), figsize=(4.5 * len(cells), 3.2), squeeze=False)
    for ax, cell in zip(axes[0], cells, strict=True):
        curve = curves[cell]
        bins = sorted(c for c in curve if c.startswith("phase_") and c[6:].isdigit())
        hist = np.stack([curve[b][:iterations] for b in bins])
        image = ax.imshow(hist, aspect="auto", origin="lower", cmap="viridis", vmin=0,
                          extent=(0.5, hist.shape[1] + 0.5, 0.0, 1.0))
        ax.set_title(f"{cell.schedule} (uniformity "
                     f"{curve['phase_uniformity'][:iterations].mean():.2f})")
        ax.set_xlabel("iteration")
        ax.set_ylabel("episode phase t / H")
        fig.colorbar(image, ax=ax, label="share of batch")
    fig.suptitle(f"Where in the episode each batch's steps come from (K = {k}, N = {n}, "
                 f"seed {seed})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_critic(curves: dict[Cell, dict], path: Path) -> None:
    """Value loss and explained variance over env steps at the smallest K, per N."""
    import matplotlib.pyplot as plt

    groups = by_group(curves)
    k = min(k for _, k, _ in groups)
    ns = sorted({n for _, _, n in groups})
    fig, axes = plt.subplots(2, len(ns), figsize=(4 * len(ns), 5.5), squeeze=False,
                             sharex="col")
    for (schedule, kk, n), runs in groups.items():
        if kk != k:
            continue
        for row, metric in enumerate(("value_loss", "explained_variance")):
            grid, mean, _, _ = mean_band(runs, "env_steps", metric, points=400)
            axes[row][ns.index(n)].plot(grid, mean, color=COLORS[schedule], label=schedule,
                                        linewidth=0.8)
    for col, n in enumerate(ns):
        axes[0][col].set_title(f"K = {k}, N = {n}")
        axes[0][col].set_yscale("log")
        axes[1][col].set_ylim(-1.0, 1.0)
        axes[1][col].set_xlabel("env steps")
    axes[0][0].set_ylabel("value loss")
    axes[1][0].set_ylabel("explained variance")
    axes[0][0].legend(fontsize="small")
    fig.suptitle("Critic over training (mean over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_scaling(rows: list[dict], path: Path, metric: str = "return") -> None:
    """Final ``metric`` and env steps to threshold against N, one line per (schedule, K)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    ks = sorted({r["K"] for r in rows})
    for schedule in COLORS:
        for k in ks:
            sel = sorted((r for r in rows if r["schedule"] == schedule and r["K"] == k),
                         key=lambda r: r["N"])
            if not sel:
                continue
            style = {"color": COLORS[schedule], "linestyle": LINESTYLES[ks.index(k) % 4],
                     "marker": "o", "capsize": 3, "label": f"{schedule} K={k}"}
            ns = [r["N"] for r in sel]
            axes[0].errorbar(ns, [r[f"final_{metric}_mean"] for r in sel],
                             [r[f"final_{metric}_std"] for r in sel], **style)
            axes[1].errorbar(ns, [r["steps_to_threshold_mean"] for r in sel],
                             [r["steps_to_threshold_std"] for r in sel], **style)
    axes[0].set_ylabel(f"final {metric}")
    axes[1].set_ylabel("env steps to threshold (seeds that reached it)")
    all_ns = sorted({r["N"] for r in rows})
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(all_ns, [str(n) for n in all_ns])
        ax.set_xlim(all_ns[0] / 1.3, all_ns[-1] * 1.3)
        ax.set_xlabel("N (parallel envs)")
    if any(r["reached"] for r in rows):  # log scale needs at least one finite value
        axes[1].set_yscale("log")
    axes[0].legend(fontsize="x-small", ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def finished_curves(cfg: DictConfig, out_dir: Path) -> dict[Cell, dict[str, np.ndarray]]:
    """The curves of the grid's cells that have finished, by cell."""
    return {c: read_csv(path) for c in grid_cells(cfg)
            if (path := curve_path(out_dir, c.name)).exists()}


def compared_curves(cfg: DictConfig, out_dir: Path) -> dict[Cell, dict[str, np.ndarray]]:
    """The finished curves of the entry named by ``compare_with`` (its own grid, in its
    folder beside ``out_dir``), so an entry of variants reports them beside the schedules
    they vary, sync included; none where the entry names none."""
    name = study_settings(cfg).get("compare_with")
    if name is None:
        return {}
    other = cfg.copy()
    with open_dict(other):
        other.entry = name
        other.grid = {"schedules": list(other.study[name].schedules),
                      "rollout_lengths": list(other.study[name].rollout_lengths)}
    return finished_curves(other, out_dir.parent / name)


def report(cfg: DictConfig, out_dir: Path) -> None:
    """Summary tables and figures from the finished curves of this study in ``out_dir`` (a
    grid still running is summarized as far as it got)."""
    import matplotlib

    matplotlib.use("Agg")
    study = study_settings(cfg)
    threshold, metric = float(study.threshold), metric_of(study)
    curves = finished_curves(cfg, out_dir)
    if not curves:
        print(f"no finished runs in {out_dir} yet")
        return
    rows = summarize(curves, threshold, metric)
    budget = max(cell_budget(study, c) for c in curves)
    write_summary(curves, rows, out_dir, threshold, budget, metric)
    if "criterion" in study:
        (out_dir / "checks.md").write_text(
            checks_tables({**compared_curves(cfg, out_dir), **curves}, study))
    timed = {c: {**curve, "training_time": training_time(curve)} for c, curve in curves.items()}
    for x in ("env_steps", "training_time"):
        plot_metric(timed, x, threshold, out_dir / f"{metric}_vs_{x}.png", metric)
    plot_phase_histograms(curves, int(cfg.histogram_iterations), out_dir / "phase_histogram.png")
    plot_critic(curves, out_dir / "critic.png")
    plot_scaling(rows, out_dir / "scaling_with_n.png", metric)


@hydra.main(config_path="configs", config_name="stagger_study", version_base="1.3")
def main(cfg: DictConfig) -> None:
    out_dir = Path(to_absolute_path(cfg.out_dir))
    if not cfg.report_only:
        start = time.perf_counter()
        ran = run_grid(cfg, out_dir, int(cfg.jobs))
        print(f"ran {len(ran)} of {len(grid_cells(cfg))} runs in "
              f"{time.perf_counter() - start:.0f} s")
    report(cfg, out_dir)
    print(f"figures and summary in {out_dir}")


if __name__ == "__main__":
    main()
