"""Tasks: commands, observations, rewards and terminations, and the env built from a config.

``make_env(cfg)`` is how every command, the evaluator and user code build a batched env:
the task named by ``cfg.task.name`` plus, when ``cfg.multitask`` lists subtasks, the
subtask set that assigns each env slot its terrain, commands, gait and pushes.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from omegaconf import DictConfig

from locomotion.config_checks import ConfigError
from locomotion.envs.vec_env import EpisodeHook, LocomotionEnv, TaskFactory
from locomotion.tasks.subtasks import SubtaskSet
from locomotion.tasks.velocity import VelocityTask

TASKS: dict[str, TaskFactory] = {
    "flat_velocity": VelocityTask,
    "rough": VelocityTask,  # on a terrain grid
    "gaits": VelocityTask,  # flat + gait commands drawn per episode (configs/gait_commands)
    "multitask": VelocityTask,  # rough + gaits + subtask one-hot (configs/multitask)
}


def task_class(name: str) -> TaskFactory:
    """The task registered under ``name``; an unknown name lists the valid ones."""
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r}; valid tasks: {sorted(TASKS)}")
    return TASKS[name]


def make_env(cfg: DictConfig) -> LocomotionEnv:
    """The batched env ``cfg`` describes (see ``configs/env.yaml``).

    ``task.modules`` names modules to import first: where a user's own terms or tasks
    register themselves, so that every command replaying the run (play, evaluate, export)
    finds them too.
    """
    for module in cfg.task.get("modules") or []:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ConfigError(f"task.modules: cannot import {module!r} ({e}); it must be "
                              "importable (installed, or on PYTHONPATH)") from None
    multitask = cfg.get("multitask")
    with_subtasks = multitask is not None and bool(multitask.get("subtasks"))

    def hooks(env: LocomotionEnv) -> Mapping[str, EpisodeHook]:
        return {"subtasks": SubtaskSet(multitask, env)} if with_subtasks else {}

    return LocomotionEnv(cfg, task_class(cfg.task.name), hooks)


def subtasks_of(env: LocomotionEnv) -> SubtaskSet | None:
    """The subtask set riding on ``env`` (None when it runs no subtasks)."""
    return env.hooks.get("subtasks")
