"""On-policy reinforcement learning: PPO, Gaussian actor-critic, rollout storage."""

from locomotion.rl.actor_critic import ActorCritic, PolicyModule, PolicyStep
from locomotion.rl.normalizer import EmpiricalNormalizer
from locomotion.rl.ppo import PPO, PPOConfig
from locomotion.rl.storage import MiniBatch, RolloutStorage, bootstrap_truncated

__all__ = [
    "PPO",
    "ActorCritic",
    "EmpiricalNormalizer",
    "MiniBatch",
    "PPOConfig",
    "PolicyModule",
    "PolicyStep",
    "RolloutStorage",
    "bootstrap_truncated",
]
