"""MuJoCo Warp backend against native MuJoCo, on Warp's CPU device (GPU checks when present).

Tolerances: Warp computes in float32 and its Newton solver, stopped at the training
profile's 10 iterations, differs in detail from MuJoCo's (line search, warm start), so
trajectories are not bit-identical. Over 100 control steps (400 physics steps, feet in
contact throughout) of 3 worlds the measured worst differences were: qpos 3e-4, qvel 2e-2,
sensors 5e-5 (quaternion), 9e-5 (foot positions), 2e-4 (velocimeter), 5e-3 (gyro), 2e-2
(accelerometer, m/s^2), 2e-2 (actuator force, N m, of up to 9), foot contact flags equal.
The tolerances below are about 5-10x those and stay orders of magnitude below the signals.
The backends do not drift apart: the differences stay flat over the 100 steps. Through the
env (60 steps of random actions, a time-out and autoreset) observations differed by at
most 6e-4 and rewards by 4e-6 (tolerances 5e-3 and 1e-4); terminations and time-outs match.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from locomotion.config import load_config
from locomotion.sim.model_builder import SolverProfile, build_model
from locomotion.sim.native import NativeBackend
from locomotion.sim.robot_spec import load_robot_spec
from locomotion.sim.warp_backend import HFIELD_CONTACTS_PER_PAIR, WarpBackend, budget
from locomotion.tasks import make_env

pytestmark = [pytest.mark.warp, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
N = 3
STEPS = 100
DECIMATION = 4
QPOS_ATOL = 2e-3
QVEL_ATOL = 0.1
SENSOR_ATOL = {"quat": 1e-3, "pos": 1e-3, "linvel": 2e-3, "gyro": 0.05, "acc": 0.2,
               "force": 0.2, "contact": 0.0}

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def go1():
    """The Go1 under the training solver profile, with its spec and layout."""
    cfg = load_config("env", [])
    spec = load_robot_spec(cfg.robot.spec)
    model, layout = build_model(spec, SolverProfile(**cfg.solver))
    return model, spec, layout


@pytest.fixture(scope="module")
def warp_sim(go1):
    """One compiled backend shared by the tests that put every world in a known state."""
    sim = WarpBackend(go1[0], N, "cpu")
    yield sim
    sim.close()


def standing(go1, n: int = N) -> tuple[torch.Tensor, torch.Tensor]:
    """Every world standing in the default pose at rest."""
    model, spec, layout = go1
    qpos = torch.tensor(model.qpos0, dtype=torch.float64).repeat(n, 1)
    qpos[:, 2] = spec.init_height
    qpos[:, layout.joint_qpos] = torch.tensor(spec.default_pose, dtype=torch.float64)
    return qpos, torch.zeros(n, model.nv, dtype=torch.float64)


def controls(go1, k: int, n: int = N) -> torch.Tensor:
    """Default pose plus a 2 Hz sinusoid of 0.15 rad, phase-shifted per joint and world."""
    model, spec, layout = go1
    phase = torch.arange(n, dtype=torch.float64)[:, None] + 0.5 * torch.arange(model.nu)[None]
    ctrl = torch.zeros(n, model.nu, dtype=torch.float64)
    ctrl[:, layout.actuator_ids] = torch.tensor(spec.default_pose, dtype=torch.float64) \
        + 0.15 * torch.sin(2 * math.pi * 2.0 * k * 0.02 + phase)
    return ctrl


def start(go1, *sims) -> None:
    """Reset every world of ``sims`` to standing."""
    qpos, qvel = standing(go1)
    for sim in sims:
        sim.reset(torch.arange(N), qpos, qvel)


def test_trajectories_match_native(go1, warp_sim):
    """Same model, start and controls: Warp (CPU) follows native MuJoCo within tolerance."""
    layout = go1[2]
    native = NativeBackend(go1[0], N, nthread=1)
    start(go1, native, warp_sim)
    for k in range(STEPS):
        ctrl = controls(go1, k)
        native.step(ctrl, DECIMATION)
        warp_sim.step(ctrl, DECIMATION)
        torch.testing.assert_close(warp_sim.qpos.double(), native.qpos, rtol=0, atol=QPOS_ATOL)
        torch.testing.assert_close(warp_sim.qvel.double(), native.qvel, rtol=0, atol=QVEL_ATOL)
        for name, cols in layout.sensors.items():
            torch.testing.assert_close(
                warp_sim.substep_sensordata[:, :, cols].double(),
                native.substep_sensordata[:, :, cols], rtol=0,
                atol=SENSOR_ATOL[name.rsplit("_", 1)[1]], msg=lambda m, n=name: f"{n}: {m}")
    assert not warp_sim.diverged.any()
    native.close()


def test_env_matches_native():
    """The env on ``sim=warp device=cpu`` gives native's observations, rewards and resets."""
    base = ["num_envs=4", "reset=sync", "task.episode_length_s=1.0"]
    warp_env = make_env(load_config("env", [*base, "sim=warp"]))
    native_env = make_env(load_config("env", [*base, "sim.nthread=1"]))
    w_obs, n_obs = warp_env.reset(), native_env.reset()
    for k in n_obs:
        torch.testing.assert_close(w_obs[k], n_obs[k], rtol=0, atol=1e-6)
    gen = torch.Generator().manual_seed(1)
    timeouts = 0
    for _ in range(60):  # one time-out and autoreset of every env at step 50
        actions = 0.3 * torch.randn(4, warp_env.num_actions, generator=gen)
        w_obs, w_rew, w_term, w_trunc, _ = warp_env.step(actions)
        n_obs, n_rew, n_term, n_trunc, _ = native_env.step(actions)
        for k in n_obs:
            torch.testing.assert_close(w_obs[k], n_obs[k], rtol=0, atol=5e-3)
        torch.testing.assert_close(w_rew, n_rew, rtol=0, atol=1e-4)
        assert torch.equal(w_term, n_term) and torch.equal(w_trunc, n_trunc)
        timeouts += int(w_trunc.sum())
    assert timeouts == 4
    warp_env.close()
    native_env.close()


def test_graph_replays_the_loop_exactly(go1, warp_sim):
    """The captured graph of a control step gives bit for bit what the plain loop gives."""
    loop = WarpBackend(go1[0], N, "cpu", graph=False)
    start(go1, loop, warp_sim)
    for k in range(3):
        loop.step(controls(go1, k), DECIMATION)
        warp_sim.step(controls(go1, k), DECIMATION)
    assert torch.equal(loop.qpos, warp_sim.qpos) and torch.equal(loop.qvel, warp_sim.qvel)
    assert torch.equal(loop.substep_sensordata, warp_sim.substep_sensordata)


def test_reset_touches_only_the_given_worlds(go1, warp_sim):
    """A reset sets the state of its worlds at time 0 and leaves the others as they were."""
    start(go1, warp_sim)
    warp_sim.apply_force(torch.arange(N), go1[1].base_body, torch.ones(N, 6))
    for k in range(3):
        warp_sim.step(controls(go1, k), DECIMATION)
    before = warp_sim.state_dict()["state"]
    qpos, qvel = standing(go1, 1)
    qpos[0, 0], qvel[0, 0] = 0.5, 0.3
    warp_sim.reset(torch.tensor([1]), qpos, qvel)
    after = warp_sim.state_dict()["state"]
    others = [0, 2]
    for k in before:
        assert torch.equal(after[k][others], before[k][others]), k
    assert torch.equal(after["qpos"][1], qpos[0].float())
    assert torch.equal(after["qvel"][1], qvel[0].float())
    for k in ("time", "act", "qacc_warmstart", "xfrc_applied"):
        assert not after[k][1].any(), k
    assert before["time"][1] > 0 and before["xfrc_applied"][1].any()


def test_state_dict_restores_the_trajectory(go1, warp_sim):
    """Loading a state dict and replaying the same controls repeats the same steps."""
    start(go1, warp_sim)
    warp_sim.step(controls(go1, 0), DECIMATION)
    saved = warp_sim.state_dict()
    runs = []
    for _ in range(2):
        warp_sim.load_state_dict(saved)
        for k in range(1, 4):
            warp_sim.step(controls(go1, k), DECIMATION)
        runs.append(warp_sim.state_dict())
    for k in saved["state"]:
        assert torch.equal(runs[0]["state"][k], runs[1]["state"][k]), k
    assert torch.equal(runs[0]["sensordata"], runs[1]["sensordata"])


def test_per_world_parameters(go1):
    """A heavier base in world 1 changes world 1 only, as it does on native MuJoCo."""
    model, spec = go1[0], go1[1]
    warp_sim = WarpBackend(model, N, "cpu")
    native = NativeBackend(model, N, nthread=1)
    start(go1, warp_sim, native)
    base = model.body(spec.base_body).id
    mass = torch.tensor(model.body_mass).repeat(1, 1)
    mass[0, base] *= 3.0
    for sim in (warp_sim, native):
        sim.set_params(torch.tensor([1]), "body_mass", mass)
    reference = WarpBackend(model, N, "cpu")  # shared masses, same start and controls
    start(go1, reference)
    for k in range(25):
        for sim in (warp_sim, native, reference):
            sim.step(controls(go1, k), DECIMATION)
    torch.testing.assert_close(warp_sim.qpos.double(), native.qpos, rtol=0, atol=QPOS_ATOL)
    assert torch.equal(warp_sim.qpos[[0, 2]], reference.qpos[[0, 2]])
    assert (reference.qpos[1, 2] - warp_sim.qpos[1, 2]) > 5e-3  # the heavy base sags
    with pytest.raises(ValueError, match="not a per-world model field"):
        warp_sim.set_params(torch.tensor([0]), "jnt_type", torch.zeros(1, model.njnt))
    native.close()


def test_push_changes_base_velocity(go1, warp_sim):
    """A lateral push on the base of one world moves it sideways, as on native MuJoCo."""
    model, spec = go1[0], go1[1]
    native = NativeBackend(model, N, nthread=1)
    start(go1, warp_sim, native)
    push = torch.tensor([[0.0, 300.0, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    ctrl = controls(go1, 0)[:1].repeat(N, 1)  # every world holds the same pose
    sims = (warp_sim, native)
    for wrench in (None, push, torch.zeros_like(push), None, None):
        for sim in sims:
            if wrench is not None:
                sim.apply_force(torch.tensor([1]), spec.base_body, wrench)
            sim.step(ctrl, DECIMATION)
        if wrench is push:  # one control step (20 ms) of 300 N on a ~12 kg robot
            vy = warp_sim.qvel[:, 1]
            assert vy[1] - vy[0] > 0.2 and vy[2] == vy[0]
        torch.testing.assert_close(warp_sim.qvel.double(), native.qvel, rtol=0, atol=QVEL_ATOL)
    assert warp_sim.qpos[1, 1] - warp_sim.qpos[0, 1] > 5e-3
    assert not warp_sim.xfrc_applied.any()
    native.close()


def test_overflow_diverges_the_world_and_is_counted(go1):
    """Too small a constraint buffer: the worlds that overflow are diverged until reset, the
    flags are counted by kind (naming the setting to raise) and nothing raises."""
    sim = WarpBackend(go1[0], 2, "cpu", njmax=2)
    sim.reset(torch.arange(2), *standing(go1, 2))
    for k in range(3):
        sim.step(controls(go1, k, 2), DECIMATION)
    assert sim.diverged.all()
    ((kind, count),) = [(k, n) for k, n in sim.warnings.items() if "NEFC" in k]
    assert "raise sim.njmax" in kind and count == 3 * 2  # every world, every step
    assert not sim._t["overflow"].any()  # counted flags are cleared
    sim.reset(torch.tensor([1]), *standing(go1, 1))
    assert sim.diverged.tolist() == [True, False]
    sim.reset_where(torch.tensor([True, False]), *standing(go1, 2))
    assert not sim.diverged.any()


def test_overflowing_run_continues_and_logs_the_count(tmp_path):
    """Training with a tiny njmax on Warp's CPU device runs on: the overflowing worlds count
    as diverged env steps and the overflows as physics warnings, in progress.jsonl."""
    from locomotion.rl.runner import Runner

    cfg = load_config("train", ["sim=warp", "num_envs=4", "algo.num_steps=4", "reset=sync",
                                "sim.njmax=2", "logging.tensorboard=false",
                                "algo.policy.actor_hidden_dims=[32]",
                                "algo.policy.critic_hidden_dims=[32]"])
    env = make_env(cfg)
    runner = Runner(env, cfg, log_dir=tmp_path)
    runner.learn(2)
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2]
    for r in rows:
        assert r["Train/diverged_envs"] == 16 and r["Train/mujoco_warnings"] >= 16
    env.close()


def test_budget_comes_from_the_model(go1, warp_sim):
    """Unset nconmax/njmax are derived from plain-MuJoCo drops; set ones are kept."""
    assert warp_sim.nconmax >= 8 and warp_sim.njmax >= 28  # four feet standing, doubled
    sim = WarpBackend(go1[0], 1, "cpu", nconmax=40, njmax=200)
    assert (sim.nconmax, sim.njmax) == (40, 200)


def test_budget_on_terrain_holds_a_tumble(go1):
    """On a heightfield every geom that can touch the ground gets mujoco_warp's contacts
    per geom-heightfield pair (a robot tumbling down stairs), rows for each."""
    from locomotion.sim.terrain import make_terrain

    cfg = load_config("env", ["task=rough"])
    model, _ = build_model(go1[1], SolverProfile(**cfg.solver), make_terrain(cfg.terrain))
    ground = model.geom("ground").id
    touching = sum(1 for g in range(model.ngeom) if g != ground and model.geom_contype[g]
                   & model.geom_conaffinity[ground])
    nconmax, njmax = budget(model)
    assert nconmax >= HFIELD_CONTACTS_PER_PAIR * touching
    assert njmax >= 4 * nconmax  # pyramidal condim-3 contacts: 4 rows each
    assert (nconmax, njmax) > budget(go1[0])


def test_cuda_device_without_index(monkeypatch):
    """A bare "cuda" gets the current device's index before Warp sees it (Warp's
    device_from_torch refuses a cuda device without one)."""
    import locomotion.sim.warp_backend as wb
    from locomotion.sim.backend import resolve_device

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert resolve_device("cuda") == torch.device("cuda", 1)
    assert resolve_device(torch.device("cuda", 0)) == torch.device("cuda", 0)
    assert resolve_device("cpu") == torch.device("cpu")

    def device_from_torch(device):  # Warp's behaviour, without a GPU
        if device.index is None:
            raise TypeError("list indices must be integers or slices, not NoneType")
        return f"warp:{device}"

    monkeypatch.setattr(wb.wp, "device_from_torch", device_from_torch)
    assert wb.warp_device("cuda") == (torch.device("cuda", 1), "warp:cuda:1")


def test_benchmark_runs_on_warp_cpu(tmp_path):
    """scripts/benchmark_gpu.py end to end on Warp's CPU device, tiny N."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "benchmark_gpu.py"), "device=cpu",
         "num_envs_list=[4]", "warmup_steps=1", "physics_steps=3", "env_steps=3",
         "train_iterations=1", "algo.num_steps=4", f"hydra.run.dir={tmp_path}"],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    row = result["results"][0]
    assert row["num_envs"] == 4 and row["train_steps_per_s"] > 0
    assert row["gpu_peak_mb"] is None  # nothing on a GPU


def test_graph_conditional_only_inside_a_cuda_graph(monkeypatch):
    """On CUDA the solver's early exit needs a captured graph and a driver with conditional
    nodes; otherwise it is off (else every solver iteration reads back to the host)."""
    import types

    import locomotion.sim.warp_backend as wb

    gpu, cpu = types.SimpleNamespace(is_cuda=True), types.SimpleNamespace(is_cuda=False)
    monkeypatch.setattr(wb.wp, "is_conditional_graph_supported", lambda: True)
    assert wb.graph_conditional(gpu, True) and not wb.graph_conditional(gpu, False)
    assert wb.graph_conditional(cpu, False)  # mujoco_warp's default on Warp's CPU device
    monkeypatch.setattr(wb.wp, "is_conditional_graph_supported", lambda: False)
    assert not wb.graph_conditional(gpu, True)


# ------------------------------------------------------------------ GPU only
@cuda
def test_cuda_graph_matches_the_loop(go1):
    """On a GPU the captured CUDA graph steps like the plain loop (contact order may differ)."""
    sims = [WarpBackend(go1[0], 64, "cuda", graph=g) for g in (True, False)]
    qpos, qvel = standing(go1, 64)
    for sim in sims:
        sim.reset(torch.arange(64), qpos, qvel)
        assert sim.qpos.device.type == "cuda"
        for k in range(10):
            sim.step(controls(go1, k, 64).cuda(), DECIMATION)
    torch.testing.assert_close(sims[0].qpos, sims[1].qpos, rtol=0, atol=1e-4)
    torch.testing.assert_close(sims[0].substep_sensordata, sims[1].substep_sensordata,
                               rtol=0, atol=1e-2)
    assert not sims[0].diverged.any() and not sims[0].warnings  # no buffer ran out


@cuda
def test_cuda_training_iteration(tmp_path):
    """Env, policy and storage on the GPU: one PPO iteration runs and stays on the device."""
    from locomotion.rl.runner import Runner

    cfg = load_config("train", ["sim=warp", "device=cuda", "num_envs=256", "algo.num_steps=8",
                                "reset=sync", "logging.tensorboard=false"])
    env = make_env(cfg)
    runner = Runner(env, cfg)
    runner.start()
    stats = runner.train_iteration()
    assert env.obs["policy"].is_cuda and runner.storage.obs.is_cuda
    assert stats["steps_per_s"] > 0 and math.isfinite(stats["losses"]["value_loss"])
    env.close()


def test_randomization_reaches_warp_as_on_native(env_from_cfg):
    """The same seed gives the same per-env model parameters on both backends, and a push
    kicks the Warp worlds' base velocity like the native ones."""
    base = ["num_envs=4", "reset=sync", "randomization=robust"]
    native = env_from_cfg(load_config("env", base))
    warp = env_from_cfg(load_config("env", [*base, "sim=warp"]))
    ground = native.model.geom("ground").id
    body = native.model.body(native.spec.base_body).id
    for i in range(4):
        model = native.sim.models[i]
        assert warp.sim._param("geom_friction")[i, ground, 0] == pytest.approx(
            model.geom_friction[ground, 0], abs=1e-6)
        assert warp.sim._param("body_mass")[i, body] == pytest.approx(model.body_mass[body],
                                                                      abs=1e-5)
    kick = torch.tensor([[0.5, -0.5]] * 4)
    before = warp.sim.qvel[:, 0:2].clone()
    warp.randomizer.events["push"].apply(torch.arange(4), {"velocity": kick.double()})
    assert torch.allclose(warp.sim.qvel[:, 0:2] - before, kick, atol=1e-6)
