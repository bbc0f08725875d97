"""The ``policy.json`` sidecar: everything a player needs to run an exported policy.

A deployment loop must rebuild the policy observation, map actions to actuator targets
and reproduce the task's commands and failure check without the training code. This
module writes all of that down from the env a checkpoint was trained in, so the sidecar
is the single contract between training and ``scripts/deploy_mujoco.py`` (or a robot).
"""

from __future__ import annotations

import importlib.metadata
import platform
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from locomotion.config import CONFIG_DIR
from locomotion.envs.vec_env import LocomotionEnv

FORMAT = "locomotion-policy"
VERSION = 1
MODEL_FILE = "robot.xml"
CHECKPOINT_FILE = "checkpoint.pt"  # policy-only checkpoint, for play and evaluation
ONNX_FILE = "policy.onnx"
TORCHSCRIPT_FILE = "policy.pt"
SIDECAR_FILE = "policy.json"
INPUT_NAME = "obs"
OUTPUT_NAME = "actions"
VERSIONED_PACKAGES = ("locomotion", "torch", "mujoco", "onnx", "onnxruntime", "numpy")


def observation_layout(env: LocomotionEnv) -> list[dict[str, Any]]:
    """Ordered ``{name, size, scale}`` of the env's policy observation (scale: float or list).

    Read from the task itself, so terms a task adds on its own (a height scan the policy
    observes, a gait clock, a subtask one-hot) are listed with their real widths.
    """
    task = env.task
    columns = task.observation_layout(task.world(env.sim), env.actions)["policy"]
    layout = []
    for name, cols in columns.items():
        scale = task.obs_scales["policy"][name]
        values = [_short(v) for v in scale.reshape(-1).tolist()]
        layout.append({"name": name, "size": cols.stop - cols.start,
                       "scale": values[0] if scale.dim() == 0 else values})
    return layout


def _short(value: float) -> float:
    """A float32 scale as the number it was configured as (0.05, not 0.05000000074505806)."""
    return float(str(np.float32(value)))


def command_spec(commands: DictConfig) -> dict[str, Any]:
    """The command distribution trained on. With ``heading`` (fraction, stiffness) that
    share of envs was given a heading and the yaw-rate command was stiffness x heading
    error, clipped to ``ang_vel_yaw``; a player steering to a heading does the same."""
    heading = commands.get("heading")
    return {"lin_vel_x": list(commands.lin_vel_x), "lin_vel_y": list(commands.lin_vel_y),
            "ang_vel_yaw": list(commands.ang_vel_yaw),
            "resample_time_s": float(commands.resample_time_s),
            "standing_fraction": float(commands.standing_fraction),
            "heading": ({k: float(heading[k]) for k in ("fraction", "stiffness")}
                        if heading else None)}


def solver_profiles(trained: DictConfig) -> dict[str, dict[str, Any]]:
    """Every profile in ``configs/solver`` plus the one the checkpoint was trained with."""
    profiles = {p.stem: OmegaConf.to_container(OmegaConf.load(p))
                for p in sorted((CONFIG_DIR / "solver").glob("*.yaml"))}
    profiles[str(trained.name)] = OmegaConf.to_container(trained, resolve=True)
    return {name: {k: v for k, v in p.items() if k != "name"} for name, p in profiles.items()}


# Randomization events about the joints and contacts a deployed robot differs in.
DYNAMICS_EVENTS = ("joint_dynamics", "contact", "friction", "actuator")


def joint_dynamics(env: LocomotionEnv, trained: dict[str, Any]) -> dict[str, Any]:
    """The joint dynamics the policy was trained under: the model's damping (N m s/rad),
    dry friction (N m) and armature (kg m^2) per joint, and the randomization of them (the
    preset's name and its events on joints and contacts; null: none). ``trained``: the
    checkpoint's config (the export's own env replays it without randomization)."""
    dofs = env.layout.joint_qvel
    model = env.model
    randomization = OmegaConf.create(trained.get("randomization") or {})
    events = randomization.get("events") or {}
    drawn = {name: OmegaConf.to_container(event, resolve=True)
             for name, event in events.items() if name in DYNAMICS_EVENTS}
    return {"damping": [float(v) for v in model.dof_damping[dofs]],
            "frictionloss": [float(v) for v in model.dof_frictionloss[dofs]],
            "armature": [float(v) for v in model.dof_armature[dofs]],
            "randomization": ({"preset": str(randomization.get("name")), "events": drawn}
                              if drawn else None)}


def package_versions() -> dict[str, str]:
    """Versions of the packages that produced (and must be able to read) the export."""
    versions = {"python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def build_sidecar(env: LocomotionEnv, cfg: DictConfig, checkpoint: dict[str, Any],
                  onnx_opset: int) -> dict[str, Any]:
    """The sidecar of a policy trained by ``checkpoint`` in ``env`` (built from ``cfg``)."""
    spec, task, model = env.spec, cfg.task, env.model
    layout = observation_layout(env)
    obs_size = sum(t["size"] for t in layout)
    pd = spec.actuation == "pd"
    return {
        "format": FORMAT,
        "version": VERSION,
        "robot": spec.name,
        "files": {"model": MODEL_FILE, "onnx": ONNX_FILE, "torchscript": TORCHSCRIPT_FILE},
        "policy": {"input": INPUT_NAME, "output": OUTPUT_NAME, "observation_size": obs_size,
                   "num_actions": env.num_actions, "onnx_opset": onnx_opset},
        "model": {"base_body": spec.base_body, "nq": model.nq, "nv": model.nv, "nu": model.nu},
        "joints": list(spec.joints),
        "default_joint_pos": list(spec.default_pose),
        "actuation": spec.actuation,
        "actuators": list(spec.actuators),
        "default_ctrl": [float(v) for v in env.layout.default_ctrl],
        "action_scale": spec.action_scale,
        "action_clip": env.action_clip,
        # PD gains of the position actuators in robot.xml (null: the model's own actuators).
        "pd": {"kp": list(spec.kp), "kd": list(spec.kd),
               "torque_limits": list(spec.torque_limits)} if pd else None,
        "control_dt": env.control_dt,
        "physics_timestep": env.solver.timestep,
        "decimation": env.decimation,
        "solver": env.solver.name,
        "solver_profiles": solver_profiles(cfg.solver),
        "feet": list(spec.feet),
        "observation": {"size": obs_size, "terms": layout},
        "commands": command_spec(task.commands),
        "episode_length_s": float(task.episode_length_s),
        "episode_length_steps": env.max_episode_length,
        "init_state": {"base_height": spec.init_height,
                       **OmegaConf.to_container(task.init_state, resolve=True)},
        "joint_dynamics": joint_dynamics(env, checkpoint.get("config") or {}),
        "termination": {
            "max_tilt": float(task.terminations.max_tilt),
            "contact_bodies": (list(spec.terminate_contacts)
                               if task.terminations.base_contact else []),
            "contact_sensors": ([f"{b}_contact" for b in spec.terminate_contacts]
                                if task.terminations.base_contact else []),
        },
        "foot_contact_sensors": [f"{f}_contact" for f in spec.feet],
        "checkpoint": {"iteration": int(checkpoint["iteration"]),
                       "env_steps": int(checkpoint["env_steps"])},
        "versions": package_versions(),
    }
