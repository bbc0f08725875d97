"""Which subtask each env slot runs: a target per slot that takes effect at the slot's reset.

Changing a slot's subtask mid-episode would cut episodes short and re-synchronize resets;
instead a re-allocation only sets targets, and each env adopts its target when its own
episode ends, so the staggered reset pattern survives every re-allocation.
"""

from __future__ import annotations

import torch


class SubtaskSlots:
    """The current and target subtask of each of ``num_envs`` env slots."""

    def __init__(self, num_envs: int, counts: torch.Tensor, device: torch.device | str = "cpu"):
        self.num_envs = num_envs
        self.target = torch.repeat_interleave(torch.arange(len(counts)), counts.long()).to(device)
        if len(self.target) != num_envs:
            raise ValueError(f"subtask slot counts sum to {len(self.target)}, not {num_envs}")
        self.current = self.target.clone()

    def retarget(self, counts: torch.Tensor) -> int:
        """Move targets to the new ``counts`` per subtask, changing as few slots as possible;
        returns how many slots got a new target."""
        if int(counts.sum()) != self.num_envs:
            raise ValueError(f"subtask slot counts sum to {int(counts.sum())}, "
                             f"not {self.num_envs}")
        target = self.target.cpu()
        have = torch.bincount(target, minlength=len(counts))
        freed = []
        for s in torch.nonzero(have > counts).squeeze(1).tolist():
            slots = torch.nonzero(target == s).squeeze(1)
            freed.append(slots[int(counts[s]):])
        pool = torch.cat(freed) if freed else torch.empty(0, dtype=torch.long)
        start = 0
        for s in torch.nonzero(have < counts).squeeze(1).tolist():
            need = int(counts[s] - have[s])
            target[pool[start:start + need]] = s
            start += need
        self.target.copy_(target)
        return len(pool)

    def adopt(self, env_ids: torch.Tensor) -> None:
        """Envs ``env_ids`` are resetting: they start running their target subtask."""
        self.current[env_ids] = self.target[env_ids]

    def adopt_where(self, mask: torch.Tensor) -> None:
        """``adopt`` for the envs where ``mask`` [N] is set (no host read)."""
        self.current.copy_(torch.where(mask, self.target, self.current))

    def counts(self, which: str = "current", num_subtasks: int | None = None) -> torch.Tensor:
        ids = self.current if which == "current" else self.target
        return torch.bincount(ids.cpu(), minlength=num_subtasks or 0)

    def state_dict(self) -> dict:
        return {"current": self.current.clone(), "target": self.target.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.current.copy_(state["current"])
        self.target.copy_(state["target"])
