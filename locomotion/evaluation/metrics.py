"""Per-level statistics of evaluation episodes: rates with Wilson intervals, means, margins.

Survival is a binomial rate measured on a few hundred episodes, often at or near 0 or 1,
where the normal-approximation interval collapses to zero width or leaves [0, 1]; the
Wilson score interval stays inside [0, 1] and keeps a sensible width there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

#: Two-sided 95 % quantile of the standard normal distribution.
Z95 = 1.959963984540054
#: Standard gravity, m/s^2 (cost of transport).
GRAVITY = 9.81


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial rate (95 % by default); (0, 1) without trials."""
    if trials <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must lie in [0, {trials}], got {successes}")
    p = successes / trials
    z2n = z * z / trials
    centre = (p + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * math.sqrt(p * (1 - p) / trials + z2n / (4 * trials))
    # p = 0 or 1 puts one end exactly on the boundary; rounding must not move it off
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


def mean_interval(values: torch.Tensor, z: float = Z95) -> tuple[float, float, float]:
    """Mean of ``values`` and its normal-approximation 95 % interval (nan when empty)."""
    values = values[torch.isfinite(values)].double()
    n = values.numel()
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = float(values.mean())
    half = z * float(values.std()) / math.sqrt(n) if n > 1 else 0.0
    return mean, mean - half, mean + half


@dataclass
class Episodes:
    """The first episode of every env slot of one condition, [n] tensors on the CPU."""

    survived: torch.Tensor  # bool: reached the time limit without a failure
    lin_vel_error: torch.Tensor  # m/s, per-episode mean of the planar tracking error
    yaw_error: torch.Tensor  # rad/s, per-episode mean
    distance: torch.Tensor  # m, base displacement in the plane, spawn to end
    energy: torch.Tensor  # J, sum over steps of sum_a |force_a velocity_a| dt (actuators)
    mass: torch.Tensor  # kg, the robot's total mass (payload included)
    pushed: torch.Tensor  # bool: the episode was pushed
    recovery: torch.Tensor  # s after the push until tracking and upright again; nan: never

    @classmethod
    def cat(cls, parts: Sequence[Episodes]) -> Episodes:
        """Episodes of several rounds of the same condition, in round order."""
        return cls(**{k: torch.cat([getattr(p, k) for p in parts])
                      for k in cls.__dataclass_fields__})


def _round(x: float) -> float | None:
    """Six decimals keep report.json readable; nan/inf become null (valid JSON)."""
    return round(x, 6) if math.isfinite(x) else None


def summarize(ep: Episodes, reach: float | None = None) -> dict[str, float | int | list | None]:
    """The numbers a report shows for one level.

    Tracking errors and distance average over all episodes (a failed episode counts up to
    its failure); cost of transport is total energy over total m g d of the survivors (a
    ratio of sums, so near-zero distances of standing commands do not blow it up);
    recovery averages over pushed survivors that recovered, with the share that did (both
    null without pushes). With ``reach`` (m), ``reached`` is the share of episodes whose base
    ended at least that far from its spawn point, falls included (null without ``reach``).
    """
    n = int(ep.survived.numel())
    k = int(ep.survived.sum())
    low, high = wilson_interval(k, n)
    lin, lin_lo, lin_hi = mean_interval(ep.lin_vel_error)
    yaw, _, _ = mean_interval(ep.yaw_error)
    dist, _, _ = mean_interval(ep.distance)
    alive = ep.survived
    work = float((ep.mass[alive] * GRAVITY * ep.distance[alive]).double().sum())
    cot = float(ep.energy[alive].double().sum()) / work if work > 0 else math.nan
    rec = ep.recovery[alive & ep.pushed]
    recovered = torch.isfinite(rec)
    rec_mean = float(rec[recovered].double().mean()) if recovered.any() else math.nan
    rec_share = float(recovered.double().mean()) if len(rec) else math.nan
    return {
        "episodes": n,
        "survived": k,
        "survival": _round(k / n) if n else None,
        "survival_ci": [_round(low), _round(high)],
        "lin_vel_error": _round(lin),
        "lin_vel_error_ci": [_round(lin_lo), _round(lin_hi)],
        "yaw_error": _round(yaw),
        "distance": _round(dist),
        "cost_of_transport": _round(cot),
        "recovery_time": _round(rec_mean),
        "recovered": _round(rec_share),
        "reached": (_round(float((ep.distance >= reach).double().mean())) if reach is not None
                    and n else None),
    }


def robustness_margin(levels: Sequence[float], survival: Sequence[float | None],
                      nominal: float | None, harder: str, threshold: float) -> dict:
    """The farthest level from nominal, in the harder direction, that still survives.

    Walk from the level nearest nominal (the easy end when there is no nominal) towards the
    harder end; the margin is the last level whose survival is >= ``threshold`` before the
    first that falls below it. ``beyond`` marks a margin that is the sweep's last level (the
    true margin may lie farther); ``None`` means the start already fails. ``harder`` is
    ``up``, ``down`` or ``both`` (a range around nominal: ``low`` and ``high``).
    """
    if harder not in ("up", "down", "both"):
        raise ValueError(f"harder must be up, down or both, got {harder!r}")
    order = sorted(range(len(levels)), key=lambda i: levels[i])
    xs = [levels[i] for i in order]
    ok = [(survival[i] is not None and survival[i] >= threshold) for i in order]

    def walk(direction: int) -> tuple[float | None, bool]:
        if nominal is not None:  # the level nearest nominal (nominal itself when swept)
            start = min(range(len(xs)), key=lambda i: abs(xs[i] - nominal))
        else:  # the easy end: where the harder direction starts from
            start = 0 if direction > 0 else len(xs) - 1
        if not ok[start]:
            return None, False
        i = start
        while 0 <= i + direction < len(xs) and ok[i + direction]:
            i += direction
        return xs[i], not 0 <= i + direction < len(xs)

    if harder == "both":
        low, low_beyond = walk(-1)
        high, high_beyond = walk(+1)
        return {"harder": harder, "low": low, "high": high, "low_beyond": low_beyond,
                "high_beyond": high_beyond, "threshold": threshold}
    value, beyond = walk(+1 if harder == "up" else -1)
    return {"harder": harder, "value": value, "beyond": beyond, "threshold": threshold}
