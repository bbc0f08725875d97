"""The update timer: every timed update starts from the same weights, optimizer state,
learning rate and shuffling seed, so the repeats time one and the same computation."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from locomotion.rl import PPO, ActorCritic, PPOConfig, RolloutStorage
from research.update_cost import profile_update, time_updates


def filled_runner() -> SimpleNamespace:
    torch.manual_seed(0)
    policy = ActorCritic(3, 2, actor_hidden_dims=(16,), critic_hidden_dims=(16,))
    ppo = PPO(policy, PPOConfig(num_learning_epochs=2, num_mini_batches=2),
              generator=torch.Generator().manual_seed(0))
    storage = RolloutStorage(8, 4, 3, 3, 2)
    for _ in range(8):
        obs = torch.randn(4, 3)
        step = policy.act(obs)
        storage.add(obs=obs, critic_obs=obs, actions=step.actions, rewards=torch.randn(4),
                    dones=torch.zeros(4, dtype=torch.bool), values=step.values,
                    log_probs=step.log_prob, action_mean=step.action_mean,
                    action_std=step.action_std)
    ppo.compute_returns(storage, torch.randn(4, 3))
    return SimpleNamespace(ppo=ppo, storage=storage)


def test_each_timed_update_starts_where_the_first_did():
    once, thrice = filled_runner(), filled_runner()
    assert len(time_updates(once, 1)) == 1
    seconds = time_updates(thrice, 3)
    assert len(seconds) == 3 and all(s > 0 for s in seconds)
    for a, b in zip(once.ppo.policy.parameters(), thrice.ppo.policy.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert once.ppo.learning_rate == thrice.ppo.learning_rate
    # the check can fail: three updates in a row end elsewhere than one
    again = filled_runner()
    for _ in range(3):
        again.ppo.update(again.storage)
    assert not all(torch.equal(a, b) for a, b in zip(again.ppo.policy.parameters(),
                                                      once.ppo.policy.parameters(), strict=True))


def test_the_profile_names_the_operators_and_the_matrix_products_share():
    table, share = profile_update(filled_runner())
    assert "aten::addmm" in table  # the networks' layers
    assert 0 < share < 1  # the update also adds, exponentiates and steps the optimizer
