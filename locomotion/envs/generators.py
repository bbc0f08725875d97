"""Random generators in checkpoints: a state saved on one kind of device, restored on another."""

from __future__ import annotations

import hashlib

import torch


def restore_generator(gen: torch.Generator, state: torch.Tensor) -> bool:
    """Set ``gen`` to a saved ``state``; True when it continues exactly.

    A state saved from a generator on another kind of device (a CUDA generator's 16 bytes,
    a CPU one's 5056) does not fit: ``gen`` is then seeded from a hash of that state, so a
    checkpoint resumed on another device continues the same way every time, though not
    with the draws the original device would have made.
    """
    try:
        gen.set_state(state)
        return True
    except RuntimeError:
        gen.manual_seed(seed_from(state))
        return False


def seed_from(state: torch.Tensor) -> int:
    """A seed (63 bits) from the bytes of a generator state."""
    digest = hashlib.sha256(state.detach().cpu().numpy().tobytes()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)
