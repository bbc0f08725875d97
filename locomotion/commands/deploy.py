"""Run an exported policy in plain MuJoCo: the reference control loop to adapt for hardware.

    locomotion-deploy runs/<run>/exported/policy.onnx
    locomotion-deploy policy.onnx --solver fidelity --vx 0.5 --episodes 3
    MUJOCO_GL=egl locomotion-deploy policy.onnx --video walk.mp4

    locomotion-deploy policy.onnx --xml my_go1.xml --solver model   # a team's own MJCF

Needs only mujoco, numpy and onnxruntime (imageio for --video), never torch or the
training code: the robot and task come from the ``policy.json`` sidecar and the model
from ``robot.xml``, both written by ``locomotion-export`` next to ``policy.onnx``. This
file imports nothing else of the package, so it can be copied to a robot on its own.

Any MJCF of the robot plays (``--xml``): it needs only the joints, base body and foot
geoms the sidecar names (its own sites, sensors and extra joints are left alone).
Actuators are matched by the joint they drive. On ``pd`` robots a position actuator gets
the sidecar's PD gains and torque limits; a motor, or a joint without an actuator, gets
the sidecar's PD law as a torque at every physics step. Base state and contacts are read
from qpos, qvel and MuJoCo's contact list, not from named sensors.

The loop, once per control step (``control_dt``):
    obs    = observation terms of the sidecar's layout, each times its scale, concatenated
    action = clip(policy(obs), -action_clip, action_clip)
    ctrl   = default_ctrl + action_scale * action     (PD position targets on ``pd`` robots)
    then ``decimation`` physics steps holding ctrl (torque joints: PD torque every step).
On a robot, replace the MuJoCo state reads in ``Observer`` by the state estimator and the
physics steps by sending targets to the joint PD controllers (gains in the sidecar's ``pd``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np

try:
    import onnxruntime as ort
except ImportError as e:  # refused with a one-line fix when a policy is loaded
    ort, _ORT_MISSING = None, e

SIDECAR_FORMAT = "locomotion-policy"
SIDECAR_VERSION = 1
SIDECAR_KEYS = ("robot", "files", "policy", "model", "joints", "default_joint_pos",
                "actuators", "default_ctrl", "action_scale", "action_clip", "control_dt",
                "solver", "solver_profiles", "feet", "observation", "commands",
                "episode_length_steps", "init_state", "termination", "foot_contact_sensors")


class DeployError(ValueError):
    """Files that do not belong together, or a setting the sidecar does not allow."""


# ----------------------------------------------------------------------------- files
def load_sidecar(path: Path) -> dict:
    """Read ``policy.json`` and check it is a sidecar this player understands."""
    if not path.is_file():
        raise DeployError(f"sidecar {path} does not exist (pass --json)")
    try:
        sidecar = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DeployError(f"sidecar {path} is not valid JSON ({e}); export the policy again "
                          "(locomotion-export) or pass the right file with --json") from None
    if not isinstance(sidecar, dict) or sidecar.get("format") != SIDECAR_FORMAT \
            or sidecar.get("version") != SIDECAR_VERSION:
        found = sidecar if isinstance(sidecar, dict) else {}
        raise DeployError(f"{path} is not a {SIDECAR_FORMAT} v{SIDECAR_VERSION} sidecar "
                          f"(format {found.get('format')!r}, version {found.get('version')})")
    missing = [k for k in SIDECAR_KEYS if k not in sidecar]
    if missing:
        raise DeployError(f"sidecar {path} lacks {missing}; export the policy again "
                          "(locomotion-export)")
    for names, values in (("joints", "default_joint_pos"), ("actuators", "default_ctrl")):
        if len(sidecar[names]) != len(sidecar[values]):
            raise DeployError(f"sidecar {path} lists {len(sidecar[names])} {names} but "
                              f"{len(sidecar[values])} {values}; export the policy again "
                              "(locomotion-export)")
    return sidecar


def load_model(xml: Path, sidecar: dict, solver: str) -> mujoco.MjModel:
    """Compile ``robot.xml`` under one of the sidecar's solver profiles and check it fits.

    A profile sets the physics timestep, friction cone, impratio, solver iterations,
    integrator and the feet's contact dimension; the control dt never changes.
    ``solver="model"`` keeps the MJCF's own physics options (its integrator, timestep...).
    """
    profiles = sidecar["solver_profiles"]
    if solver not in profiles and solver != MODEL_SOLVER:
        raise DeployError(f"unknown solver profile {solver!r}; the sidecar has "
                          f"{sorted(profiles)} (or {MODEL_SOLVER!r}: the MJCF's own options)")
    if not xml.is_file():
        raise DeployError(f"robot model {xml} does not exist (pass --xml)")
    try:
        spec = mujoco.MjSpec.from_file(str(xml))
        model = spec.compile()
    except ValueError as e:
        raise DeployError(f"robot model {xml} does not load: {' '.join(str(e).split())}") \
            from None
    _check_model(model, sidecar, xml)  # before edits that assume the sidecar's names
    if solver == MODEL_SOLVER:
        return model
    profile = profiles[solver]
    spec.option.timestep = profile["timestep"]
    spec.option.cone = getattr(mujoco.mjtCone, f"mjCONE_{profile['cone'].upper()}")
    spec.option.impratio = profile["impratio"]
    spec.option.iterations = profile["iterations"]
    spec.option.ls_iterations = profile["ls_iterations"]
    spec.option.integrator = getattr(mujoco.mjtIntegrator,
                                     f"mjINT_{profile['integrator'].upper()}")
    for foot in sidecar["feet"]:
        spec.geom(foot).condim = profile["foot_condim"]
    return spec.compile()


MODEL_SOLVER = "model"  # --solver model: the MJCF's own physics options


def contact_bodies(sidecar: dict) -> list[str]:
    """Bodies whose touching the ground ends an episode (sidecars before ``contact_bodies``
    named only the exported model's sensors, ``<body>_contact``)."""
    term = sidecar["termination"]
    if "contact_bodies" in term:
        return list(term["contact_bodies"])
    return [n.removesuffix("_contact") for n in term["contact_sensors"]]


def _check_model(model: mujoco.MjModel, sidecar: dict, xml: Path) -> None:
    """The model has every joint, body and foot geom the sidecar names, and a free base."""
    robot = sidecar["robot"]
    names = {
        mujoco.mjtObj.mjOBJ_JOINT: sidecar["joints"],
        mujoco.mjtObj.mjOBJ_BODY: [sidecar["model"]["base_body"], *contact_bodies(sidecar)],
        mujoco.mjtObj.mjOBJ_GEOM: sidecar["feet"],
    }
    if sidecar.get("actuation", "pd") != "pd":  # the model's own actuators, by name
        names[mujoco.mjtObj.mjOBJ_ACTUATOR] = sidecar["actuators"]
    for kind, wanted_names in names.items():
        missing = [n for n in wanted_names if mujoco.mj_name2id(model, kind, n) < 0]
        if missing:
            kind_name = kind.name.removeprefix("mjOBJ_").lower()
            raise DeployError(f"{xml} lacks {kind_name} {missing} named by the sidecar of robot "
                              f"{robot!r}: model and policy come from different robots, or "
                              "the model names its parts otherwise (rename them to match)")
    base = model.body(sidecar["model"]["base_body"])
    if base.jntnum[0] < 1 or model.jnt_type[base.jntadr[0]] != mujoco.mjtJoint.mjJNT_FREE:
        raise DeployError(f"{xml}: base body {base.name!r} has no free joint; the player "
                          "reads the base state from it")


class OnnxPolicy:
    """The exported network: raw observation [obs] -> action [num_actions] (normalizer inside)."""

    def __init__(self, path: Path, sidecar: dict):
        if not path.is_file():
            raise DeployError(f"policy {path} does not exist")
        if ort is None:
            raise DeployError(f"onnxruntime cannot be imported ({_ORT_MISSING}); "
                              "pip install onnxruntime")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # one small MLP per control step: threads only add jitter
        try:
            self.session = ort.InferenceSession(str(path), options,
                                                providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - ONNX Runtime's own types (InvalidProtobuf, ...)
            raise DeployError(f"{path} is not a loadable ONNX model ({type(e).__name__}: {e}); "
                              "export the policy again (locomotion-export)") from None
        io = sidecar["policy"]
        self.input, self.output = io["input"], io["output"]
        inputs = {i.name: i.shape for i in self.session.get_inputs()}
        outputs = {o.name: o.shape for o in self.session.get_outputs()}
        if self.input not in inputs or self.output not in outputs:
            raise DeployError(f"{path} has inputs {inputs} and outputs {outputs}; the sidecar "
                              f"expects input {self.input!r} and output {self.output!r}")
        obs_size, num_actions = sidecar["observation"]["size"], len(sidecar["actuators"])
        if inputs[self.input][-1] != obs_size or outputs[self.output][-1] != num_actions:
            raise DeployError(
                f"{path} maps {inputs[self.input][-1]} observations to "
                f"{outputs[self.output][-1]} actions, but the sidecar's robot "
                f"{sidecar['robot']!r} has {obs_size} observations and {num_actions} actions")
        robot = self.session.get_modelmeta().custom_metadata_map.get("robot")
        if robot is not None and robot != sidecar["robot"]:
            raise DeployError(f"{path} was exported for robot {robot!r}, the sidecar describes "
                              f"{sidecar['robot']!r}")

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return self.session.run([self.output], {self.input: obs[None].astype(np.float32)})[0][0]


# ----------------------------------------------------------------------------- observation
def quat_rotate_inverse(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Express world vector ``v`` in the frame of unit quaternion ``q`` (w, x, y, z)."""
    w, xyz = q[0], q[1:]
    t = 2.0 * np.cross(xyz, v)
    return v - w * t + np.cross(xyz, t)


def projected_gravity(q: np.ndarray) -> np.ndarray:
    """World -z in the body frame: (0, 0, -1) upright; what an IMU's gravity estimate gives."""
    return quat_rotate_inverse(q, np.array([0.0, 0.0, -1.0]))


class Observer:
    """Builds the policy observation exactly as the training env does, from the sidecar layout.

    The base is MuJoCo's free joint: qpos[0:3] position, qpos[3:7] orientation (w, x, y, z),
    qvel[0:3] world-frame linear velocity, qvel[3:6] body-frame angular velocity (at the
    joint's addresses, which are 0 in the exported model but need not be in another).
    """

    def __init__(self, sidecar: dict, model: mujoco.MjModel):
        base = model.body(sidecar["model"]["base_body"])
        self.base_qpos = int(model.jnt_qposadr[base.jntadr[0]])
        self.base_qvel = int(model.jnt_dofadr[base.jntadr[0]])
        joint_ids = [model.joint(n).id for n in sidecar["joints"]]
        self.qpos_adr = model.jnt_qposadr[joint_ids]
        self.qvel_adr = model.jnt_dofadr[joint_ids]
        self.default_joint_pos = np.asarray(sidecar["default_joint_pos"])
        self.terms = [(t["name"], t["size"], np.asarray(t["scale"], dtype=np.float64))
                      for t in sidecar["observation"]["terms"]]
        unknown = [name for name, _, _ in self.terms if name not in self._TERMS]
        if unknown:
            raise DeployError(f"observation terms {unknown} are unknown to this player; "
                              f"known: {sorted(self._TERMS)}")
        self.size = sidecar["observation"]["size"]

    _TERMS = {
        "base_lin_vel": lambda s: quat_rotate_inverse(s["qpos"][3:7], s["qvel"][0:3]),
        "base_ang_vel": lambda s: s["qvel"][3:6],
        "projected_gravity": lambda s: projected_gravity(s["qpos"][3:7]),
        "commands": lambda s: s["commands"],
        "joint_pos": lambda s: s["joint_pos"],
        "joint_vel": lambda s: s["joint_vel"],
        "actions": lambda s: s["last_actions"],
        "foot_contact": lambda s: s["foot_contact"].astype(np.float64),
        "base_height": lambda s: s["qpos"][2:3],
    }

    def __call__(self, qpos: np.ndarray, qvel: np.ndarray, commands: np.ndarray,
                 last_actions: np.ndarray, foot_contact: np.ndarray | None = None) -> np.ndarray:
        """The float32 observation; ``last_actions`` are the clipped actions of the last step."""
        joint_pos, joint_vel = qpos[self.qpos_adr], qvel[self.qvel_adr]
        qpos = qpos[self.base_qpos:self.base_qpos + 7]  # the base's free joint
        qvel = qvel[self.base_qvel:self.base_qvel + 6]
        state = {"qpos": qpos, "qvel": qvel, "commands": commands, "last_actions": last_actions,
                 "foot_contact": foot_contact,
                 "joint_pos": joint_pos - self.default_joint_pos,
                 "joint_vel": joint_vel}
        parts = []
        for name, size, scale in self.terms:
            value = np.asarray(self._TERMS[name](state), dtype=np.float64)
            if value.shape != (size,):
                raise DeployError(f"observation term {name!r} has shape {value.shape}, "
                                  f"the sidecar says {size}")
            parts.append(value * scale)
        return np.concatenate(parts).astype(np.float32)


# ----------------------------------------------------------------------------- task
class Commander:
    """Velocity commands (vx, vy, yaw rate): fixed, or resampled like the training task."""

    def __init__(self, sidecar: dict, fixed: np.ndarray | None, rng: np.random.Generator):
        self.cfg = sidecar["commands"]
        self.fixed = fixed
        self.dt = sidecar["control_dt"]
        self.rng = rng
        self.value = np.zeros(3)
        self.timer = 0.0

    def reset(self) -> None:
        self._sample()

    def advance(self) -> None:
        """Count down one control step; draw new commands when the timer runs out."""
        self.timer -= self.dt
        if self.timer <= 0:
            self._sample()

    def _sample(self) -> None:
        self.timer = self.cfg["resample_time_s"]
        if self.fixed is not None:
            self.value = self.fixed.copy()
            return
        ranges = (self.cfg["lin_vel_x"], self.cfg["lin_vel_y"], self.cfg["ang_vel_yaw"])
        self.value = np.array([self.rng.uniform(lo, hi) for lo, hi in ranges])
        if self.rng.random() < self.cfg["standing_fraction"]:
            self.value[:] = 0.0


def initial_state(model: mujoco.MjModel, sidecar: dict, observer: Observer,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A spawn state drawn like the task's: scaled default pose, random heading, small velocity."""
    s = sidecar["init_state"]
    qpos, qvel = model.qpos0.copy(), np.zeros(model.nv)  # joints the sidecar does not name
    b, v = observer.base_qpos, observer.base_qvel
    qpos[b:b + 2] = rng.uniform(-s["base_xy"], s["base_xy"], 2)
    qpos[b + 2] = s["base_height"]
    yaw = rng.uniform(-s["base_yaw"], s["base_yaw"])
    qpos[b + 3:b + 7] = [math.cos(0.5 * yaw), 0.0, 0.0, math.sin(0.5 * yaw)]
    scale = rng.uniform(*s["joint_pos_scale"], len(observer.default_joint_pos))
    qpos[observer.qpos_adr] = observer.default_joint_pos * scale
    qvel[v:v + 3] = rng.uniform(-s["base_lin_vel"], s["base_lin_vel"], 3)
    qvel[v + 3:v + 6] = rng.uniform(-s["base_ang_vel"], s["base_ang_vel"], 3)
    return qpos, qvel


class Contacts:
    """Which of some geoms or bodies touch anything outside the robot (the ground, an
    obstacle), read from MuJoCo's contact list: what the exported model's contact sensors
    report, for a model without them (a robot's own self-contacts do not count)."""

    def __init__(self, model: mujoco.MjModel, base_body: str, geoms: list[str] = (),
                 bodies: list[str] = ()):
        root = model.body(base_body).rootid[0]
        self.robot_geom = model.body_rootid[model.geom_bodyid] == root  # [ngeom]
        # each geom -> the watched item it belongs to (-1: none)
        self.item = np.full(model.ngeom, -1)
        for i, name in enumerate(bodies):
            self.item[model.geom_bodyid == model.body(name).id] = i
        for i, name in enumerate(geoms):  # geoms or bodies, not both at once
            self.item[model.geom(name).id] = i
        self.count = len(geoms) + len(bodies)

    def __call__(self, data: mujoco.MjData) -> np.ndarray:
        touching = np.zeros(self.count, dtype=bool)
        if data.ncon:
            pairs = data.contact.geom[:data.ncon]
            outside = ~self.robot_geom[pairs]
            for a, b in ((0, 1), (1, 0)):
                hit = self.item[pairs[:, a]]
                touching[hit[(hit >= 0) & outside[:, b]]] = True
        return touching


class Actuation:
    """Sets the sidecar's joint targets on any model of the robot, matching by joint.

    ``pd`` policies: a joint's position actuator gets the sidecar's kp, kd and torque limit
    and the target as ctrl; a joint driven by a motor, or by nothing, gets the PD law
    ``clip(kp (target - q) - kd qdot, +-limit)`` as a torque at every physics step (the motor's
    ctrl, or ``qfrc_applied``). ``model`` policies set ctrl of the sidecar's actuators.
    """

    def __init__(self, sidecar: dict, model: mujoco.MjModel, observer: Observer):
        self.n = len(sidecar["actuators"])
        self.pd = sidecar.get("actuation", "pd") == "pd"
        if not self.pd:
            self.ctrl_ids = np.array([model.actuator(n).id for n in sidecar["actuators"]])
            self.torque = np.zeros(0, dtype=int)
            return
        gains = sidecar.get("pd")
        if not gains:
            raise DeployError("the sidecar of a pd robot has no 'pd' gains; export the policy "
                              "again (locomotion-export)")
        kp, kd, limit = (np.asarray(gains[k], dtype=np.float64)
                         for k in ("kp", "kd", "torque_limits"))
        position, motor, free = [], [], []
        for j, name in enumerate(sidecar["joints"]):
            jid = model.joint(name).id
            acts = [a for a in range(model.nu) if model.actuator_trnid[a, 0] == jid
                    and model.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT]
            kinds = {a: _actuator_kind(model, a) for a in acts}
            if any(k == "position" for k in kinds.values()):
                position.append((j, next(a for a, k in kinds.items() if k == "position")))
            elif any(k == "motor" for k in kinds.values()):
                motor.append((j, next(a for a, k in kinds.items() if k == "motor")))
            elif not acts:
                free.append(j)
            else:
                raise DeployError(f"joint {name!r} is driven by actuators "
                                  f"{[model.actuator(a).name for a in acts]} that are neither "
                                  "position servos nor motors; the player cannot drive it")
        for j, a in position:  # the sidecar's gains and limits on the model's servo
            gear = model.actuator_gear[a, 0]
            model.actuator_gainprm[a, 0] = kp[j] / gear
            model.actuator_biasprm[a, :3] = (0.0, -kp[j] / gear, -kd[j] / gear)
            model.actuator_forcelimited[a] = 1
            model.actuator_forcerange[a] = (-limit[j], limit[j])
            model.actuator_ctrllimited[a] = 1
            model.actuator_ctrlrange[a] = model.jnt_range[model.actuator_trnid[a, 0]]
        self.ctrl_joints = np.array([j for j, _ in position], dtype=int)
        self.ctrl_ids = np.array([a for _, a in position], dtype=int)
        self.torque = np.array([j for j, _ in motor] + free, dtype=int)  # joint indices
        self.motor_ids = np.array([a for _, a in motor], dtype=int)
        self.motor_gain = np.array([model.actuator_gainprm[a, 0] * model.actuator_gear[a, 0]
                                    for a in self.motor_ids])
        self.n_motor = len(motor)
        self.kp, self.kd, self.limit = kp[self.torque], kd[self.torque], limit[self.torque]
        self.qpos_adr = observer.qpos_adr[self.torque]
        self.qvel_adr = observer.qvel_adr[self.torque]
        self.target = np.zeros(self.n)
        self.summary = {"position": len(position), "motor": len(motor), "none": len(free)}

    def set_targets(self, data: mujoco.MjData, ctrl: np.ndarray) -> None:
        """Hold ``ctrl`` (the sidecar's actuator commands) for the coming physics steps."""
        if not self.pd:
            data.ctrl[self.ctrl_ids] = ctrl
            return
        self.target = ctrl
        data.ctrl[self.ctrl_ids] = ctrl[self.ctrl_joints]

    def before_step(self, data: mujoco.MjData) -> None:
        """The PD torque of the torque-driven joints, from the state before this step."""
        if not len(self.torque):
            return
        tau = (self.kp * (self.target[self.torque] - data.qpos[self.qpos_adr])
               - self.kd * data.qvel[self.qvel_adr])
        tau = np.clip(tau, -self.limit, self.limit)
        m = self.n_motor
        data.ctrl[self.motor_ids] = tau[:m] / self.motor_gain
        data.qfrc_applied[self.qvel_adr[m:]] = tau[m:]


def _actuator_kind(model: mujoco.MjModel, a: int) -> str:
    """'position' (a servo: gain kp, bias -kp q - kv qdot), 'motor' (force = gain x ctrl)."""
    fixed = model.actuator_gaintype[a] == mujoco.mjtGain.mjGAIN_FIXED
    bias = model.actuator_biastype[a]
    if fixed and bias == mujoco.mjtBias.mjBIAS_AFFINE and model.actuator_biasprm[a, 1] < 0 \
            and model.actuator_biasprm[a, 0] == 0:
        return "position"
    if fixed and bias == mujoco.mjtBias.mjBIAS_NONE and model.actuator_dyntype[a] == 0:
        return "motor"
    return "other"


@dataclass
class Episode:
    """How one episode went."""

    steps: int
    survived: bool
    failure: str | None
    tracking_error: float  # mean planar |command - body velocity|, m/s
    yaw_error: float  # mean |yaw-rate command - yaw rate|, rad/s
    distance: float  # planar distance from the spawn point, m
    base_height: float  # mean height of the base over the episode, m (flat ground: a
    # policy that crouches or drags its belly shows here, not in tracking or survival)


class Player:
    """The control loop: observe, infer, set PD targets, step physics ``decimation`` times.

    ``run_episode`` plays a whole episode; ``reset`` then ``step`` drive it step by step.
    """

    def __init__(self, sidecar: dict, model: mujoco.MjModel, policy: OnnxPolicy,
                 commander: Commander, rng: np.random.Generator):
        self.sidecar, self.model, self.policy = sidecar, model, policy
        self.commander, self.rng = commander, rng
        self.data = mujoco.MjData(model)
        self.observer = Observer(sidecar, model)
        control_dt = sidecar["control_dt"]
        # Keep the control rate whatever the physics timestep of the chosen profile.
        self.decimation = round(control_dt / model.opt.timestep)
        if abs(self.decimation * model.opt.timestep - control_dt) > 1e-9:
            raise DeployError(f"control dt {control_dt} is not a multiple of the physics "
                              f"timestep {model.opt.timestep}")
        self.actuation = Actuation(sidecar, model, self.observer)
        self.default_ctrl = np.asarray(sidecar["default_ctrl"])
        self.action_scale = sidecar["action_scale"]
        self.action_clip = sidecar["action_clip"]
        self.max_tilt = sidecar["termination"]["max_tilt"]
        base = sidecar["model"]["base_body"]
        self.fail_contacts = Contacts(model, base, bodies=contact_bodies(sidecar))
        self.foot_contacts = Contacts(model, base, geoms=sidecar["feet"])
        self.b, self.v = self.observer.base_qpos, self.observer.base_qvel
        self.length = sidecar["episode_length_steps"]

    def reset(self, qpos: np.ndarray | None = None, qvel: np.ndarray | None = None) -> None:
        """Start an episode from the given state, or from a random spawn like the task's."""
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        if qpos is None or qvel is None:
            qpos, qvel = initial_state(m, self.sidecar, self.observer, self.rng)
        d.qpos[:], d.qvel[:] = qpos, qvel
        mujoco.mj_forward(m, d)
        self.commander.reset()
        self.start_xy = d.qpos[self.b:self.b + 2].copy()
        self.last_action = np.zeros(self.actuation.n)
        self.foot_contact = np.ones(self.foot_contacts.count, dtype=bool)  # spawned on its feet
        self.steps = 0
        self.lin_err = self.yaw_err = self.height = 0.0

    def step(self) -> str | None:
        """One control step; returns why the episode failed, or None."""
        m, d = self.model, self.data
        obs = self.observer(d.qpos, d.qvel, self.commander.value, self.last_action,
                            self.foot_contact)
        action = np.clip(self.policy(obs), -self.action_clip, self.action_clip)
        self.actuation.set_targets(d, self.default_ctrl + self.action_scale * action)
        self.foot_contact[:] = False
        for _ in range(self.decimation):
            self.actuation.before_step(d)
            mujoco.mj_step(m, d)
            self.foot_contact |= self.foot_contacts(d)  # any touch in the step
        self.steps += 1
        self.commander.advance()
        self.last_action = action
        b, v = self.b, self.v
        body_vel = quat_rotate_inverse(d.qpos[b + 3:b + 7], d.qvel[v:v + 3])
        self.lin_err += float(np.linalg.norm(self.commander.value[:2] - body_vel[:2]))
        self.height += float(d.qpos[b + 2])
        self.yaw_err += abs(self.commander.value[2] - d.qvel[v + 5])
        return self._failure()

    def run_episode(self, on_step: Callable[[mujoco.MjData], None] | None = None) -> Episode:
        """One episode from a random spawn until the time limit or a failure."""
        self.reset()
        failure = None
        while self.steps < self.length and failure is None:
            failure = self.step()
            if on_step is not None:
                on_step(self.data)
        return Episode(steps=self.steps, survived=failure is None, failure=failure,
                       tracking_error=self.lin_err / self.steps,
                       yaw_error=self.yaw_err / self.steps,
                       distance=float(np.linalg.norm(self.data.qpos[self.b:self.b + 2]
                                                     - self.start_xy)),
                       base_height=self.height / self.steps)

    def _failure(self) -> str | None:
        """The task's failure check: tipped over, a terminating body touched, or diverged."""
        d = self.data
        if not np.isfinite(d.qpos).all() or d.warning[mujoco.mjtWarning.mjWARN_BADQACC].number:
            return "diverged"
        gravity = projected_gravity(d.qpos[self.b + 3:self.b + 7])
        if math.acos(float(np.clip(-gravity[2], -1.0, 1.0))) > self.max_tilt:
            return "tilt"
        if self.fail_contacts(d).any():
            return "contact"
        return None


# ----------------------------------------------------------------------------- video
class Recorder:
    """Frames of the first episode, from a camera tracking the base (needs MUJOCO_GL)."""

    def __init__(self, model: mujoco.MjModel, base_body: str, width: int = 640,
                 height: int = 480):
        try:
            import imageio
        except ImportError as e:
            raise DeployError("--video needs imageio and imageio-ffmpeg "
                              "(pip install imageio imageio-ffmpeg)") from e
        self.imageio = imageio
        try:
            self.renderer = mujoco.Renderer(model, height, width)
        except Exception as e:  # noqa: BLE001 - any GL failure means "no renderer"
            raise DeployError(f"cannot render offscreen ({type(e).__name__}: {e}); "
                              "set MUJOCO_GL=egl (GPU) or MUJOCO_GL=osmesa (CPU)") from e
        self.camera = mujoco.MjvCamera()
        self.camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
        self.camera.trackbodyid = model.body(base_body).id
        self.camera.distance, self.camera.elevation, self.camera.azimuth = 1.8, -20.0, 120.0
        self.frames: list[np.ndarray] = []

    def __call__(self, data: mujoco.MjData) -> None:
        self.renderer.update_scene(data, self.camera)
        self.frames.append(self.renderer.render().copy())

    def save(self, path: Path, fps: float) -> None:
        self.imageio.mimwrite(path, self.frames, fps=round(fps))


# ----------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("onnx", type=Path, help="policy.onnx written by scripts/export.py")
    p.add_argument("--json", type=Path, help="sidecar (default: policy.json beside the ONNX)")
    p.add_argument("--xml", type=Path, help="robot model (default: the sidecar's robot.xml); "
                                            "any MJCF naming the sidecar's joints and bodies")
    p.add_argument("--episodes", type=int, default=3)
    p.add_argument("--solver", help="physics profile from the sidecar, e.g. fast | fidelity "
                                    "(default: the one the policy was trained with), or "
                                    "'model': the MJCF's own options")
    p.add_argument("--vx", type=float, help="fixed forward velocity command, m/s")
    p.add_argument("--vy", type=float, help="fixed lateral velocity command, m/s")
    p.add_argument("--yaw", type=float, help="fixed yaw-rate command, rad/s")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--video", type=Path, help="write an MP4 of the first episode")
    p.add_argument("--check-imports", action="store_true",
                   help="print the non-stdlib modules loaded (shows no torch/training code)")
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error("--episodes must be >= 1")
    return args


def main(argv: list[str] | None = None) -> dict:
    """Play the episodes and print one line each, then a JSON summary; returns the summary."""
    args = parse_args(argv)
    sidecar_path = args.json or args.onnx.with_name("policy.json")
    sidecar = load_sidecar(sidecar_path)
    solver = args.solver or sidecar["solver"]
    model = load_model(args.xml or sidecar_path.with_name(sidecar["files"]["model"]),
                       sidecar, solver)
    policy = OnnxPolicy(args.onnx, sidecar)
    flags = (args.vx, args.vy, args.yaw)
    fixed = None if all(v is None for v in flags) else np.array([v or 0.0 for v in flags])
    rng = np.random.default_rng(args.seed)
    player = Player(sidecar, model, policy, Commander(sidecar, fixed, rng), rng)
    recorder = Recorder(model, sidecar["model"]["base_body"]) if args.video else None

    episodes = []
    for i in range(args.episodes):
        ep = player.run_episode(on_step=recorder if i == 0 else None)
        episodes.append(ep)
        print(f"episode {i}: {ep.steps} steps, "
              f"{'survived' if ep.survived else f'failed ({ep.failure})'}, "
              f"tracking error {ep.tracking_error:.3f} m/s, distance {ep.distance:.2f} m, "
              f"base height {ep.base_height:.3f} m")
    summary = {
        "robot": sidecar["robot"], "solver": solver, "decimation": player.decimation,
        "actuation": getattr(player.actuation, "summary", "model"),
        "commands": "fixed" if fixed is not None else "resampled",
        "episodes": len(episodes),
        "survival": float(np.mean([e.survived for e in episodes])),
        "tracking_error": float(np.mean([e.tracking_error for e in episodes])),
        "yaw_error": float(np.mean([e.yaw_error for e in episodes])),
        "distance": float(np.mean([e.distance for e in episodes])),
        "base_height": float(np.mean([e.base_height for e in episodes])),
    }
    print(json.dumps(summary))
    if recorder is not None:
        recorder.save(args.video, 1.0 / sidecar["control_dt"])
        print(f"video: {args.video}")
    if args.check_imports:  # top-level packages, and every module of this one
        loaded = {m if m.startswith("locomotion") else m.split(".")[0]
                  for m in sys.modules} - set(sys.stdlib_module_names)
        print("imports: " + json.dumps(sorted(m for m in loaded if not m.startswith("_"))))
    return summary


def cli() -> None:
    """The ``locomotion-deploy`` command: a refused file set is one line on stderr,
    ``error: <what; what to do>``, and exit code 2 (as for a bad argument)."""
    try:
        main()
    except DeployError as e:
        print("error: " + " ".join(str(e).split()), file=sys.stderr, flush=True)
        sys.exit(2)


if __name__ == "__main__":
    cli()
