"""Exact weighted max-min water-filling with offsets on one server.

Each active user n receives ``X[n] = clip(weight[n] * L - offset[n], 0, upper[n])`` as a common
level L rises; when a resource saturates, every still-active user consuming it is frozen at its
current amount; the level keeps rising for the others until everyone is frozen (saturated or at
its upper bound).  This is the PS-DSF best response of a server (see :mod:`server_procedure`).

The usage of each resource is piecewise linear in L with breakpoints where users start
(``offset/weight``) and stop (``(offset + upper)/weight``).  Each phase sorts the breakpoints of
the active users once and finds, for every resource, the first level at which its usage reaches
its capacity by a cumulative sum: O(N log N + N*M) per phase, at most M + 1 phases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# A resource counts as saturated within this relative distance of its capacity.
SATURATION_RTOL = 1e-12


@dataclass(frozen=True)
class WaterFill:
    """Result of one water-fill, with the structure a certificate or exact solve needs."""

    column: FloatArray
    """Tasks per user on this server."""
    group: IntArray
    """Phase in which the user froze (0, 1, ...); -1 for users that took no part."""
    level: FloatArray
    """Water level of each phase."""
    saturated: tuple[IntArray, ...]
    """Resources that saturated in each phase (empty when the phase ended on upper bounds)."""
    at_upper: BoolArray
    """Users that stopped at their upper bound (finite backlog) rather than on a resource."""


def water_fill(
    capacity: FloatArray,
    consumption: FloatArray,
    weight: FloatArray,
    offset: FloatArray,
    upper: FloatArray,
) -> WaterFill:
    """Water-fill one server.

    Args:
        capacity: (M,) capacities, >= 0.
        consumption: (N, M) consumption per task; a user consuming nothing, or consuming a
            resource of capacity 0, takes no part.
        weight: (N,) level-to-tasks rate, > 0 for users taking part (0 excludes the user).
        offset: (N,) level offset; a user starts receiving tasks at ``L = offset/weight``.
        upper: (N,) largest amount the user may receive here (``inf`` for none); <= 0 excludes.
    """
    N, M = consumption.shape
    column = np.zeros(N)
    group = np.full(N, -1, dtype=np.int64)
    at_upper = np.zeros(N, dtype=bool)
    levels: list[float] = []
    saturated: list[IntArray] = []

    uses = consumption > 0
    missing = (uses & (capacity[None, :] <= 0)).any(axis=1)
    active = (weight > 0) & (upper > 0) & uses.any(axis=1) & ~missing
    frozen_usage = np.zeros(M)
    phase = 0
    while active.any():
        idx = np.flatnonzero(active)
        # The phase runs on weights scaled into [0.5, 1) (the same amounts: w L = (w / s)(s L)):
        # with tiny weights the level at which a resource saturates would overflow to inf and
        # read as "nothing saturates".  s is a power of two, so scaling is exact and every
        # amount, level and tolerance test is bit-for-bit what it is unscaled when nothing
        # overflows.  Levels are reported on the caller's scale.
        scale = math.ldexp(1.0, math.frexp(float(weight[idx].max()))[1])
        w = weight[idx] / scale
        o = offset[idx]
        u = upper[idx]
        c = consumption[idx]
        start = o / w
        end = (o + u) / w  # inf for unlimited users
        rate = c * w[:, None]  # usage slope each user adds while filling
        finite_end = np.isfinite(end)
        ev_level = np.concatenate([start, end[finite_end]])
        ev_slope = np.concatenate([rate, -rate[finite_end]])
        order = np.argsort(ev_level, kind="stable")
        ev_level = ev_level[order]
        slope = np.cumsum(ev_slope[order], axis=0)  # slope after each event
        gaps = np.diff(ev_level)
        usage = np.empty((len(ev_level), M))
        usage[0] = frozen_usage
        if len(gaps):
            usage[1:] = frozen_usage + np.cumsum(slope[:-1] * gaps[:, None], axis=0)

        live = uses[idx].any(axis=0) & (capacity > 0)
        cross = np.full(M, np.inf)
        reached = usage >= capacity[None, :]
        hit = reached.any(axis=0) & live
        for r in np.flatnonzero(live):
            if hit[r]:
                j = int(np.argmax(reached[:, r]))
                if j == 0:
                    cross[r] = ev_level[0]
                else:
                    cross[r] = ev_level[j - 1] + (capacity[r] - usage[j - 1, r]) / slope[j - 1, r]
            elif slope[-1, r] > 0:
                cross[r] = ev_level[-1] + (capacity[r] - usage[-1, r]) / slope[-1, r]

        level = float(cross.min()) if M else np.inf
        if not np.isfinite(level):
            # nothing saturates: everyone left stops at its upper bound
            column[idx] = u
            group[idx] = phase
            at_upper[idx] = True
            levels.append(math.inf)
            saturated.append(np.zeros(0, dtype=np.int64))
            break
        x = np.clip(w * level - o, 0.0, u)
        column[idx] = x
        tol = SATURATION_RTOL * max(scale, abs(level))  # 1e-12 max(1, |L|) on the caller's scale
        sat = np.flatnonzero(cross <= level + tol)
        end_scale = np.maximum(1.0, np.abs(np.where(finite_end, end, 0.0)) / scale)
        done_upper = finite_end & (end <= level + tol * end_scale)
        freeze = uses[idx][:, sat].any(axis=1) | done_upper
        fidx = idx[freeze]
        group[fidx] = phase
        at_upper[idx[done_upper]] = True
        frozen_usage = frozen_usage + consumption[fidx].T @ column[fidx]
        active[fidx] = False
        levels.append(level / scale)
        saturated.append(sat.astype(np.int64))
        phase += 1

    # Guard against rounding: a column must never exceed a capacity, not even by an ulp.
    used = consumption.T @ column
    with np.errstate(divide="ignore", invalid="ignore"):
        over = np.where(capacity > 0, used / capacity, 0.0)
    worst = float(over.max()) if M else 0.0
    if worst > 1.0:
        column = column / worst
    return WaterFill(column, group, np.array(levels), tuple(saturated), at_upper)
