"""The last seconds before the first failure of each condition, kept as states for clips.

Rendering every env of a batch would cost more than the evaluation; instead a ring buffer
holds the last few seconds of every env's joint positions (a few MB), and when an env's first
episode ends in a failure, its condition (if it has no clip yet) copies that env's window.
The states are rendered once the batch is done (``locomotion-evaluate video=true``).
"""

from __future__ import annotations

import torch


class FailureClips:
    """States [steps, nq] before the first failure of each condition index."""

    def __init__(self, num_envs: int, nq: int, steps: int, condition_of: torch.Tensor):
        """``condition_of`` [num_envs]: the condition index of every env slot."""
        self.window = torch.zeros(steps, num_envs, nq, dtype=torch.float64)
        self.condition_of = condition_of.cpu()
        self.steps = 0
        self.states: dict[int, torch.Tensor] = {}

    def record(self, qpos: torch.Tensor) -> None:
        """The batch's state before a control step."""
        self.window[self.steps % len(self.window)] = qpos.cpu()
        self.steps += 1

    def failed(self, env_ids: torch.Tensor) -> None:
        """``env_ids`` failed (terminated) in their first episode at the last step."""
        for i in env_ids.cpu().tolist():
            c = int(self.condition_of[i])
            if c not in self.states:
                kept = min(self.steps, len(self.window))
                order = torch.arange(self.steps - kept, self.steps) % len(self.window)
                self.states[c] = self.window[order, i].clone()
