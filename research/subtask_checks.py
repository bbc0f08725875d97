"""Why a multitask run's subtasks fail: per subtask, the share of episodes passing each check.

    python -m research.subtask_checks runs/<run> [runs/<other run> ...] [--iterations 201 228]

A multitask episode succeeds when it survives, tracks its command and (gait subtasks) keeps
its foot-contact schedule. The trainer logs each share per iteration in ``progress.jsonl``
(read compressed too); this script weights them by the iteration's episode count over an
iteration range and prints one markdown table per run: episodes, survived, tracked, on gait,
the mean share of contacts on schedule (gaits only) and success.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from research.study import read_jsonl, stored

COLUMNS = ("survived", "tracked", "on_gait", "gait_match", "success")


def episode_weighted(rows: list[dict], first: int, last: int) -> dict[str, dict[str, float]]:
    """Per subtask: episode count and the episode-weighted mean of each of ``COLUMNS``
    (NaN where the run logged none) over iterations ``first``..``last``."""
    totals: dict[str, dict[str, float]] = {}
    for row in rows:
        if not first <= row["iteration"] <= last:
            continue
        for key, episodes in row.items():
            if not key.startswith("multitask/episodes/") or not episodes:
                continue
            name = key.rsplit("/", 1)[1]
            t = totals.setdefault(name, {"episodes": 0.0})
            t["episodes"] += episodes
            for col in COLUMNS:
                value = row.get(f"multitask/{col}/{name}")
                if value is not None and not math.isnan(value):
                    t[col] = t.get(col, 0.0) + value * episodes
    return {name: {"episodes": t["episodes"],
                   **{c: t[c] / t["episodes"] if c in t else math.nan for c in COLUMNS}}
            for name, t in sorted(totals.items())}


def table(shares: dict[str, dict[str, float]]) -> str:
    lines = ["| subtask | episodes | " + " | ".join(COLUMNS) + " |",
             "|---|---|" + "---|" * len(COLUMNS)]
    for name, s in shares.items():
        cells = ["" if math.isnan(s[c]) else f"{s[c]:.2f}" for c in COLUMNS]
        lines.append(f"| {name} | {int(s['episodes'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders with progress.jsonl")
    parser.add_argument("--iterations", nargs=2, type=int, metavar=("FIRST", "LAST"),
                        default=(1, 10**9), help="inclusive iteration range (default: all)")
    args = parser.parse_args()
    first, last = args.iterations
    for run in args.runs:
        path = stored(run / "progress.jsonl")
        if not path.is_file():
            raise SystemExit(f"{path} not found: pass a run folder the trainer logged into")
        rows = read_jsonl(path)
        shares = episode_weighted(rows, first, last)
        if not shares:
            raise SystemExit(f"{path} has no multitask episodes in iterations {first}..{last}"
                             " (a task=multitask run?)")
        print(f"## {run} (iterations {first}..{min(last, rows[-1]['iteration'])})\n")
        print(table(shares) + "\n")


if __name__ == "__main__":
    main()
