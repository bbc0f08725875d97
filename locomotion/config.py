"""Compose the project's Hydra configs from Python (tests, notebooks, benchmarks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

import locomotion.configs

# The config tree ships inside the package (the repository's configs/ folder).
CONFIG_DIR = Path(locomotion.configs.__file__).resolve().parent


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
