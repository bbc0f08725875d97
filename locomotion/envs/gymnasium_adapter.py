"""Gymnasium 1.x ``VectorEnv`` view of a ``LocomotionEnv``, numpy in and out.

Lets gymnasium-based trainers, wrappers and tools drive the batched env unchanged. Both of
gymnasium's autoreset modes are offered:

- ``NEXT_STEP`` (the default, gymnasium's own): the step that ends an episode returns its
  last observation; the next ``step`` restarts that sub-env, ignores its action and returns
  its first observation with reward 0 and no done flag. Wrappers that transform
  observations (``NormalizeObservation``, ``FlattenObservation``, ...) require this mode.
- ``SAME_STEP``: the env restarts finished sub-envs inside ``step`` and returns their first
  observations at once; ``infos["final_obs"]`` is an object array holding the last
  observation of every sub-env that ended this step (``None`` elsewhere), and
  ``infos["final_info"]`` that episode's statistics, with ``infos["_final_obs"]`` /
  ``infos["_final_info"]`` (and a ``_<key>`` per statistic) as the masks of the sub-envs
  concerned.

In both modes the statistics of an ended episode come with ``partial`` (1: it began with an
advanced time-out counter: before training, in the reset schedule's warm-up or with a
randomized counter, so its return and length cover only part of it, or under
``phase_locked`` after a fall, so it had less than the whole horizon). A next-step restart
takes the counter its dropped one-step episode began with, so the episode after a time-out
stays whole.
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
    float32 ``Box`` bounded by ``env.action_bounds`` (the joint ranges, for position
    actuators), so ``action_space.sample()`` and action rescaling stay within what the robot
    can do. ``reset(seed=s)`` re-seeds the env's torch generator, which drives every random
    draw of the env (spawn states, commands, counters). The reset schedule's warm-up runs on
    the first reset only, or with ``reset(options={"warm_up": True})``;
    ``reset(options={"warmup_policy": f})`` runs it with that policy, ``f`` mapping a numpy
    observation (as this adapter returns it) to numpy actions.

    A per-env ``diverged`` flag is not reported: the env gives only a count per step, kept in
    ``self.env.diverged_count``; diverged envs show up as terminated.
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, env: LocomotionEnv, obs_group: str | Sequence[str] = "policy",
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP):
        self.env = env
        self.num_envs = env.num_envs
        modes = (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP)
        mode = AutoresetMode(autoreset_mode)
        if mode not in modes:
            raise ValueError(f"autoreset_mode {mode.value!r} is not offered; valid: "
                             f"{[m.value for m in modes]}")
        self.metadata = {**self.metadata, "autoreset_mode": mode}
        self._restart = np.zeros(self.num_envs, dtype=bool)  # NEXT_STEP: restart these next
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
        low, high = env.action_bounds.cpu().numpy().astype(np.float32).T
        self.single_action_space = spaces.Box(low, high, (env.num_actions,), np.float32)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[NumpyObs, dict[str, Any]]:
        """Reset every sub-env (all at once: the env has no per-env reset from outside)."""
        super().reset(seed=seed)
        if seed is not None:
            self.env.gen.manual_seed(int(seed))
        options = dict(options or {})
        warmup = options.pop("warmup_policy", None)
        warm_up = options.pop("warm_up", None if warmup is None else True)  # a policy: warm up
        if options:
            raise ValueError(f"unknown reset options {sorted(options)}; valid: "
                             "['warm_up', 'warmup_policy']")
        obs = self.env.reset(self._torch_policy(warmup) if warmup is not None else None,
                             warm_up=warm_up)
        self._restart[:] = False
        return self._to_numpy(obs), {}

    def step(self, actions: np.ndarray) -> tuple[NumpyObs, np.ndarray, np.ndarray, np.ndarray,
                                                 dict[str, Any]]:
        """Step every sub-env; finished ones are reset in the same call (see module docstring)."""
        act = torch.as_tensor(np.asarray(actions, dtype=np.float32), device=self.env.device)
        obs, reward, terminated, truncated, info = self.env.step(act)
        terminated, truncated = terminated.cpu().numpy(), truncated.cpu().numpy()
        rewards = reward.cpu().numpy().astype(np.float64)  # gymnasium's vector envs use float64
        if self.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP:
            infos = self._final_infos(terminated | truncated, info) if "final_obs" in info \
                else {}
            return self._to_numpy(obs), rewards, terminated, truncated, infos
        # NEXT_STEP: sub-envs that ended last step start over now; their action was ignored
        # (what it did to the env's own fresh start is undone by a new respawn).
        restart, ended = self._restart.copy(), terminated | truncated
        if restart.any():
            obs = self.env.restart(torch.as_tensor(np.flatnonzero(restart),
                                                   device=self.env.device))
            rewards[restart], terminated[restart], truncated[restart] = 0.0, False, False
        done = terminated | truncated
        infos = {}
        if done.any():  # the ended episodes show their last observation and statistics
            final = {k: v.clone() for k, v in obs.items()}
            ids = torch.as_tensor(np.flatnonzero(done), device=self.env.device)
            for k, v in info["final_obs"].items():
                final[k][ids] = v[ids]
            obs = final
            rows = torch.as_tensor(~restart[np.flatnonzero(ended)])  # the env's episode rows
            infos = self._episode_infos(done, {k: v[rows] for k, v in info["episode"].items()})
        self._restart = done
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
        for i in np.flatnonzero(done):
            final_obs[i] = final[i] if self._single_group else {g: v[i] for g, v in final.items()}
        return {"final_obs": final_obs, "_final_obs": done.copy(),
                "final_info": self._episode_infos(done, info["episode"]),
                "_final_info": done.copy()}

    def _episode_infos(self, done: np.ndarray, episode: dict) -> dict[str, np.ndarray]:
        """The ended episodes' statistics, one column per key with its ``_<key>`` mask."""
        ids = np.flatnonzero(done)  # episode rows come in this (ascending) order
        out: dict[str, np.ndarray] = {}
        for key, values in episode.items():
            column = np.zeros(self.num_envs, dtype=np.float32)
            column[ids] = values.detach().cpu().numpy()
            out[key], out[f"_{key}"] = column, done.copy()
        return out
