"""Export a checkpoint for deployment: ONNX, TorchScript, the sidecar and the robot's MJCF.

The deployed graph is normalizer + actor (mean action), so a player feeds it raw
observations. Nothing is written to the output folder unless the graphs reproduce the
torch policy on observations recorded in the checkpoint's own env: files are built in a
temporary folder, checked, then moved into place.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import tempfile
import time
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from locomotion.config import CONFIG_DIR, replay_config
from locomotion.envs.vec_env import LocomotionEnv
from locomotion.export import sidecar as sc
from locomotion.export.verification import max_abs_errors, record_observations
from locomotion.rl.actor_critic import PolicyModule
from locomotion.rl.checkpoint import (
    inference_payload,
    load_checkpoint,
    policy_from_checkpoint,
    save_checkpoint,
)
from locomotion.sim.model_builder import build_spec
from locomotion.tasks import make_env

#: Model fields robot.xml must reproduce (compared with a relative tolerance: MJCF text
#: stores fewer digits than the compiled doubles).
_MODEL_FIELDS = ("actuator_gainprm", "actuator_biasprm", "actuator_forcerange",
                 "actuator_ctrlrange", "jnt_range", "body_mass", "geom_friction")
_MODEL_RTOL = 1e-5
_EXPORTER_LOGGERS = ("torch.onnx", "torch.export", "onnx_ir", "onnxscript")


class ExportError(ValueError):
    """A checkpoint that cannot be exported, or an export that does not act like its policy."""


@dataclass(frozen=True)
class ExportResult:
    """Where an export went and how closely its graphs match the torch policy."""

    out_dir: Path
    files: tuple[Path, ...]
    errors: dict[str, float]  # max |action - torch action| per format
    num_observations: int
    seconds: float

    def summary(self) -> str:
        errors = ", ".join(f"{name} {err:.2e}" for name, err in self.errors.items())
        return (f"exported {', '.join(p.name for p in self.files)} to {self.out_dir} in "
                f"{self.seconds:.1f}s; max abs error vs torch on {self.num_observations} "
                f"recorded observations: {errors}")


def default_export_dir(checkpoint: str | os.PathLike) -> Path:
    """``<run>/exported`` for ``<run>/checkpoints/*.pt``; else ``exported/`` beside the file."""
    parent = Path(checkpoint).resolve().parent
    return (parent.parent if parent.name == "checkpoints" else parent) / "exported"


def load_check_settings() -> DictConfig:
    """The ``check`` section of ``configs/export.yaml`` (used when the trainer exports)."""
    return OmegaConf.load(CONFIG_DIR / "export.yaml").check


def export_checkpoint(checkpoint: str | os.PathLike, out_dir: str | os.PathLike | None = None,
                      check: DictConfig | None = None) -> ExportResult:
    """Write policy.onnx, policy.pt, policy.json, robot.xml and a policy-only checkpoint.pt.

    ``check`` (``configs/export.yaml``'s ``check`` by default) sizes the recorded batch and
    the tolerance; exceeding it raises ``ExportError`` with the measured errors.
    """
    start = time.perf_counter()
    onnx, ort = _export_packages()
    check = check if check is not None else load_check_settings()
    path = Path(checkpoint)
    data = load_checkpoint(path)
    out = Path(out_dir) if out_dir is not None else default_export_dir(path)
    cfg = replay_config(data["config"], int(check.num_envs), int(check.seed))
    env = make_env(cfg)
    try:
        _check_matches(data, env, path)
        policy = policy_from_checkpoint(data).inference_policy()
        observations = record_observations(env, policy, int(check.num_steps))
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".export-", dir=out) as tmp_dir:
            tmp = Path(tmp_dir)
            opset = _write_onnx(policy, observations[:2], tmp / sc.ONNX_FILE)
            sidecar = sc.build_sidecar(env, cfg, data, opset)
            text = json.dumps(sidecar, indent=2) + "\n"
            _tag_onnx(onnx, tmp / sc.ONNX_FILE, sidecar)
            _write_torchscript(policy, tmp / sc.TORCHSCRIPT_FILE, text)
            (tmp / sc.MODEL_FILE).write_text(_model_xml(env))
            errors = _verify(ort, policy, observations, tmp, float(check.tolerance))
            (tmp / sc.SIDECAR_FILE).write_text(text)
            save_checkpoint(tmp / sc.CHECKPOINT_FILE, inference_payload(data))
            files = tuple(out / name for name in (sc.ONNX_FILE, sc.TORCHSCRIPT_FILE,
                                                  sc.SIDECAR_FILE, sc.MODEL_FILE,
                                                  sc.CHECKPOINT_FILE))
            for dest in files:
                os.replace(tmp / dest.name, dest)
    finally:
        env.close()
    return ExportResult(out, files, errors, len(observations), time.perf_counter() - start)


EXPORT_PACKAGES = ("onnx", "onnxscript", "onnxruntime")  # the ``export`` extra


def missing_export_packages() -> list[str]:
    """The packages of the ``export`` extra that are not installed (empty: export works)."""
    def installed(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a module blocked or half-imported
            return False

    return [name for name in EXPORT_PACKAGES if not installed(name)]


def _export_packages():
    try:
        import onnx
        import onnxruntime
    except ImportError as e:
        raise ExportError(f"export needs onnx, onnxscript and onnxruntime ({e}); "
                          "pip install 'locomotion[export]'") from e
    return onnx, onnxruntime


def _check_matches(data: dict[str, Any], env: LocomotionEnv, path: Path) -> None:
    """Refuse a checkpoint whose stored shapes differ from those its own config builds."""
    built = {"robot": env.spec.name, "observation_sizes": env.observation_sizes,
             "num_actions": env.num_actions}
    stored = {k: data[k] for k in built}
    if stored != built:
        raise ExportError(
            f"checkpoint {path} stores {stored}, but its config builds {built}: the config "
            "was edited or the weights come from another robot/task; refusing to export"
        )


@contextlib.contextmanager
def _quiet_torch_exporters():
    """Hide the exporters' deprecation chatter and graph-pass progress logs."""
    loggers = [logging.getLogger(name) for name in _EXPORTER_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _write_onnx(policy: PolicyModule, example: torch.Tensor, path: Path) -> int:
    """Export with a dynamic batch axis; returns the ONNX opset used."""
    batch = torch.export.Dim("batch")
    with _quiet_torch_exporters():
        program = torch.onnx.export(
            policy, (example,), input_names=[sc.INPUT_NAME], output_names=[sc.OUTPUT_NAME],
            dynamic_shapes={"obs": {0: batch}}, dynamo=True, verbose=False)
    program.save(str(path))
    return int(program.model.opset_imports[""])


def _tag_onnx(onnx, path: Path, sidecar: dict[str, Any]) -> None:
    """Stamp robot and sizes into the ONNX metadata so players can spot a wrong sidecar."""
    model = onnx.load(str(path))
    onnx.helper.set_model_props(model, {
        "format": sc.FORMAT,
        "robot": sidecar["robot"],
        "observation_size": str(sidecar["policy"]["observation_size"]),
        "num_actions": str(sidecar["policy"]["num_actions"]),
    })
    for node in model.graph.node:  # exporter stack traces name this machine's source paths
        del node.metadata_props[:]
        node.doc_string = ""
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _write_torchscript(policy: PolicyModule, path: Path, sidecar_text: str) -> None:
    """TorchScript for libtorch players; the sidecar travels inside as an extra file."""
    with _quiet_torch_exporters():
        torch.jit.save(torch.jit.script(policy), str(path),
                       _extra_files={sc.SIDECAR_FILE: sidecar_text})
    _drop_debug_info(path)


def _drop_debug_info(path: Path) -> None:
    """Remove TorchScript's optional debug tables: they hold this machine's source paths."""
    with zipfile.ZipFile(path) as src:
        entries = [(info, src.read(info)) for info in src.infolist()
                   if not info.filename.endswith(".debug_pkl")]
    with zipfile.ZipFile(path, "w") as dst:
        for info, data in entries:
            dst.writestr(info, data)


def _model_xml(env: LocomotionEnv) -> str:
    """The robot + floor MJCF of ``env.model``, checked to compile to the same model."""
    mj = build_spec(env.spec, env.solver)
    assets = [e.file for group in (mj.meshes, mj.textures, mj.hfields, mj.skins)
              for e in group if e.file]
    if assets:
        raise ExportError(f"robot {env.spec.name!r} loads asset files {assets}; robot.xml "
                          "export supports self-contained models only")
    xml = mj.to_xml()
    loaded = mujoco.MjModel.from_xml_string(xml)
    model = env.model
    for field in ("nq", "nv", "nu", "nsensordata", "nbody", "ngeom"):
        if getattr(loaded, field) != getattr(model, field):
            raise ExportError(f"robot.xml compiles to {field}={getattr(loaded, field)}, "
                              f"the training model has {getattr(model, field)}")
    for field in _MODEL_FIELDS:
        if not np.allclose(getattr(loaded, field), getattr(model, field), rtol=_MODEL_RTOL):
            raise ExportError(f"robot.xml changes model field {field}")
    if loaded.opt.timestep != model.opt.timestep:
        raise ExportError(f"robot.xml has timestep {loaded.opt.timestep}, "
                          f"the training model {model.opt.timestep}")
    return xml


def _verify(ort, policy: PolicyModule, observations: torch.Tensor, folder: Path,
            tolerance: float) -> dict[str, float]:
    """Max errors of the written ONNX and TorchScript files; ``ExportError`` over tolerance."""
    session = ort.InferenceSession(str(folder / sc.ONNX_FILE),
                                   providers=["CPUExecutionProvider"])
    with _quiet_torch_exporters():
        scripted = torch.jit.load(str(folder / sc.TORCHSCRIPT_FILE))
    errors = max_abs_errors(policy, observations, {
        "onnx": lambda obs: session.run([sc.OUTPUT_NAME], {sc.INPUT_NAME: obs})[0],
        "torchscript": lambda obs: scripted(torch.from_numpy(obs)).numpy(),
    })
    bad = {name: err for name, err in errors.items() if not err <= tolerance}
    if bad:
        raise ExportError(
            f"exported policy differs from the torch policy on {len(observations)} recorded "
            f"observations: max abs error {bad} > tolerance {tolerance} (all: {errors}); "
            "no files were written"
        )
    return errors
