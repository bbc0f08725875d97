"""The kept results reproduce what the pages show, through the commands the pages give."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from research import (
    curve_diff,
    multitask_overview,
    multitask_power,
    multitask_study,
    plot_training,
    replay_scheduler,
    stagger_study,
)
from research.study import curve_path, load_config, read_csv

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "research" / "results"
MULTITASK_PAGE = ROOT / "docs" / "multitask.md"
# every allocation measured beside the shipped one, and what the withdrawn bar asked
HISTORY_PAGE = ROOT / "docs" / "multitask_history.md"


def run_main(module, argv: list[str], monkeypatch, capsys) -> str:
    """``python -m research.<module> <argv>`` in this process (from the repository root);
    what it printed."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", [module.__name__, *argv])
    module.main()
    return capsys.readouterr().out


def page_command(page: Path, module: str) -> list[str]:
    """The arguments of the first ``python -m research.<module>`` command in a page's bash
    blocks (continuation lines joined)."""
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line.split("#")[0])
            if words[:3] == ["python", "-m", f"research.{module}"]:
                return words[3:]
    raise AssertionError(f"{page} has no python -m research.{module} command")


def table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


@pytest.mark.parametrize("task", ["toy", "flat_velocity"])
def test_stagger_curves_give_the_kept_summary(task, tmp_path):
    """The study's summary, redrawn from the kept (compressed) curves, is the kept one."""
    cfg = load_config("stagger_study", [f"task={task}"])
    out = ROOT / cfg.out_dir
    curves = {c: read_csv(curve_path(out, c.name)) for c in stagger_study.grid_cells(cfg)}
    study = stagger_study.study_settings(cfg)
    rows = stagger_study.summarize(curves, float(study.threshold))
    stagger_study.write_summary(curves, rows, tmp_path, float(study.threshold),
                                int(study.env_steps))
    for name in ("summary.md", "summary.csv"):
        assert (tmp_path / name).read_text() == (out / name).read_text()
    page = (ROOT / "docs" / "staggered_resets.md").read_text()
    assert "| K | N | schedule | env steps to threshold | reached | final return |" in \
        (tmp_path / "summary.md").read_text()
    if task == "toy":  # the page shows the toy's first table as the study writes it
        first = (out / "summary.md").read_text().split("\n\n")[1]
        assert len(table_rows(first)) == 2 + 27 and all(row in page for row in table_rows(first))


def test_multitask_curves_give_the_kept_summary():
    cfg = load_config("multitask_study", [])
    out = ROOT / cfg.out_dir
    curves = {(str(a), int(s)): read_csv(curve_path(out, multitask_study.run_name(a, int(s))))
              for a in cfg.allocations for s in cfg.seeds}
    steps = {key: multitask_study.steps_to_threshold(c, cfg) for key, c in curves.items()}
    shares = {key: multitask_study.shares_until_reached(c, steps[key])
              for key, c in curves.items()}
    tables = [multitask_study.summary_table(steps, cfg), multitask_study.seed_table(
        steps, shares, cfg), multitask_study.experience_table(steps, curves, cfg)]
    assert "\n".join(tables) == (out / "summary.md").read_text()


@pytest.mark.slow
def test_the_pages_overview_command_gives_the_pages_table(monkeypatch, capsys):
    argv = page_command(HISTORY_PAGE, "multitask_overview")
    assert all(Path(ROOT / a).is_dir() for a in argv)
    out = run_main(multitask_overview, argv, monkeypatch, capsys)
    rows = table_rows(out)
    assert rows[0].startswith("| study | allocation | seeds | flat | rough |")
    assert len(rows) == 2 + len(argv)  # one allocation per study
    page = HISTORY_PAGE.read_text()
    assert all(row in page for row in rows)


def test_the_pages_power_command_gives_the_pages_table(monkeypatch, capsys):
    text = HISTORY_PAGE.read_text()
    command = re.search(r"`python -m research.multitask_power ([^`]+)`", text)[1].split()
    out = run_main(multitask_power, command, monkeypatch, capsys)
    assert out.startswith("7 seeds (0, 1, 2, 3, 4, 5, 6), 9 subtasks.")
    rows = table_rows(out)
    assert rows[0] == ("| effect on every subtask | steps, allocation / uniform | seeds sooner "
                       "on all | chance for 3 of them | normal model: per seed | 3 seeds |")
    assert len(rows) == 2 + 8 and all(row in text for row in rows)


@pytest.mark.parametrize("page", [MULTITASK_PAGE, HISTORY_PAGE], ids=lambda p: p.name)
def test_the_pages_per_subtask_means_are_the_power_commands(page, monkeypatch, capsys):
    """The per-subtask mean ln ratios over fresh seeds on each page (seeds 15-24 in
    docs/multitask.md, 10-14 in the history) are the ones its first multitask_power command
    prints, all nine subtasks of them."""
    out = run_main(multitask_power, page_command(page, "multitask_power"), monkeypatch, capsys)
    means = re.search(r"Measured effect per subtask: (.*?)\. Spread", out)[1]
    assert means.count(",") == 8
    assert means in page.read_text().replace("\u2212", "-").replace("\n", " ")


@pytest.mark.parametrize("seed_set", ["entry_ten", "entry_ten_new"])
def test_the_kept_primary_report_is_the_curves_and_the_page_shows_it(seed_set):
    """The primary measure of the ten-seed comparison, and of its last five seeds alone,
    redrawn from the kept curves, is the kept primary.md; docs/multitask.md shows its rows."""
    cfg = load_config("multitask_study", [f"seed_set={seed_set}"])
    out = ROOT / cfg.out_dir
    curves = {(str(a), int(s)): read_csv(curve_path(out, multitask_study.run_name(a, int(s))))
              for a in cfg.allocations for s in cfg.seeds}
    kept = (out / "primary.md").read_text()
    assert multitask_study.primary_table(curves, cfg) == kept
    page = MULTITASK_PAGE.read_text().replace("\u2212", "-")
    assert len(table_rows(kept)) == 2 + len(cfg.seeds)
    assert all(row in page for row in table_rows(kept)[2:])


def test_the_pages_floor_chances_are_the_power_commands(monkeypatch, capsys):
    """docs/multitask.md's chances that no subtask's five-seed mean is below -0.10, for an
    allocation with no effect, 5 % and 10 % fewer env steps, are its --floor command's."""
    text = MULTITASK_PAGE.read_text().replace("\n", " ")
    command = re.search(r"`python -m research.multitask_power ([^`]*--floor[^`]*)`", text)[1]
    out = run_main(multitask_power, command.split(), monkeypatch, capsys)
    chances = {row.split(" | ")[0][2:]: float(row.split(" | ")[2].rstrip(" |"))
               for row in table_rows(out)[2:]}
    quoted = re.search(r"in (\d+) % of such studies, .*? in (\d+) %, .*? in (\d+) %", text)
    assert [int(q) for q in quoted.groups()] == [round(100 * chances[e])
                                                 for e in ("+0.00", "+0.05", "+0.10")]


def test_curve_diff_finds_where_the_kept_pairs_part(monkeypatch, capsys):
    """docs/multitask.md: the learning-progress runs of seeds 0-2 part from the uniform ones
    at iteration 21, 25 and 18."""
    curves = RESULTS / "multitask" / "curves"
    for seed, iteration in ((0, 21), (1, 25), (2, 18)):
        out = run_main(curve_diff, [str(curves / f"uniform_s{seed}.csv.xz"),
                                    str(curves / f"learning_progress_s{seed}.csv.xz")],
                       monkeypatch, capsys)
        assert out.startswith(f"first difference at iteration {iteration}, after "
                              f"{iteration - 1} equal rows (of 1500 common rows)")
    out = run_main(curve_diff, [str(curves / "uniform_s0.csv.xz")] * 2, monkeypatch, capsys)
    assert out == "equal over all 1500 common rows\n"


def test_replay_of_the_kept_uniform_curve_gives_the_pages_progress(monkeypatch, capsys):
    """The shipped scheduler replayed over seed 1's uniform curve (the page's second
    command): per subtask the progress and success columns of the page's table."""
    argv = [a for a in page_command(MULTITASK_PAGE, "replay_scheduler") if "=" not in a]
    out = run_main(replay_scheduler, argv, monkeypatch, capsys)
    rows = table_rows(out)
    assert rows[0] == ("| subtask | it 200-700: progress (success 200→700) share | "
                       "it 1300-1500: progress (success 1300→1500) share |")
    page = {cells[0]: cells for cells in (
        [c.strip() for c in row.strip("|").split("|")]
        for row in table_rows(MULTITASK_PAGE.read_text())) if len(cells) == 5}
    for row in rows[2:]:
        name, *windows = [c.strip() for c in row.strip("|").split("|")]
        progress = [w.split(" (")[0] for w in windows]
        success = [w.split(" (")[1].split(")")[0] for w in windows]
        assert page[name][3:] == progress, name
        assert [c.split(" (")[1].rstrip(")") for c in page[name][1:3]] == success, name


def test_plot_training_draws_the_kept_run(tmp_path, monkeypatch, capsys):
    """The page's command, with the figure written elsewhere."""
    out = tmp_path / "training_curve.png"
    printed = run_main(plot_training, ["research/results/train_default", "--out", str(out)],
                       monkeypatch, capsys)
    assert printed == f"wrote {out}\n" and out.stat().st_size > 10_000
    assert "python -m research.plot_training research/results/train_default --out " \
        "docs/figures/training_curve.png" in (ROOT / "docs" / "training.md").read_text()
