"""rsl_rl (rsl-rl-lib 5.5.1) ``VecEnv`` view of a ``LocomotionEnv``, for comparison runs.

rsl_rl is a peer, not a dependency: the adapter duck-types ``rsl_rl.env.VecEnv`` instead of
subclassing it. rsl_rl never checks ``isinstance(env, VecEnv)`` (it only reads the attributes
and calls the methods), so subclassing would buy nothing but an import of rsl_rl, and a base
class chosen by a try/except import would make the class's ancestry depend on what is
installed. ``tests/test_adapters.py`` checks the adapter against the ABC's abstract methods and
annotated attributes. The observations are a ``tensordict.TensorDict``, the type rsl_rl's
runner, storage and models index by group; tensordict comes with rsl-rl-lib and is imported
only when an adapter is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from omegaconf import DictConfig

from locomotion.envs.vec_env import LocomotionEnv, Obs

if TYPE_CHECKING:
    from tensordict import TensorDict


class RslRlVecEnv:
    """A ``LocomotionEnv`` behind rsl_rl 5.5.1's ``VecEnv`` interface.

    ``step(actions) -> (obs, rewards, dones, extras)`` with ``obs`` a ``TensorDict`` of the
    env's groups (``"policy"``, ``"critic"``), ``dones = terminated | truncated`` (bool) and
    ``extras["time_outs"] = truncated``. When episodes end, ``extras["episode"]`` holds the
    statistics of those begun in training (one value per episode, which rsl_rl's logger
    averages and writes as ``Episode/<key>``; partial episodes, begun in the reset
    schedule's warm-up or under ``phase_locked`` after a fall, are left out) and
    ``extras["final_obs"]`` the pre-reset observations of all envs (meaningful where
    ``dones``), which rsl_rl ignores.

    Time-out bootstrapping differs from ours. rsl_rl 5.5.1's ``PPO.process_env_step`` adds
    ``gamma * V(o_t)`` to the reward of a timed-out step, where ``o_t`` is the observation the
    action was taken *from* (the value computed in ``act()``): neither the final observation
    (absent from its interface) nor the post-reset one (the done flag stops GAE from reading
    it). Our runner adds ``gamma * V(final_obs)``, the value of the state the episode actually
    ended in, so the two learners' targets differ by one step at every time-out.

    Building the adapter resets the env, since rsl_rl's runner never calls ``reset()``; this
    applies the env's reset schedule, with ``warmup_policy`` for schedules that warm up with
    a policy. Restore a saved env state, if any, after building the adapter.

    The env is stepped with inference mode switched off: rsl_rl collects rollouts under
    ``torch.inference_mode()``, and the env keeps tensors made during ``step`` (last actions,
    episode sums), which would otherwise become inference tensors that the env can no longer
    update in place outside inference mode (e.g. when evaluating after training).
    """

    def __init__(self, env: LocomotionEnv,
                 warmup_policy: Callable[[Obs], torch.Tensor] | None = None):
        from tensordict import TensorDict  # rsl_rl's observation type; see module docstring

        self._tensordict = TensorDict
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = env.num_actions
        self.max_episode_length = env.max_episode_length
        self.device = env.device
        self.cfg: DictConfig = env.cfg
        env.reset(warmup_policy)

    @property
    def episode_length_buf(self) -> torch.Tensor:
        """The env's step counters [N]; rsl_rl may overwrite them to randomize episode starts."""
        return self.env.episode_length

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        self.env.episode_length.copy_(value)

    def get_observations(self) -> TensorDict:
        return self._wrap(self.env.obs)

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor,
                                                   dict[str, Any]]:
        with torch.inference_mode(False):
            obs, reward, terminated, truncated, info = self.env.step(actions)
        extras: dict[str, Any] = {"time_outs": truncated}
        if "final_obs" in info:
            extras["final_obs"] = self._wrap(info["final_obs"])
            # whole episodes only: a partial one covers part of itself or of the horizon
            whole = info["episode"]["partial"] == 0
            extras["episode"] = {k: v[whole] for k, v in info["episode"].items()
                                 if k != "partial"}
        return self._wrap(obs), reward, terminated | truncated, extras

    def close(self) -> None:
        self.env.close()

    def _wrap(self, obs: Obs) -> TensorDict:
        return self._tensordict(obs, batch_size=[self.num_envs], device=self.device)
