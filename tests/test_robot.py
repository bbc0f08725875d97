"""Tests for robot specs and model building: Go1 model, standing, solver profiles, spec errors."""

import copy

import mujoco
import numpy as np
import pytest
import yaml

from locomotion.config import CONFIG_DIR
from locomotion.robots import ROBOTS_DIR
from locomotion.sim.model_builder import SolverProfile, build_model
from locomotion.sim.robot_spec import RobotSpecError, load_robot_spec

GO1_JOINTS = [f"{leg}_{part}_joint" for leg in ("FR", "FL", "RR", "RL")
              for part in ("hip", "thigh", "calf")]


def solver_profile(name: str) -> SolverProfile:
    """The solver profile ``configs/solver/<name>.yaml``."""
    return SolverProfile(**yaml.safe_load((CONFIG_DIR / "solver" / f"{name}.yaml").read_text()))


@pytest.fixture(scope="module")
def go1_spec():
    """The shipped Go1 spec."""
    return load_robot_spec("go1")


@pytest.fixture(scope="module")
def go1(go1_spec):
    """The Go1 model under the fast profile and its layout."""
    return build_model(go1_spec, solver_profile("fast"))


def settle(model, layout, spec, seconds: float):
    """Simulate from the default pose holding the default controls; track height and contact."""
    data = mujoco.MjData(model)
    data.qpos[2] = spec.init_height
    data.qpos[3:7] = (1.0, 0.0, 0.0, 0.0)
    data.qpos[layout.joint_qpos] = spec.default_pose
    data.ctrl[layout.actuator_ids] = layout.default_ctrl
    bad = layout.columns([f"{b}_contact" for b in spec.terminate_contacts])
    min_height, bad_contact = np.inf, False
    for _ in range(round(seconds / model.opt.timestep)):
        mujoco.mj_step(model, data)
        min_height = min(min_height, data.qpos[2])
        bad_contact |= bool((data.sensordata[bad] > 0).any())
    return data, min_height, bad_contact


def up_z(quat: np.ndarray) -> float:
    """World z component of the body z axis of a w-x-y-z quaternion."""
    mat = np.empty(9)
    mujoco.mju_quat2Mat(mat, quat)
    return float(mat[8])


# ------------------------------------------------------------------ the Go1 model
def test_go1_spec_has_twelve_joints(go1_spec):
    """The Go1 spec resolves 12 joints and their default pose."""
    assert go1_spec.joints == tuple(GO1_JOINTS)
    assert go1_spec.num_actions == 12
    assert go1_spec.actuation == "pd"
    assert len(go1_spec.default_pose) == len(go1_spec.kp) == len(go1_spec.torque_limits) == 12
    pose = dict(zip(go1_spec.joints, go1_spec.default_pose, strict=True))
    assert pose["FL_hip_joint"] == 0.1 and pose["FR_hip_joint"] == -0.1
    assert pose["RL_thigh_joint"] == 1.0 and pose["FR_calf_joint"] == -1.5


def test_go1_position_actuators_follow_spec(go1, go1_spec):
    """One PD position actuator per joint, as the spec says."""
    model, layout = go1
    assert model.nu == 12
    np.testing.assert_array_equal(layout.actuator_ids, np.arange(12))
    for j, name in enumerate(go1_spec.joints):
        act = model.actuator(name)
        joint = model.joint(name)
        assert model.actuator_trntype[act.id] == mujoco.mjtTrn.mjTRN_JOINT
        assert model.actuator_trnid[act.id, 0] == joint.id
        assert model.actuator_gaintype[act.id] == mujoco.mjtGain.mjGAIN_FIXED
        assert model.actuator_biastype[act.id] == mujoco.mjtBias.mjBIAS_AFFINE
        kp, kd, limit = go1_spec.kp[j], go1_spec.kd[j], go1_spec.torque_limits[j]
        assert model.actuator_gainprm[act.id, 0] == pytest.approx(kp)
        np.testing.assert_allclose(model.actuator_biasprm[act.id, :3], [0.0, -kp, -kd])
        np.testing.assert_allclose(model.actuator_forcerange[act.id], [-limit, limit])
        assert model.actuator_forcelimited[act.id]
        np.testing.assert_allclose(model.actuator_ctrlrange[act.id], model.jnt_range[joint.id])
    limits = dict(zip(go1_spec.joints, go1_spec.torque_limits, strict=True))
    assert limits["RL_calf_joint"] == 35.55 and limits["FR_hip_joint"] == 23.7


def test_go1_has_task_sensors(go1, go1_spec):
    """Every sensor the task reads exists with the right size."""
    model, layout = go1
    expected = {"base_quat": 4, "base_gyro": 3, "base_acc": 3, "base_linvel": 3}
    for foot in go1_spec.feet:
        expected |= {f"{foot}_pos": 3, f"{foot}_contact": 1}
    for body in go1_spec.terminate_contacts + go1_spec.undesired_contacts:
        expected[f"{body}_contact"] = 1
    for joint in go1_spec.joints:
        expected[f"{joint}_force"] = 1
    assert len(go1_spec.undesired_contacts) == 4 and "trunk" in go1_spec.terminate_contacts
    for name, dim in expected.items():
        assert name in layout.sensors, f"missing sensor {name}"
        sl = layout.sensors[name]
        assert sl.stop - sl.start == dim, name
    assert sum(s.stop - s.start for s in layout.sensors.values()) == model.nsensordata


def test_go1_stands_ten_seconds_under_zero_action(go1, go1_spec):
    """Holding the default pose, Go1 stands for 10 s."""
    model, layout = go1
    data, min_height, bad_contact = settle(model, layout, go1_spec, 10.0)
    assert min_height > 0.22
    assert up_z(data.qpos[3:7]) > 0.98
    assert not bad_contact
    assert np.linalg.norm(data.qpos[:2]) < 0.1  # no drift
    feet = layout.columns([f"{f}_contact" for f in go1_spec.feet])
    assert (data.sensordata[feet] > 0).all()


def test_go1_falls_when_unpowered(go1, go1_spec):
    """Without actuator gains the robot collapses onto its trunk."""
    model, layout = go1
    limp = copy.copy(model)
    limp.actuator_gainprm[:] = 0.0
    limp.actuator_biasprm[:] = 0.0
    data, _, bad_contact = settle(limp, layout, go1_spec, 2.0)
    assert data.qpos[2] < 0.15  # started at 0.33
    assert bad_contact  # the trunk or a hip ends on the ground
    assert np.all(model.actuator_gainprm[:, 0] > 0)  # the original model is untouched


@pytest.mark.parametrize("name,cone,timestep", [
    ("fast", mujoco.mjtCone.mjCONE_PYRAMIDAL, 0.005),
    ("fidelity", mujoco.mjtCone.mjCONE_ELLIPTIC, 0.002),
])
def test_solver_profiles_compile(go1_spec, name, cone, timestep):
    """Both solver profiles compile with their cone, timestep, condim."""
    profile = solver_profile(name)
    model, _ = build_model(go1_spec, profile)
    assert model.opt.cone == cone
    assert model.opt.timestep == pytest.approx(timestep)
    assert model.opt.impratio == pytest.approx(profile.impratio)
    assert model.opt.iterations == profile.iterations
    assert model.opt.ls_iterations == profile.ls_iterations
    assert model.opt.integrator == mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    for foot in go1_spec.feet:
        assert model.geom_condim[model.geom(foot).id] == profile.foot_condim
    data = mujoco.MjData(model)
    mujoco.mj_step(model, data, 10)
    assert np.isfinite(data.qpos).all()


def test_foot_condim_follows_profile(go1_spec):
    """foot_condim sets the feet only."""
    base = solver_profile("fast")
    model, _ = build_model(go1_spec, SolverProfile(**{**base.__dict__, "foot_condim": 6}))
    assert all(model.geom_condim[model.geom(f).id] == 6 for f in go1_spec.feet)
    assert model.geom_condim[model.geom("trunk").id] == 1  # other geoms keep the MJCF's


def test_invalid_solver_profile():
    """An unknown friction cone is rejected with the valid ones."""
    with pytest.raises(ValueError, match="pyramidal"):
        SolverProfile(name="x", timestep=0.005, cone="round", impratio=1.0, foot_condim=3,
                      iterations=1, ls_iterations=1)


def test_dm_control_quadruped_loads_and_steps():
    """The dm_control quadruped builds through the same path."""
    spec = load_robot_spec("dmc_quadruped")
    assert spec.actuation == "model" and spec.num_actions == 12
    model, layout = build_model(spec, solver_profile("fast"))
    assert model.nu == 12 and len(layout.joint_qpos) == 16
    assert {f"{f}_contact" for f in spec.feet} <= set(layout.sensors)
    data = mujoco.MjData(model)
    data.qpos[2] = spec.init_height
    data.ctrl[:] = 0.1
    start = data.qpos.copy()
    mujoco.mj_step(model, data, 50)
    assert np.isfinite(data.qpos).all() and np.isfinite(data.sensordata).all()
    assert not np.allclose(data.qpos, start)


# ------------------------------------------------------------------ spec errors
def write_spec(tmp_path, **changes):
    """A copy of the Go1 spec in ``tmp_path`` with ``changes``, pointing at go1.xml."""
    raw = yaml.safe_load((ROBOTS_DIR / "go1" / "spec.yaml").read_text())
    raw["mjcf"] = str(ROBOTS_DIR / "go1" / "go1.xml")
    raw.update(changes)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_spec_copy_pointing_at_go1_builds(tmp_path, go1_spec):
    """A spec outside robots/ can point at an MJCF by path."""
    spec = load_robot_spec(write_spec(tmp_path))
    assert spec.joints == go1_spec.joints
    model, _ = build_model(spec, solver_profile("fast"))
    assert model.nu == 12


def test_unknown_robot_lists_available():
    """An unknown robot name lists the shipped robots."""
    with pytest.raises(RobotSpecError, match="unknown robot 'go2'") as err:
        load_robot_spec("go2")
    assert "go1" in str(err.value) and "dmc_quadruped" in str(err.value)


@pytest.mark.parametrize("change,kind,valid", [
    ({"joints": [*GO1_JOINTS[:2], "XR_calf_joint", *GO1_JOINTS[3:]]}, "joint", "FR_calf_joint"),
    ({"feet": ["FR_foot", "FL_foot", "RR_foot", "RL_toe"]}, "geom", "RL_foot"),
    ({"terminate_contacts": ["trunk", "FR_hip", "body"]}, "body", "FL_hip"),
    ({"undesired_contacts": ["FR_thigh", "FL_thing"]}, "body", "FL_thigh"),
    ({"base_body": "torso"}, "body", "trunk"),
])
def test_wrong_name_lists_valid_names(tmp_path, change, kind, valid):
    """A misspelt joint, geom or body lists the valid names."""
    spec = load_robot_spec(write_spec(tmp_path, **change))
    with pytest.raises(RobotSpecError, match=f"no {kind} ") as err:
        build_model(spec, solver_profile("fast"))
    assert f"valid {kind} names" in str(err.value)
    assert repr(valid) in str(err.value)


def test_joint_without_default_pose_pattern(tmp_path):
    """A joint no default_pose pattern matches is an error."""
    pose = {"F[LR]_thigh_joint": 0.8, "R[LR]_thigh_joint": 1.0, ".*_hip_joint": 0.0}
    with pytest.raises(RobotSpecError, match="default_pose: joint 'FR_calf_joint' matches no"):
        load_robot_spec(write_spec(tmp_path, default_pose=pose))


def test_joint_matching_two_patterns(tmp_path):
    """A joint matched by two patterns is an error."""
    with pytest.raises(RobotSpecError, match="several patterns"):
        load_robot_spec(write_spec(tmp_path, kp={".*": 30.0, ".*_calf_joint": 40.0}))


def test_menagerie_needs_root(tmp_path, monkeypatch):
    """menagerie: MJCFs need MENAGERIE_ROOT and an existing file."""
    monkeypatch.delenv("MENAGERIE_ROOT", raising=False)
    path = write_spec(tmp_path, mjcf="menagerie:unitree_go1/go1.xml")
    with pytest.raises(RobotSpecError, match="MENAGERIE_ROOT"):
        load_robot_spec(path)
    monkeypatch.setenv("MENAGERIE_ROOT", str(tmp_path / "menagerie"))
    with pytest.raises(RobotSpecError, match="does not exist"):
        load_robot_spec(path)


def test_unknown_spec_key_lists_valid_keys(tmp_path):
    """A misspelt spec key lists the valid keys."""
    with pytest.raises(RobotSpecError, match=r"unknown robot spec keys \['foot_geoms'\]") as err:
        load_robot_spec(write_spec(tmp_path, foot_geoms=["FR_foot"]))
    assert "valid keys" in str(err.value)
    assert "'feet'" in str(err.value) and "'torque_limits'" in str(err.value)


def test_missing_spec_file(tmp_path):
    """A spec path that does not exist is a clear error."""
    with pytest.raises(RobotSpecError, match="does not exist"):
        load_robot_spec(tmp_path / "nope.yaml")


# ------------------------------------------------------------------ real-world MJCF files
def test_team_mjcf_with_own_imu_site_and_actuators_builds_and_steps(tmp_path):
    """An MJCF that already has an ``imu`` site, a foot site, a sensor and position actuators
    with other names builds (the added sites are renamed, the actuators replaced) and an env
    on it steps."""
    from locomotion import tasks
    from locomotion.config import load_config
    from tests.team_mjcf import team_go1

    xml = team_go1(tmp_path / "team_go1.xml")
    spec = load_robot_spec(write_spec(tmp_path, mjcf=str(xml)))
    model, layout = build_model(spec, solver_profile("fast"))
    assert model.nu == 12 and model.site("imu").bodyid == model.body("trunk").id
    assert model.site("imu_1").bodyid == model.body("trunk").id  # the sensors' own site
    assert model.sensor_objid[model.sensor("base_gyro").id] == model.site("imu_1").id
    assert [model.actuator(i).name for i in layout.actuator_ids] == GO1_JOINTS
    env = tasks.make_env(load_config("env", ["num_envs=4", "reset=sync",
                                             f"robot.spec={tmp_path / 'spec.yaml'}"]))
    try:
        env.reset()
        for _ in range(5):
            obs, *_ = env.step(np.zeros((env.num_envs, env.num_actions), dtype=np.float32))
        assert all(np.isfinite(np.asarray(v)).all() for v in obs.values())
    finally:
        env.close()


def test_missing_mesh_file_names_it_and_suggests_primitives(tmp_path):
    xml = (ROBOTS_DIR / "go1" / "go1.xml").read_text().replace(
        "<worldbody>", '<asset><mesh name="trunk_mesh" file="trunk.stl"/></asset>\n<worldbody>')
    (tmp_path / "meshy.xml").write_text(xml)
    spec = load_robot_spec(write_spec(tmp_path, mjcf=str(tmp_path / "meshy.xml")))
    with pytest.raises(RobotSpecError, match=r"trunk\.stl.*does not exist.*primitive"):
        build_model(spec, solver_profile("fast"))
