"""Gaussian MLP actor with an (optionally asymmetric) MLP critic."""

import copy
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.distributions import Normal

from locomotion.config_checks import ConfigError
from locomotion.rl.normalizer import EmpiricalNormalizer

# in place wherever torch can (``make_activation`` says why)
ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "elu": partial(nn.ELU, inplace=True),
    "relu": partial(nn.ReLU, inplace=True),
    "selu": partial(nn.SELU, inplace=True),
    "silu": partial(nn.SiLU, inplace=True),
    "tanh": nn.Tanh,
}


def make_activation(name: str) -> nn.Module:
    """Build an activation module from its config name, rejecting unknown names early.

    In ``make_mlp`` each activation follows a linear layer whose output nothing else reads,
    so it runs in place where it can. In place, ELU's backward pass reads its output
    instead of evaluating ``exp`` again and no [batch, width] buffer is allocated per layer:
    one PPO update took about 0.9 times as long on 2 CPU cores (docs/training.md)."""
    try:
        return ACTIVATIONS[name.lower()]()
    except KeyError:
        valid = ", ".join(sorted(ACTIVATIONS))
        raise ConfigError(f"unknown activation {name!r}; valid: {valid}") from None


def make_mlp(
    in_dim: int,
    hidden_dims: Sequence[int],
    out_dim: int,
    activation: str,
    out_gain: float,
) -> nn.Sequential:
    """Build an orthogonally initialized MLP whose output layer is scaled by ``out_gain``."""
    dims = [in_dim, *hidden_dims]
    layers: list[nn.Module] = []
    for d_in, d_out in itertools.pairwise(dims):
        linear = nn.Linear(d_in, d_out)
        nn.init.orthogonal_(linear.weight, gain=math.sqrt(2.0))
        nn.init.zeros_(linear.bias)
        layers += [linear, make_activation(activation)]
    head = nn.Linear(dims[-1], out_dim)
    nn.init.orthogonal_(head.weight, gain=out_gain)
    nn.init.zeros_(head.bias)
    layers.append(head)
    return nn.Sequential(*layers)


def run_mlp(mlp: nn.Sequential, x: Tensor) -> Tensor:
    """``mlp(x)``, its output layer in float32 whatever precision autocast runs the hidden
    layers in: rounded to bfloat16, a value keeps 3 significant digits, coarser than the
    differences between values that GAE's advantages are made of."""
    if not torch.is_autocast_enabled(x.device.type):
        return mlp(x)
    hidden = mlp[:-1](x)
    with torch.autocast(x.device.type, enabled=False):
        return mlp[-1](hidden.float())


class PolicyStep(NamedTuple):
    """Everything a rollout step needs to store from the policy."""

    actions: Tensor
    log_prob: Tensor
    values: Tensor
    action_mean: Tensor
    action_std: Tensor


class PolicyModule(nn.Module):
    """Maps raw observations to mean actions, normalizer included, for TorchScript/ONNX export."""

    def __init__(self, normalizer: nn.Module, actor: nn.Module) -> None:
        """Wrap an observation normalizer and an actor MLP."""
        super().__init__()
        self.normalizer = normalizer
        self.actor = actor

    def forward(self, obs: Tensor) -> Tensor:
        """Return the deterministic action for raw observations."""
        return self.actor(self.normalizer(obs))


class ActorCritic(nn.Module):
    """Gaussian policy with state-independent learnable log-std and a separate value MLP.

    The critic may see a different (privileged) observation; when ``num_critic_obs`` is
    omitted it uses the actor observation and ``critic_obs`` arguments may be left out.
    """

    def __init__(
        self,
        num_obs: int,
        num_actions: int,
        num_critic_obs: int | None = None,
        *,
        actor_hidden_dims: Sequence[int] = (512, 256, 128),
        critic_hidden_dims: Sequence[int] = (512, 256, 128),
        activation: str = "elu",
        init_noise_std: float = 1.0,
        normalize_obs: bool = True,
    ) -> None:
        """Build actor, critic, log-std and (if ``normalize_obs``) the two input normalizers."""
        super().__init__()
        if init_noise_std <= 0:
            raise ConfigError(f"init_noise_std must be positive, got {init_noise_std}")
        num_critic_obs = num_obs if num_critic_obs is None else num_critic_obs
        self.normalize_obs = normalize_obs
        self.actor = make_mlp(num_obs, actor_hidden_dims, num_actions, activation, 0.01)
        self.critic = make_mlp(num_critic_obs, critic_hidden_dims, 1, activation, 1.0)
        self.log_std = nn.Parameter(torch.full((num_actions,), math.log(init_noise_std)))
        self.obs_normalizer: nn.Module = (
            EmpiricalNormalizer(num_obs) if normalize_obs else nn.Identity()
        )
        self.critic_obs_normalizer: nn.Module = (
            EmpiricalNormalizer(num_critic_obs) if normalize_obs else nn.Identity()
        )

    @property
    def action_std(self) -> Tensor:
        """Current per-dimension exploration std."""
        return self.log_std.exp()

    def distribution(self, obs: Tensor) -> Normal:
        """Return the factorized Gaussian for raw observations.

        Arguments are not validated so that non-finite inputs surface as a non-finite loss,
        which PPO skips, instead of raising mid-update. The mean is float32 even where the
        hidden layers run in bfloat16 (PPO's autocast).
        """
        mean = run_mlp(self.actor, self.obs_normalizer(obs))
        return Normal(mean, self.action_std.expand_as(mean), validate_args=False)

    def value(self, critic_obs: Tensor) -> Tensor:
        """Return state values with shape ``[batch]``, float32 as ``distribution``'s mean."""
        return run_mlp(self.critic, self.critic_obs_normalizer(critic_obs)).squeeze(-1)

    @torch.no_grad()
    def act(self, obs: Tensor, critic_obs: Tensor | None = None) -> PolicyStep:
        """Sample actions and return them with log-probs, values and distribution parameters."""
        dist = self.distribution(obs)
        # rsample draws the same numbers as sample, which checks std >= 0 on the host: one
        # GPU synchronization per env step
        actions = dist.rsample()
        return PolicyStep(
            actions=actions,
            log_prob=dist.log_prob(actions).sum(-1),
            values=self.value(obs if critic_obs is None else critic_obs),
            action_mean=dist.mean,
            action_std=dist.stddev,
        )

    @torch.no_grad()
    def act_inference(self, obs: Tensor) -> Tensor:
        """Return the deterministic (mean) action."""
        return self.actor(self.obs_normalizer(obs))

    def update_normalizers(self, obs: Tensor, critic_obs: Tensor | None = None) -> None:
        """Accumulate observation statistics; a no-op when normalization is disabled."""
        if self.normalize_obs:
            self.obs_normalizer.update(obs)
            self.critic_obs_normalizer.update(obs if critic_obs is None else critic_obs)

    def inference_policy(self) -> PolicyModule:
        """Return a detached eval-mode copy of normalizer + actor for deployment export."""
        module = PolicyModule(copy.deepcopy(self.obs_normalizer), copy.deepcopy(self.actor))
        return module.eval().requires_grad_(False)


def build_policy(cfg: Mapping, sizes: dict[str, int], num_actions: int) -> ActorCritic:
    """The actor-critic described by ``algo.policy`` for these observation sizes."""
    return ActorCritic(
        sizes["policy"], num_actions, sizes["critic"],
        actor_hidden_dims=list(cfg["actor_hidden_dims"]),
        critic_hidden_dims=list(cfg["critic_hidden_dims"]),
        activation=cfg["activation"],
        init_noise_std=float(cfg["init_noise_std"]),
        normalize_obs=bool(cfg["normalize_obs"]),
    )
