"""Counts the torch calls that make the host wait for a GPU, on any device.

A GPU rollout must not wait for the device between env steps (``step_mode=masked``).
Torch's own detector, ``torch.cuda.set_sync_debug_mode``, needs CUDA; this counter runs the
same code on the CPU and counts the calls that would wait there: reads (``item``,
``tolist``, ``numpy``, ``nonzero``, ``unique``, ``bincount``, conversions to bool, int or
float, boolean-mask and list indexing, ``normal`` with a tensor std, which checks std >= 0
on the host), and every explicit device move (``cpu()``, ``cuda()``, ``to(device)``) and
tensor made from host data, since on a CPU the counter cannot tell a move that is free
there from one that copies on a GPU.
"""

from __future__ import annotations

import traceback
from collections import Counter

import torch
from torch.overrides import TorchFunctionMode

READS = {"item", "tolist", "numpy", "cpu", "cuda", "nonzero", "argwhere", "unique",
         "unique_consecutive", "bincount", "masked_select", "repeat_interleave", "__bool__",
         "__int__", "__float__", "__index__"}


def code_site(stack: list[traceback.FrameSummary]) -> str:
    """``file:line function`` of the innermost frame of the package (or its tasks) in
    ``stack``, else of the innermost frame."""
    ours = [f for f in stack if "/locomotion/" in f.filename or "/tasks/" in f.filename]
    frame = (ours or stack)[-1]
    return f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} {frame.name}"


class HostReads(TorchFunctionMode):
    """``with HostReads() as reads: ...``: ``reads.count`` calls that would wait for a GPU,
    ``reads.where`` them by call and code site."""

    def __init__(self):
        super().__init__()
        self.count = 0
        self.where: Counter[str] = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.reads(getattr(func, "__name__", ""), args, kwargs):
            self.count += 1
            self.where[f"{func.__name__} at {code_site(traceback.extract_stack()[:-1])}"] += 1
        return func(*args, **kwargs)

    @staticmethod
    def reads(name: str, args: tuple, kwargs: dict) -> bool:
        """Whether the call ``name(*args, **kwargs)`` would make the host wait for a GPU."""
        if name in READS:
            return True
        if name == "to":  # a device named, or another tensor's device
            return any(isinstance(a, str | torch.device | torch.Tensor)
                       for a in (*args[1:], *kwargs.values()))
        if name in ("tensor", "as_tensor"):
            return bool(args) and not isinstance(args[0], torch.Tensor)
        if name in ("__getitem__", "__setitem__") and len(args) > 1:
            index = args[1] if isinstance(args[1], tuple) else (args[1],)
            return any(isinstance(i, list) or (isinstance(i, torch.Tensor)
                                               and i.dtype == torch.bool) for i in index)
        if name == "normal":
            return isinstance(kwargs.get("std", args[1] if len(args) > 1 else None),
                              torch.Tensor)
        return name == "where" and len(args) == 1 and not kwargs
