"""Write a robustness report: report.json (every number) and report.md (the tables).

Both are made from the report dict alone, so a report can be re-rendered from its JSON.
Timing and the command line are passed in separately: they belong to the Markdown page
(what a reader wants to know) but not to the JSON (which must not change between runs).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

JSON_FILE = "report.json"
MARKDOWN_FILE = "report.md"


def write_json(report: dict, out_dir: Path) -> Path:
    path = out_dir / JSON_FILE
    path.write_text(json.dumps(report, indent=1, sort_keys=False) + "\n")
    return path


def _num(x, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _level(x) -> str:
    return f"{x:g}" if isinstance(x, float | int) else str(x)


def format_margin(margin: dict | None, unit: str) -> str:
    """``2.0 m/s``, ``≥ 3.0`` (the sweep ended first), ``fails at nominal``; ranges for
    axes that are harder both ways."""
    if margin is None:
        return "–"
    u = f" {unit}" if unit and not unit.startswith("x ") else ""

    def one(value, beyond: bool, sign: str) -> str:
        if value is None:
            return "fails at nominal"
        return f"{sign}{_level(value)}" if beyond else _level(value)

    if margin["harder"] == "both":
        if margin["low"] is None:
            return "fails at nominal"
        return (f"{one(margin['low'], margin['low_beyond'], '≤ ')} … "
                f"{one(margin['high'], margin['high_beyond'], '≥ ')}{u}")
    sign = "≥ " if margin["harder"] == "up" else "≤ "
    text = one(margin["value"], margin["beyond"], sign)
    return text if margin["value"] is None else text + u


def _nominal(axis: str, nominal) -> str:
    """The nominal setting of an axis that has no nominal level among its levels."""
    if nominal is not None:
        return _level(nominal)
    return {"command": "sampled", "terrain": "flat ground"}.get(axis, "–")


def _survival(row: dict) -> str:
    low, high = row["survival_ci"]
    return f"{row['survival']:.3f} [{low:.3f}, {high:.3f}]"


def _recovery(row: dict) -> str:
    if row["recovery_time"] is None:
        return "–"
    share = row["recovered"]
    return f"{row['recovery_time']:.2f} ({share:.0%})" if share is not None and share < 1 \
        else f"{row['recovery_time']:.2f}"


def markdown(report: dict, timing: Sequence[str] = (), command: str | None = None,
             figures: dict[str, list[str]] | None = None) -> str:
    """The report as a Markdown page: margins first, then one table per axis and grid."""
    suite = report["suite"]
    labels = [p["label"] for p in report["policies"]]
    lines = [f"# Robustness report: suite `{suite['name']}`", ""]
    if command:
        lines += ["```bash", command, "```", ""]
    eps = {row["episodes"] for s in report["sweeps"].values()
           for r in s["policies"].values() for row in r["levels"]}
    lines += [
        f"Seed {report['seed']}; {suite['episode_length_s']:g} s episodes, all started "
        f"together; {'/'.join(str(e) for e in sorted(eps)) or suite['episodes_per_level']} "
        f"episodes per level; physics `{report['sim']['backend']}` on "
        f"`{report['sim']['device']}`. Survival is the share of episodes that reach the time "
        f"limit without a failure, with its 95 % Wilson interval; the margin is the farthest "
        f"level from nominal, in the harder direction, with survival ≥ "
        f"{suite['survival_threshold']:g}.", "",
        "| policy | file | kind | sha256 |", "|---|---|---|---|"]
    if suite.get("terrain_types"):
        lines[-2:-2] = [f"Terrain levels are tiles of {', '.join(suite['terrain_types'])} only "
                        f"(grid `{suite['terrain']}`).", ""]
    if suite.get("reach"):
        lines[-2:-2] = [f"*Reached*: the share of episodes whose base ended at least "
                        f"{suite['reach']:g} m from its spawn point.", ""]
    lines += [f"| {p['label']} | `{p['path']}` | {p['kind']} | `{p['sha256'][:12]}` |"
              for p in report["policies"]]
    lines += ["", "## Robustness margins", "",
              "| axis | harder | nominal level | " + " | ".join(labels) + " |",
              "|---|---|---|" + "---|" * len(labels)]
    for s in report["sweeps"].values():
        if s["harder"] == "none":
            continue
        first = s["policies"][labels[0]]
        nominal = first["nominal"]
        cells = [format_margin(s["policies"][lab].get("margin"), s["unit"]) for lab in labels]
        title = f"{s['label']} ({s['unit']})" if s["unit"] else s["label"]
        lines.append(f"| {title} | {s['harder']} | {_nominal(s['axis'], nominal)} | "
                     + " | ".join(cells) + " |")
    head = ("| level | policy | survival [95 % CI] | lin. vel. error (m/s) | yaw rate error "
            "(rad/s) | distance (m) | cost of transport |")
    for name, s in report["sweeps"].items():
        title = f"{s['label']} ({s['unit']})" if s["unit"] else s["label"]
        lines += ["", f"## {title}", ""]
        for fig in (figures or {}).get(name, []):
            lines += [f"![{title}]({fig})", ""]
        pushes = any(r["recovered"] is not None for p in s["policies"].values()
                     for r in p["levels"])  # recovery only where something was pushed
        reach = suite.get("reach")
        lines += [head + (" recovery (s) |" if pushes else "")
                  + (f" reached ≥ {reach:g} m |" if reach else ""),
                  "|---|---|---|---|---|---|---|" + ("---|" if pushes else "")
                  + ("---|" if reach else "")]
        for i, level in enumerate(s["levels"]):
            for lab in labels:
                row = s["policies"][lab]["levels"][i]
                lines.append(
                    f"| {_level(level)} | {lab} | {_survival(row)} | "
                    f"{_num(row['lin_vel_error'], 3)} | {_num(row['yaw_error'], 3)} | "
                    f"{_num(row['distance'])} | {_num(row['cost_of_transport'])} |"
                    + (f" {_recovery(row)} |" if pushes else "")
                    + (f" {_num(row['reached'])} |" if reach else ""))
    for name, g in report["grids"].items():
        (la, lb), (ta, tb) = g["levels"], g["labels"]
        lines += ["", f"## Grid {name}: survival, {ta} (rows) x {tb} (columns)", ""]
        for fig in (figures or {}).get(name, []):
            lines += [f"![{name}]({fig})", ""]
        for lab in labels:
            cells = g["policies"][lab]["cells"]
            lines += [f"**{lab}**", "", "| | " + " | ".join(_level(v) for v in lb) + " |",
                      "|---|" + "---|" * len(lb)]
            for va, row in zip(la, cells, strict=True):
                lines.append(f"| {_level(va)} | "
                             + " | ".join(f"{c['survival']:.2f}" for c in row) + " |")
            lines.append("")
    lines += ["", "## How the numbers are made", "",
              "- Tracking errors: per-episode mean of |command − base velocity| (planar, body "
              "frame) and |yaw-rate command − yaw rate|, averaged over all episodes (a failed "
              "episode counts up to its failure).",
              "- Distance: base displacement in the plane from spawn to the end of the episode.",
              "- Cost of transport: Σ|τ·q̇|·dt over the joints and control steps, divided by "
              "m·g·distance, as a ratio of sums over the surviving episodes (m includes the "
              "payload).",
              f"- Recovery: time from the push ({suite['push']['time_s']:g} s after the start) "
              f"until the planar velocity error is below "
              f"{suite['recovery']['lin_vel_error']:g} m/s and the tilt below "
              f"{suite['recovery']['max_tilt']:g} rad for {suite['recovery']['hold_s']:g} s, "
              "averaged over surviving episodes that recovered (the share that did in "
              "brackets when below 100 %).", ""]
    if timing:
        lines += ["## Timing", "", *[f"- {t}" for t in timing], ""]
    return "\n".join(lines)


def write_markdown(report: dict, out_dir: Path, timing: Sequence[str] = (),
                   command: str | None = None,
                   figures: dict[str, list[str]] | None = None) -> Path:
    path = out_dir / MARKDOWN_FILE
    path.write_text(markdown(report, timing, command, figures))
    return path
