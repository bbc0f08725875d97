"""Shared fixtures: small Go1 environments that are closed after each test."""

import pytest

from locomotion import tasks
from locomotion.config import load_config
from locomotion.envs import LocomotionEnv

BASE_OVERRIDES = ("num_envs=16", "reset=sync", "task.episode_length_s=1.0")


@pytest.fixture
def make_env():
    """Factory ``make_env(*overrides)``: a LocomotionEnv on top of BASE_OVERRIDES, reset."""
    envs = []

    def factory(*overrides: str, reset: bool = True) -> LocomotionEnv:
        env = tasks.make_env(load_config("env", [*BASE_OVERRIDES, *overrides]))
        envs.append(env)
        if reset:
            env.reset()
        return env

    yield factory
    for env in envs:
        env.close()


@pytest.fixture
def env_from_cfg():
    """Factory ``env_from_cfg(cfg)``: a LocomotionEnv of a composed config, reset."""
    envs = []

    def factory(cfg) -> LocomotionEnv:
        env = tasks.make_env(cfg)
        envs.append(env)
        env.reset()
        return env

    yield factory
    for env in envs:
        env.close()
