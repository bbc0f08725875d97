"""Time to walk of the default training config and of variants of it, several seeds each.

Every run is ``scripts/benchmark_train.py`` with a variant's overrides and a seed: the
deterministic policy is checked every 25 iterations, and the run stops at the first check
that walks (tracking error <= 0.15 m/s, survival >= 95 %), or unwalked (censored) at the
first check past ``max_env_steps``. With ``jobs=2`` two runs train at
once, each pinned to a core, so the env-step counts compare across variants and the
wall-clock compares between runs that trained side by side (not with a run that had the
whole machine). Each result records the boot of the machine it ran on: machines of the
same 2-core type have trained about three times as fast as one another, so wall-clock is
compared only between runs of one boot. Results: ``<out_dir>/runs/<variant>_s<seed>.json``
(the script's result, a run whose file exists is skipped) and ``<out_dir>/summary.md``.

    python -m research.walk_ablation run=all
    python -m research.walk_ablation run=[default,num_envs_256] seeds=[0,1,2,3,4]
    python -m research.walk_ablation report_only=true
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path

import hydra
import numpy as np
from hydra.utils import to_absolute_path
from omegaconf import DictConfig

from research.study import run_jobs

ROOT = Path(__file__).resolve().parents[1]


def machine_boot() -> int | None:
    """When this machine booted (Linux: /proc/stat's btime, seconds since the epoch), which
    tells runs of one sitting of one machine from those of another; None elsewhere."""
    try:
        stat = Path("/proc/stat").read_text()
    except OSError:
        return None
    return next((int(line.split()[1]) for line in stat.splitlines()
                 if line.startswith("btime ")), None)


def selected(cfg: DictConfig) -> list[str]:
    """The variants to train: ``run`` (``all``: every variant), checked against ``variants``."""
    names = list(cfg.variants) if cfg.run == "all" else list(cfg.run)
    unknown = [n for n in names if n not in cfg.variants]
    if unknown:
        raise ValueError(f"unknown variants {unknown}; valid: {list(cfg.variants)}")
    return names


def result_path(out_dir: Path, variant: str, seed: int) -> Path:
    return out_dir / "runs" / f"{variant}_s{seed}.json"


def train(job: tuple[str, list[str], int, int | None, Path, Path]) -> tuple[str, int, dict]:
    """One run of scripts/benchmark_train.py; its result, with the overrides, to a JSON."""
    variant, overrides, seed, max_env_steps, out_dir, runs_dir = job
    cap = "null" if max_env_steps is None else max_env_steps
    args = [*overrides, f"seed={seed}", f"max_env_steps={cap}",
            f"hydra.run.dir={runs_dir / f'{variant}_s{seed}'}"]
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "benchmark_train.py"), *args],
                          cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{variant} seed {seed} failed:\n{done.stderr[-2000:]}")
    result = {**json.loads(done.stdout.strip().splitlines()[-1]), "variant": variant,
              "seed": seed, "overrides": list(overrides), "machine_boot": machine_boot()}
    run_dir = Path(result["run_dir"])
    if run_dir.is_relative_to(ROOT):  # results name the checkout's folders relative to it
        result["run_dir"] = str(run_dir.relative_to(ROOT))
    path = result_path(out_dir, variant, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    return variant, seed, result


def run_ablation(cfg: DictConfig, out_dir: Path, runs_dir: Path) -> None:
    cap = None if cfg.max_env_steps is None else int(cfg.max_env_steps)
    work = [(v, list(cfg.variants[v]), int(s), cap, out_dir, runs_dir)
            for s in cfg.seeds for v in selected(cfg)
            if not result_path(out_dir, v, int(s)).exists()]
    for variant, seed, result in run_jobs(train, work, int(cfg.jobs)):
        steps = result["env_steps_to_walk"]
        print(f"{variant} seed {seed}: "
              + (f"walked at {steps / 1e6:.2f}M env steps, {result['wall_s_to_walk']:.0f} s"
                 if steps else "did not walk"), flush=True)


def baseline(name: str, variants: DictConfig, run: Collection[str]) -> str | None:
    """The variant ``name`` changes the least of among those that have runs (``run``): the
    one whose overrides are the most of its own (``epochs_2`` = ``no_symmetry`` + one
    setting); None for the default."""
    own = set(variants[name])
    below = [v for v in variants if v in run and set(variants[v]) < own]
    return max(below, key=lambda v: len(variants[v])) if below else None


def same_sitting(a: dict, b: dict) -> bool:
    """Whether two runs' wall-clock compare: they ran on one boot of one machine (results
    from before the boot was recorded were each compared with runs of their own sitting)."""
    return a.get("machine_boot") == b.get("machine_boot")


def summary(results: list[dict], variants: DictConfig) -> str:
    """One row per variant: env steps and wall-clock to walk per seed and their medians (a
    run that never walked counts as later than any that did), seeds that walked sooner
    than its baseline with the same seed (in env steps; in wall-clock where both ran on one
    boot of one machine), throughput and the learner's share."""
    by_variant: dict[str, dict[int, dict]] = {}
    for r in results:
        by_variant.setdefault(r["variant"], {})[r["seed"]] = r

    def steps(r: dict) -> float:
        return r["env_steps_to_walk"] or math.inf

    def wall(r: dict) -> float:
        return r["wall_s_to_walk"] or math.inf

    lines = ["| variant | overrides | env steps to walk (per seed) | median | median wall-clock "
             "| sooner than its baseline (same seed): env steps, wall-clock | env steps/s "
             "| learn fraction |",
             "|---|---|---|---|---|---|---|---|"]
    for name in [v for v in variants if v in by_variant]:
        runs = by_variant[name]
        seeds = sorted(runs)
        per_seed = " ".join(f"s{s}:{steps(runs[s]) / 1e6:.2f}M" if runs[s]["walked"]
                            else f"s{s}:never" for s in seeds)
        walls = [wall(runs[s]) for s in seeds]
        base_name = baseline(name, variants, by_variant)
        base = by_variant.get(base_name, {})
        paired = [s for s in seeds if s in base]
        timed = [s for s in paired if same_sitting(runs[s], base[s])]
        sooner_wall = (f"{sum(wall(runs[s]) < wall(base[s]) for s in timed)}/{len(timed)}"
                       if timed else "other sittings")
        sooner = (f"{base_name}: {sum(steps(runs[s]) < steps(base[s]) for s in paired)}"
                  f"/{len(paired)}, {sooner_wall}" if paired else "-")
        lines.append(
            f"| {name} | {' '.join(variants[name]) or '-'} | {per_seed} | "
            f"{np.median([steps(runs[s]) for s in seeds]) / 1e6:.2f}M | {np.median(walls):.0f} s | "
            f"{sooner} | {np.mean([runs[s]['env_steps_per_s'] for s in seeds]):,.0f} | "
            f"{np.mean([runs[s]['learn_fraction'] for s in seeds]):.2f} |")
    return "\n".join(lines) + "\n"


def report(cfg: DictConfig, out_dir: Path) -> None:
    results = [json.loads(p.read_text()) for p in sorted((out_dir / "runs").glob("*.json"))]
    if not results:
        print(f"no finished runs in {out_dir} yet")
        return
    (out_dir / "summary.md").write_text(summary(results, cfg.variants))
    print((out_dir / "summary.md").read_text())


@hydra.main(config_path="configs", config_name="walk_ablation", version_base="1.3")
def main(cfg: DictConfig) -> None:
    out_dir = Path(to_absolute_path(cfg.out_dir))
    if not cfg.report_only:
        run_ablation(cfg, out_dir, Path(to_absolute_path(cfg.runs_dir)))
    report(cfg, out_dir)


if __name__ == "__main__":
    main()
