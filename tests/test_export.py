"""Deployment export: numerical round trip, sidecar layout, the standalone player, refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mujoco
import numpy as np
import onnxruntime as ort
import pytest
import torch
from omegaconf import OmegaConf

from locomotion.commands import deploy
from locomotion.config import load_config
from locomotion.envs import LocomotionEnv
from locomotion.export import ExportError, export_checkpoint, policy_export
from locomotion.export.sidecar import command_spec, observation_layout
from locomotion.export.verification import record_observations
from locomotion.rl.checkpoint import load_checkpoint, policy_from_checkpoint, save_checkpoint
from locomotion.rl.runner import Runner
from locomotion.tasks import make_env

TRAIN = ["num_envs=16", "algo.num_steps=8", "reset=sync", "logging.tensorboard=false"]
TOLERANCE = 1e-5

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated")


def train_checkpoint(run_dir: Path, *overrides: str) -> Path:
    """One PPO iteration (so the normalizer is not the identity), saved as a checkpoint."""
    cfg = load_config("train", [*TRAIN, *overrides])
    runner = Runner(make_env(cfg), cfg, log_dir=run_dir)
    runner.learn(1)
    runner.env.close()
    # A fresh head outputs ~0.1; scale it so the error bound is tested on O(1) actions.
    runner.policy.actor[-1].weight.data.mul_(10.0)
    return runner.save()


def checkpoint_env(checkpoint: Path, num_envs: int) -> LocomotionEnv:
    cfg = OmegaConf.create(load_checkpoint(checkpoint)["config"])
    cfg.num_envs = num_envs
    cfg.reset = {"schedule": "sync", "num_groups": None, "warmup": "zero"}
    return make_env(cfg)


@pytest.fixture(scope="module")
def go1(tmp_path_factory):
    """A go1 checkpoint and its export (into the default ``<run>/exported``)."""
    checkpoint = train_checkpoint(tmp_path_factory.mktemp("go1"))
    result = export_checkpoint(checkpoint)
    print(result.summary())
    return checkpoint, result


def test_exported_graphs_match_the_torch_policy(go1):
    checkpoint, result = go1
    assert result.out_dir == checkpoint.parent.parent / "exported"
    assert result.num_observations == 64 * 17
    assert all(err <= TOLERANCE for err in result.errors.values()), result.errors

    policy = policy_from_checkpoint(load_checkpoint(checkpoint)).inference_policy()
    env = checkpoint_env(checkpoint, num_envs=32)
    obs = record_observations(env, policy, num_steps=8)
    env.close()
    expected = policy(obs).numpy()
    assert np.abs(expected).max() > 0.5  # the bound below is not vacuous

    session = ort.InferenceSession(str(result.out_dir / "policy.onnx"),
                                   providers=["CPUExecutionProvider"])
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, out.name) == ("obs", "actions")
    assert isinstance(inp.shape[0], str) and inp.shape[1] == obs.shape[1]  # dynamic batch
    scripted = torch.jit.load(str(result.out_dir / "policy.pt"))
    for rows in (obs, obs[:1], obs[:7]):
        want = policy(rows).numpy()
        onnx_err = np.abs(session.run(None, {"obs": rows.numpy()})[0] - want).max()
        script_err = np.abs(scripted(rows).numpy() - want).max()
        assert onnx_err <= TOLERANCE and script_err <= TOLERANCE, (onnx_err, script_err)


def test_sidecar_layout_reproduces_the_env_observation(go1):
    checkpoint, result = go1
    sidecar = deploy.load_sidecar(result.out_dir / "policy.json")
    model = deploy.load_model(result.out_dir / "robot.xml", sidecar, sidecar["solver"])
    observer = deploy.Observer(sidecar, model)

    env = checkpoint_env(checkpoint, num_envs=8)
    assert (model.nq, model.nv, model.nu) == (env.model.nq, env.model.nv, env.model.nu)
    np.testing.assert_allclose(model.actuator_gainprm, env.model.actuator_gainprm, rtol=1e-6)
    np.testing.assert_allclose(model.actuator_biasprm, env.model.actuator_biasprm, rtol=1e-6)
    assert sidecar["joints"] == list(env.spec.joints)
    assert sidecar["observation"]["size"] == env.observation_sizes["policy"]
    assert sidecar["decimation"] * sidecar["physics_timestep"] == pytest.approx(env.control_dt)

    policy = policy_from_checkpoint(load_checkpoint(checkpoint)).inference_policy()
    record_observations(env, policy, num_steps=5)  # moving, not spawn, states
    qpos, qvel = env.sim.qpos.numpy(), env.sim.qvel.numpy()
    for i in range(env.num_envs):
        built = observer(qpos[i], qvel[i], env.task.commands[i].numpy(), env.actions[i].numpy())
        np.testing.assert_allclose(built, env.obs["policy"][i].numpy(), rtol=1e-5, atol=1e-5)
    env.close()


def test_player_loop_follows_the_env_from_the_same_state(go1):
    """Same state, commands and policy: the player's control loop tracks the env's physics."""
    checkpoint, result = go1
    sidecar = deploy.load_sidecar(result.out_dir / "policy.json")
    model = deploy.load_model(result.out_dir / "robot.xml", sidecar, sidecar["solver"])
    env = checkpoint_env(checkpoint, num_envs=2)
    rng = np.random.default_rng(0)
    commander = deploy.Commander(sidecar, env.task.commands[0].double().numpy(), rng)
    player = deploy.Player(sidecar, model,
                           deploy.OnnxPolicy(result.out_dir / "policy.onnx", sidecar),
                           commander, rng)
    player.reset(env.sim.qpos[0].numpy(), env.sim.qvel[0].numpy())
    policy = policy_from_checkpoint(load_checkpoint(checkpoint)).inference_policy()
    with torch.inference_mode():
        for _ in range(10):
            _, _, terminated, _, _ = env.step(policy(env.obs["policy"]))
            assert not terminated[0]
            player.step()
    # ~1e-6 apart in practice (float32 observations, ONNX vs torch); a wrong action scale,
    # default or decimation would be off by 1e-2 or more.
    np.testing.assert_allclose(player.data.qpos, env.sim.qpos[0].numpy(), atol=1e-4)
    np.testing.assert_allclose(player.last_action, env.actions[0].numpy(), atol=1e-4)
    env.close()


@pytest.mark.subprocess
def test_player_runs_without_torch_or_the_training_code(go1):
    _, result = go1
    onnx_path = str(result.out_dir / "policy.onnx")
    run = subprocess.run([sys.executable, "-m", "locomotion.commands.deploy", onnx_path,
                          "--episodes", "1", "--solver", "fidelity", "--vx", "0.5",
                          "--check-imports"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("episode 0:")
    summary = json.loads(next(line for line in lines if line.startswith("{")))
    assert summary["solver"] == "fidelity" and summary["decimation"] == 10
    assert summary["commands"] == "fixed" and summary["episodes"] == 1
    for key in ("survival", "tracking_error", "distance"):
        assert np.isfinite(summary[key])
    assert 0.05 < summary["base_height"] < 0.5  # the base's mean height, m
    imported = json.loads(lines[-1].removeprefix("imports: "))
    assert "onnxruntime" in imported and "mujoco" in imported
    assert "torch" not in imported, imported
    ours = {m for m in imported if m.startswith("locomotion")}  # the player runs as __main__
    assert ours <= {"locomotion", "locomotion.commands", "locomotion.commands.deploy"}, ours

    default = deploy.main([onnx_path, "--episodes", "1"])
    assert default["solver"] == "fast" and default["decimation"] == 4
    assert default["commands"] == "resampled"


def test_checkpoints_that_do_not_fit_are_refused(go1, tmp_path):
    go1_checkpoint, go1_result = go1
    dmc_checkpoint = train_checkpoint(tmp_path / "dmc", "robot=dmc_quadruped", "num_envs=8")

    data = load_checkpoint(dmc_checkpoint)
    data["config"]["robot"]["spec"] = "go1"  # dmc weights, config edited to another robot
    save_checkpoint(tmp_path / "relabelled.pt", data)
    with pytest.raises(ExportError, match="refusing to export"):
        export_checkpoint(tmp_path / "relabelled.pt", tmp_path / "out")

    data = load_checkpoint(go1_checkpoint)
    del data["config"]["task"]["observations"]["policy"]["actions"]  # 48 -> 36 observations
    save_checkpoint(tmp_path / "fewer_obs.pt", data)
    with pytest.raises(ExportError, match="observation_sizes"):
        export_checkpoint(tmp_path / "fewer_obs.pt", tmp_path / "out")
    assert not (tmp_path / "out").exists()

    # The player refuses files of different robots put together.
    dmc = export_checkpoint(dmc_checkpoint).out_dir
    go1_sidecar = deploy.load_sidecar(go1_result.out_dir / "policy.json")
    with pytest.raises(deploy.DeployError, match="56 observations"):
        deploy.OnnxPolicy(dmc / "policy.onnx", go1_sidecar)
    with pytest.raises(deploy.DeployError, match="different robots"):
        deploy.load_model(dmc / "robot.xml", go1_sidecar, "fast")
    mislabelled = {**deploy.load_sidecar(dmc / "policy.json"), "robot": "go1"}
    with pytest.raises(deploy.DeployError, match="exported for robot 'dmc_quadruped'"):
        deploy.OnnxPolicy(dmc / "policy.onnx", mislabelled)


def test_export_that_misses_the_tolerance_fails_and_writes_nothing(go1, tmp_path, monkeypatch):
    checkpoint, _ = go1
    monkeypatch.setattr(policy_export, "max_abs_errors",
                        lambda *args: {"onnx": 3.2e-4, "torchscript": 1e-8})
    with pytest.raises(ExportError, match=r"max abs error \{'onnx': 0.00032\} > tolerance 1e-05"):
        export_checkpoint(checkpoint, tmp_path / "out")
    assert not list((tmp_path / "out").iterdir())


def test_robot_xml_loads_in_plain_mujoco(go1):
    _, result = go1
    model = mujoco.MjModel.from_xml_path(str(result.out_dir / "robot.xml"))
    sidecar = json.loads((result.out_dir / "policy.json").read_text())
    assert (model.nq, model.nv, model.nu) == tuple(sidecar["model"][k] for k in ("nq", "nv", "nu"))
    kp = model.actuator_gainprm[:, 0]
    kd = -model.actuator_biasprm[:, 2]
    np.testing.assert_allclose(kp, sidecar["pd"]["kp"])
    np.testing.assert_allclose(kd, sidecar["pd"]["kd"])
    np.testing.assert_allclose(model.actuator_forcerange[:, 1], sidecar["pd"]["torque_limits"])


def test_sidecar_lists_terms_the_task_adds_with_their_widths():
    cfg = load_config("env", ["task=rough", "terrain=flat", "num_envs=2"])
    env = make_env(cfg)
    layout = observation_layout(env)
    env.close()
    assert layout[-1] == {"name": "height_scan", "size": 187, "scale": 1.0}
    assert sum(t["size"] for t in layout) == env.observation_sizes["policy"]
    assert [t["name"] for t in layout[:-1]] == list(cfg.task.observations.policy)


def test_sidecar_commands_say_whether_yaw_steers_to_a_heading():
    rough = command_spec(load_config("env", ["task=rough"]).task.commands)
    assert rough["heading"] == {"fraction": 1.0, "stiffness": 0.5}
    assert rough["lin_vel_x"] == [-1.0, 1.0]
    assert command_spec(load_config("env", ["task=flat_velocity"]).task.commands)[
        "heading"] is None


# ------------------------------------------------------------------ any MJCF of the robot
PRETRAINED = Path(__file__).resolve().parents[1] / "robots" / "go1" / "pretrained"


def play(xml: Path, solver: str = "fast", vx: float = 0.5, steps: int = 250, seed: int = 0,
         sidecar: dict | None = None):
    """The shipped policy played by the standalone player on ``xml`` at a fixed command."""
    sidecar = sidecar or deploy.load_sidecar(PRETRAINED / "policy.json")
    model = deploy.load_model(xml, sidecar, solver)
    rng = np.random.default_rng(seed)
    player = deploy.Player(sidecar, model, deploy.OnnxPolicy(PRETRAINED / "policy.onnx", sidecar),
                           deploy.Commander(sidecar, np.array([vx, 0.0, 0.0]), rng), rng)
    player.reset()
    failure = None
    while player.steps < steps and failure is None:
        failure = player.step()
    return player, failure


@pytest.mark.parametrize("actuators, kinds", [
    ("position", {"position": 12, "motor": 0, "none": 0}),
    ("motor", {"position": 0, "motor": 12, "none": 0}),
    ("none", {"position": 0, "motor": 0, "none": 12}),
])
def test_player_drives_a_team_mjcf_matched_by_joint_name(tmp_path, actuators, kinds):
    """A team's own Go1 MJCF (an ``imu`` site of its own, servos or motors named otherwise,
    or no actuators, no exported sensors) plays the shipped policy: joints and actuators are
    matched by the joint they drive, the sidecar's PD gains set on servos or applied as
    torques, and the walk is the exported model's."""
    from tests.team_mjcf import team_go1

    xml = team_go1(tmp_path / f"go1_{actuators}.xml", actuators=actuators)
    player, failure = play(xml)
    assert player.actuation.summary == kinds
    assert failure is None
    assert player.lin_err / player.steps < 0.15
    if actuators == "position":  # the servos now carry the sidecar's gains
        a = player.actuation.ctrl_ids
        np.testing.assert_allclose(player.model.actuator_gainprm[a, 0], 30.0)
        np.testing.assert_allclose(player.model.actuator_biasprm[a, 2], -0.8)
    exported, _ = play(PRETRAINED / "robot.xml")
    # Same physics and policy from the same spawn: the team model walks like the export
    # (servo or torque PD differ only by the servo's implicit damping).
    np.testing.assert_allclose(player.data.qpos[:2], exported.data.qpos[:2], atol=0.1)


def test_shipped_policy_stands_at_walking_height():
    """Asked to stand, the shipped policy holds its base at walking height: a policy trained
    under heavy joint damping without the base_height term crouched to 0.13 m."""
    player, failure = play(PRETRAINED / "robot.xml", vx=0.0)
    assert failure is None
    assert player.height / player.steps > 0.22


def test_player_refuses_a_model_missing_the_sidecars_joints(tmp_path):
    from tests.team_mjcf import team_go1

    xml = (team_go1(tmp_path / "go1.xml", actuators="none").read_text()
           .replace('name="FL_calf_joint"', 'name="FL_knee"'))
    (tmp_path / "renamed.xml").write_text(xml)
    with pytest.raises(deploy.DeployError, match=r"lacks joint \['FL_calf_joint'\]"):
        play(tmp_path / "renamed.xml")


def test_sidecar_records_the_joint_dynamics_trained_under(go1):
    _, result = go1
    sidecar = json.loads((result.out_dir / "policy.json").read_text())
    dynamics = sidecar["joint_dynamics"]
    assert dynamics["damping"] == pytest.approx([0.05] * 12)
    assert dynamics["frictionloss"] == pytest.approx([0.05] * 12)
    assert dynamics["armature"] == pytest.approx([0.005, 0.005, 0.01] * 4)
    assert dynamics["randomization"] is None  # trained without randomization
    assert sidecar["termination"]["contact_bodies"][0] == "trunk"
