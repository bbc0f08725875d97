"""Atomic training checkpoints and their validation on load.

A checkpoint holds tensors and plain values only (numbers, strings, None, lists, tuples,
dicts), and every load uses ``torch.load(..., weights_only=True)``: reading a file never
runs code from it, whoever wrote it. ``save_checkpoint`` refuses anything else.
"""

from __future__ import annotations

import os
import pickle
import re
import tempfile
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from locomotion.rl.actor_critic import ActorCritic, build_policy

FORMAT = "locomotion-checkpoint"
VERSION = 1


class CheckpointError(ValueError):
    """A file that is not a readable checkpoint of this project, or of another setup."""


#: What a checkpoint may hold besides dicts, lists and tuples: what weights_only loads.
_PLAIN = (torch.Tensor, str, bytes, int, float, bool, type(None), torch.Size, torch.dtype,
          torch.device)


def check_payload(payload: Any, where: str = "checkpoint") -> None:
    """Raise ``TypeError`` naming the first value that ``weights_only`` loading would refuse
    (a numpy array, an object), so a checkpoint that could not be read is never written."""
    if isinstance(payload, dict | OrderedDict):
        for k, v in payload.items():
            if not isinstance(k, str | int | float | bool | type(None)):
                raise TypeError(f"{where} has a key of type {type(k).__name__}: {k!r}")
            check_payload(v, f"{where}[{k!r}]")
    elif isinstance(payload, list | tuple):
        for i, v in enumerate(payload):
            check_payload(v, f"{where}[{i}]")
    elif not isinstance(payload, _PLAIN):
        raise TypeError(f"{where} is a {type(payload).__module__}.{type(payload).__name__}; "
                        "checkpoints hold only tensors and plain values (numbers, strings, "
                        "lists, tuples, dicts), so that loading them never runs code: "
                        "convert it (e.g. torch.from_numpy) before saving")


def save_checkpoint(path: str | os.PathLike, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``path`` atomically: a crash mid-write leaves the old file intact.

    ``payload`` must hold only tensors and plain values (``check_payload``).
    """
    check_payload(payload)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"format": FORMAT, "version": VERSION, **payload}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def remove_stale_temporary_files(folder: str | os.PathLike) -> list[Path]:
    """Delete the temporary files (``.<name>.<random>.tmp``) that ``save_checkpoint`` calls
    killed mid-write (``kill -9``, a lost machine) left in ``folder``; returns them.

    Call it only when nothing else is saving into ``folder`` (a run starting up).
    """
    folder = Path(folder)
    removed = []
    for tmp in sorted(folder.glob(".*.tmp")) if folder.is_dir() else ():
        if tmp.is_file() and not tmp.is_symlink():
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint written by ``save_checkpoint``; anything else is a clear error.

    Loading uses ``torch.load(..., weights_only=True)``: tensors and plain values only, so a
    file never runs code while it is read. A file that holds anything else (a checkpoint
    written before checkpoints were safe to load, with numpy arrays of physics state, or a
    crafted one) is refused with a ``CheckpointError``.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        with warnings.catch_warnings():  # torch's note on a non-torch pickle's protocol
            warnings.filterwarnings("ignore", "Detected pickle protocol")
            data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        unsafe = _unsafe_globals(path, e)
        if unsafe is not None:
            raise CheckpointError(_refusal(path, unsafe)) from None
        # torch's message advises weights_only=False: keep only what it found wrong
        found = re.search(r"WeightsUnpickler error:\s*(.*?)\s*(?:\n\n|$)", str(e), re.S)
        raise CheckpointError(f"{path} is not a readable checkpoint (corrupt or truncated): "
                              f"{found.group(1) if found else e}") from None
    # the weights-only unpickler fails on garbage with any of several errors (KeyError,
    # IndexError, ...); none of them has run code from the file
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"{path} is not a readable checkpoint (corrupt or truncated): "
                              f"{type(e).__name__}: {e}") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a locomotion checkpoint (no '{FORMAT}' marker); "
                              "it may come from another tool")
    if data.get("version") != VERSION:
        raise CheckpointError(f"{path} has checkpoint version {data.get('version')}; "
                              f"this release reads version {VERSION}")
    return data


def _unsafe_globals(path: Path, error: pickle.UnpicklingError) -> list[str] | None:
    """The Python objects (``module.name``) a file refused by weights_only loading would have
    built, or None when the error is not such a refusal (a corrupt file)."""
    message = str(error)
    named = re.findall(r"GLOBAL (\S+) was not an allowed global", message)
    try:  # reads the pickle's opcodes without running them
        found = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # noqa: BLE001  (not a torch.save zip archive)
        found = []
    if found or named or "Unsupported global" in message:
        return found or named
    return None


def _refusal(path: Path, unsafe: list[str]) -> str:
    if unsafe and all(name.split(".")[0] == "numpy" for name in unsafe):
        return (f"{path} predates safe checkpoints: it holds numpy arrays, and checkpoints "
                "are loaded with torch.load(weights_only=True), which reads only tensors and "
                "plain values so that a file never runs code. Its run's policy-only export "
                "(exported/checkpoint.pt) still loads for play, evaluate and export; to "
                "resume, re-train with this release")
    names = ", ".join(unsafe) if unsafe else "objects other than tensors and plain values"
    return (f"{path} was refused: loading it would build Python objects ({names}), i.e. run "
            "code from the file. Checkpoints of this project hold only tensors and plain "
            "values; this file was not written by it, or was tampered with")


def inference_payload(data: dict[str, Any]) -> dict[str, Any]:
    """The part of a loaded checkpoint that running its policy needs: small enough to ship.

    Enough for ``play``, ``evaluate`` and ``export``; not for resuming training.
    """
    keys = ("robot", "observation_sizes", "num_actions", "iteration", "env_steps")
    # where the run lived and what it resumed from say nothing about the policy
    config = {k: v for k, v in data["config"].items() if k not in _RUN_PATHS}
    return {"inference_only": True, "config": config, **{k: data[k] for k in keys},
            "ppo": {"policy": data["ppo"]["policy"]}}


_RUN_PATHS = ("resume", "run_dir")


def policy_from_checkpoint(data: dict) -> ActorCritic:
    """The trained actor-critic stored in a loaded checkpoint, in eval mode."""
    policy = build_policy(data["config"]["algo"]["policy"], data["observation_sizes"],
                          data["num_actions"])
    policy.load_state_dict(data["ppo"]["policy"])
    return policy.eval()
