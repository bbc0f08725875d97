"""Atomic training checkpoints and their validation on load."""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

import torch

from locomotion.rl.actor_critic import ActorCritic, build_policy

FORMAT = "locomotion-checkpoint"
VERSION = 1


class CheckpointError(ValueError):
    """A file that is not a readable checkpoint of this project, or of another setup."""


def save_checkpoint(path: str | os.PathLike, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``path`` atomically: a crash mid-write leaves the old file intact."""
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


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint written by ``save_checkpoint``; anything else is a clear error.

    Checkpoints hold pickled simulator models, so only load files you trust.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        data = torch.load(path, map_location="cpu", weights_only=False)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as e:
        raise CheckpointError(f"{path} is not a readable checkpoint (corrupt or truncated): "
                              f"{type(e).__name__}: {e}") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a locomotion checkpoint (no '{FORMAT}' marker); "
                              "it may come from another tool")
    if data.get("version") != VERSION:
        raise CheckpointError(f"{path} has checkpoint version {data.get('version')}; "
                              f"this release reads version {VERSION}")
    return data


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
