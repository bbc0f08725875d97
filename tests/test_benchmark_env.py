"""scripts/benchmark_env.py: the raw physics it times is the work the env just did."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def load_script():
    spec = importlib.util.spec_from_file_location(
        "benchmark_env", ROOT / "scripts" / "benchmark_env.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_raw_physics_repeats_the_env_steps_it_is_paired_with(make_env):
    """The raw side times the env's own physics: replaying a step's start states and
    controls reaches the states the env reached, bit for bit, in every world the step did
    not reset."""
    env = make_env("reset=random_counter")
    raw = load_script().RawPhysics(env.model, env.num_envs, env.decimation, nthread=2)
    gen, carried = torch.Generator().manual_seed(0), 0
    for _ in range(12):
        start = env.sim.state.copy()
        env.step(torch.randn((env.num_envs, env.num_actions), generator=gen))
        assert raw.seconds(start, env.ctrl.numpy()) > 0
        kept = env.sim.state[:, 0] > start[:, 0]  # a reset world starts again at time 0
        np.testing.assert_array_equal(raw.out[kept, -1], env.sim.state[kept])
        carried += int(kept.sum())
    raw.close()
    assert carried > 0.8 * 12 * env.num_envs


def test_paired_seconds_splits_the_env_step_and_restores_the_backend(make_env):
    """The backend's step is timed inside the env's, and left untouched afterwards."""
    script, env = load_script(), make_env("reset=random_counter")
    raw = script.RawPhysics(env.model, env.num_envs, env.decimation, nthread=2)
    env_s, backend_s, raw_s = script.paired_seconds(env, [raw], 5,
                                                    torch.Generator().manual_seed(0))
    raw.close()
    assert 0 < backend_s < env_s and raw_s > 0
    assert "step" not in vars(env.sim)


def test_work_alone_replays_the_same_steps_without_the_physics(make_env):
    """The second pass writes back each step's physics result: it must end where the first
    ended (the same observations), and the env's own work is timed on both passes."""
    script, env = load_script(), make_env("reset=random_counter")
    gen = torch.Generator().manual_seed(0)
    actions = [torch.randn((env.num_envs, env.num_actions), generator=gen) for _ in range(8)]
    env.step(actions[0])
    between, alone, exact = script.work_seconds(env, actions)
    assert exact and between > 0 and alone > 0
    assert "step" not in vars(env.sim)


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_script_reports_each_n_with_its_split_and_the_fidelity_replay(tmp_path):
    """A small run of the command, as a user starts it, under inference mode (the default)."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "benchmark_env.py"), "num_envs_list=[8,16]",
         "rounds=2", "measure_steps=3", "warmup_steps=1", f"hydra.run.dir={tmp_path}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["inference_mode"] is True
    rows = report["results"]
    assert [r["num_envs"] for r in rows] == [8, 16]
    for r in rows:
        ms = r["ms_per_step"]
        assert 0 < ms["backend"] < ms["env"] and ms["raw"] > 0
        assert 0 < ms["work_alone"] and 0 < ms["work"] < ms["env"]
        assert r["replay_exact"] is True
        assert r["ratio_range"][0] <= r["ratio"] <= r["ratio_range"][1]
        assert r["raw_env_steps_per_s_fidelity"] > 0


@pytest.mark.subprocess
@pytest.mark.parametrize("flag", ["inference_mode", "work_alone"])
def test_a_flag_that_is_not_a_boolean_is_refused(tmp_path, flag):
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "benchmark_env.py"), "num_envs=8",
         f"{flag}=yes_please", f"hydra.run.dir={tmp_path}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert f"{flag} must be true or false, got 'yes_please'" in run.stderr
