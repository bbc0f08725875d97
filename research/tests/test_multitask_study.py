"""The multitask allocation study: curves, resume, thresholds, report, errors."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from research import (
    multitask_overview,
    multitask_power,
    multitask_study,
    replay_scheduler,
    subtask_checks,
    subtask_terrain,
)
from research.study import curve_path, first_difference, load_config, mean_band, write_csv

ROOT = Path(__file__).resolve().parents[2]

SMALL = ["num_envs=32", "iterations=2", "seeds=[0]", "algo.num_steps=8", "multitask.every=1",
         "terrain.levels=4", "terrain.curriculum.max_init_level=1", "task.episode_length_s=0.1",
         "algo.policy.actor_hidden_dims=[16]", "algo.policy.critic_hidden_dims=[16]",
         "success_threshold=0.0", "window=1", "min_episodes=1"]


def reaching_curve(study: Path, name: str, reached: dict[str, int | None]) -> None:
    """A 4-iteration study curve (10 env steps an iteration) in which each subtask succeeds
    from the iteration given on (None: never)."""
    (study / "curves").mkdir(parents=True, exist_ok=True)
    rows = [{"iteration": i, "env_steps": 10.0 * i,
             **{f"{k}/{n}": v for n, at in reached.items()
                for k, v in (("success", float(at is not None and i >= at)),
                             ("episodes", 2.0), ("share", 0.5))}}
            for i in range(1, 5)]
    write_csv(study / "curves" / f"{name}.csv", rows)


def test_threshold_is_the_first_window_with_enough_episodes_at_the_rate():
    study = multitask_study
    cfg = load_config("multitask_study", ["success_threshold=0.5", "window=2",
                                          "min_episodes=4"])
    curve = {"env_steps": np.array([10.0, 20, 30, 40]),
             "success/a": np.array([1.0, 0.0, 1.0, 1.0]),
             "episodes/a": np.array([2.0, 6, 1, 3]),
             "success/b": np.array([np.nan, 0.0, 0.0, 0.2]),
             "episodes/b": np.array([0.0, 5, 5, 5])}
    # a: window sums (2 ep, 2 won) too few, (8, 2) 0.25, (7, 1) 0.14, (4, 4) 1.0 -> 40
    rate = study.windowed_success(curve, "a", 2, 4)
    assert math.isnan(rate[0]) and rate[1:].tolist() == pytest.approx([0.25, 1 / 7, 1.0])
    steps = study.steps_to_threshold(curve, cfg)
    assert steps["a"] == 40 and math.isnan(steps["b"]) and math.isnan(steps["all subtasks"])
    table = study.summary_table({("learning_progress", 0): steps,
                                 ("uniform", 0): {"a": 30.0, "b": 10.0,
                                                  "all subtasks": 30.0}}, cfg)
    assert "| a | 0.0M (1/1) | 0.0M (1/1) | 0/1 |" in table
    assert "| b | never (0/1) |" in table
    assert "Over 2 subtask-seeds: learning_progress first on 0, uniform first on 2, " \
        "tied or neither reached on 0." in table
    half = study.summary_table({("learning_progress", 0): steps}, cfg)  # uniform not run
    assert "| a | 0.0M (1/1) | not run yet | 0/0 |" in half
    per_seed = study.seed_table({("learning_progress", 0): steps, ("uniform", 1): steps},
                                {("learning_progress", 0): {"a": 0.25}}, cfg)
    assert "| a | 0.0M / - (25.0 %) | - / 0.0M |" in per_seed
    assert "| b | never / - | - / never |" in per_seed
    curve.update({"share/a": np.array([0.2, 0.4, 0.6, 0.8]), "share/b": np.full(4, 0.5)})
    shares = study.shares_until_reached(curve, {"a": 20.0, "b": math.nan})
    assert shares == pytest.approx({"a": 0.3, "b": 0.5})  # a: steps 10 and 20; b: all


def test_outcomes_are_grouped_by_the_experience_each_allocation_gave():
    study = multitask_study
    cfg = load_config("multitask_study", ["experience_bins=[0.95,1.05]"])
    steps = np.array([10.0, 20, 30, 40])
    lp = {"env_steps": steps, "share/a": np.full(4, 0.5), "share/b": np.array([.3, .3, .9, .9]),
          "share/c": np.full(4, 0.2)}
    uni = {"env_steps": steps, "share/a": np.full(4, 0.5), "share/b": np.full(4, 0.5),
           "share/c": np.full(4, 0.5)}
    reached = {("learning_progress", 0): {"a": 30.0, "b": 40.0, "c": math.nan,
                                          "all subtasks": math.nan},
               ("uniform", 0): {"a": 20.0, "b": math.nan, "c": math.nan,
                                "all subtasks": math.nan}}
    table = study.experience_table(reached, {("learning_progress", 0): lp,
                                             ("uniform", 0): uni}, cfg)
    # a: equal shares until 20, uniform first; b: 0.6 / 0.5 until 40, only LP got there;
    # c: neither got there, so it is in no group
    assert "| 0.95-1.05 | 1 | 0 | 1.50-1.50 | a |" in table
    assert "| ≥ 1.05 | 1 | 1 | - | b |" in table
    assert "< 0.95" not in table and "| c |" not in table
    with pytest.raises(ValueError, match="experience_bins must be increasing"):
        study.experience_table(reached, {}, load_config("multitask_study",
                                                        ["experience_bins=[1.1,0.9]"]))


def test_mean_band_counts_missing_values_as_fill_or_leaves_gaps():
    x = np.array([0.0, 1, 2, 3])
    curves = [{"x": x, "y": np.array([0.5, np.nan, 1.0, np.nan])},
              {"x": x, "y": np.array([0.3, 0.4, 0.6, np.nan])}]
    _, mean, low, high = mean_band(curves, "x", "y", points=4)
    assert mean.tolist() == pytest.approx([0.4, 0.2, 0.8, 0.0])  # NaN as 0
    _, mean, low, high = mean_band(curves, "x", "y", points=4, fill=None)
    assert mean[[0, 2]].tolist() == pytest.approx([0.4, 0.8])  # every seed has a value
    assert np.isnan(mean[[1, 3]]).all() and np.isnan(low[1]) and np.isnan(high[3])


def test_first_difference_skips_timings_and_equal_nans():
    a = {"iteration": np.array([1.0, 2, 3]), "wall_s": np.array([1.0, 2, 3]),
         "success/a": np.array([np.nan, 0.5, 0.7])}
    b = {"iteration": np.array([1.0, 2, 3, 4]), "wall_s": np.array([9.0, 9, 9, 9]),
         "success/a": np.array([np.nan, 0.5, 0.7, 0.9])}
    assert first_difference(a, b) is None  # over the common rows, timings aside
    b["success/a"][2] = 0.6
    assert first_difference(a, b) == 2
    assert first_difference(a, b, ignore=()) == 0


def test_hold_last_carries_the_last_measured_rate_over_gaps():
    study = multitask_study
    held = study.hold_last(np.array([np.nan, 0.2, np.nan, np.nan, 0.9, np.nan]))
    assert math.isnan(held[0])  # nothing measured yet
    assert held[1:].tolist() == [0.2, 0.2, 0.2, 0.9, 0.9]


@pytest.mark.slow
def test_study_runs_resumes_and_reports(tmp_path, monkeypatch, capsys):
    study = multitask_study
    cfg = load_config("multitask_study", SMALL)
    out, runs = tmp_path / "out", tmp_path / "runs"
    assert sorted(study.run_study(cfg, out, runs)) == ["learning_progress_s0", "uniform_s0"]
    curve = study.read_csv(out / "curves" / "learning_progress_s0.csv.xz")
    names = study.subtask_names(curve)
    assert names == ["flat", "rough", "stairs", "slopes", "push_recovery", "trot", "pace",
                     "bound", "pronk"]
    assert curve["iteration"].tolist() == [1, 2]
    shares = np.stack([curve[f"share/{n}"] for n in names])
    assert shares.sum(0) == pytest.approx(1.0) and (shares > 0).all()  # floors hold
    assert sum(curve[f"episodes/{n}"].sum() for n in names) > 0
    assert study.level_names(curve) == ["rough", "stairs", "slopes"]  # off flat ground
    assert ((curve["level/stairs"] >= 0) & (curve["level/stairs"] <= 1)).all()
    checkpoint = runs / "learning_progress_s0" / "checkpoints" / "latest.pt"
    assert checkpoint.exists()

    terrain = subtask_terrain
    outcomes = terrain.terrain_outcomes(str(checkpoint), "stairs", num_envs=8)
    assert outcomes and {kind for kind, _ in outcomes} <= {"stairs_up", "stairs_down"}
    assert all(0 <= level <= 1 for _, level in outcomes)  # the subtask's level range
    assert sum(o["episodes"] for o in outcomes.values()) > 0
    assert all(0 <= o["survived"] <= 1 and 0 <= o["success"] <= 1 for o in outcomes.values())
    assert "| terrain | level |" in terrain.table(outcomes)
    with pytest.raises(ValueError, match="unknown subtask 'lava'.*stairs"):
        terrain.terrain_outcomes(str(checkpoint), "lava", num_envs=8)
    monkeypatch.setattr(sys, "argv", ["subtask_terrain", str(checkpoint), "stairs",
                                      "--num-envs", "8"])  # the command line
    capsys.readouterr()
    terrain.main()
    assert capsys.readouterr().out.startswith("| terrain | level | episodes | survived | "
                                              "success | tracking error (m/s) | distance (m) |")

    stamp = (out / "curves" / "uniform_s0.csv.xz").stat().st_mtime_ns
    assert study.run_study(cfg, out, runs) == []  # finished runs are skipped
    assert (out / "curves" / "uniform_s0.csv.xz").stat().st_mtime_ns == stamp
    study.report(cfg, out)
    assert "| flat |" in (out / "summary.md").read_text()
    assert "| 0 |" in (out / "primary.md").read_text()  # seed 0, both allocations
    for name in ("success_vs_env_steps", "allocation"):
        assert (out / f"{name}.png").stat().st_size > 0

    # scheduler knobs leave the uniform curve valid, not the learning-progress one
    (out / "curves" / "learning_progress_s0.csv.xz").rename(out / "learning_progress_s0.csv.xz")
    cfg.multitask.mastered = 0.7
    assert study.pending(cfg, out) == [("learning_progress", 0)]
    (out / "learning_progress_s0.csv.xz").rename(out / "curves" / "learning_progress_s0.csv.xz")
    with pytest.raises(ValueError, match=r"learning_progress_s0.csv.xz was trained with other "
                                         r"\['multitask.mastered'\]"):
        study.run_study(cfg, out, runs)
    cfg.multitask.mastered = 0.8
    cfg.algo.ppo.gamma, cfg.allocations = 0.9, ["uniform"]  # and nothing else does
    with pytest.raises(ValueError,
                       match=r"uniform_s0.csv.xz was trained with other \['algo.ppo.gamma'\]"):
        study.pending(cfg, out)
    cfg.algo.ppo.gamma, cfg.allocations = 0.99, ["learning_progress", "uniform"]

    cfg.iterations = 3
    with pytest.raises(ValueError, match="ran 2 iterations, the study asks 3"):
        study.run_study(cfg, out, runs)


def test_an_interrupted_run_continues_from_its_checkpoint(tmp_path):
    """A run stopped part-way (here: its final curve lost after 2 of 3 iterations) resumes
    at its checkpoint and keeps the curve rows from before."""
    study = multitask_study
    cfg = load_config("multitask_study", [*SMALL, "allocations=[uniform]"])
    out, runs = tmp_path / "out", tmp_path / "runs"
    study.run_study(cfg, out, runs)
    before = study.read_csv(out / "curves" / "uniform_s0.csv.xz")
    (out / "curves" / "uniform_s0.csv.xz").unlink()
    cfg.iterations = 3
    assert study.run_study(cfg, out, runs) == ["uniform_s0"]
    after = study.read_csv(out / "curves" / "uniform_s0.csv.xz")
    assert after["iteration"].tolist() == [1, 2, 3]
    assert after["env_steps"].tolist() == [32 * 8, 2 * 32 * 8, 3 * 32 * 8]
    for column, values in before.items():
        np.testing.assert_array_equal(after[column][:2], values)
    assert after["wall_s"][2] > after["wall_s"][1]

    cfg.iterations = 1
    (out / "curves" / "uniform_s0.csv.xz").unlink()
    with pytest.raises(ValueError, match="at iteration 3, past the study's 1"):
        study.run_study(cfg, out, runs)

    cfg.iterations = 3
    cfg.multitask.floor = 0.1  # a changed scheduler is another run, not this one resumed
    with pytest.raises(ValueError, match=r"trained with other \['multitask.floor'\]"):
        study.run_study(cfg, out, runs)


def test_study_needs_the_multitask_task(tmp_path):
    study = multitask_study
    cfg = load_config("multitask_study", ["task=flat_velocity", "multitask=none"])
    with pytest.raises(ValueError, match="needs subtasks: use task=multitask"):
        study.run_study(cfg, tmp_path, tmp_path)


def test_a_curve_depends_on_the_weights_where_set_and_not_under_uniform_slots():
    study = multitask_study
    allocations = ("fixed", "uniform", "learning_progress")
    cfg = load_config("multitask_study", ["multitask.weights={trot: 0.25}"])
    settings = {a: study.curve_settings(study.run_config(cfg, a, 0))["multitask"]
                for a in allocations}
    assert settings["fixed"]["weights"] == settings["learning_progress"]["weights"] \
        == {"trot": 0.25}
    assert "weights" not in settings["uniform"]
    assert "noise" not in settings["uniform"] and "noise" in settings["learning_progress"]
    unset = load_config("multitask_study", [])
    assert all("weights" not in study.curve_settings(study.run_config(unset, a, 0))["multitask"]
               for a in allocations)


def test_subtask_checks_weight_each_iteration_by_its_episodes():
    checks = subtask_checks
    rows = [{"iteration": 1, "multitask/episodes/trot": 2.0, "multitask/on_gait/trot": 0.5,
             "multitask/gait_match/trot": 0.6, "multitask/success/trot": 0.0},
            {"iteration": 2, "multitask/episodes/trot": 6.0, "multitask/on_gait/trot": 1.0,
             "multitask/gait_match/trot": 0.9, "multitask/success/trot": 0.5,
             "multitask/episodes/flat": 4.0, "multitask/success/flat": 0.25},
            {"iteration": 3, "multitask/episodes/trot": 9.0, "multitask/on_gait/trot": 0.0}]
    shares = checks.episode_weighted(rows, 1, 2)
    assert list(shares) == ["flat", "trot"]
    assert shares["trot"]["episodes"] == 8
    assert shares["trot"]["on_gait"] == pytest.approx((2 * 0.5 + 6 * 1.0) / 8)
    assert shares["trot"]["gait_match"] == pytest.approx((2 * 0.6 + 6 * 0.9) / 8)
    assert shares["flat"]["success"] == 0.25 and math.isnan(shares["flat"]["gait_match"])
    assert "| flat | 4 |" in checks.table(shares)


def test_replay_sees_progress_on_a_rising_subtask_and_none_on_a_plateau():
    replay = replay_scheduler
    rng = np.random.default_rng(0)
    iterations = 600
    rising = np.linspace(0.0, 0.9, iterations)
    curve = {"episodes/rising": np.full(iterations, 3.0), "episodes/plateau": np.full(
        iterations, 3.0)}
    curve["success/rising"] = rng.binomial(3, rising) / 3
    curve["success/plateau"] = rng.binomial(3, 0.5, iterations) / 3
    cfg = load_config("multitask_study", []).multitask
    names, progress, shares = replay.replay(curve, replay.SchedulerConfig(
        fast=cfg.fast, slow=cfg.slow, noise=cfg.noise, mastered=cfg.mastered, stalled=0.5))
    assert names == ["rising", "plateau"]
    assert progress[200:500, 0].mean() > 5 * progress[200:500, 1].mean()
    assert np.allclose(shares.sum(1), 1.0) and (shares[:9] == 0.5).all()  # before the first
    assert shares[200:500, 0].mean() > 0.6  # the plateau lends the rising one slots
    _, raw, _ = replay.replay(curve, replay.SchedulerConfig(noise=0.0, fast=0.3, slow=0.05))
    assert raw[200:500, 1].mean() > 0.03  # without the noise allowance the plateau "progresses"
    assert replay.window_rate(curve, "plateau", 1, iterations) == pytest.approx(0.5, abs=0.05)


def test_power_splits_the_pairs_spread_and_finds_the_effect_each_seed_needs(tmp_path):
    power = multitask_power
    cfg = load_config("multitask_study", ["success_threshold=0.5", "window=1",
                                          "min_episodes=1"])

    def curve(name: str, a_at: int, b_at: int | None) -> None:
        reaching_curve(tmp_path, name, {"a": a_at, "b": b_at})

    curve("learning_progress_s0", 2, 3)
    curve("uniform_s0", 4, None)   # b never: counted as reached at the last step, 40
    with pytest.raises(ValueError, match="1 seeds with both.*at least 2"):
        power.paired_log_ratios(tmp_path, cfg)
    curve("learning_progress_s1", 3, 1)
    curve("uniform_s1", 3, 2)
    curve("learning_progress_s2", 1, 1)   # no uniform run: left out
    names, seeds, d = power.paired_log_ratios(tmp_path, cfg)
    assert names == ["a", "b"] and seeds == [0, 1]
    assert d == pytest.approx(np.log([[40 / 20, 40 / 30], [30 / 30, 20 / 10]]))

    # d = subtask effect + seed effect exactly: no rest, the seed effects' spread shared.
    d = np.array([[0.1, 0.3], [0.3, 0.5], [-0.1, 0.1]]) + np.array([0.0, 0.2])
    effect, shared_sd, rest_sd = power.spread(d)
    assert effect == pytest.approx([0.1, 0.5]) and rest_sd == pytest.approx(0.0, abs=1e-9)
    assert shared_sd == pytest.approx(0.2)
    assert power.needed_effect(d) == pytest.approx([0.0, -0.2, 0.2])
    assert power.chance_all_above(np.array([0.1, 0.2]), 0.0, 0.0) == 1.0
    assert power.chance_all_above(np.array([0.1, -0.2]), 0.0, 0.0) == 0.0
    assert 0.2 < power.chance_all_above(np.zeros(2), 0.0, 1.0) < 0.3  # (1/2)^2
    # Means over 4 seeds spread by 1/2: each subtask above -1/2 with Phi(1) = 0.841.
    assert power.chance_all_above(np.zeros(2), 0.0, 1.0, seeds=4, floor=-0.5) == \
        pytest.approx(0.841 ** 2, abs=0.01)
    assert power.chance_all_above(np.zeros(2), 1.0, 0.0, seeds=4, floor=-0.5) == \
        pytest.approx(0.841, abs=0.01)  # a shared effect moves both subtasks together


def test_overview_rows_pair_each_allocation_with_uniform_runs_of_its_seeds(tmp_path):
    overview = multitask_overview

    first, second = tmp_path / "first", tmp_path / "second"
    reaching_curve(first, "fixed_s0", {"a": 2, "b": 4})
    reaching_curve(first, "uniform_s0", {"a": 4, "b": 2})
    reaching_curve(first, "fixed_s1", {"a": 1, "b": 1})   # sooner on both subtasks
    reaching_curve(first, "uniform_s1", {"a": 2, "b": 2})
    reaching_curve(first, "learning_progress_s2", {"a": 1, "b": 1})   # no uniform s2: left out
    assert overview.paired_runs(first) == {"fixed": [0, 1]}
    table = overview.overview([first], ["success_threshold=0.5", "window=1",
                                        "min_episodes=1"]).splitlines()
    assert table[0].startswith("| study | allocation | seeds | a | b |")
    # a: ln(40/20) and ln(20/10), both ln 2; b: ln(20/40) and ln 2, mean 0
    assert table[2] == "| first | fixed | 0, 1 | +0.69 | +0.00 | 3 / 1 | 1 of 2 |"

    reaching_curve(second, "uniform_s0", {"a": 1})
    with pytest.raises(ValueError, match="no allocation paired with a uniform curve"):
        overview.overview([second], [])
    reaching_curve(second, "fixed_s0", {"a": 1})
    with pytest.raises(ValueError, match="compare studies of one subtask set"):
        overview.overview([first, second], ["success_threshold=0.5", "window=1",
                                            "min_episodes=1"])


def run_curve(rates: dict[str, list[float]], hours: float = 1.0) -> dict[str, np.ndarray]:
    """A curve of 1M env steps and ``hours`` an iteration, one episode per subtask and
    iteration at the given success rates (NaN: no episode)."""
    i = np.arange(1, len(next(iter(rates.values()))) + 1)
    curve = {"env_steps": 1e6 * i, "wall_s": 3600.0 * hours * i}
    for name, r in rates.items():
        curve[f"success/{name}"] = np.array(r, dtype=float)
        curve[f"episodes/{name}"] = np.where(np.isnan(curve[f"success/{name}"]), 0.0, 1.0)
    return curve


def test_primary_measure_needs_every_subtask_there_at_once_and_censors_the_rest():
    study = multitask_study
    cfg = load_config("multitask_study", ["success_threshold=0.8", "window=1",
                                          "min_episodes=1"])
    # a is there at iteration 1, falls back at 2; b gets there at 2; both at 4 (b held
    # over its episode-less iteration 3 at its last rate)
    curve = run_curve({"a": [1.0, 0.0, 0.0, 1.0, 1.0], "b": [0.0, 1.0, 1.0, np.nan, 0.5]})
    assert study.all_at_threshold(curve, cfg) == {"env_steps": 4e6, "wall_s": 4 * 3600.0,
                                                  "censored": False}
    assert study.steps_to_threshold(curve, cfg)["all subtasks"] == 2e6  # each on its own
    assert study.at_budget(curve, cfg) == {"mastered": 1, "worst": 0.5}
    never = run_curve({"a": [1.0] * 5, "b": [np.nan, 0.5, 0.5, 0.5, 0.5]})
    assert study.all_at_threshold(never, cfg) == {"env_steps": 5e6, "wall_s": 5 * 3600.0,
                                                  "censored": True}  # the budget, flagged


def test_sign_test_is_the_two_sided_binomial_tail_without_ties():
    sign_test = multitask_study.sign_test
    assert sign_test(5, 0) == pytest.approx(2 / 32) and sign_test(0, 5) == sign_test(5, 0)
    assert sign_test(4, 1) == pytest.approx(2 * 6 / 32)
    assert sign_test(3, 3) == 1.0 and sign_test(0, 0) == 1.0
    assert sign_test(9, 1) == pytest.approx(2 * 11 / 1024)


def test_primary_table_pairs_seeds_counts_censored_runs_and_tests_the_signs():
    study = multitask_study
    cfg = load_config("multitask_study", ["success_threshold=0.8", "window=1",
                                          "min_episodes=1", "seeds=[0,1,2,3]"])
    at = {None: [0.0] * 5, 2: [0, 1.0, 1, 1, 1], 3: [0, 0, 1.0, 1, 1], 4: [0, 0, 0, 1.0, 1]}
    lp, uni = "learning_progress", "uniform"
    curves = {(lp, 0): run_curve({"a": at[2]}, 0.5), (uni, 0): run_curve({"a": at[4]}),
              (lp, 1): run_curve({"a": at[3]}, 0.5), (uni, 1): run_curve({"a": at[None]}),
              (lp, 2): run_curve({"a": at[None]}, 0.5), (uni, 2): run_curve({"a": at[None]}),
              (lp, 3): run_curve({"a": at[4]}, 0.5), (uni, 3): run_curve({"a": at[2]}),
              (lp, 4): run_curve({"a": at[2]})}  # no uniform run of seed 4: not paired
    table = study.primary_table(curves, cfg)
    rows = [line for line in table.splitlines() if line.startswith("| ")][1:]
    assert rows == [
        "| 0 | 2.0M / 4.0M | +0.69 | 1.0 h / 4.0 h | +1.39 | 1 / 1 | 1.00 / 1.00 |",
        "| 1 | 3.0M / > 5.0M | +0.51 | 1.5 h / > 5.0 h | +1.20 | 1 / 0 | 1.00 / 0.00 |",
        "| 2 | > 5.0M / > 5.0M | +0.00 | > 2.5 h / > 5.0 h | +0.69 | 0 / 0 | 0.00 / 0.00 |",
        "| 3 | 4.0M / 2.0M | -0.69 | 2.0 h / 2.0 h | +0.00 | 1 / 1 | 1.00 / 1.00 |"]
    assert (f"- Sooner by env steps: {lp} in 2 seeds, {uni} in 1, tied or neither got there "
            f"in 1; sign test p = 1.000; mean ln ratio {math.log(5 / 3) / 4:+.3f} over 4 "
            "seeds.") in table
    assert (f"- Sooner by wall-clock: {lp} in 2 seeds, {uni} in 0, tied or neither got there "
            "in 2; sign test p = 0.500;") in table
    assert "- 2 of 4 pairs hold a censored run" in table
    assert (f"- More subtasks at 0.8 at the budget: {lp} in 1 seed, {uni} in 0, equal in 3; "
            "sign test p = 1.000; mean difference +0.25.") in table
    assert study.primary_table({(uni, 0): curves[(uni, 0)]}, cfg).startswith(
        "No seed has both")


def test_primary_table_pairs_the_first_allocation_with_the_one_asked():
    """With three allocations, primary.md pairs the first with each of the others."""
    cfg = load_config("multitask_study", [
        "success_threshold=0.8", "window=1", "min_episodes=1", "seeds=[0]",
        "allocations=[progress_per_cost,learning_progress,uniform]"])
    curves = {("progress_per_cost", 0): run_curve({"a": [0, 0, 1.0, 1]}),
              ("learning_progress", 0): run_curve({"a": [0, 1.0, 1, 1]}),
              ("uniform", 0): run_curve({"a": [0, 0, 0, 1.0]})}
    tables = {other: multitask_study.primary_table(curves, cfg, other)
              for other in ("learning_progress", "uniform")}
    assert multitask_study.primary_table(curves, cfg) == tables["learning_progress"]
    assert "| 0 | 3.0M / 2.0M | -0.41 |" in tables["learning_progress"]
    assert "| 0 | 3.0M / 4.0M | +0.29 |" in tables["uniform"]
    assert "progress_per_cost / uniform;" in tables["uniform"]


def test_mean_success_is_the_level_over_the_whole_run_paired_per_seed():
    study = multitask_study
    cfg = load_config("multitask_study", ["window=1", "min_episodes=1", "seeds=[0,1]"])
    lp, uni = "learning_progress", "uniform"
    # a is unmeasured (0) in iteration 1 under learning progress, then held over iteration 3
    curves = {(lp, 0): run_curve({"a": [np.nan, 1.0, np.nan, 0.5], "b": [1.0] * 4}),
              (uni, 0): run_curve({"a": [0.5] * 4, "b": [0.0, 0, 1, 1]}),
              (lp, 1): run_curve({"a": [1.0] * 4, "b": [0.0] * 4}),
              (uni, 1): run_curve({"a": [0.0] * 4, "b": [0.0] * 4}),
              (lp, 2): run_curve({"a": [1.0] * 4, "b": [1.0] * 4})}  # unpaired: left out
    table = study.mean_success_table(curves, cfg)
    assert "(mean over seeds 0, 1)" in table
    assert "| a | 0.812 / 0.250 | +0.562 | +0.125, +1.000 | 2/2 |" in table
    assert "| b | 0.500 / 0.250 | +0.250 | +0.500, +0.000 | 1/2 |" in table
    assert study.mean_success_table({(uni, 0): curves[(uni, 0)]}, cfg).startswith(
        "No seed has both")


def test_mean_level_pairs_the_terrain_subtasks_levels_per_seed():
    study = multitask_study
    cfg = load_config("multitask_study", ["seeds=[0]"])
    lp, uni = "learning_progress", "uniform"
    curves = {(lp, 0): {"level/stairs": np.array([1.0, 0.0, 0.5])},
              (uni, 0): {"level/stairs": np.array([1.0, 1.0, 1.0])}}
    table = study.mean_level_table(curves, cfg)
    assert table.startswith("Mean terrain level of the slots over the run")
    assert "| stairs | 0.500 / 1.000 | -0.500 | -0.500 | 0/1 |" in table


def test_fresh_seeds_run_the_shipped_allocation_against_uniform_at_the_same_budget():
    from locomotion.config import load_config as package_config

    default = load_config("multitask_study", [])
    fresh = load_config("multitask_study", ["seed_set=fresh"])
    shipped = package_config("train", ["task=multitask"]).multitask.allocation
    assert list(fresh.allocations) == [shipped, "uniform"]
    assert list(fresh.seeds) == [10, 11, 12, 13, 14]
    assert not set(fresh.seeds) & set(default.seeds) and fresh.out_dir != default.out_dir
    assert (fresh.iterations, fresh.num_envs, fresh.algo) == (default.iterations,
                                                              default.num_envs, default.algo)


def test_the_cost_seed_set_runs_progress_per_cost_on_fresh_seeds_in_its_own_out_dir():
    default = load_config("multitask_study", [])
    fresh = load_config("multitask_study", ["seed_set=fresh"])
    cost = load_config("multitask_study", ["seed_set=cost"])
    assert list(cost.allocations) == ["progress_per_cost", "uniform"]
    assert set(cost.seeds) <= set(fresh.seeds)
    assert cost.out_dir not in (default.out_dir, fresh.out_dir)
    assert cost.runs_dir not in (default.runs_dir, fresh.runs_dir)
    assert (cost.iterations, cost.num_envs, cost.algo) == (fresh.iterations, fresh.num_envs,
                                                           fresh.algo)


def test_the_entry_seed_set_runs_the_shipped_allocation_on_seeds_nothing_has_seen():
    default, fresh, cost, entry = (load_config("multitask_study", overrides) for overrides in
                                   ([], ["seed_set=fresh"], ["seed_set=cost"],
                                    ["seed_set=entry"]))
    assert list(entry.allocations) == list(fresh.allocations)
    assert not set(entry.seeds) & (set(default.seeds) | set(fresh.seeds) | set(cost.seeds))
    assert len(entry.seeds) >= 5
    assert entry.out_dir not in (default.out_dir, fresh.out_dir, cost.out_dir)
    assert entry.runs_dir not in (default.runs_dir, fresh.runs_dir, cost.runs_dir)
    assert (entry.iterations, entry.num_envs, entry.algo) == (fresh.iterations,
                                                              fresh.num_envs, fresh.algo)


def assert_reads_curves(study, owner, seeds) -> None:
    """``study`` finds ``owner``'s curves of ``seeds`` (every allocation ``owner`` ran) as
    they are, through its ``curves/shared.txt``."""
    for allocation in owner.allocations:
        for seed in seeds:
            mine, theirs = (curve_path(ROOT / cfg.out_dir, multitask_study.run_name(
                allocation, int(seed))) for cfg in (study, owner))
            assert mine.read_bytes() == theirs.read_bytes()


def test_the_cost_entry_seed_set_compares_with_the_entry_studys_own_runs():
    """seed_set=cost_entry reads seed_set=entry's learning_progress and uniform curves of
    its seeds where that study keeps them, and accepts them as finished: only
    progress_per_cost runs."""
    entry, both = (load_config("multitask_study", [f"seed_set={name}"])
                   for name in ("entry", "cost_entry"))
    assert list(both.allocations) == ["progress_per_cost", *entry.allocations]
    assert set(both.seeds) <= set(entry.seeds) and both.out_dir != entry.out_dir
    assert (both.iterations, both.num_envs, both.algo) == (entry.iterations, entry.num_envs,
                                                           entry.algo)
    assert_reads_curves(both, entry, both.seeds)
    left = multitask_study.pending(both, ROOT / both.out_dir)
    assert {allocation for allocation, _ in left} <= {"progress_per_cost"}


def test_only_the_cost_aware_allocation_records_its_probe_settings():
    study = multitask_study
    cfg = load_config("multitask_study", [])
    recorded = {a: "cost_probe" in study.curve_settings(study.run_config(cfg, a, 0))["multitask"]
                for a in ("learning_progress", "progress_per_cost", "uniform", "fixed")}
    assert recorded == {"learning_progress": False, "progress_per_cost": True,
                        "uniform": False, "fixed": False}


def test_the_ten_seed_set_reads_seeds_15_to_19_and_trains_only_seeds_nothing_has_seen():
    """seed_set=entry_ten is seed_set=entry widened: the same settings, seed_set=entry's
    curves of seeds 15-19 read where that study keeps them, and only new seeds left to
    train."""
    others = [load_config("multitask_study", overrides) for overrides in
              ([], ["seed_set=fresh"], ["seed_set=cost"], ["seed_set=cost_entry"])]
    entry, ten = (load_config("multitask_study", [f"seed_set={name}"])
                  for name in ("entry", "entry_ten"))
    assert list(ten.allocations) == list(entry.allocations)
    assert len(ten.seeds) == 10 and set(entry.seeds) < set(ten.seeds)
    new = set(ten.seeds) - set(entry.seeds)
    assert not new & set().union(*(set(cfg.seeds) for cfg in others))
    assert ten.out_dir not in {cfg.out_dir for cfg in (entry, *others)}
    assert (ten.iterations, ten.num_envs, ten.algo) == (entry.iterations, entry.num_envs,
                                                        entry.algo)
    assert_reads_curves(ten, entry, entry.seeds)
    left = multitask_study.pending(ten, ROOT / ten.out_dir)
    assert {seed for _, seed in left} <= new


def test_the_new_seed_set_reads_seeds_20_to_24_of_the_ten_seed_study():
    """seed_set=entry_ten_new reports the seeds trained after seed_set=entry_ten's rule was
    declared, alone: entry_ten's curves of exactly those seeds, read as they are, and
    nothing left to train."""
    entry, ten, new = (load_config("multitask_study", [f"seed_set={name}"])
                       for name in ("entry", "entry_ten", "entry_ten_new"))
    assert set(new.seeds) == set(ten.seeds) - set(entry.seeds)
    assert list(new.allocations) == list(ten.allocations)
    assert new.out_dir != ten.out_dir
    assert (new.iterations, new.num_envs, new.algo) == (ten.iterations, ten.num_envs, ten.algo)
    assert_reads_curves(new, ten, new.seeds)
    assert multitask_study.pending(new, ROOT / new.out_dir) == []
