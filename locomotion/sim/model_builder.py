"""Build the simulated model of a robot from its spec: one path for every robot.

The robot's MJCF supplies bodies, joints and geoms. This module replaces its world with a
ground plane (or a terrain heightfield), adds PD position actuators (``actuation: pd``) and
the sensors the task reads, applies a solver profile, and records where everything lives in
the state and sensor vectors so the task never looks names up in a hot path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import mujoco
import numpy as np

from locomotion.config_checks import ConfigError
from locomotion.sim.robot_spec import RobotSpec, RobotSpecError

if TYPE_CHECKING:
    from locomotion.sim.terrain import TerrainGrid

CONES = {"pyramidal": mujoco.mjtCone.mjCONE_PYRAMIDAL, "elliptic": mujoco.mjtCone.mjCONE_ELLIPTIC}
INTEGRATORS = {
    "euler": mujoco.mjtIntegrator.mjINT_EULER,
    "implicitfast": mujoco.mjtIntegrator.mjINT_IMPLICITFAST,
    "implicit": mujoco.mjtIntegrator.mjINT_IMPLICIT,
    "rk4": mujoco.mjtIntegrator.mjINT_RK4,
}


@dataclass(frozen=True)
class SolverProfile:
    """Physics settings traded between speed (training) and fidelity (evaluation)."""

    name: str
    timestep: float
    cone: str
    impratio: float
    foot_condim: int
    iterations: int
    ls_iterations: int
    integrator: str = "implicitfast"

    def __post_init__(self) -> None:
        if self.cone not in CONES:
            raise ConfigError(f"solver cone {self.cone!r} is not one of {list(CONES)}")
        if self.integrator not in INTEGRATORS:
            raise ConfigError(
                f"solver integrator {self.integrator!r} is not one of {list(INTEGRATORS)}"
            )
        if self.foot_condim not in (1, 3, 4, 6):
            raise ConfigError(f"foot_condim {self.foot_condim} is not one of [1, 3, 4, 6]")


@dataclass(frozen=True)
class ModelLayout:
    """Where the spec's named parts live in qpos, qvel, ctrl and sensordata."""

    nq: int
    nv: int
    nu: int
    joint_qpos: np.ndarray  # [J] qpos address per spec joint
    joint_qvel: np.ndarray  # [J]
    joint_range: np.ndarray  # [J, 2]
    actuator_ids: np.ndarray  # [A] ctrl index per spec actuator, in action order
    default_ctrl: np.ndarray  # [A]
    sensors: dict[str, slice]  # sensor name -> slice of sensordata
    # [A, nv] each spec actuator's transmission: its velocity is actuator_moment @ qvel, its
    # mechanical power force * velocity. Exact for joint and fixed-tendon transmissions (the
    # robots here: Go1's joints, the dm_control quadruped's tendons coupling 3 joints); taken
    # at qpos0 for transmissions that vary with the pose (spatial tendons, sites).
    actuator_moment: np.ndarray

    def columns(self, names: list[str] | tuple[str, ...]) -> np.ndarray:
        """Sensordata columns of several sensors, concatenated in order."""
        return np.concatenate([np.arange(self.sensors[n].start, self.sensors[n].stop)
                               for n in names])


def as_slice(ids) -> slice | np.ndarray:
    """``ids`` as a slice where they are evenly spaced and increasing (as the columns of a
    spec's joints, actuators and sensors are), else as given: indexing a tensor by a slice
    is a view, by an index array a gather that costs as much as the math on it."""
    ids = np.asarray(ids).reshape(-1)
    step = ids[1] - ids[0] if len(ids) > 1 else 1
    if len(ids) == 0 or step < 1 or (np.diff(ids) != step).any():
        return ids
    return slice(int(ids[0]), int(ids[-1]) + 1, int(step))


def build_model(spec: RobotSpec, solver: SolverProfile, terrain: TerrainGrid | None = None,
                ) -> tuple[mujoco.MjModel, ModelLayout]:
    """Compile the robot of ``spec`` under ``solver`` on ``terrain`` (None: a plane)."""
    mj = build_spec(spec, solver, terrain)
    try:
        model = mj.compile()
    except ValueError as e:  # MuJoCo's compiler: e.g. a mesh file the MJCF names is missing
        raise RobotSpecError(f"robot MJCF {spec.mjcf} does not compile: "
                             f"{' '.join(str(e).split())}; fix the file") from None
    return model, _layout(model, spec)


def build_spec(spec: RobotSpec, solver: SolverProfile, terrain: TerrainGrid | None = None,
               ) -> mujoco.MjSpec:
    """The edited, uncompiled MJCF of ``build_model`` (exporters write it out with ``to_xml``)."""
    try:
        mj = mujoco.MjSpec.from_file(str(spec.mjcf))
    except ValueError as e:  # MuJoCo's parser names a line but not the file
        raise RobotSpecError(f"robot MJCF {spec.mjcf} does not load: "
                             f"{' '.join(str(e).split())}; fix the file") from None
    _check_files(mj, spec)
    base = _find(mj, "body", spec.base_body)
    _replace_world(mj, base, terrain)
    _check_names(mj, spec)
    for s in list(mj.sensors):
        mj.delete(s)
    for k in list(mj.keys):
        mj.delete(k)
    if spec.actuation == "pd":
        for a in list(mj.actuators):
            mj.delete(a)
        for j, name in enumerate(spec.joints):
            joint = mj.joint(name)
            act = mj.add_actuator(name=name, target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
            act.set_to_position(kp=spec.kp[j], kv=spec.kd[j])
            act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
            act.forcerange = [-spec.torque_limits[j], spec.torque_limits[j]]
            act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
            act.ctrlrange = list(joint.range)
    _add_sensors(mj, spec, base)
    _apply_solver(mj, spec, solver)
    return mj


def _check_files(mj: mujoco.MjSpec, spec: RobotSpec) -> None:
    """Refuse a model whose mesh files are missing, naming the file (MuJoCo's compiler names
    only the path as written, not where it looked)."""
    root = spec.mjcf.parent
    meshdir = root / (mj.meshdir or "")
    missing = [(m.name, m.file, meshdir / m.file) for m in mj.meshes
               if m.file and not (meshdir / m.file).is_file()]
    if missing:
        name, file, path = missing[0]
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise RobotSpecError(
            f"robot MJCF {spec.mjcf}: mesh {name!r} names file {file!r}, but {path} does not "
            f"exist{more}; copy the mesh files there (meshdir {str(meshdir)!r}), or replace "
            "the mesh geoms by primitive collision geometry (box, capsule, sphere geoms, as "
            "robots/go1/go1.xml does) and drop the <mesh> assets")


def _unique(mj: mujoco.MjSpec, kind: str, name: str) -> str:
    """``name``, or ``name_1``, ``name_2``... if the model already has a ``kind`` so named
    (a real MJCF often has its own ``imu`` site)."""
    candidate, i = name, 0
    while getattr(mj, kind)(candidate) is not None:
        i += 1
        candidate = f"{name}_{i}"
    return candidate


def _find(mj: mujoco.MjSpec, kind: str, name: str):
    """Element of ``kind`` named ``name``; an unknown name lists the valid ones."""
    element = getattr(mj, kind)(name)
    if element is None:
        plural = "bodies" if kind == "body" else kind + "s"
        valid = [e.name for e in getattr(mj, plural) if e.name]
        raise RobotSpecError(f"robot has no {kind} {name!r}; valid {kind} names: {valid}")
    return element


def _check_names(mj: mujoco.MjSpec, spec: RobotSpec) -> None:
    for name in spec.joints:
        _find(mj, "joint", name)
    if spec.actuation == "model":
        for name in spec.actuators:
            _find(mj, "actuator", name)
    for name in spec.feet:
        _find(mj, "geom", name)
    for name in spec.terminate_contacts + spec.undesired_contacts:
        _find(mj, "body", name)


# Contact and look of the geom named "ground", plane or heightfield alike (randomizers find
# the ground friction by that name).
_GROUND = {"contype": 1, "conaffinity": 1, "condim": 3, "friction": [1.0, 0.005, 0.0001],
           "material": "ground"}


def _add_looks(mj: mujoco.MjSpec) -> None:
    """A sky and a checkered ground for rendered video: built-in textures (no files), small
    enough that a model copy per randomized robot stays light, and no effect on physics."""
    tex, builtin = mujoco.mjtTexture, mujoco.mjtBuiltin
    mj.add_texture(name="sky", type=tex.mjTEXTURE_SKYBOX, builtin=builtin.mjBUILTIN_GRADIENT,
                   rgb1=[0.55, 0.7, 0.85], rgb2=[0.1, 0.15, 0.2], width=64, height=384)
    mj.add_texture(name="ground", type=tex.mjTEXTURE_2D, builtin=builtin.mjBUILTIN_CHECKER,
                   rgb1=[0.35, 0.4, 0.45], rgb2=[0.3, 0.34, 0.38], width=64, height=64)
    material = mj.add_material(name="ground", texrepeat=[0.5, 0.5], texuniform=True)
    material.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = "ground"


def _replace_world(mj: mujoco.MjSpec, base, terrain: TerrainGrid | None = None) -> None:
    """Drop everything in the world but the robot, then lay a ground plane or the terrain."""
    world = mj.worldbody
    for body in list(world.bodies):
        if body.name != base.name:
            mj.delete(body)
    for geom in list(world.geoms):
        mj.delete(geom)
    for site in list(world.sites):
        mj.delete(site)
    _add_looks(mj)
    if terrain is None:
        world.add_geom(name="ground", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 0.05],
                       **_GROUND)
    else:
        _add_heightfield(mj, terrain)
    if not any(light for light in mj.lights):
        world.add_light(pos=[0, 0, 4], dir=[0, 0, -1], type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL)


def _add_heightfield(mj: mujoco.MjSpec, terrain: TerrainGrid) -> None:
    """The terrain grid as one ``hfield`` asset (data inline, no file) and the ground geom."""
    hf = terrain.heightfield()
    mj.add_hfield(name="terrain", nrow=hf.nrow, ncol=hf.ncol, size=list(hf.size),
                  userdata=hf.data.ravel().tolist())
    mj.worldbody.add_geom(name="ground", type=mujoco.mjtGeom.mjGEOM_HFIELD, hfieldname="terrain",
                          pos=list(hf.pos), **_GROUND)


def _add_sensors(mj: mujoco.MjSpec, spec: RobotSpec, base) -> None:
    # Sites the model already has keep their names and places (the model's own IMU site
    # may sit off the base's origin); the sensors read new ones, renamed on a clash.
    site_t = mujoco.mjtObj.mjOBJ_SITE
    imu = _unique(mj, "site", "imu")
    base.add_site(name=imu, pos=[0, 0, 0])
    for kind, name in ((mujoco.mjtSensor.mjSENS_FRAMEQUAT, "base_quat"),
                       (mujoco.mjtSensor.mjSENS_GYRO, "base_gyro"),
                       (mujoco.mjtSensor.mjSENS_ACCELEROMETER, "base_acc"),
                       (mujoco.mjtSensor.mjSENS_VELOCIMETER, "base_linvel")):
        mj.add_sensor(name=name, type=kind, objtype=site_t, objname=imu)
    for foot in spec.feet:
        geom = mj.geom(foot)
        site = _unique(mj, "site", f"{foot}_site")
        geom.parent.add_site(name=site, pos=list(geom.pos))
        mj.add_sensor(name=f"{foot}_pos", type=mujoco.mjtSensor.mjSENS_FRAMEPOS,
                      objtype=site_t, objname=site)
        _add_contact(mj, f"{foot}_contact", mujoco.mjtObj.mjOBJ_GEOM, foot)
    for body in spec.terminate_contacts + spec.undesired_contacts:
        _add_contact(mj, f"{body}_contact", mujoco.mjtObj.mjOBJ_BODY, body)
    for name in spec.actuators:
        mj.add_sensor(name=f"{name}_force", type=mujoco.mjtSensor.mjSENS_ACTUATORFRC,
                      objtype=mujoco.mjtObj.mjOBJ_ACTUATOR, objname=name)


def _add_contact(mj: mujoco.MjSpec, name: str, objtype, objname: str) -> None:
    """Contact sensor counting the contacts of one geom or body with anything."""
    # intprm = (data bits, reduce, num): data bit 0 is "found"; reduce 0 keeps one match.
    mj.add_sensor(name=name, type=mujoco.mjtSensor.mjSENS_CONTACT, objtype=objtype,
                  objname=objname, intprm=[1, 0, 1])


def _apply_solver(mj: mujoco.MjSpec, spec: RobotSpec, solver: SolverProfile) -> None:
    opt = mj.option
    opt.timestep = solver.timestep
    opt.cone = CONES[solver.cone]
    opt.impratio = solver.impratio
    opt.iterations = solver.iterations
    opt.ls_iterations = solver.ls_iterations
    opt.integrator = INTEGRATORS[solver.integrator]
    for foot in spec.feet:
        mj.geom(foot).condim = solver.foot_condim


def _layout(model: mujoco.MjModel, spec: RobotSpec) -> ModelLayout:
    jids = [model.joint(n).id for n in spec.joints]
    sensors = {
        model.sensor(i).name: slice(int(model.sensor_adr[i]),
                                    int(model.sensor_adr[i] + model.sensor_dim[i]))
        for i in range(model.nsensor)
    }
    if spec.actuation == "pd":
        default_ctrl = np.asarray(spec.default_pose)
    else:
        default_ctrl = np.zeros(len(spec.actuators))
    actuator_ids = np.array([model.actuator(n).id for n in spec.actuators])
    return ModelLayout(
        nq=model.nq, nv=model.nv, nu=model.nu,
        joint_qpos=model.jnt_qposadr[jids].copy(),
        joint_qvel=model.jnt_dofadr[jids].copy(),
        joint_range=model.jnt_range[jids].copy(),
        actuator_ids=actuator_ids,
        default_ctrl=default_ctrl,
        sensors=sensors,
        actuator_moment=_actuator_moment(model)[actuator_ids],
    )


def _actuator_moment(model: mujoco.MjModel) -> np.ndarray:
    """Every actuator's moment arm on every DOF [nu, nv], at qpos0."""
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    moment = np.zeros((model.nu, model.nv))
    if model.nu:
        mujoco.mju_sparse2dense(moment, data.actuator_moment, data.moment_rownnz,
                                data.moment_rowadr, data.moment_colind)
    return moment
