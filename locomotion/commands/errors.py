"""How the Hydra commands end on a user's mistake: one line ``error: <what; what to do>`` on
stderr and exit code 2, with no traceback and no empty run folder left behind. A bug (any
other exception) still ends in Hydra's traceback and exit code 1.

    @hydra.main(...)
    @user_errors
    def train(cfg): ...          # cfg is checked (locomotion.config_checks) before it runs

    def main():
        run_app(train)           # Hydra's own config errors (unknown key) exit 2 as well

``locomotion-deploy`` has its own handler: it imports nothing of the package.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import locomotion.config  # noqa: F401  (registers the resolvers the configs use)
from locomotion.config_checks import ConfigError, check_config
from locomotion.envs.randomization import RandomizationError
from locomotion.evaluation.policies import PolicyLoadError
from locomotion.evaluation.suite import SuiteError
from locomotion.export import ExportError
from locomotion.rl.checkpoint import CheckpointError
from locomotion.sim.robot_spec import RobotSpecError

USER_ERROR_EXIT = 2
USER_ERRORS: tuple[type[Exception], ...] = (
    ConfigError, RobotSpecError, RandomizationError, CheckpointError, ExportError,
    PolicyLoadError, SuiteError)
"""What a user's input can be wrong with: a config value, a robot spec or its MJCF, a
randomization preset, a checkpoint (or one that does not fit the run), an export, a policy
file or an evaluation suite."""

_started = False  # the task function was entered: Hydra composed the config


def fail(message: object) -> NoReturn:
    """Print ``error: message`` as one line on stderr and exit with code 2."""
    text = re.sub(r"\s*\n\s*", " ", str(message)).strip()
    print(f"error: {text}", file=sys.stderr, flush=True)
    sys.exit(USER_ERROR_EXIT)


def user_errors(task: Callable[[DictConfig], Any]) -> Callable[[DictConfig], Any]:
    """Wrap a Hydra task function (under ``@hydra.main``): check the config, then run it;
    a ``USER_ERRORS`` exception becomes ``fail``, after removing the run folder when it
    holds nothing but what Hydra and a failed start wrote."""

    @functools.wraps(task)
    def run(cfg: DictConfig) -> Any:
        global _started
        _started = True
        try:
            check_config(cfg)
            return task(cfg)
        except USER_ERRORS as e:
            if os.environ.get("RANK", "0") == "0":  # torchrun: rank 0 owns the folder
                remove_unused_run_dir()
            fail(e)

    return run


def run_app(app: Callable[[], Any]) -> Any:
    """Call a ``@hydra.main`` app; a config Hydra itself refuses (an unknown key or option,
    a bad override) exits with code 2 like every other user error."""
    try:
        return app()
    except SystemExit as e:
        if e.code == 1 and not _started:
            raise SystemExit(USER_ERROR_EXIT) from None
        raise


# Entries a run folder holds after a start that failed: Hydra's config copy and job log,
# and a training log that has not logged an iteration.
_STARTUP_FILES = {".hydra", "progress.jsonl", "tensorboard"}


def remove_unused_run_dir() -> Path | None:
    """Delete Hydra's output folder of this job if it holds only startup files (never one
    with a checkpoint, a logged iteration or anything else), then its parents that this
    leaves empty below the working directory. Returns the folder removed, if any."""
    try:
        hydra_cfg = HydraConfig.get()
    except ValueError:  # not under Hydra
        return None
    run_dir = Path(hydra_cfg.runtime.output_dir).resolve()
    cwd = Path.cwd().resolve()
    if run_dir == cwd or cwd.is_relative_to(run_dir) or not run_dir.is_dir():
        return None
    allowed = _STARTUP_FILES | {f"{hydra_cfg.job.name}.log"}
    entries = list(run_dir.iterdir())
    if any(e.name not in allowed for e in entries):
        return None
    progress = run_dir / "progress.jsonl"
    if progress.is_file() and progress.stat().st_size > 0:
        return None
    tensorboard = run_dir / "tensorboard"
    if tensorboard.exists() and any(not p.name.startswith("events.out.tfevents")
                                    for p in tensorboard.iterdir()):
        return None
    shutil.rmtree(run_dir)
    parent = run_dir.parent
    while parent != cwd and parent.is_relative_to(cwd) and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent
    return run_dir
