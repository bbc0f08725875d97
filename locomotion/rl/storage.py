"""Fixed-size on-policy rollout buffer with GAE and mini-batch sampling."""

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


def bootstrap_truncated(
    rewards: Tensor, truncated: Tensor, final_values: Tensor, gamma: float
) -> Tensor:
    """Return rewards with ``gamma * V(final_obs)`` added where episodes hit a time-out.

    Pass ``truncated`` only for envs that timed out without terminating, and ``final_values``
    as the critic's value of the observation reached before the automatic reset.
    """
    return rewards + gamma * final_values * truncated.to(rewards.dtype)


def normalize(x: Tensor, eps: float = 1e-8) -> Tensor:
    """Return ``x`` whitened to zero mean, unit std, so policy-gradient scale stays stable."""
    return (x - x.mean()) / (x.std() + eps)


@dataclass
class MiniBatch:
    """A flattened, shuffled slice of the rollout used for one gradient step."""

    obs: Tensor
    critic_obs: Tensor
    actions: Tensor
    values: Tensor
    returns: Tensor
    advantages: Tensor
    log_probs: Tensor
    action_mean: Tensor
    action_std: Tensor


def _shape(dims: int | Sequence[int]) -> tuple[int, ...]:
    """Turn an int or a sequence of ints into a shape tuple."""
    return (dims,) if isinstance(dims, int) else tuple(dims)


class RolloutStorage:
    """Preallocated ``[num_steps, num_envs, ...]`` tensors for one PPO rollout.

    Time-out convention: an env that is truncated (not terminated) at step ``t`` is stored
    with ``done=True`` and a reward already augmented by ``gamma * V(final_obs)``
    (see ``bootstrap_truncated``), so GAE can treat every done as a terminal transition.
    """

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_shape: int | Sequence[int],
        critic_obs_shape: int | Sequence[int],
        action_shape: int | Sequence[int],
        device: torch.device | str = "cpu",
    ) -> None:
        """Allocate all buffers on ``device``."""
        self.num_steps = num_steps
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.step = 0

        # Every field is a column block of one [num_steps, num_envs, width] buffer, so a
        # mini-batch is one row gather of the buffer instead of one gather per field.
        shapes = {"obs": _shape(obs_shape), "critic_obs": _shape(critic_obs_shape),
                  "actions": _shape(action_shape), "action_mean": _shape(action_shape),
                  "action_std": _shape(action_shape)}
        shapes.update(dict.fromkeys(
            ("rewards", "dones", "values", "log_probs", "returns", "advantages"), ()))
        widths = {name: math.prod(shape) for name, shape in shapes.items()}
        self._buffer = torch.zeros(num_steps, num_envs, sum(widths.values()),
                                   device=self.device)
        self._columns: dict[str, tuple[slice, tuple[int, ...]]] = {}
        start = 0
        for name, shape in shapes.items():
            self._columns[name] = (slice(start, start + widths[name]), shape)
            setattr(self, name, self._field(self._buffer, name))
            start += widths[name]

    def _field(self, rows: Tensor, name: str) -> Tensor:
        """The view of field ``name`` in ``rows`` (the buffer or rows gathered from it)."""
        columns, shape = self._columns[name]
        return rows[..., columns].unflatten(-1, shape) if shape else rows[..., columns.start]

    def add(
        self,
        *,
        obs: Tensor,
        critic_obs: Tensor,
        actions: Tensor,
        rewards: Tensor,
        dones: Tensor,
        values: Tensor,
        log_probs: Tensor,
        action_mean: Tensor,
        action_std: Tensor,
    ) -> None:
        """Write one transition for all envs at the current step index and advance it."""
        if self.step >= self.num_steps:
            raise RuntimeError("rollout storage is full; call clear() before adding")
        t = self.step
        self.obs[t] = obs
        self.critic_obs[t] = critic_obs
        self.actions[t] = actions
        self.rewards[t] = rewards
        self.dones[t] = dones.to(self.dones.dtype)
        self.values[t] = values
        self.log_probs[t] = log_probs
        self.action_mean[t] = action_mean
        self.action_std[t] = action_std
        self.step += 1

    def clear(self) -> None:
        """Reset the write index so the next rollout overwrites the buffers."""
        self.step = 0

    @torch.no_grad()
    def compute_returns(
        self,
        last_values: Tensor,
        gamma: float,
        lam: float,
        normalize_advantages: bool = False,
    ) -> None:
        """Fill ``advantages`` with GAE(gamma, lam) and ``returns`` with advantages + values.

        ``last_values`` are the critic values of the observation after the final step.
        With ``normalize_advantages`` the whole batch of advantages is whitened afterwards;
        returns are always computed from the raw advantages.
        """
        next_values = last_values
        advantage = torch.zeros_like(last_values)
        for t in reversed(range(self.num_steps)):
            not_done = 1.0 - self.dones[t]
            delta = self.rewards[t] + gamma * not_done * next_values - self.values[t]
            advantage = delta + gamma * lam * not_done * advantage
            self.advantages[t] = advantage
            next_values = self.values[t]
        self.returns.copy_(self.advantages + self.values)
        if normalize_advantages:
            self.advantages.copy_(normalize(self.advantages))

    def mini_batches(
        self,
        num_mini_batches: int,
        num_epochs: int,
        generator: torch.Generator | None = None,
        normalize_advantages: bool = False,
    ) -> Iterator[MiniBatch]:
        """Yield ``num_epochs * num_mini_batches`` shuffled mini-batches over all transitions.

        ``generator`` must be a CPU generator (or None); with ``normalize_advantages`` each
        mini-batch's advantages are whitened on their own.
        """
        batch_size = self.num_steps * self.num_envs
        flat = self._buffer.flatten(0, 1)
        for _ in range(num_epochs):
            perm = torch.randperm(batch_size, generator=generator).to(self.device)
            for idx in perm.tensor_split(num_mini_batches):
                rows = flat.index_select(0, idx)
                batch = MiniBatch(**{name: self._field(rows, name)
                                     for name in MiniBatch.__dataclass_fields__})
                if normalize_advantages:
                    batch.advantages = normalize(batch.advantages)
                yield batch
