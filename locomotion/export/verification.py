"""Numerical checks of an export: the deployed graphs must act like the trained policy.

Random inputs would miss what matters (the normalizer's clipping, realistic magnitudes),
so the graphs are compared on observations recorded by running the policy in its env.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch

from locomotion.envs.vec_env import LocomotionEnv

Predictor = Callable[[np.ndarray], np.ndarray]


@torch.inference_mode()
def record_observations(env: LocomotionEnv, policy: Callable[[torch.Tensor], torch.Tensor],
                        num_steps: int) -> torch.Tensor:
    """Policy observations of a reset and ``num_steps`` policy steps: [(steps + 1) * N, obs]."""
    frames = [env.reset()["policy"].clone()]
    for _ in range(num_steps):
        env.step(policy(frames[-1]))
        frames.append(env.obs["policy"].clone())
    return torch.cat(frames)


@torch.inference_mode()
def max_abs_errors(reference: torch.nn.Module, observations: torch.Tensor,
                   predictors: Mapping[str, Predictor]) -> dict[str, float]:
    """Largest |action - reference action| of each predictor, on the batch and on one row.

    The single row checks that the batch axis really is dynamic.
    """
    obs = observations.numpy()
    expected = reference(observations).numpy()
    errors = {}
    for name, run in predictors.items():
        batch = np.abs(run(obs) - expected).max()
        row = np.abs(run(obs[:1]) - expected[:1]).max()
        errors[name] = float(max(batch, row))
    return errors
