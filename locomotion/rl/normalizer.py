"""Running observation statistics used to whiten policy and critic inputs."""

from collections.abc import Sequence

import torch
from torch import Tensor, nn


class EmpiricalNormalizer(nn.Module):
    """Whitens inputs with running mean/variance so drifting observation scales stay tame.

    Statistics live in buffers (``mean``, ``var``, ``count``) so they are saved in the
    state dict and follow ``.to(device)``. ``var`` is the population variance (M2 / count).

    For multi-process training every rank computes ``batch_stats`` on its own data, all
    ranks gather everyone's (count, mean, M2), fold them in rank order with
    ``combine_stats`` and ``merge`` the result, so all ranks hold identical statistics: those
    of the union of their batches (see ``locomotion.rl.distributed``).
    """

    def __init__(self, shape: int | Sequence[int], eps: float = 1e-2, clip: float = 5.0) -> None:
        """Start at mean 0, variance 1, no samples; ``eps`` floors std, ``clip`` bounds outputs."""
        super().__init__()
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.eps = eps
        self.clip = clip
        self.frozen = False
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    def forward(self, x: Tensor) -> Tensor:
        """Return ``(x - mean) / max(std, eps)`` clipped to ``[-clip, clip]``."""
        std = self.var.sqrt().clamp_min(self.eps)
        return ((x - self.mean) / std).clamp(-self.clip, self.clip)

    def mean_std(self) -> tuple[Tensor, Tensor]:
        """Return detached copies of (mean, floored std) so exporters can bake them into a graph."""
        return self.mean.clone(), self.var.sqrt().clamp_min(self.eps)

    @torch.no_grad()
    def batch_stats(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Return (count, mean, M2) of a batch whose trailing dims match the normalizer shape."""
        flat = x.reshape(-1, *self.mean.shape).to(self.mean.dtype)
        count = torch.tensor(flat.shape[0], dtype=torch.long, device=flat.device)
        mean = flat.sum(dim=0) / max(flat.shape[0], 1)
        m2 = ((flat - mean) ** 2).sum(dim=0)
        return count, mean, m2

    @torch.no_grad()
    def merge(self, count: Tensor, mean: Tensor, m2: Tensor) -> None:
        """Fold batch statistics into the running ones with Chan's parallel variance formula."""
        n_a = self.count.to(self.mean.dtype)
        n_b = count.to(self.mean.dtype)
        n = (n_a + n_b).clamp_min(1.0)
        weight_b = n_b / n
        delta = mean - self.mean
        total_m2 = self.var * n_a + m2 + delta**2 * n_a * weight_b
        self.var.copy_(torch.where(n_a + n_b > 0, total_m2 / n, self.var))
        self.mean.add_(delta * weight_b)
        self.count.add_(count)

    def update(self, x: Tensor) -> None:
        """Merge the statistics of batch ``x`` unless the normalizer is frozen."""
        if not self.frozen:
            self.merge(*self.batch_stats(x))


@torch.no_grad()
def combine_stats(stats: Sequence[tuple[Tensor, Tensor, Tensor]]) -> tuple[Tensor, Tensor, Tensor]:
    """The (count, mean, M2) of the union of batches given by their own (count, mean, M2).

    Chan's parallel formula, folded left to right: the same inputs in the same order give
    the same bits on every process.
    """
    if not stats:
        raise ValueError("combine_stats needs at least one (count, mean, M2) triple")
    count, mean, m2 = stats[0]
    for count_b, mean_b, m2_b in stats[1:]:
        total = count + count_b
        if int(total) == 0:
            continue
        n_a = count.to(mean.dtype)
        weight_b = count_b.to(mean.dtype) / total.to(mean.dtype)
        delta = mean_b - mean
        mean = mean + delta * weight_b
        m2 = m2 + m2_b + delta**2 * n_a * weight_b
        count = total
    return count, mean, m2
