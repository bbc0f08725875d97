"""PNG figures of a robustness report: survival and tracking error per axis, grid heatmaps.

Drawn from the report dict alone (one line per policy, 95 % bands), so figures can be
redrawn from a saved report.json. Needs matplotlib (``pip install 'locomotion[plot]'``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


def _series(rows: list[dict], key: str, ci_key: str | None) -> tuple[np.ndarray, ...]:
    def val(x):
        return np.nan if x is None else x

    y = np.array([val(r[key]) for r in rows], dtype=float)
    if ci_key is None:
        return y, y, y
    lo = np.array([val(r[ci_key][0]) for r in rows], dtype=float)
    hi = np.array([val(r[ci_key][1]) for r in rows], dtype=float)
    return y, lo, hi


def sweep_figure(name: str, sweep: dict, out_dir: Path, threshold: float) -> Path:
    """Survival (Wilson band) and planar tracking error (band of the mean) against levels."""
    plt = _pyplot()
    levels = sweep["levels"]
    categorical = sweep["harder"] == "none"
    x = np.arange(len(levels)) if categorical else np.array(levels, dtype=float)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    panels = (("survival", "survival_ci", "survival", (-0.02, 1.02)),
              ("lin_vel_error", "lin_vel_error_ci", "lin. vel. tracking error (m/s)", None))
    for ax, (key, ci, ylabel, ylim) in zip(axes, panels, strict=True):
        for label, result in sweep["policies"].items():
            y, lo, hi = _series(result["levels"], key, ci)
            if categorical:
                line = ax.errorbar(x, y, yerr=[y - lo, hi - y], marker="o", capsize=4,
                                   linestyle="none", label=label)
            else:
                (line,) = ax.plot(x, y, marker="o", label=label)
                ax.fill_between(x, lo, hi, alpha=0.2, color=line.get_color())
        if key == "survival":
            ax.axhline(threshold, color="grey", linestyle=":", linewidth=1)
        title = f"{sweep['label']} ({sweep['unit']})" if sweep["unit"] else sweep["label"]
        ax.set_xlabel(title)
        ax.set_ylabel(ylabel)
        if categorical:
            ax.set_xticks(x, [str(v) for v in levels])
        if ylim:
            ax.set_ylim(*ylim)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="lower left" if sweep["harder"] != "down" else "lower right")
    fig.tight_layout()
    path = out_dir / f"sweep_{name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def grid_figure(name: str, grid: dict, out_dir: Path) -> Path:
    """One survival heatmap per policy, side by side, cells annotated."""
    plt = _pyplot()
    (la, lb), (ta, tb) = grid["levels"], grid["labels"]
    policies = list(grid["policies"].items())
    fig, axes = plt.subplots(1, len(policies), figsize=(4.6 * len(policies), 4), squeeze=False)
    image = None
    for ax, (label, result) in zip(axes[0], policies, strict=True):
        z = np.array([[np.nan if c["survival"] is None else c["survival"] for c in row]
                      for row in result["cells"]])
        image = ax.imshow(z, origin="lower", cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto")
        for i in range(len(la)):
            for j in range(len(lb)):
                ax.text(j, i, f"{z[i, j]:.2f}", ha="center", va="center", fontsize=9)
        ax.set_xticks(range(len(lb)), [f"{v:g}" for v in lb])
        ax.set_yticks(range(len(la)), [f"{v:g}" for v in la])
        ax.set_xlabel(tb)
        ax.set_ylabel(ta)
        ax.set_title(f"{label}: survival")
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.85)
    path = out_dir / f"grid_{name}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def write_figures(report: dict, out_dir: Path) -> dict[str, list[str]]:
    """Every figure of ``report`` in ``out_dir``; file names per sweep/grid (for report.md)."""
    threshold = float(report["suite"]["survival_threshold"])
    figures = {name: [sweep_figure(name, s, out_dir, threshold).name]
               for name, s in report["sweeps"].items()}
    figures.update({name: [grid_figure(name, g, out_dir).name]
                    for name, g in report["grids"].items()})
    return figures
