"""The commands of research/README.md at tiny budgets: each runs and writes its tables in
the format the pages show."""

from __future__ import annotations

import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest

from locomotion.config import load_config as load_package_config
from locomotion.rl.runner import Runner
from locomotion.tasks import make_env
from research import stagger_study, subtask_checks, terrain_levels
from research.study import load_config

ROOT = Path(__file__).resolve().parents[2]
TINY_POLICY = ["algo.policy.actor_hidden_dims=[16]", "algo.policy.critic_hidden_dims=[16]"]


def run_module(module: str, *overrides: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """``python -m research.<module> <overrides>`` from the repository root, Hydra's run
    folder in ``tmp_path``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-m", f"research.{module}", *overrides,
         f"hydra.run.dir={tmp_path / 'hydra'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_study_configs_resolve_the_package_groups():
    """The study configs find robot=, task=, terrain= ... in the package's configs, and
    task=toy only in research/configs."""
    cfg = load_config("stagger_study", ["task=flat_velocity", "robot=dmc_quadruped"])
    assert cfg.task.name == "flat_velocity" and cfg.study.flat_velocity.num_envs == [1024]
    assert load_config("stagger_study", []).task.name == "toy"
    assert load_config("multitask_study", []).task.name == "multitask"
    assert load_config("scaling_projection", []).write == "docs/scaling.md"
    with pytest.raises(Exception, match="task/toy"):
        load_package_config("train", ["task=toy"])


@pytest.mark.slow
@pytest.mark.subprocess
def test_stagger_study_command_writes_its_summary_and_figures(tmp_path):
    out = tmp_path / "out"
    result = run_module(
        "stagger_study", f"out_dir={out}", "grid.schedules=[sync,staggered]",
        "grid.rollout_lengths=[8]", "study.toy.seeds=[0]", "study.toy.num_envs=[16]",
        "study.toy.env_steps=1280", "histogram_iterations=4",
        *(f"study.toy.config.{o}" for o in TINY_POLICY), tmp_path=tmp_path)
    assert "ran 2 of 2 runs" in result.stdout
    summary = (out / "summary.md").read_text()
    assert "| K | N | schedule | env steps to threshold | reached | final return |" in summary
    assert "| 8 | 16 | staggered |" in summary
    assert "| K | N | schedule | seeds faster than sync (same seed) |" in summary
    assert (out / "summary.csv").read_text().startswith("schedule,K,N,seeds,reached,")
    for name in ("return_vs_env_steps", "return_vs_training_time", "phase_histogram", "critic",
                 "scaling_with_n"):
        assert (out / f"{name}.png").stat().st_size > 0
    assert sorted(p.name for p in (out / "curves").iterdir()) == [
        "staggered_K8_N16_s0.csv.xz", "staggered_K8_N16_s0.settings.json.xz",
        "sync_K8_N16_s0.csv.xz", "sync_K8_N16_s0.settings.json.xz"]


def test_stagger_study_on_the_quadruped(tmp_path):
    """``task=flat_velocity``: the quadruped env from the package, two cells."""
    cfg = load_config("stagger_study", [
        "task=flat_velocity", "grid.schedules=[sync,staggered]", "grid.rollout_lengths=[8]",
        "study.flat_velocity.seeds=[0]", "study.flat_velocity.num_envs=[8]",
        "study.flat_velocity.env_steps=128", "task.episode_length_s=0.4", *TINY_POLICY])
    ran = stagger_study.run_grid(cfg, tmp_path)
    assert [c.name for c in ran] == ["sync_K8_N8_s0", "staggered_K8_N8_s0"]
    curve = stagger_study.read_csv(tmp_path / "curves" / "staggered_K8_N8_s0.csv")
    assert curve["env_steps"].tolist() == [64, 128]


@pytest.mark.slow
@pytest.mark.subprocess
def test_multitask_study_commands_write_their_summary_and_figures(tmp_path):
    out, runs = tmp_path / "out", tmp_path / "runs"
    small = ["num_envs=32", "iterations=2", "seeds=[0]", "algo.num_steps=8",
             "multitask.every=1", "terrain.levels=4", "terrain.curriculum.max_init_level=1",
             "task.episode_length_s=0.1", *TINY_POLICY, "success_threshold=0.0", "window=1",
             "min_episodes=1", f"out_dir={out}", f"runs_dir={runs}"]
    result = run_module("multitask_study", *small, tmp_path=tmp_path)
    assert "ran 2 runs" in result.stdout
    header = "| subtask | learning_progress | uniform | seeds where learning_progress is faster |"
    summary = (out / "summary.md").read_text()
    assert header in summary and "| all subtasks |" in summary
    assert "| relative experience | subtask-seeds | learning_progress first |" in summary
    (out / "summary.md").unlink()
    (out / "success_vs_env_steps.png").unlink()
    result = run_module("multitask_study", *small, "report_only=true", tmp_path=tmp_path)
    assert "ran" not in result.stdout.splitlines()[0]
    assert header in (out / "summary.md").read_text()
    assert (out / "success_vs_env_steps.png").stat().st_size > 0
    assert (out / "allocation.png").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.subprocess
def test_walk_ablation_command_trains_each_variant_and_tables_them(tmp_path):
    """Two variants, one seed each, through scripts/benchmark_train.py at a tiny budget (the
    walk criterion cannot be met: both "never", stopped by max_env_steps after 2 of 50
    iterations); a second call skips the finished runs."""
    out = tmp_path / "out"
    tiny = ["max_iterations=50", "num_envs=16", "algo.num_steps=8", "eval_every=1",
            "eval_envs=4", "task.episode_length_s=0.1", *TINY_POLICY]
    args = [f"variants.default={tiny}",
            f"+variants.tiny_lr={[*tiny, 'algo.ppo.learning_rate=1e-4']}",
            "run=[default,tiny_lr]", "seeds=[0]", "jobs=1", "max_env_steps=256", f"out_dir={out}",
            f"runs_dir={tmp_path / 'runs'}"]
    result = run_module("walk_ablation", *args, tmp_path=tmp_path)
    assert "default seed 0: did not walk" in result.stdout
    summary = (out / "summary.md").read_text()
    assert "| variant | overrides | env steps to walk (per seed) | median |" in summary
    assert "| tiny_lr | " in summary and "s0:never | inf" in summary
    tiny_lr = json.loads((out / "runs" / "tiny_lr_s0.json").read_text())
    assert tiny_lr["overrides"][-1] == "algo.ppo.learning_rate=1e-4"
    # the physics is part of the collection, never all of an iteration with its update
    assert 0 < tiny_lr["physics_fraction"] < 1 - tiny_lr["learn_fraction"]
    checks = (Path(tiny_lr["run_dir"]) / "curve.csv").read_text().splitlines()
    assert [row.split(",")[1] for row in checks[1:]] == ["128", "256"]  # env steps
    again = run_module("walk_ablation", *args, tmp_path=tmp_path)
    assert "did not walk" not in again.stdout


@pytest.mark.slow
@pytest.mark.subprocess
def test_scaling_projection_command_rewrites_the_pages_table(tmp_path):
    page = tmp_path / "scaling.md"
    text = (ROOT / "docs" / "scaling.md").read_text()
    page.write_text(text)
    result = run_module("scaling_projection", "num_envs=16", "measure.iterations=1",
                        "measure.allreduce_calls=5", "algo.num_steps=8", f"write={page}",
                        tmp_path=tmp_path)
    header = ("| ranks | nodes | link between nodes | grad all-reduce (ms) | comm / iteration "
              "(ms) | iteration (s) | env steps/s | efficiency | comm share |")
    assert header in result.stdout and header in text
    report = json.loads(result.stdout.strip().splitlines()[-1])
    # one row per rank count inside a node (2 ranks), one per assumed network beyond it
    assert [(r["ranks"], r["link"]) for r in report["rows"][:4]] == [
        (1, "—"), (2, "this machine"), (4, "10 Gb/s"), (4, "100 Gb/s")]
    assert [r["ranks"] for r in report["rows"]][-2:] == [64, 64]
    begin, end = "<!-- scaling-table:begin -->", "<!-- scaling-table:end -->"
    new = page.read_text()
    assert new.split(begin)[0] == text.split(begin)[0]
    assert new.split(end)[1] == text.split(end)[1]
    assert "Measured with `python -m research.scaling_projection num_envs=16" in new


def test_subtask_checks_command_reads_a_compressed_log(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"iteration": 1, "multitask/episodes/trot": 2.0, "multitask/survived/trot": 1.0,
             "multitask/tracked/trot": 0.5, "multitask/on_gait/trot": 0.5,
             "multitask/gait_match/trot": 0.7, "multitask/success/trot": 0.5},
            {"iteration": 2, "multitask/episodes/flat": 4.0, "multitask/success/flat": 0.25}]
    with lzma.open(run / "progress.jsonl.xz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    monkeypatch.setattr(sys, "argv", ["subtask_checks", str(run), "--iterations", "1", "2"])
    subtask_checks.main()
    out = capsys.readouterr().out
    assert f"## {run} (iterations 1..2)" in out
    assert "| subtask | episodes | survived | tracked | on_gait | gait_match | success |" in out
    assert "| trot | 2 | 1.00 | 0.50 | 0.50 | 0.70 | 0.50 |" in out
    monkeypatch.setattr(sys, "argv", ["subtask_checks", str(tmp_path)])
    with pytest.raises(SystemExit, match="progress.jsonl not found"):
        subtask_checks.main()


def test_terrain_levels_command_on_a_rough_checkpoint(tmp_path, capsys):
    cfg = load_package_config("train", [
        "task=rough", "num_envs=16", "algo.num_steps=8", "terrain.levels=4",
        "terrain.tile_size=4.0", "terrain.border=2.0", "terrain.curriculum.max_init_level=1",
        "task.episode_length_s=0.4",
        "logging.tensorboard=false", *TINY_POLICY])
    env = make_env(cfg)
    try:
        runner = Runner(env, cfg, log_dir=tmp_path)
        runner.learn(1)
    finally:
        env.close()
    capsys.readouterr()  # training's own lines
    terrain_levels.main(str(runner.checkpoint_path))
    lines = capsys.readouterr().out.strip().splitlines()
    assert "iteration 1, 128 env steps; levels 0..3, middle = 2" in lines[0]
    report = json.loads(lines[-1])
    assert report["middle_level"] == 2 and report["env_steps"] == 128
    assert sum(t["envs"] for t in report["types"].values()) == 16
    assert all("mean level" in line for line in lines[1:-1])
    assert len(lines) == 2 + len(report["types"])
