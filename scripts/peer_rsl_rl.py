"""Peer check: train with rsl-rl-lib's OnPolicyRunner on this project's env, same settings.

The env, reset schedule, network sizes and PPO hyperparameters come from the same config
as ``scripts/train.py``; rsl_rl drives the env through ``RslRlVecEnv``. Each iteration's
mean episode return, env steps and wall-clock go to ``progress.jsonl`` in the run folder,
in the format ``scripts/plot_training.py`` reads. Needs ``pip install -e ".[peer]"``.

    python scripts/peer_rsl_rl.py max_wall_s=900
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from locomotion.envs.rsl_rl_adapter import RslRlVecEnv
from locomotion.tasks import make_env


class EpisodeTap(RslRlVecEnv):
    """The adapter, keeping the returns of episodes that end so they can be logged."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.returns: list[torch.Tensor] = []

    def step(self, actions):
        obs, rewards, dones, extras = super().step(actions)
        if "episode" in extras:
            self.returns.append(extras["episode"]["return"].clone())
        return obs, rewards, dones, extras


def train_cfg(cfg: DictConfig) -> dict:
    """rsl_rl 5.5 runner config equivalent to this project's ``algo`` config."""
    pol, ppo = cfg.algo.policy, cfg.algo.ppo

    def net(dims) -> dict:
        return {"class_name": "MLPModel", "hidden_dims": list(dims),
                "activation": pol.activation, "obs_normalization": bool(pol.normalize_obs)}

    return {
        "num_steps_per_env": int(cfg.algo.num_steps),
        "save_interval": 10**9,
        "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
        "algorithm": {"class_name": "PPO", **{k: ppo[k] for k in (
            "clip_param", "num_learning_epochs", "num_mini_batches", "value_loss_coef",
            "use_clipped_value_loss", "entropy_coef", "gamma", "lam", "learning_rate",
            "schedule", "desired_kl", "max_grad_norm")}},
        "actor": {**net(pol.actor_hidden_dims), "distribution_cfg": {
            "class_name": "GaussianDistribution", "init_std": float(pol.init_noise_std)}},
        "critic": net(pol.critic_hidden_dims),
    }


@hydra.main(config_path="../configs", config_name="peer_rsl_rl", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from rsl_rl.runners import OnPolicyRunner

    if cfg.torch_threads:
        torch.set_num_threads(int(cfg.torch_threads))
    torch.manual_seed(int(cfg.seed))
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    env = EpisodeTap(make_env(cfg))  # resets through the configured schedule
    runner = OnPolicyRunner(env, train_cfg(cfg), log_dir=None, device=cfg.device)
    start = time.perf_counter()  # like Runner.train_wall_s: training only, after the reset
    steps_per_it = env.num_envs * int(cfg.algo.num_steps)
    with (run_dir / "progress.jsonl").open("w") as log:
        it = 0
        while time.perf_counter() - start < cfg.max_wall_s:
            runner.learn(num_learning_iterations=1)
            it += 1
            row = {"iteration": it, "env_steps": it * steps_per_it,
                   "Perf/wall_s": time.perf_counter() - start}
            if env.returns:
                row["Episode/return"] = float(torch.cat(env.returns).mean())
                env.returns.clear()
            log.write(json.dumps(row) + "\n")
            log.flush()
    env.close()
    print(json.dumps({"iterations": it, "env_steps": it * steps_per_it,
                      "run_dir": str(run_dir)}))


if __name__ == "__main__":
    main()
