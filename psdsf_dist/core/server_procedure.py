"""The PS-DSF server procedure: what one server runs every T seconds.

A server knows its own capacities and column, the users' demands, weights, eligibility and caps,
and the (gossiped) per-user global totals ``x``.  Its best response is an exact local water-fill
in which user n's level is its *global* virtual dominant share ``x[n] / (phi[n] * gamma[n, i])``:
the offset ``o[n] = x[n] - X[n, i]`` is what n gets elsewhere and ``w[n] = phi[n] * gamma[n, i]``
turns a level into tasks.  Its fixed points across all servers are exactly the PS-DSF allocations
(Theorem 1; Theorem 2 with one resource, time, in TDM).

``gain`` generalises the rule: server i assumes that ``gain[n]`` servers (itself included) move
user n exactly as it does, and values n's level at the predicted total
``x[n] + gain[n] * (X_new - X_old)``.  That is the same water-fill with weight ``w / gain`` and
offset ``(o - (gain - 1) * X_old) / gain``; fixed points are unchanged.  ``gain = 1`` is the
plain best response.  The exact solver uses ``gain`` = the size of a class of identical servers
(where the prediction is exact); the asynchronous rule uses a locally estimated gain.

``max_raise`` bounds how far one step may raise each user here (the asynchronous rule uses it
to keep the servers together within a user's cap while they act on stale totals; see
:func:`psdsf_dist.protocol.update_rule.cap_raise_limit`).  A bound that is positive wherever the
user is below its cap changes no fixed point: a column that is a best response without it is
one with it, and conversely (the water-fill is an exact convex program; a bound met with room to
spare changes nothing, and a user at its cap cannot be raised anyway).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.water_fill import WaterFill, water_fill

FloatArray = npt.NDArray[np.float64]


def server_procedure(
    capacity: FloatArray,
    consumption: FloatArray,
    gamma: FloatArray,
    weight: FloatArray,
    totals: FloatArray,
    column: FloatArray,
    max_tasks: FloatArray,
    *,
    mode: Literal["rdm", "tdm"] = "rdm",
    gain: FloatArray | float | None = None,
    max_raise: FloatArray | None = None,
) -> FloatArray:
    """Return server i's new column (tasks per user).

    Args:
        capacity: (M,) the server's capacities (ignored in TDM, where the server shares time).
        consumption: (N, M) per-task consumption of the server's resources; in TDM only its
            support matters (``1/gamma`` per task is used).
        gamma: (N,) tasks each user could run alone here; 0 = not eligible.
        weight: (N,) user weights phi > 0.
        totals: (N,) the user's global task totals as this server knows them (may be stale).
        column: (N,) this server's current tasks per user.
        max_tasks: (N,) finite backlogs (``inf`` = unlimited).
        mode: ``"rdm"`` (divisible resources) or ``"tdm"`` (time-shared server).
        gain: servers assumed to move each user together (>= 1); default 1.
        max_raise: (N,) >= 0: the most this step may raise each user's entry; default none.
    """
    return server_water_fill(
        capacity, consumption, gamma, weight, totals, column, max_tasks, mode=mode, gain=gain,
        max_raise=max_raise,
    ).column


def server_water_fill(
    capacity: FloatArray,
    consumption: FloatArray,
    gamma: FloatArray,
    weight: FloatArray,
    totals: FloatArray,
    column: FloatArray,
    max_tasks: FloatArray,
    *,
    mode: Literal["rdm", "tdm"] = "rdm",
    gain: FloatArray | float | None = None,
    max_raise: FloatArray | None = None,
) -> WaterFill:
    """:func:`server_procedure` with the water-fill structure (groups, levels, saturation)."""
    eligible = gamma > 0
    w = np.where(eligible, weight * gamma, 0.0)
    # Stale totals can fall below the server's own column; what the user holds elsewhere
    # cannot be negative.
    offset = np.maximum(totals - column, 0.0)
    upper = np.maximum(max_tasks - offset, 0.0)
    if gain is not None:
        k = np.maximum(np.asarray(gain, dtype=float), 1.0)
        w = w / k
        upper = np.maximum(column + (max_tasks - offset - column) / k, 0.0)
        offset = (offset - (k - 1.0) * column) / k
    if max_raise is not None:
        upper = np.minimum(upper, column + np.maximum(max_raise, 0.0))
    if mode == "tdm":
        with np.errstate(divide="ignore"):
            cons = np.where(eligible, 1.0 / np.where(eligible, gamma, 1.0), 0.0)[:, None]
        cap = np.ones(1)
    else:
        cons = np.where(eligible[:, None], consumption, 0.0)
        cap = capacity
    return water_fill(cap, cons, w, offset, upper)
