"""Where two study curves part: the first iteration at which their logged values differ.

    python -m research.curve_diff research/results/multitask/curves/uniform_s0.csv.xz \
        research/results/multitask/curves/learning_progress_s0.csv.xz

On one machine with the same ``torch_threads`` a learning-progress run equals the uniform
run of its seed until the scheduler first changes the slots; a run on another CPU, or with
other ``torch_threads``, rounds differently and parts after a few dozen iterations
(docs/multitask.md, "Reproducing a curve"). Timings (``wall_s``) are not compared.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from research.study import first_difference, read_csv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("curves", nargs=2, type=Path,
                        help="two curve CSVs of a study (.csv, .csv.xz or .csv.gz)")
    a, b = (read_csv(path) for path in parser.parse_args().curves)
    row = first_difference(a, b)
    rows = min(len(a["iteration"]), len(b["iteration"]))
    if row is None:
        print(f"equal over all {rows} common rows")
    else:
        print(f"first difference at iteration {int(a['iteration'][row])}, after {row} equal "
              f"rows (of {rows} common rows)")


if __name__ == "__main__":
    main()
