"""Proximal Policy Optimization with clipped objectives and KL-adaptive learning rate."""

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from locomotion.config_checks import ConfigError
from locomotion.rl.actor_critic import ActorCritic
from locomotion.rl.storage import MiniBatch, RolloutStorage

SCHEDULES = ("adaptive", "fixed")
ADVANTAGE_NORMALIZATIONS = ("batch", "mini_batch", "none")
PRECISIONS = ("float32", "bfloat16")
LR_FACTOR = 1.5


@dataclass
class PPOConfig:
    """PPO hyperparameters; defaults follow common legged-robot practice."""

    clip_param: float = 0.2
    num_learning_epochs: int = 5
    num_mini_batches: int = 4
    value_loss_coef: float = 1.0
    use_clipped_value_loss: bool = True
    entropy_coef: float = 0.01
    gamma: float = 0.99
    lam: float = 0.95
    learning_rate: float = 1e-3
    schedule: str = "adaptive"
    desired_kl: float = 0.01
    min_learning_rate: float = 1e-5
    max_learning_rate: float = 1e-2
    max_grad_norm: float = 1.0
    advantage_normalization: str = "batch"
    precision: str = "float32"
    mirror_critic: bool = True  # with a mirror: the critic learns the mirrored samples too

    def __post_init__(self) -> None:
        """Reject unknown option names at construction rather than mid-training."""
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"unknown schedule {self.schedule!r}; valid: {', '.join(SCHEDULES)}")
        if self.advantage_normalization not in ADVANTAGE_NORMALIZATIONS:
            raise ConfigError(
                f"unknown advantage_normalization {self.advantage_normalization!r}; "
                f"valid: {', '.join(ADVANTAGE_NORMALIZATIONS)}"
            )
        if self.precision not in PRECISIONS:
            raise ConfigError(f"unknown precision {self.precision!r}; "
                              f"valid: {', '.join(PRECISIONS)}")


def native_bfloat16(device_type: str) -> bool:
    """Whether ``device_type`` multiplies bfloat16 matrices in hardware. A CPU needs
    AVX512-BF16 or AMX: without them torch emulates bfloat16, and the update ran 11 times
    slower than in float32 on an AVX2 CPU (``python -m research.update_cost
    algo.ppo.precision=bfloat16``). Where torch cannot tell, the answer is yes."""
    if device_type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    if device_type != "cpu":
        return True
    probes = [getattr(torch.cpu, name, None)
              for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(probe is None or probe() for probe in probes)


def gaussian_kl(mean_old: Tensor, std_old: Tensor, mean_new: Tensor, std_new: Tensor) -> Tensor:
    """Return KL(old || new) between diagonal Gaussians, summed over action dims."""
    kl = (
        torch.log(std_new / std_old)
        + (std_old**2 + (mean_old - mean_new) ** 2) / (2.0 * std_new**2)
        - 0.5
    )
    return kl.sum(-1)


class Mirror(Protocol):
    """A left-right mirror of observation groups and actions (``locomotion.tasks.symmetry``)."""

    def observations(self, group: str, x: Tensor) -> Tensor: ...
    def actions(self, x: Tensor) -> Tensor: ...


def with_mirror(batch: MiniBatch, mirror: Mirror, critic: bool = True) -> MiniBatch:
    """The mini-batch followed by its mirror image (symmetry augmentation): mirrored
    observations, actions and rollout-policy means and stds, the same advantages and
    log-probabilities (a Gaussian's density is unchanged by the mirror). With ``critic``
    the critic's observations, values and returns are doubled the same way; without, the
    critic keeps the rollout's samples alone (its rows are the first ``len(batch.obs)``)."""
    def both(x: Tensor, mirrored: Tensor | None = None) -> Tensor:
        return torch.cat((x, x if mirrored is None else mirrored))

    critic_obs, values, returns = batch.critic_obs, batch.values, batch.returns
    if critic:
        critic_obs = both(critic_obs, mirror.observations("critic", critic_obs))
        values, returns = both(values), both(returns)
    return MiniBatch(
        obs=both(batch.obs, mirror.observations("policy", batch.obs)),
        critic_obs=critic_obs, actions=both(batch.actions, mirror.actions(batch.actions)),
        values=values, returns=returns,
        advantages=both(batch.advantages), log_probs=both(batch.log_probs),
        action_mean=both(batch.action_mean, mirror.actions(batch.action_mean)),
        action_std=both(batch.action_std, mirror.actions(batch.action_std).abs()))


class PPO:
    """Updates an ``ActorCritic`` from a filled ``RolloutStorage``.

    ``grad_reduce`` receives the list of parameter gradients before clipping and must reduce
    them in place (e.g. all-reduce mean); ``kl_reduce`` does the same for the 0-dim KL tensor
    so every rank adapts its learning rate identically. With ``kl_with_grads`` the KL
    instead travels with the gradients: ``grad_reduce`` receives them followed by a
    1-element KL tensor, so one collective per step serves both. Steps whose loss or
    (reduced) gradient norm is non-finite are skipped and counted. With a ``mirror`` every
    mini-batch is learned together with its left-right mirror image (twice the samples per
    step, none of them simulated; the critic's only with ``mirror_critic``). With
    ``precision`` bfloat16 the policy's hidden layers run under autocast (``autocast``: the
    update's forward and backward passes, and the rollout's, so the update's first ratios
    are the rollout's); output layers, weights, optimizer, actions and losses stay float32.
    """

    def __init__(
        self,
        policy: ActorCritic,
        config: PPOConfig | None = None,
        *,
        grad_reduce: Callable[[list[Tensor]], None] | None = None,
        kl_reduce: Callable[[Tensor], None] | None = None,
        kl_with_grads: bool = False,
        generator: torch.Generator | None = None,
        mirror: Mirror | None = None,
    ) -> None:
        """Create the Adam optimizer; ``generator`` (CPU) seeds mini-batch shuffling."""
        if kl_with_grads and (grad_reduce is None or kl_reduce is not None):
            raise ValueError("kl_with_grads reduces the KL through grad_reduce: "
                             "give grad_reduce and no kl_reduce")
        self.policy = policy
        self.config = config or PPOConfig()
        self.grad_reduce = grad_reduce
        self.kl_reduce = kl_reduce
        self.kl_with_grads = kl_with_grads
        self.generator = generator
        self.mirror = mirror
        self.device_type = next(policy.parameters()).device.type
        self.learning_rate = self.config.learning_rate
        # one fused kernel per step instead of a dozen ops per parameter tensor (CPU and GPU)
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=self.learning_rate,
                                          fused=True)
        if self.config.precision == "bfloat16" and not native_bfloat16(self.device_type):
            warnings.warn(
                f"algo.ppo.precision=bfloat16 on a {self.device_type} without bfloat16 matrix "
                "instructions (a CPU needs AVX512-BF16 or AMX): torch emulates them, and "
                "training runs several times slower than in float32. Use "
                "algo.ppo.precision=float32 on this machine.", stacklevel=2)

    def autocast(self) -> torch.autocast:
        """The precision the policy's hidden layers train in (``precision``), for the
        rollout and the update alike."""
        return torch.autocast(self.device_type, dtype=torch.bfloat16,
                              enabled=self.config.precision == "bfloat16")

    @torch.no_grad()
    def compute_returns(self, storage: RolloutStorage, last_critic_obs: Tensor) -> None:
        """Bootstrap from the critic on the post-rollout observation and fill GAE targets."""
        cfg = self.config
        with self.autocast():
            last_values = self.policy.value(last_critic_obs)
        storage.compute_returns(
            last_values,
            cfg.gamma,
            cfg.lam,
            normalize_advantages=cfg.advantage_normalization == "batch",
        )

    def _set_learning_rate(self, lr: float) -> None:
        """Store ``lr`` and push it into every optimizer parameter group."""
        self.learning_rate = lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def _adapt_learning_rate(self, kl: float) -> None:
        """Shrink the step size when the policy moved too far, grow it when it barely moved."""
        cfg = self.config
        if kl > 2.0 * cfg.desired_kl:
            self._set_learning_rate(max(self.learning_rate / LR_FACTOR, cfg.min_learning_rate))
        elif kl < 0.5 * cfg.desired_kl:
            self._set_learning_rate(min(self.learning_rate * LR_FACTOR, cfg.max_learning_rate))

    def update(self, storage: RolloutStorage) -> dict[str, float]:
        """Run the PPO epochs over ``storage`` (returns already computed); return mean statistics.

        The KL of each mini-batch compares the rollout policy with the current parameters
        just before that mini-batch's step, and drives the adaptive learning rate.
        Skipped (non-finite) steps neither move the weights nor adapt the learning rate.
        Statistics are averaged over applied steps (NaN if none were applied).
        """
        cfg = self.config
        params = [p for p in self.policy.parameters() if p.requires_grad]
        totals = dict.fromkeys(
            ("surrogate_loss", "value_loss", "entropy", "kl", "clip_fraction"), 0.0
        )
        applied = skipped = 0
        batches = storage.mini_batches(
            cfg.num_mini_batches,
            cfg.num_learning_epochs,
            self.generator,
            normalize_advantages=cfg.advantage_normalization == "mini_batch",
        )
        for batch in batches:
            # the step size is the KL on the states the rollout policy acted in: a mirrored
            # sample's "rollout policy" is the mirror of it, which differs from the policy at
            # the mirrored state by the policy's asymmetry, not by this update's step
            rollout = len(batch.obs)
            if self.mirror is not None:
                batch = with_mirror(batch, self.mirror, cfg.mirror_critic)
            with self.autocast():
                dist = self.policy.distribution(batch.obs)
                values = self.policy.value(batch.critic_obs)
            log_prob = dist.log_prob(batch.actions).sum(-1)
            entropy = dist.entropy().sum(-1).mean()

            with torch.no_grad():
                kl = gaussian_kl(batch.action_mean[:rollout], batch.action_std[:rollout],
                                 dist.mean[:rollout], dist.stddev[:rollout]).mean()
                if self.kl_reduce is not None:
                    self.kl_reduce(kl)

            ratio = torch.exp(log_prob - batch.log_probs)
            clipped_ratio = ratio.clamp(1.0 - cfg.clip_param, 1.0 + cfg.clip_param)
            surrogate_loss = torch.max(
                -batch.advantages * ratio, -batch.advantages * clipped_ratio
            ).mean()
            value_error = (values - batch.returns) ** 2
            if cfg.use_clipped_value_loss:
                clipped_values = batch.values + (values - batch.values).clamp(
                    -cfg.clip_param, cfg.clip_param
                )
                value_error = torch.max(value_error, (clipped_values - batch.returns) ** 2)
            value_loss = value_error.mean()
            loss = surrogate_loss + cfg.value_loss_coef * value_loss - cfg.entropy_coef * entropy

            self.optimizer.zero_grad()
            loss.backward()
            if self.grad_reduce is not None:
                grads = [p.grad for p in params if p.grad is not None]
                if self.kl_with_grads:
                    kl = kl.reshape(1)
                    grads.append(kl)
                self.grad_reduce(grads)
            grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            if not bool(torch.isfinite(loss) & torch.isfinite(grad_norm)):
                self.optimizer.zero_grad()
                skipped += 1
                continue

            kl_value = kl.item()
            if cfg.schedule == "adaptive":
                self._adapt_learning_rate(kl_value)
            self.optimizer.step()

            applied += 1
            totals["surrogate_loss"] += surrogate_loss.item()
            totals["value_loss"] += value_loss.item()
            totals["entropy"] += entropy.item()
            totals["kl"] += kl_value
            totals["clip_fraction"] += ((ratio - 1.0).abs() > cfg.clip_param).float().mean().item()

        stats = {k: v / applied if applied else float("nan") for k, v in totals.items()}
        stats["learning_rate"] = self.learning_rate
        stats["action_std"] = self.policy.action_std.mean().item()
        stats["nonfinite_skipped"] = float(skipped)
        return stats

    def state_dict(self) -> dict[str, Any]:
        """Return policy, optimizer and current learning rate for checkpointing."""
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "learning_rate": self.learning_rate,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a checkpoint produced by ``state_dict``."""
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self._set_learning_rate(state["learning_rate"])
