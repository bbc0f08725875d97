"""Checks of the config values a user sets, run as soon as a command's config is composed.

``RULES`` says, per dotted key, what its value must be: a kind (``int``, ``number``,
``bool``, ``path``, ``device``; a trailing ``?`` also allows null) and a range
(``">= 1"``, ``"> 0, <= 1"``). ``check_config`` checks every key of ``RULES`` that a
config has, so the train, play, evaluate and export configs share one table, and raises a
``ConfigError`` that names the key, the value and what to pass instead, e.g.
``num_envs='abc' is not a whole number; use num_envs=<int >= 1>``.
"""

from __future__ import annotations

import operator
import re

from omegaconf import DictConfig, OmegaConf


class ConfigError(ValueError):
    """A config value that cannot work: the message names the key and what to use."""


RULES: dict[str, tuple[str, str]] = {
    # key: (kind, range)
    "checkpoint": ("path", ""),
    "num_envs": ("int", ">= 1"),
    "seed": ("int", ""),
    "max_iterations": ("int", ">= 1"),
    "device": ("device", ""),
    "torch_threads": ("int?", ">= 1"),
    "export": ("bool", ""),
    "video": ("bool", ""),
    "plots": ("bool", ""),
    "episodes_per_level": ("int?", ">= 1"),
    "task.control_dt": ("number", "> 0"),
    "task.episode_length_s": ("number", "> 0"),
    "algo.num_steps": ("int", ">= 1"),
    "algo.symmetry": ("bool_or_auto", ""),
    "algo.policy.init_noise_std": ("number", "> 0"),
    "algo.ppo.learning_rate": ("number", "> 0"),
    "algo.ppo.clip_param": ("number", "> 0"),
    "algo.ppo.num_learning_epochs": ("int", ">= 1"),
    "algo.ppo.num_mini_batches": ("int", ">= 1"),
    "algo.ppo.value_loss_coef": ("number", ">= 0"),
    "algo.ppo.entropy_coef": ("number", ">= 0"),
    "algo.ppo.gamma": ("number", "> 0, <= 1"),
    "algo.ppo.lam": ("number", ">= 0, <= 1"),
    "algo.ppo.desired_kl": ("number?", "> 0"),
    "algo.ppo.max_grad_norm": ("number", "> 0"),
    "logging.save_interval": ("int", ">= 1"),
    "logging.print_interval": ("int", ">= 1"),
    "logging.tensorboard": ("bool", ""),
    "divergence.max_fraction": ("number", ">= 0, <= 1"),
    "divergence.patience": ("int", ">= 1"),
    "check.num_envs": ("int", ">= 1"),
    "check.num_steps": ("int", ">= 1"),
    "check.seed": ("int", ""),
    "check.tolerance": ("number", "> 0"),
}

_KINDS = {  # kind: (test, what a wrong value is not)
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number"),
    "number": (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "bool_or_auto": (lambda v: isinstance(v, bool) or v == "auto", "true, false or auto"),
    "path": (lambda v: isinstance(v, str) and v != "", "a path"),
    "device": (lambda v: isinstance(v, str) and re.fullmatch(r"cpu|cuda(:\d+)?", v) is not None,
               "a device"),
}
_HINTS = {"bool": "true | false", "bool_or_auto": "true | false | auto",
          "device": "cpu | cuda | cuda:N"}
_OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}
_ABSENT = object()


def check_config(cfg: DictConfig) -> None:
    """Raise ``ConfigError`` for the first value of ``cfg`` that breaks ``RULES``, a
    mandatory value (``???``) left unset, or a device this machine cannot use."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise ConfigError(f"{missing[0]} is not set; pass {missing[0]}=<{_hint(missing[0])}>")
    for key, (kind, bounds) in RULES.items():
        value = OmegaConf.select(cfg, key, default=_ABSENT)
        if value is _ABSENT or (value is None and kind.endswith("?")):
            continue
        test, noun = _KINDS[kind.rstrip("?")]
        if not test(value):
            raise ConfigError(f"{key}={value!r} is not {noun}; use {key}=<{_hint(key)}>")
        if not all(_OPS[op](value, float(bound)) for op, bound in _bounds(bounds)):
            raise ConfigError(f"{key}={value!r} is out of range; use {key}=<{_hint(key)}>")
    device = OmegaConf.select(cfg, "device", default=None)
    if isinstance(device, str) and device.startswith("cuda"):
        problem = cuda_problem()
        if problem:
            raise ConfigError(f"device={device!r}: {problem}")
        if OmegaConf.select(cfg, "sim.backend", default=None) == "native":
            raise ConfigError(f"device={device!r} needs sim=warp (sim=native runs on the CPU); "
                              "pass sim=warp, or use device=cpu")


def cuda_problem() -> str | None:
    """Why this torch cannot run on CUDA here, or None when it can."""
    import torch

    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None and torch.version.hip is None:
        return (f"this torch ({torch.__version__}) has no CUDA (a CPU-only build); install the "
                "CUDA build: pip install torch --index-url https://download.pytorch.org/whl/cu128 "
                "(or the index matching your driver; docs/gpu.md), or use device=cpu")
    return ("torch sees no CUDA device on this machine (check the driver and "
            "CUDA_VISIBLE_DEVICES), or use device=cpu")


def _bounds(text: str) -> list[tuple[str, str]]:
    return [tuple(part.split()) for part in text.split(",") if part.strip()]


def _hint(key: str) -> str:
    """What a value of ``key`` may be, e.g. ``int >= 1`` or ``number > 0 and <= 1``."""
    if key not in RULES:
        return "value"
    kind, bounds = RULES[key]
    text = " ".join([_HINTS.get(kind.rstrip("?"), kind.rstrip("?")),
                     " and ".join(" ".join(b) for b in _bounds(bounds))]).strip()
    return text + (" or null" if kind.endswith("?") else "")
