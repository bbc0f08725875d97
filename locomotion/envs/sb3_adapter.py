"""Stable-Baselines3 ``VecEnv`` view of a ``LocomotionEnv`` (the ``sb3`` extra).

SB3's algorithms take their own ``VecEnv``, not a gymnasium vector env. Its conventions match
the batched env's: finished sub-envs restart inside ``step_wait`` and the observation they
ended on is ``infos[i]["terminal_observation"]``; ``infos[i]["TimeLimit.truncated"]`` tells
a time-out (SB3 bootstraps it) from a failure. Each ended episode that began in training
carries ``infos[i]["episode"] = {"r": return, "l": length, "t": seconds}``, which SB3 logs as
``ep_rew_mean`` / ``ep_len_mean``; partial episodes (begun in the reset schedule's warm-up,
or under ``phase_locked`` after a fall, part-way into the horizon) carry none, so those
statistics cover whole episodes only. Do not add ``VecMonitor``: it would count the partial
episodes too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.vec_env.base_vec_env import VecEnv

from locomotion.envs.vec_env import LocomotionEnv


class Sb3VecEnv(VecEnv):
    """A ``LocomotionEnv`` behind SB3's ``VecEnv``: one observation group (``"policy"`` by
    default) as a float32 ``Box``; actions bounded by ``env.action_bounds``."""

    def __init__(self, env: LocomotionEnv, obs_group: str = "policy"):
        self.env = env
        if not env.obs:
            env.reset()  # observation sizes are known once the env has observed
        if obs_group not in env.observation_sizes:
            raise ValueError(f"obs_group must be one of {sorted(env.observation_sizes)}, "
                             f"got {obs_group!r}")
        self.obs_group = obs_group
        low, high = env.action_bounds.cpu().numpy().astype(np.float32).T
        super().__init__(env.num_envs,
                         spaces.Box(-np.inf, np.inf, (env.observation_sizes[obs_group],),
                                    np.float32),
                         spaces.Box(low, high, (env.num_actions,), np.float32))
        self._actions: torch.Tensor | None = None
        self._start = time.monotonic()

    def reset(self) -> np.ndarray:
        """Reset every sub-env; the schedule's warm-up runs on the env's first reset only."""
        seed = self._seeds[0] if self._seeds and self._seeds[0] is not None else None
        if seed is not None:
            self.env.gen.manual_seed(int(seed))
        self._reset_seeds()
        self._reset_options()
        return self._numpy(self.env.reset())

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = torch.as_tensor(np.asarray(actions, dtype=np.float32),
                                        device=self.env.device)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, reward, terminated, truncated, info = self.env.step(self._actions)
        done = (terminated | truncated).cpu().numpy()
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if "final_obs" in info:
            final = self._numpy(info["final_obs"])
            episode = {k: v.cpu().numpy() for k, v in info["episode"].items()}
            seconds = round(time.monotonic() - self._start, 6)
            truncated = truncated.cpu().numpy()
            for row, i in enumerate(np.flatnonzero(done)):
                infos[i]["terminal_observation"] = final[i]
                infos[i]["TimeLimit.truncated"] = bool(truncated[i])
                if not episode["partial"][row]:
                    infos[i]["episode"] = {"r": float(episode["return"][row]),
                                           "l": int(episode["length"][row]), "t": seconds}
        return self._numpy(obs), reward.cpu().numpy().astype(np.float32), done, infos

    def close(self) -> None:
        self.env.close()

    # SB3 reaches into sub-envs by index; the batched env has one object for all of them.
    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        return [getattr(self.env, attr_name)] * len(self._get_indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        raise AttributeError(f"the {self.num_envs} sub-envs share one batched env; set "
                             f"{attr_name!r} on Sb3VecEnv.env (or through its config)")

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs):
        return [getattr(self.env, method_name)(*method_args, **method_kwargs)
                ] * len(self._get_indices(indices))

    def env_is_wrapped(self, wrapper_class: type, indices=None) -> list[bool]:
        return [False] * len(self._get_indices(indices))

    def _get_indices(self, indices) -> Sequence[int]:
        if indices is None:
            return range(self.num_envs)
        return [indices] if isinstance(indices, int) else list(indices)

    def _numpy(self, obs: dict[str, torch.Tensor]) -> np.ndarray:
        return obs[self.obs_group].detach().cpu().numpy().astype(np.float32, copy=True)
