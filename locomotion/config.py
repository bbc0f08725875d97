"""Compose the project's Hydra configs from Python (tests, notebooks, benchmarks)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

import locomotion.configs

# The config tree ships inside the package (the repository's configs/ folder).
CONFIG_DIR = Path(locomotion.configs.__file__).resolve().parent


def robot_name(spec: str | None = None, *, _root_: DictConfig | None = None) -> str:
    """``spec`` (by default the config's ``robot.spec``) as a folder name: a robot's name, or
    for the path of a spec file the ``name`` it gives (its file stem when unreadable), in the
    characters [A-Za-z0-9_.-]. The run folders' ``${robot_name:}``."""
    name = str(spec if spec is not None else _root_.robot.spec)
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        try:
            name = str(yaml.safe_load(path.read_text())["name"])
        except Exception:  # noqa: BLE001  (the run reports a bad spec; the name only falls back)
            name = path.stem
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._-") or "robot"


if not OmegaConf.has_resolver("robot_name"):
    OmegaConf.register_new_resolver("robot_name", robot_name)


def load_config(name: str = "env", overrides: list[str] | None = None) -> DictConfig:
    """The config ``configs/<name>.yaml`` with Hydra command-line style ``overrides``."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name=name, overrides=overrides or [])


def replay_config(trained: dict[str, Any], num_envs: int, seed: int,
                  solver: str | None = None, randomization: str = "none",
                  terrain: str | DictConfig | None = None) -> DictConfig:
    """A trained run's env config for running its policy: native MuJoCo on the CPU, every
    episode started together, this batch size and seed, optionally another solver profile
    or terrain, and the randomization preset ``randomization`` (nominal by default).
    """
    cfg = OmegaConf.create(trained)
    cfg.num_envs = num_envs
    cfg.seed = seed
    cfg.device = "cpu"
    cfg.sim = OmegaConf.load(CONFIG_DIR / "sim" / "native.yaml")
    cfg.reset = {"schedule": "sync", "num_groups": None, "warmup": "zero"}
    if solver:
        cfg.solver = config_group("solver", solver)
    cfg.randomization = config_group("randomization", randomization)
    if terrain:  # a terrain option's name or config, e.g. a flat-ground policy on rough
        cfg.terrain = config_group("terrain", terrain) if isinstance(terrain, str) else terrain
    return cfg


def config_group(group: str, name: str) -> DictConfig:
    """Option ``name`` of config group ``group`` (e.g. solver/fast); errors list the valid."""
    path = CONFIG_DIR / group / f"{name}.yaml"
    if not path.is_file():
        valid = sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))
        raise ValueError(f"unknown {group} option {name!r}; valid: {valid}")
    return OmegaConf.load(path)
