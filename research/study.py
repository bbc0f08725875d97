"""What the studies share: their configs, curve CSVs that make a grid resumable, runs spread
over pinned cores, and the seed bands their figures draw.

A study trains many independent runs with the same budget and compares their curves. Each
run writes its curve once, atomically, when it finishes, so a CSV that exists is a finished
run and an interrupted study resumes by skipping those. Beside the curve it keeps the
settings the run was trained with, so a study asked to run with other settings stops
instead of reporting the old curve as the new experiment.

Curves are written xz-compressed (``<name>.csv.xz``), as results are kept; the readers here
take gzipped and plain files as well (older results, ``progress.jsonl``), and a study finds a
curve kept in either form as it finds its own.
"""

from __future__ import annotations

import csv
import gzip
import json
import lzma
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

# The studies' configs. Each names the package's configs (pkg://locomotion.configs) as its
# search path, so robot=, task=, algo= ... resolve as in the package's commands.
CONFIG_DIR = Path(__file__).resolve().parent / "configs"

# What decides a run's outcome: a curve or checkpoint made under other values of these is
# another experiment. Not here: how it logs, and where it runs (device, thread counts),
# which changes results only by rounding.
RUN_KEYS = ("seed", "num_envs", "robot", "terrain", "randomization", "multitask", "task",
            "reset", "solver", "algo")


def load_config(name: str, overrides: list[str] | None = None) -> DictConfig:
    """The study config ``research/configs/<name>.yaml`` with Hydra command-line style
    ``overrides`` (what ``python -m research.<study> <overrides>`` would run)."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name=name, overrides=overrides or [])


# How a file is opened by the suffix of its name: results are kept xz-compressed, older ones
# gzipped; any other name is plain text.
COMPRESSED = {".xz": lzma.open, ".gz": gzip.open}


def _opener(path: Path) -> Callable:
    return COMPRESSED.get(Path(path).suffix, open)


def uncompressed(path: Path) -> Path:
    """``path`` without its compression suffix (``a.csv.xz`` -> ``a.csv``)."""
    path = Path(path)
    return path.with_suffix("") if path.suffix in COMPRESSED else path


def stored(path: Path) -> Path:
    """``path``, or its compressed copy (``<path>.xz``, ``<path>.gz``) where only that is
    kept."""
    path = Path(path)
    if path.exists() or path.suffix in COMPRESSED:
        return path
    copies = (path.with_name(path.name + suffix) for suffix in COMPRESSED)
    return next((copy for copy in copies if copy.exists()), path)


def open_text(path: Path, mode: str = "r"):
    """A text file, decompressed as the suffix of its name says (``.xz``, ``.gz``)."""
    return _opener(path)(path, mode + "t", newline="")


def read_jsonl(path: Path) -> list[dict]:
    """One dict per line of a ``progress.jsonl`` (or its ``.xz``, ``.gz``)."""
    with open_text(stored(path)) as f:
        return [json.loads(line) for line in f if line.strip()]


def run_settings(cfg: DictConfig) -> dict:
    """The resolved values of ``RUN_KEYS`` in ``cfg``, as JSON would give them back."""
    values = {k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k])
              else cfg[k] for k in RUN_KEYS}
    return json.loads(json.dumps(values))


# Settings the package gained after runs were kept, each with the value under which it
# changes nothing: a run saved without the key matches that value only. A task saved
# without ``fall_tilt`` reads it as its ``max_tilt``, 1.0 in every task kept before it.
ADDED_SETTINGS = {"algo.symmetry": False, "task.rewards.weights.fallen": 0.0,
                  "task.rewards.fall_tilt": 1.0, "algo.ppo.precision": "float32",
                  "algo.ppo.mirror_critic": True}


def changed_settings(saved: dict, wanted: dict, prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two ``run_settings``, down to the
    leaves, so an error can say which setting changed (``multitask.noise``)."""
    changed = []
    for k in sorted(saved.keys() | wanted.keys()):
        a, b = saved.get(k), wanted.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            changed += changed_settings(a, b, f"{prefix}{k}.")
            continue
        key = f"{prefix}{k}"
        added_later = k not in saved and key in ADDED_SETTINGS and ADDED_SETTINGS[key] == b
        if a != b and not added_later:
            changed.append(key)
    return changed


SHARED = "shared.txt"  # in a study's curves/: its runs whose curves another study keeps


def shared_curves(out_dir: Path) -> list[Path]:
    """The curves listed in ``<out_dir>/curves/shared.txt``, one path per line relative to
    that directory (``#`` starts a comment): a study that reuses runs of another (the same
    seed and settings, such as the uniform runs of a study that changes only the
    scheduler's knobs) reads their curves and settings where they are kept, not copies."""
    listing = Path(out_dir) / "curves" / SHARED
    if not listing.exists():
        return []
    lines = (line.split("#")[0].strip() for line in listing.read_text().splitlines())
    return [listing.parent / line for line in lines if line]


def study_curves(out_dir: Path) -> list[Path]:
    """Every curve of a study: its own (plain or compressed) and those it shares."""
    return sorted(Path(out_dir).glob("curves/*.csv*")) + shared_curves(out_dir)


def curve_path(out_dir: Path, name: str) -> Path:
    """Where run ``name`` of a study writing to ``out_dir`` keeps its curve: ``.csv.xz``, or
    the plain or gzipped one an older study kept there, or the one it shares with another
    study. A curve found nowhere (a listed one missing too) is written to ``out_dir``,
    never into another study."""
    plain = Path(out_dir) / "curves" / f"{name}.csv"
    kept = stored(plain)
    if kept.exists():
        return kept
    shared = [c for c in shared_curves(out_dir)
              if uncompressed(c).name == plain.name and c.exists()]
    return shared[0] if shared else plain.with_name(plain.name + ".xz")


def settings_path(curve: Path) -> Path:
    """Where the settings of the run that drew ``curve`` are kept: beside it, as JSON
    (``<name>.settings.json``, compressed as the curve is; ``stored`` finds either form)."""
    return uncompressed(curve).with_suffix(".settings.json")


def compressed_as(path: Path, like: Path) -> Path:
    """``path`` with the compression suffix of ``like``, if it has one."""
    suffix = Path(like).suffix
    return path.with_name(path.name + suffix) if suffix in COMPRESSED else path


def _write_atomically(path: Path, write: Callable) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with _opener(path)(tmp, "wt", newline="") as f:  # compressed as ``path`` says
        write(f)
    os.replace(tmp, path)


def write_csv(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` atomically, so a CSV that exists is always a finished run (compressed
    where ``path`` ends in ``.xz`` or ``.gz``)."""
    def write(f) -> None:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: f"{v:.6g}" if isinstance(v, float) else v for k, v in row.items()})
    _write_atomically(path, write)


def write_curve(path: Path, rows: list[dict], settings: dict) -> None:
    """A finished run's curve and, first, its settings: a curve never lacks them."""
    _write_atomically(compressed_as(settings_path(path), path),
                      lambda f: json.dump(settings, f, indent=1))
    write_csv(path, rows)


def read_csv(path: Path) -> dict[str, np.ndarray]:
    """A curve CSV (or ``.csv.xz``, ``.csv.gz``) as one float array per column."""
    with open_text(stored(path)) as f:
        rows = list(csv.DictReader(f))
    return {k: np.array([float(r[k]) for r in rows]) for k in rows[0]}


def first_difference(a: dict[str, np.ndarray], b: dict[str, np.ndarray],
                     ignore: tuple[str, ...] = ("wall_s",)) -> int | None:
    """Index of the first row where two curves differ in a shared column (NaN equals NaN),
    over their common length; None where they agree. Columns in ``ignore`` (timings) are
    expected to differ."""
    rows = min(len(next(iter(a.values()))), len(next(iter(b.values()))))
    differs = np.zeros(rows, dtype=bool)
    for k in (a.keys() & b.keys()) - set(ignore):
        x, y = a[k][:rows], b[k][:rows]
        differs |= ~((x == y) | (np.isnan(x) & np.isnan(y)))
    return int(np.argmax(differs)) if differs.any() else None


def finished(path: Path, column: str, budget: int, unit: str, settings: dict) -> bool:
    """Whether ``path`` holds a finished run of ``settings``. One that ran another budget or
    other settings is an error, so a changed study never mixes experiments in one table.
    A curve kept without settings (from before they were kept) is taken as it is."""
    if not path.exists():
        return False
    done = int(read_csv(path)[column][-1])
    if done != budget:
        raise ValueError(f"{path} ran {done} {unit}, the study asks {budget}: remove it or "
                         "pick another out_dir")
    saved = stored(settings_path(path))
    if not saved.exists():
        return True
    with open_text(saved) as f:
        changed = changed_settings(json.load(f), settings)
    if changed:
        raise ValueError(f"{path} was trained with other {changed} than the study asks: "
                         "remove it or pick another out_dir")
    return True


def _pin_to_core(cores) -> None:
    """Pool initializer: give this worker a core of its own where the OS allows it."""
    core = cores.get()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})


def run_jobs(fn: Callable, work: Iterable, jobs: int = 1) -> Iterator:
    """``fn(item)`` for every item, ``jobs`` at a time, yielding results as they finish.

    With ``jobs`` > 1 each worker process is pinned to its own core (Linux), so runs do not
    share a core and their wall-clock curves stay comparable; ``fn`` must be importable by
    the spawned workers. A killed study (SIGTERM, Ctrl-C) stops its workers too instead of
    leaving them to finish runs nobody collects.
    """
    from locomotion.rl.runner import sigterm_as_interrupt  # not needed to read results

    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    work = list(work)
    if jobs == 1 or len(work) <= 1:
        yield from map(fn, work)
        return
    ctx = multiprocessing.get_context("spawn")
    cores = ctx.Queue()
    available = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    for i in range(jobs):
        cores.put(available[i % len(available)] if available else i)
    with sigterm_as_interrupt(), ctx.Pool(jobs, initializer=_pin_to_core,
                                          initargs=(cores,)) as pool:
        yield from pool.imap_unordered(fn, work)


def mean_band(curves: list[dict[str, np.ndarray]], x: str, y: str, points: int = 200,
              fill: float | None = 0.0):
    """Seeds interpolated onto a common x grid: (x, mean, min, max). NaN counts as ``fill``;
    with ``fill=None`` a point where any seed lacks a value is missing (a gap)."""
    end = min(c[x][-1] for c in curves)
    grid = np.linspace(min(c[x][0] for c in curves), end, points)
    ys = np.stack([np.interp(grid, c[x], c[y] if fill is None else np.nan_to_num(c[y], nan=fill))
                   for c in curves])
    return grid, ys.mean(0), ys.min(0), ys.max(0)
