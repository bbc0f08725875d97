"""Gymnasium 1.x ``VectorEnv`` view of a ``LocomotionEnv``, numpy in and out.

Lets gymnasium-based trainers, wrappers and tools drive the batched env unchanged. The env
resets finished sub-envs inside ``step``, so the adapter declares
``AutoresetMode.SAME_STEP`` and reports each ended episode the way gymnasium's own vector envs
do in that mode: ``infos["final_obs"]`` is an object array holding the last observation of
every sub-env that ended this step (``None`` elsewhere), ``infos["final_info"]`` holds that
episode's statistics, and ``infos["_final_obs"]`` / ``infos["_final_info"]`` (and a ``_<key>``
inside ``final_info`` per statistic) are the boolean masks of the sub-envs concerned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from locomotion.envs.vec_env import LocomotionEnv, Obs

NumpyObs = np.ndarray | dict[str, np.ndarray]


class GymnasiumVectorEnv(gymnasium.vector.VectorEnv):
    """A ``LocomotionEnv`` behind gymnasium's vector-env API.

    ``obs_group`` chooses what an observation is: one group name (``"policy"`` or ``"critic"``)
    gives a float32 ``Box``; a sequence of names gives a ``Dict`` of those groups. Actions are a
    float32 ``Box`` bounded by the env's action clip. ``reset(seed=s)`` re-seeds the env's torch
    generator, which drives every random draw of the env (spawn states, commands, counters).
    ``reset(options={"warmup_policy": f})`` forwards a warm-up policy to the env's reset
    schedule; ``f`` maps a numpy observation (as this adapter returns it) to numpy actions.

    A per-env ``diverged`` flag is not reported: the env gives only a count per step, kept in
    ``self.env.diverged_count``; diverged envs show up as terminated.
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, env: LocomotionEnv, obs_group: str | Sequence[str] = "policy"):
        self.env = env
        self.num_envs = env.num_envs
        if not env.obs:  # its observation sizes are known only once the env has observed
            env.reset()  # (an env that warms up with a policy must be reset by the caller)
        sizes = env.observation_sizes
        self._single_group = isinstance(obs_group, str)
        self._groups = [obs_group] if isinstance(obs_group, str) else list(obs_group)
        unknown = sorted(set(self._groups) - set(sizes))
        if unknown or not self._groups:
            raise ValueError(f"obs_group must name one or more of {sorted(sizes)}, "
                             f"got {obs_group!r}")
        boxes = {g: spaces.Box(-np.inf, np.inf, (sizes[g],), np.float32) for g in self._groups}
        self.single_observation_space = (boxes[self._groups[0]] if self._single_group
                                         else spaces.Dict(boxes))
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        clip = env.action_clip
        self.single_action_space = spaces.Box(-clip, clip, (env.num_actions,), np.float32)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[NumpyObs, dict[str, Any]]:
        """Reset every sub-env (all at once: the env has no per-env reset from outside)."""
        super().reset(seed=seed)
        if seed is not None:
            self.env.gen.manual_seed(int(seed))
        options = dict(options or {})
        warmup = options.pop("warmup_policy", None)
        if options:
            raise ValueError(f"unknown reset options {sorted(options)}; valid: ['warmup_policy']")
        obs = self.env.reset(self._torch_policy(warmup) if warmup is not None else None)
        return self._to_numpy(obs), {}

    def step(self, actions: np.ndarray) -> tuple[NumpyObs, np.ndarray, np.ndarray, np.ndarray,
                                                 dict[str, Any]]:
        """Step every sub-env; finished ones are reset in the same call (see module docstring)."""
        act = torch.as_tensor(np.asarray(actions, dtype=np.float32), device=self.env.device)
        obs, reward, terminated, truncated, info = self.env.step(act)
        terminated, truncated = terminated.cpu().numpy(), truncated.cpu().numpy()
        infos = self._final_infos(terminated | truncated, info) if "final_obs" in info else {}
        rewards = reward.cpu().numpy().astype(np.float64)  # gymnasium's vector envs use float64
        return self._to_numpy(obs), rewards, terminated, truncated, infos

    def close_extras(self, **kwargs: Any) -> None:
        self.env.close()

    # ------------------------------------------------------------------ internals
    def _to_numpy(self, obs: Obs) -> NumpyObs:
        """Fresh float32 arrays (never views of env buffers, which the env may reuse)."""
        arrays = {g: obs[g].detach().cpu().numpy().astype(np.float32, copy=True)
                  for g in self._groups}
        return arrays[self._groups[0]] if self._single_group else arrays

    def _torch_policy(self, policy: Callable[[NumpyObs], np.ndarray]
                      ) -> Callable[[Obs], torch.Tensor]:
        """Let a numpy policy act as the env's warm-up policy."""
        def act(obs: Obs) -> torch.Tensor:
            return torch.as_tensor(np.asarray(policy(self._to_numpy(obs)), dtype=np.float32))
        return act

    def _final_infos(self, done: np.ndarray, info: dict) -> dict[str, Any]:
        """Gymnasium's same-step layout of the final observations and episode statistics."""
        final = self._to_numpy(info["final_obs"])
        final_obs = np.full(self.num_envs, None, dtype=object)
        ids = np.flatnonzero(done)  # the env lists episode statistics in this (ascending) order
        for i in ids:
            final_obs[i] = final[i] if self._single_group else {g: v[i] for g, v in final.items()}
        final_info: dict[str, np.ndarray] = {}
        for key, values in info["episode"].items():
            column = np.zeros(self.num_envs, dtype=np.float32)
            column[ids] = values.detach().cpu().numpy()
            final_info[key], final_info[f"_{key}"] = column, done.copy()
        return {"final_obs": final_obs, "_final_obs": done.copy(),
                "final_info": final_info, "_final_info": done.copy()}
