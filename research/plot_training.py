"""Plot a training run's learning curve: return and tracking error against env steps and wall-clock.

Reads ``progress.jsonl`` (every iteration) and, when present, ``curve.csv`` (the walk checks
of scripts/benchmark_train.py) from a run folder, plain or compressed (``.xz``, ``.gz``);
several runs can be overlaid.

    python -m research.plot_training runs/benchmark_train/<run> \
        --out docs/figures/training_curve.png
    python -m research.plot_training RUN_A RUN_B --labels ours rsl_rl \
        --out docs/figures/peer_rsl_rl.png
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from research.study import open_text, read_jsonl, stored  # noqa: E402


def load_run(run: Path) -> tuple[list[dict], list[dict]]:
    progress = read_jsonl(run / "progress.jsonl")
    checks = []
    if (curve := stored(run / "curve.csv")).is_file():
        with open_text(curve) as f:
            checks = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]
    return progress, checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--labels", nargs="*")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    labels = args.labels or [r.name for r in args.runs]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for run, label in zip(args.runs, labels, strict=True):
        progress, checks = load_run(run)
        rows = [p for p in progress if "Episode/return" in p]
        steps = [p["env_steps"] / 1e6 for p in rows]
        wall = [p["Perf/wall_s"] / 60 for p in rows]
        ret = [p["Episode/return"] for p in rows]
        axes[0, 0].plot(steps, ret, label=label)
        axes[0, 1].plot(wall, ret, label=label)
        if checks:
            c_steps = [c["env_steps"] / 1e6 for c in checks]
            c_wall = [c["wall_s"] / 60 for c in checks]
            err = [c["tracking_error"] for c in checks]
            axes[1, 0].plot(c_steps, err, "o-", label=label)
            axes[1, 1].plot(c_wall, err, "o-", label=label)
    for ax in axes[1]:
        ax.axhline(0.15, color="gray", linestyle="--", linewidth=1, label="walk threshold")
        ax.set_ylabel("eval tracking error (m/s)")
    for ax in axes[0]:
        ax.set_ylabel("training episode return")
    for ax in axes[:, 0]:
        ax.set_xlabel("env steps (millions)")
    for ax in axes[:, 1]:
        ax.set_xlabel("training wall-clock (min)")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
