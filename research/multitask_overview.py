"""Every allocation measured against uniform slots, one table row each.

    python -m research.multitask_overview research/results/multitask \
        research/results/multitask_gaits_first ...

For each study directory and each allocation in it with a uniform curve of the same seed,
the row gives the mean over those seeds of ``ln(uniform steps / allocation's steps)`` per
subtask until the success threshold (``research/multitask_power.py``: a subtask never
reached counts as reached at the run's last env step), in how many subtask-seeds the
allocation got there sooner and later, and in how many seeds it was sooner on every
subtask. Positive is sooner; +0.1 is about 10 % fewer env steps.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from research.multitask_power import paired_log_ratios
from research.study import load_config, study_curves, uncompressed

CURVE = re.compile(r"(?P<allocation>.+)_s(?P<seed>\d+)\.csv")
BASELINE = "uniform"


def paired_runs(study: Path) -> dict[str, list[int]]:
    """Per allocation other than the baseline, the seeds with a baseline curve too."""
    runs: dict[str, set[int]] = {}
    for path in study_curves(study):  # plain or compressed, its own and those it shares
        if m := CURVE.fullmatch(uncompressed(path).name):
            runs.setdefault(m["allocation"], set()).add(int(m["seed"]))
    base = runs.pop(BASELINE, set())
    return {a: sorted(seeds & base) for a, seeds in runs.items() if seeds & base}


def overview(studies: list[Path], overrides: list[str]) -> str:
    """The markdown table, one row per allocation and study, in the order given."""
    header, rows = None, []
    for study in studies:
        pairs = paired_runs(study)
        if not pairs:
            raise ValueError(f"{study / 'curves'} holds no allocation paired with a uniform "
                             "curve of the same seed (<allocation>_s<seed>.csv)")
        for allocation, seeds in pairs.items():
            cfg = load_config("multitask_study", [f"allocations=[{allocation},{BASELINE}]",
                                                  f"seeds={seeds}", *overrides])
            names, seeds, d = paired_log_ratios(study, cfg, min_seeds=1)
            if header is None:
                header = names
            elif names != header:
                raise ValueError(f"{study} has subtasks {names}, {studies[0]} has {header}: "
                                 "compare studies of one subtask set")
            cells = [f"{e:+.2f}" for e in d.mean(0)]
            rows.append(f"| {study.name} | {allocation} | {', '.join(map(str, seeds))} | "
                        + " | ".join(cells)
                        + f" | {int((d > 0).sum())} / {int((d < 0).sum())}"
                        f" | {int((d > 0).all(1).sum())} of {len(seeds)} |")
    return "\n".join([
        "| study | allocation | seeds | " + " | ".join(header)
        + " | sooner / later | seeds sooner on all |",
        "|---" * (len(header) + 5) + "|", *rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("studies", type=Path, nargs="+",
                        help="study out_dirs of one subtask set, e.g. research/results/multitask")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="study setting, e.g. --set window=60")
    args = parser.parse_args()
    print(overview(args.studies, args.overrides))


if __name__ == "__main__":
    main()
