"""Load the policies an evaluation compares: training checkpoints and exported graphs.

Every loaded policy is one callable ``act(obs) -> actions`` on raw policy observations
plus the env config it was trained in, so the evaluator treats a checkpoint, an ONNX
file and a TorchScript file alike. Exported files carry no training config; their env
is rebuilt from the ``policy.json`` sidecar (the deployment contract), checked against
the robot spec it names.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from locomotion.config import CONFIG_DIR
from locomotion.export import sidecar as sc
from locomotion.rl.checkpoint import CheckpointError, load_checkpoint, policy_from_checkpoint
from locomotion.robots import resolve_policy_path
from locomotion.sim.robot_spec import RobotSpecError, load_robot_spec

EXPECTED = ("a training checkpoint (.pt, full or policy-only), an exported TorchScript "
            "policy (.pt), an exported ONNX policy (.onnx with its policy.json beside it) or "
            "a shipped policy (pretrained:go1)")
#: The task an exported policy is replayed in (the sidecar fills in its settings).
EXPORT_TASK = "flat_velocity"


class PolicyLoadError(ValueError):
    """A file that is not a policy this evaluator can run."""


@dataclass
class Policy:
    """A policy ready to act in a batch of envs: ``act(obs [N, obs]) -> actions [N, act]``."""

    label: str
    path: str  # as reported: relative to the working directory where possible
    kind: str  # checkpoint | onnx | torchscript
    sha256: str
    observation_size: int
    num_actions: int
    train_config: DictConfig  # the env config it was trained in (for replay_config)
    act: Callable[[torch.Tensor], torch.Tensor]
    _to: Callable[[torch.device], None] | None = None

    def to(self, device: torch.device) -> Policy:
        """Run the policy where the env's tensors live (exported graphs stay on the CPU)."""
        if self._to is not None:
            self._to(device)
        return self

    def describe(self) -> dict[str, Any]:
        return {"label": self.label, "path": self.path, "kind": self.kind,
                "sha256": self.sha256, "observation_size": self.observation_size,
                "num_actions": self.num_actions}


def report_path(path: Path) -> str:
    """``path`` relative to the working directory, or its last two parts when outside it
    (reports must not carry this machine's directories)."""
    resolved = path.resolve()
    try:
        return resolved.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return Path(*resolved.parts[-2:]).as_posix()


def default_label(path: Path) -> str:
    """A run's name for ``<run>/checkpoints/x.pt`` and ``<run>/exported/x``; else the folder."""
    parent = path.resolve().parent
    if parent.name in ("checkpoints", "exported"):
        parent = parent.parent
    return parent.name or path.stem


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_policy(path: str | os.PathLike, label: str | None = None) -> Policy:
    """Load ``path`` as a policy; anything else raises ``PolicyLoadError`` naming the file."""
    try:
        path = resolve_policy_path(path)
    except FileNotFoundError as e:
        raise PolicyLoadError(str(e)) from None
    if not path.is_file():
        raise PolicyLoadError(f"policy file {path} does not exist; expected {EXPECTED}")
    label = label or default_label(path)
    if path.suffix == ".onnx":
        return _load_onnx(path, label)
    if _torchscript_sidecar(path) is not None:
        return _load_torchscript(path, label)
    try:
        data = load_checkpoint(path)
    except CheckpointError as e:
        reason = str(e).rstrip(".")
        raise PolicyLoadError(f"{path} is not a policy: {reason}. Expected {EXPECTED}") from None
    missing = [k for k in ("config", "ppo", "observation_sizes", "num_actions") if k not in data]
    if missing or "policy" not in data["ppo"]:
        raise PolicyLoadError(f"{path} is a checkpoint without policy weights (missing "
                              f"{missing or ['ppo.policy']}); expected {EXPECTED}")
    module = policy_from_checkpoint(data)

    @torch.inference_mode()
    def act(obs: torch.Tensor) -> torch.Tensor:
        return module.act_inference(obs)

    return Policy(label, report_path(path), "checkpoint", _sha256(path),
                  int(data["observation_sizes"]["policy"]), int(data["num_actions"]),
                  OmegaConf.create(data["config"]), act, lambda d: module.to(d))


# ---------------------------------------------------------------------- exported graphs
def _torchscript_sidecar(path: Path) -> dict | None:
    """The sidecar stored inside an exported TorchScript file, or None for other files."""
    if not zipfile.is_zipfile(path):
        return None
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if n.endswith(f"/extra/{sc.SIDECAR_FILE}")]
        if not names:  # torch.save checkpoints are zip archives too, without this entry
            return None
        try:
            return json.loads(z.read(names[0]))
        except json.JSONDecodeError:
            return None


def _load_torchscript(path: Path, label: str) -> Policy:
    sidecar = _check_sidecar(_torchscript_sidecar(path), path)
    # TorchScript is a program (no weights_only mode): load it only from trusted sources;
    # ONNX is the format to exchange (docs/deployment.md).
    module = torch.jit.load(str(path), map_location="cpu").eval()

    @torch.inference_mode()
    def act(obs: torch.Tensor) -> torch.Tensor:
        return module(obs)

    return _exported(path, label, "torchscript", sidecar, act, lambda d: module.to(d))


def _load_onnx(path: Path, label: str) -> Policy:
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise PolicyLoadError(f"{path}: running ONNX policies needs onnxruntime ({e}); "
                              "pip install 'locomotion[export]'") from e
    side = path.with_name(sc.SIDECAR_FILE)
    if not side.is_file():
        raise PolicyLoadError(f"{path}: no sidecar {side.name} beside it; expected an "
                              f"exported ONNX policy with the policy.json that "
                              f"scripts/export.py writes next to it")
    try:
        sidecar = json.loads(side.read_text())
    except json.JSONDecodeError as e:
        raise PolicyLoadError(f"{side} is not JSON ({e}); expected the policy.json sidecar "
                              f"of {path.name}") from None
    sidecar = _check_sidecar(sidecar, side)
    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
        raise PolicyLoadError(f"{path} is not a readable ONNX model ({type(e).__name__}: "
                              f"{e}); expected {EXPECTED}") from None
    names = sidecar["policy"]["input"], sidecar["policy"]["output"]

    def act(obs: torch.Tensor) -> torch.Tensor:
        x = obs.detach().to("cpu", torch.float32).numpy()
        y = session.run([names[1]], {names[0]: np.ascontiguousarray(x)})[0]
        return torch.from_numpy(y).to(obs.device)

    return _exported(path, label, "onnx", sidecar, act, None)


def _check_sidecar(sidecar: dict | None, where: Path) -> dict:
    if not isinstance(sidecar, dict) or sidecar.get("format") != sc.FORMAT:
        raise PolicyLoadError(f"{where} is not a {sc.FORMAT} sidecar; expected {EXPECTED}")
    if sidecar.get("version") != sc.VERSION:
        raise PolicyLoadError(f"{where} has sidecar version {sidecar.get('version')}; this "
                              f"release reads version {sc.VERSION}")
    return sidecar


def _exported(path: Path, label: str, kind: str, sidecar: dict,
              act: Callable[[torch.Tensor], torch.Tensor],
              to: Callable[[torch.device], None] | None) -> Policy:
    return Policy(label, report_path(path), kind, _sha256(path),
                  int(sidecar["policy"]["observation_size"]),
                  int(sidecar["policy"]["num_actions"]), config_from_sidecar(sidecar, path),
                  act, to)


def config_from_sidecar(sidecar: dict, where: Path) -> DictConfig:
    """The env config an exported policy runs in: the robot it names, the project's velocity
    task with the sidecar's timing, commands, spawn, terminations and observation layout."""
    try:
        spec = load_robot_spec(sidecar["robot"])
    except RobotSpecError as e:
        raise PolicyLoadError(f"{where}: {e}") from None
    checks = {"joints": (list(spec.joints), sidecar["joints"]),
              "default_joint_pos": (list(spec.default_pose), sidecar["default_joint_pos"]),
              "action_scale": (spec.action_scale, sidecar["action_scale"])}
    if sidecar.get("pd"):
        checks["pd.kp"] = (list(spec.kp), sidecar["pd"]["kp"])
        checks["pd.kd"] = (list(spec.kd), sidecar["pd"]["kd"])
    differ = [k for k, (mine, theirs) in checks.items() if not _same(mine, theirs)]
    if differ:
        raise PolicyLoadError(f"{where}: the sidecar's {differ} differ from robot "
                              f"{sidecar['robot']!r}'s spec in this checkout")
    task = OmegaConf.load(CONFIG_DIR / "task" / f"{EXPORT_TASK}.yaml")
    task.control_dt = sidecar["control_dt"]
    task.episode_length_s = sidecar["episode_length_s"]
    task.action_clip = sidecar["action_clip"]
    task.commands = sidecar["commands"]
    task.init_state = {k: v for k, v in sidecar["init_state"].items() if k != "base_height"}
    task.terminations.max_tilt = sidecar["termination"]["max_tilt"]
    task.terminations.base_contact = bool(sidecar["termination"]["contact_sensors"])
    task.observations.policy = {t["name"]: t["scale"] for t in sidecar["observation"]["terms"]}
    solver = sidecar["solver"]
    return OmegaConf.create({
        "robot": {"spec": sidecar["robot"]},
        "task": task,
        "solver": {"name": solver, **sidecar["solver_profiles"][solver]},
        "num_envs": 1, "seed": 0, "device": "cpu", "rollout_length": 24,
    })


def _same(mine, theirs) -> bool:
    """Names equal, numbers equal to float precision."""
    if isinstance(mine, list) and mine and isinstance(mine[0], str):
        return mine == theirs
    a, b = np.asarray(mine, dtype=float), np.asarray(theirs, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b))


def load_policies(paths: Sequence[str], labels: Sequence[str] | None = None) -> list[Policy]:
    """Load every path; labels (default: run names) must be unique, one per path."""
    if not paths:
        raise PolicyLoadError(f"no policy given: pass policy=PATH or policy=[A,B] ({EXPECTED})")
    if labels is not None and len(labels) != len(paths):
        raise PolicyLoadError(f"{len(labels)} labels {list(labels)} for {len(paths)} policies")
    policies = [load_policy(p, labels[i] if labels else None) for i, p in enumerate(paths)]
    names = [p.label for p in policies]
    if labels is None and len(set(names)) < len(names):  # e.g. .pt and .onnx of one run
        for p in policies:
            if names.count(p.label) > 1:
                p.label = f"{p.label} ({p.kind})"
        names = [p.label for p in policies]
    if len(set(names)) < len(names):
        raise PolicyLoadError(f"policy labels must be unique, got {names}; pass labels=[...]")
    return policies
