"""The stagger study's entries, its success metric for gait tasks, the phase uniformity it
reports, and a tiny run of the phase_locked schedule on the gait task."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from research import stagger_study as study
from research.study import load_config, read_csv, write_curve

TINY_POLICY = ["algo.policy.actor_hidden_dims=[16]", "algo.policy.critic_hidden_dims=[16]"]


def test_entries_pick_schedules_settings_and_folders():
    """The task picks its entry; an entry for another task's settings runs only on that
    task, with its config merged in, and writes to its own folder."""
    toy = load_config("stagger_study", [])
    assert list(toy.grid.schedules) == ["sync", "random_counter", "staggered"]
    gaits = load_config("stagger_study", ["task=gaits"])
    assert "phase_locked" in gaits.grid.schedules and study.metric_of(study.study_settings(
        gaits)) == "success"
    assert gaits.out_dir.endswith("staggered_resets/gaits")
    plain = load_config("stagger_study", ["task=flat_velocity", "entry=flat_no_termination"])
    cell = study.grid_cells(plain)[0]
    terminations = study.cell_config(plain, cell).task.terminations
    assert not terminations.base_contact and terminations.max_tilt > math.pi
    assert plain.out_dir.endswith("staggered_resets/flat_no_termination")
    with pytest.raises(ValueError, match="runs task=flat_velocity, not task=toy"):
        study.study_settings(load_config("stagger_study", ["entry=flat_no_termination"]))


def test_success_rate_judges_whole_episodes_by_the_subtask_checks():
    hook = study.SuccessRate(load_config("stagger_study", ["task=gaits"]).study.gaits.success)
    # survived+tracked+on gait, off gait, fell, tracked badly, and a partial success
    hook.record({"timeout": torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0]),
                 "lin_vel_error": torch.tensor([0.1, 0.1, 0.1, 0.4, 0.1]),
                 "gait_match": torch.tensor([0.9, 0.5, 0.9, 0.9, 0.9]),
                 "partial": torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0])})
    assert hook.end_iteration(0, 1.0) == {"success": 0.25}
    assert math.isnan(hook.end_iteration(1, 1.0)["success"])  # no episode ended
    with pytest.raises(ValueError, match="needs gait commands"):
        hook.record({"timeout": torch.ones(1), "lin_vel_error": torch.zeros(1),
                     "partial": torch.zeros(1)})


def test_windows_weigh_each_iteration_by_its_episodes():
    window = study.EpisodeWindow(2)
    assert window.add(math.nan, 0) == (pytest.approx(math.nan, nan_ok=True), 0)
    assert window.add(1.0, 1) == (1.0, 1)
    assert window.add(0.0, 3) == (0.25, 4)
    assert window.add(1.0, 4) == (4 / 7, 7)  # the first iteration left the window


def test_summary_gives_the_mean_and_lowest_phase_uniformity():
    curves = {}
    for seed, uniformity in enumerate(([1.0, 0.5, 0.9], [0.8, 0.8, 0.8])):
        curves[study.Cell("staggered", 8, 16, seed)] = {
            "env_steps": np.array([128.0, 256.0, 384.0]), "wall_s": np.ones(3),
            "return": np.array([0.1, 0.5, 0.9]), "episodes": np.full(3, 16.0),
            "phase_uniformity": np.array(uniformity)}
    [row] = study.summarize(curves, threshold=0.5)
    assert row["phase_uniformity_mean"] == pytest.approx(0.8)
    assert row["phase_uniformity_min"] == 0.5
    assert "| 8 | 16 | staggered | 0.800 | 0.500 |" in study.uniformity_table([row])


@pytest.mark.slow
def test_phase_locked_runs_on_the_gait_task_and_keeps_its_stagger(tmp_path):
    """Two tiny cells of task=gaits whose robots fall within a few steps: the curves carry
    the success rate, staggered's batches lose their spread of phases and phase_locked's
    keep it; the summary has the success threshold and the uniformity table."""
    cfg = load_config("stagger_study", [
        "task=gaits", "grid.schedules=[staggered,phase_locked]", "grid.rollout_lengths=[8]",
        "study.gaits.seeds=[0]", "study.gaits.num_envs=[8]", "study.gaits.env_steps=192",
        "task.episode_length_s=0.4", "task.terminations.max_tilt=0.05",
        "algo.policy.init_noise_std=2.0", "histogram_iterations=3", f"out_dir={tmp_path}",
        *TINY_POLICY])
    ran = study.run_grid(cfg, tmp_path)
    assert [c.name for c in ran] == ["staggered_K8_N8_s0", "phase_locked_K8_N8_s0"]
    staggered, locked = (read_csv(tmp_path / "curves" / f"{c.name}.csv") for c in ran)
    for curve in (staggered, locked):
        assert curve["env_steps"].tolist() == [64, 128, 192]
        judged = curve["success"][~np.isnan(curve["success"])]
        assert len(judged) and ((judged >= 0) & (judged <= 1)).all()
    assert locked["phase_uniformity"].min() >= 0.95 > staggered["phase_uniformity"].min()
    study.report(cfg, tmp_path)
    summary = (tmp_path / "summary.md").read_text()
    assert "Threshold: success >= 0.5" in summary
    assert "| K | N | schedule | phase uniformity, mean | lowest |" in summary
    assert "| 8 | 8 | phase_locked | 0.981 | 0.981 |" in summary
    assert (tmp_path / "summary.csv").read_text().splitlines()[0].endswith(
        "phase_uniformity_mean,phase_uniformity_min")
    assert (tmp_path / "success_vs_env_steps.png").stat().st_size > 0


def test_core_entries_share_the_grid_and_the_warmup_entry_sets_the_warmup():
    """The core grid is N = 4096, K = 8, five seeds and the four schedules on all three
    tasks (without terminations phase_locked is staggered: that entry runs one of them),
    at one budget that divides into N * K for every K of the rollout entry; the rollout
    and env-count entries set sync against phase_locked-none; the fixed-update entry's
    budget grows with N, and N = 1024 also trains the core grid's number of updates; a
    schedule-warmup name sets both."""
    for entry, task in (("flat_core", "flat_velocity"), ("gaits_core", "gaits"),
                        ("no_termination_core", "flat_velocity")):
        cfg = load_config("stagger_study", [f"task={task}", f"entry={entry}"])
        cells = study.grid_cells(cfg)
        assert {(c.rollout_length, c.num_envs) for c in cells} == {(8, 4096)}
        assert sorted({c.seed for c in cells}) == [0, 1, 2, 3, 4]
        locked = {"phase_locked"} if entry != "no_termination_core" else set()
        assert {c.schedule for c in cells} >= {"sync", "random_counter", "staggered"} | locked
        assert "max_tracking_error" in cfg.study[entry].criterion
    rollout = load_config("stagger_study", ["task=flat_velocity", "entry=flat_rollout"])
    assert {c.rollout_length for c in study.grid_cells(rollout)} == {4, 24}
    envs = load_config("stagger_study", ["task=flat_velocity", "entry=flat_num_envs"])
    for around in (rollout, envs):  # sync against the flat grid's candidate
        assert {c.schedule for c in study.grid_cells(around)} == {"sync", "phase_locked-none"}
    budgets = {c.num_envs: study.cell_budget(envs.study.flat_num_envs, c)
               for c in study.grid_cells(envs)}
    assert budgets == {1024: 45 * 1024 * 8, 16384: 45 * 16384 * 8}
    few = load_config("stagger_study", ["task=flat_velocity", "entry=flat_few_envs"])
    assert {study.cell_budget(few.study.flat_few_envs, c) for c in study.grid_cells(few)} \
        == {180 * 1024 * 8}  # the core grid's number of updates
    warmup = load_config("stagger_study", ["task=flat_velocity", "entry=flat_warmup"])
    reset = study.cell_config(warmup, study.Cell("staggered-policy", 8, 4096, 0)).reset
    assert (reset.schedule, reset.warmup) == ("staggered", "policy")
    reset = study.cell_config(warmup, study.Cell("phase_locked-none", 8, 4096, 0)).reset
    assert (reset.schedule, reset.warmup) == ("phase_locked", "none")


def test_core_cells_keep_the_zero_warm_up_whatever_the_default_reset():
    """Cells trained in different sittings stay one config: an unnamed staggered schedule
    of a core entry warms up with zero actions even where the default reset says none."""
    for entry, task in (("flat_core", "flat_velocity"), ("gaits_core", "gaits"),
                        ("no_termination_core", "flat_velocity")):
        cfg = load_config("stagger_study", [f"task={task}", f"entry={entry}",
                                            "reset=phase_locked", "reset.warmup=none"])
        reset = study.cell_config(cfg, study.Cell("staggered", 8, 4096, 0)).reset
        assert (reset.schedule, reset.warmup) == ("staggered", "zero")
        reset = study.cell_config(cfg, study.Cell("phase_locked-none", 8, 4096, 0)).reset
        assert (reset.schedule, reset.warmup) == ("phase_locked", "none")


def test_an_entry_checks_as_often_as_its_own_evaluation_says():
    """gaits_core checks twice as often as the study's default, which flat_core keeps."""
    every = {}
    for entry, task in (("flat_core", "flat_velocity"), ("gaits_core", "gaits")):
        cfg = load_config("stagger_study", [f"task={task}", f"entry={entry}",
                                            "evaluation.envs=2"])
        run_cfg = study.cell_config(cfg, study.Cell("sync", 8, 16, 0))
        checks = study.policy_checks(cfg, run_cfg)
        every[entry] = (checks.every, checks.envs)
        checks.close()
    assert every == {"flat_core": (524288, 2), "gaits_core": (262144, 2)}


def test_policy_checks_refuse_an_unknown_bound():
    cfg = load_config("stagger_study", ["task=flat_velocity", "entry=flat_core"])
    with pytest.raises(ValueError, match="unknown criterion bounds.*min_ or max_ of"):
        study.PolicyChecks(cfg, cfg.evaluation, {"min_speed": 1.0})


@pytest.mark.slow
def test_checked_cells_write_checks_and_the_tables_compare_them(tmp_path):
    """A tiny no-termination grid with policy checks: checks every other iteration and at
    the end with more episodes, falls counted (a robot that may tilt 0.05 rad falls), the
    wall-clock leaves the checks out, and checks.md has the three tables."""
    entry = "study.no_termination_core"
    cfg = load_config("stagger_study", [
        "task=flat_velocity", "entry=no_termination_core", "grid.schedules=[sync,phase_locked]",
        f"{entry}.seeds=[0,1]", f"{entry}.num_envs=[8]", f"{entry}.env_steps=192",
        "evaluation.every=128", "evaluation.envs=4", "evaluation.final_envs=8",
        "task.rewards.fall_tilt=0.05", "task.episode_length_s=0.4",
        "algo.policy.init_noise_std=2.0", f"out_dir={tmp_path}", *TINY_POLICY])
    ran = study.run_grid(cfg, tmp_path)
    assert len(ran) == 4
    curve = read_csv(tmp_path / "curves" / "phase_locked_K8_N8_s1.csv")
    assert curve["env_steps"].tolist() == [64, 128, 192]
    assert np.isnan(curve["check_passed"][0])
    assert curve["check_episodes"][1:].tolist() == [4, 8]
    assert curve["check_survival"][1:].tolist() == [1.0, 1.0]   # no terminations
    assert curve["check_no_fall"][-1] < 1.0                        # but falls
    assert (curve["check_passed"][1:] == 0).all()                 # so never at the criterion
    study.report(cfg, tmp_path)
    tables = (tmp_path / "checks.md").read_text()
    assert "tracking_error <= 0.15, no_fall >= 0.95" in tables
    assert "| 8 | 8 | phase_locked | 0/2 | >= 0.000192 ± 0M |" in tables
    assert "At equal training time" in tables
    assert "| 8 | 8 | phase_locked | 0/2 | 0/2 |" in tables  # neither met the criterion


def test_training_time_counts_the_warm_up_and_not_the_machine_speed():
    """Two runs of the same steps, one on a machine twice as fast, read the same training
    time; a warm-up of 3 iterations' time before the first one adds 3 iterations."""
    steps = np.arange(1.0, 6.0) * 1e6
    slow = {"env_steps": steps, "wall_s": np.arange(1.0, 6.0) * 20.0}
    fast = {"env_steps": steps, "wall_s": np.arange(1.0, 6.0) * 10.0}
    warm = {"env_steps": steps, "wall_s": np.arange(4.0, 9.0) * 10.0}
    np.testing.assert_allclose(study.training_time(slow), steps)
    np.testing.assert_allclose(study.training_time(fast), steps)
    np.testing.assert_allclose(study.training_time(warm), steps + 3e6)


def test_checks_tables_count_censored_runs_as_later():
    def curve(passed_at: int | None, warm_up: float, speed: float,
              error: float = 0.1) -> dict[str, np.ndarray]:
        passed = np.full(4, np.nan)
        passed[1::2] = 0.0
        if passed_at is not None:
            passed[passed_at] = 1.0
        return {"env_steps": np.array([1.0, 2.0, 3.0, 4.0]) * 1e6,
                "wall_s": (np.array([1.0, 2.0, 3.0, 4.0]) + warm_up) / speed,
                "check_passed": passed, "check_tracking_error": np.where(np.isnan(passed),
                                                                         np.nan, error),
                "check_survival": np.where(np.isnan(passed), np.nan, 0.97),
                "phase_uniformity": np.ones(4)}

    # staggered has half an iteration of warm-up and ran on a faster machine
    curves = {study.Cell("sync", 8, 4096, 0): curve(3, 0.0, 1.0),
              study.Cell("sync", 8, 4096, 1): curve(None, 0.0, 1.0),
              study.Cell("staggered", 8, 4096, 0): curve(1, 0.5, 3.0, error=0.06),
              study.Cell("staggered", 8, 4096, 1): curve(3, 0.5, 3.0, error=0.08)}
    study_cfg = load_config("stagger_study", ["task=flat_velocity",
                                              "entry=flat_core"]).study.flat_core
    tables = study.checks_tables(curves, study_cfg)
    # sync: 4M and >= 4M (censored); staggered: 2M and 4M, at 2.5M and 4.5M training time
    assert "| 8 | 4096 | sync | 1/2 | >= 4 ± 0M | >= 4 ± 0M |" in tables
    assert "| 8 | 4096 | staggered | 2/2 | 3 ± 13M | 3.5 ± 13M |" in tables
    # equal training time: 4M, the shortest run; staggered's 4M check came at 4.5M
    assert "| 8 | 4096 | staggered | 4.00M | 1/2 |" in tables
    # paired: seed 0 sooner in both (2M against 4M, 2.5M against 4M); seed 1 sooner than a
    # censored sync run in both; both ended nearer the command, by 0.04 and 0.02 m/s
    assert "| 8 | 4096 | staggered | 2/2 | 2/2 | 2/2 | -0.03 ± 0.13 |" in tables
    # every run, with its seconds and its speed (1M env steps per iteration of 1/3 s)
    assert "| 8 | 4096 | staggered | 0 | 2.00M | 1 | 2.50M | 3,000,000 | 0.060 |" in tables
    assert "| 8 | 4096 | sync | 1 | never | - | - | 1,000,000 |" in tables


def test_an_entry_of_variants_reports_the_cells_it_compares_with(tmp_path):
    """flat_warmup's tables take flat_core's finished cells (sync among them) from the
    folder beside its own, whatever schedules this run of the grid was limited to."""
    cfg = load_config("stagger_study", ["task=flat_velocity", "entry=flat_warmup",
                                        "grid.schedules=[phase_locked-none]"])
    sync = study.Cell("sync", 8, 4096, 3)
    rows = [{"iteration": 1, "env_steps": 32768, "wall_s": 1.0}]
    write_curve(study.curve_path(tmp_path / "flat_core", sync.name), rows, {})
    write_curve(study.curve_path(tmp_path / "flat_warmup", "sync_K8_N4096_s4"), rows, {})
    compared = study.compared_curves(cfg, tmp_path / "flat_warmup")
    assert list(compared) == [sync]
    assert compared[sync]["env_steps"].tolist() == [32768]
    core = load_config("stagger_study", ["task=flat_velocity", "entry=flat_core"])
    assert study.compared_curves(core, tmp_path / "flat_core") == {}


def test_the_grid_runs_seed_by_seed():
    """The schedules of a seed come next to each other in the grid (their wall-clock is
    compared, and a grid spread over sittings of a machine of changing speed keeps a seed's
    cells in one sitting)."""
    cfg = load_config("stagger_study", ["task=flat_velocity", "entry=flat_core"])
    cells = study.grid_cells(cfg)
    assert [c.seed for c in cells[:4]] == [0, 0, 0, 0]
    assert [c.schedule for c in cells[:4]] == ["sync", "random_counter", "staggered",
                                               "phase_locked"]
    assert [c.seed for c in cells] == sorted(c.seed for c in cells)
