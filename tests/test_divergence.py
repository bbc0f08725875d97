"""A run whose physics keeps diverging stops with a clear error and a loadable checkpoint;
MuJoCo's warnings are counted per iteration instead of printed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from locomotion.config import load_config
from locomotion.rl.checkpoint import load_checkpoint
from locomotion.rl.runner import DivergenceError, DivergenceGuard, Runner
from locomotion.tasks import make_env

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["num_envs=16", "algo.num_steps=8", "task.episode_length_s=0.5", "reset=sync",
         "algo.policy.actor_hidden_dims=[32,32]", "algo.policy.critic_hidden_dims=[32,32]",
         "logging.tensorboard=false", "logging.save_interval=100"]


@pytest.fixture
def stiff_robot(tmp_path) -> Path:
    """Go1 with gains 1e5 times too stiff and no torque limit: every world blows up at its
    first physics step (explicit or implicit integration alike)."""
    spec = yaml.safe_load((ROOT / "robots" / "go1" / "spec.yaml").read_text())
    spec.update(name="go1_stiff", mjcf=str(ROOT / "robots" / "go1" / "go1.xml"),
                kp={".*": 3.0e6}, torque_limits={".*": 1.0e9})
    path = tmp_path / "stiff" / "spec.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(spec))
    return path


def test_diverging_run_stops_with_a_checkpoint(stiff_robot, tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)  # MuJoCo's default handler would append to ./MUJOCO_LOG.TXT
    cfg = load_config("train", [*SMALL, f"robot.spec={stiff_robot}", "divergence.patience=3"])
    runner = Runner(make_env(cfg), cfg, log_dir=tmp_path / "run")
    try:
        with pytest.raises(DivergenceError) as caught:
            runner.learn(20)
    finally:
        runner.env.close()
    message = str(caught.value)
    assert "\n" not in message
    assert "100% of the env steps (128 of 128) for 3 iterations in a row" in message
    assert "PD gains" in message and "solver.timestep" in message
    assert "Nan, Inf or huge value in QACC" in message
    assert str(runner.checkpoint_path) in message
    assert runner.iteration == 3
    assert load_checkpoint(runner.checkpoint_path)["iteration"] == 3
    rows = [json.loads(line) for line in (tmp_path / "run" / "progress.jsonl").open()]
    # counted per iteration (not since the start), and MuJoCo's warnings with them
    assert [r["Train/diverged_envs"] for r in rows] == [128, 128, 128]
    assert all(r["Train/diverged_fraction"] == 1.0 for r in rows)
    assert all(r["Train/mujoco_warnings"] >= 128 for r in rows)
    out, err = capfd.readouterr()
    assert "Nan, Inf" not in out + err  # summarized, not printed one by one
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


def test_guard_needs_consecutive_diverging_iterations():
    guard = DivergenceGuard(max_fraction=0.5, patience=3)
    assert [guard.update(d, 100) for d in (60, 70, 10, 60, 51, 50, 99, 100, 100)] == [
        False, False, False, False, False, False, False, False, True]
    never = DivergenceGuard(max_fraction=1.0, patience=1)
    assert not never.update(100, 100)


@pytest.mark.parametrize("settings, match", [
    ({"max_fraction": 1.5}, r"divergence\.max_fraction must be a number in \[0, 1\]"),
    ({"max_fraction": "half"}, r"divergence\.max_fraction"),
    ({"patience": 0}, r"divergence\.patience must be an integer >= 1"),
    ({"patience": 2.5}, r"divergence\.patience"),
    ({"max_fractoin": 0.5}, r"no setting \['max_fractoin'\]"),
])
def test_bad_divergence_settings_are_clear_errors(settings, match):
    with pytest.raises(ValueError, match=match):
        DivergenceGuard.from_config(settings)


@pytest.mark.subprocess
@pytest.mark.slow
def test_train_command_ends_a_diverging_run_with_one_line_and_exit_2(stiff_robot, tmp_path):
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), *SMALL,
                           f"robot.spec={stiff_robot}", "divergence.patience=2",
                           "max_iterations=50", f"hydra.run.dir={run_dir}"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "training stopped at iteration 2" in errors[0], done.stderr
    assert "Nan, Inf" not in done.stderr.replace(errors[0], "") + done.stdout
    assert "Traceback" not in done.stderr
    assert re.search(r"checkpoint of iteration 2: \S+latest\.pt", errors[0])
    assert load_checkpoint(run_dir / "checkpoints" / "latest.pt")["iteration"] == 2
