"""Compose the project's Hydra configs from Python (tests, notebooks, benchmarks)."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


def load_config(name: str = "env", overrides: list[str] | None = None) -> DictConfig:
    """The config ``configs/<name>.yaml`` with Hydra command-line style ``overrides``."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name=name, overrides=overrides or [])
