"""Progressive filling: the lexicographic weighted max-min of ``x[n] / scale[n]`` by LPs.

Every LP baseline (DRF, DRFH, C-DRFH, TSF, CDRF, TSF-ER) is "max-min of x[n] / scale[n]" over
its feasible set with a different ``scale``.  One LP maximises the common level t; the users that
cannot exceed ``t * scale[n]`` are then frozen there and the LP is repeated for the others, until
everyone is frozen.  Who is blocked is read from the duals: a positive multiplier on user n's
row ``t - x[n]/scale[n] <= 0`` in an optimal dual means that row is tight in *every* optimal
primal solution (complementary slackness), so n cannot grow without someone below dropping.
Where the duals are degenerate (all zero) a per-user LP settles it.  A user reaching its backlog
``max_tasks`` is frozen at its cap.  At most N rounds; the result is leximin, hence Pareto optimal
within the feasible set.

LPs are solved by :func:`psdsf_dist.policies.lp.solve_lp`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from psdsf_dist.errors import SolverError
from psdsf_dist.policies.feasibility import LinearModel
from psdsf_dist.policies.lp import SparseRows, solve_lp, sparse_rows

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

DUAL_TOL = 1e-7  # multipliers sum to 1, so this is relative
LEVEL_RTOL = 1e-9  # slack given to frozen users' lower bounds against round-off


@dataclass(frozen=True)
class Filling:
    """Solution of progressive filling."""

    z: FloatArray  # the LP variables
    totals: FloatArray  # N user totals
    levels: FloatArray  # N: level t at which each user froze (cap/scale for capped users)
    lp_solves: int


def progressive_fill(model: LinearModel, scale: FloatArray, caps: FloatArray) -> Filling:
    """Leximin of ``x / scale`` over ``{z >= 0: A z <= b, x = totals z, x <= caps}``.

    ``scale[n] <= 0`` or a user without variables means the user gets nothing.
    """
    N = model.num_users
    T = model.totals
    has_var = np.asarray((T != 0).sum(axis=1)).ravel() > 0
    frozen = ~has_var | (scale <= 0) | (caps <= 0)
    value = np.zeros(N)  # lower bound for frozen users
    levels = np.zeros(N)
    lp_solves = 0
    z = np.zeros(model.num_variables)
    while not frozen.all():
        active = np.flatnonzero(~frozen)
        level, z, duals = _max_level(model, scale, caps, frozen, value, active)
        lp_solves += 1
        reach = caps[active] / scale[active]
        blocked = np.abs(duals) > DUAL_TOL
        at_cap = reach <= level * (1.0 + 1e-12)
        newly = blocked | at_cap
        if not newly.any():
            newly = _blocked_by_lp(model, scale, caps, frozen, value, active, level)
            lp_solves += len(active)
            if not newly.any():  # cannot happen in exact arithmetic; freeze all rather than loop
                newly[:] = True
        for j, n in enumerate(active.tolist()):
            if newly[j]:
                frozen[n] = True
                value[n] = min(caps[n], level * scale[n])
                levels[n] = level
    totals = np.asarray(T @ z) if lp_solves else np.zeros(N)
    return Filling(z, totals, levels, lp_solves)


Triplets = tuple[IntArray, IntArray, FloatArray]
"""Sparse rows as (row, column, value) arrays: LPs are assembled from them in one step."""


def _rows_of(M: sp.csr_matrix, rows: IntArray, factor: FloatArray, first: int) -> Triplets:
    """Rows ``rows`` of ``M``, row ``rows[r]`` times ``factor[r]``, numbered from ``first``
    (what ``diags(factor) @ M[rows]`` holds, without building either matrix)."""
    starts = M.indptr[rows]
    lengths = M.indptr[rows + 1] - starts
    before = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    at = np.repeat(starts - before, lengths) + np.arange(int(lengths.sum()))
    return (np.repeat(first + np.arange(len(rows)), lengths), M.indices[at],
            M.data[at] * np.repeat(factor, lengths))


def _bounds_rows(
    model: LinearModel,
    caps: FloatArray,
    frozen: npt.NDArray[np.bool_],
    value: FloatArray,
    first: int,
) -> tuple[list[Triplets], FloatArray]:
    """Frozen users keep (about) their value; every user stays within its cap.  The rows are
    numbered from ``first``."""
    T = model.totals
    rows: list[Triplets] = []
    rhs = [np.zeros(0)]
    fz = np.flatnonzero(frozen & (value > 0))
    capped = np.flatnonzero(np.isfinite(caps) & (caps > 0))
    zero = np.flatnonzero(frozen & (value <= 0))  # users that get nothing
    for users, factor, b in ((fz, -(1.0 / value[fz]), -np.ones(len(fz)) * (1.0 - LEVEL_RTOL)),
                             (capped, 1.0 / caps[capped], np.ones(len(capped))),
                             (zero, np.ones(len(zero)), np.zeros(len(zero)))):
        if len(users):
            rows.append(_rows_of(T, users, factor, first))
            rhs.append(b)
            first += len(users)
    return rows, np.concatenate(rhs)


def _matrix(parts: list[Triplets], num_rows: int) -> SparseRows:
    r, c, v = (np.concatenate([p[k] for p in parts]) if parts else np.zeros(0, dtype=int)
               for k in range(3))
    return sparse_rows(r, c, v, num_rows)


def _max_level(
    model: LinearModel,
    scale: FloatArray,
    caps: FloatArray,
    frozen: npt.NDArray[np.bool_],
    value: FloatArray,
    active: npt.NDArray[np.intp],
) -> tuple[float, FloatArray, FloatArray]:
    """max t s.t. x[n] >= t * scale[n] for active n; returns (t, z, duals of those rows)."""
    P = model.num_variables
    n_a, n_A = len(active), model.A.shape[0]
    level = _rows_of(model.totals, active, -(1.0 / scale[active]), 0)
    t_col = (np.arange(n_a), np.full(n_a, P), np.ones(n_a))
    whole = _rows_of(model.A, np.arange(n_A), np.ones(n_A), n_a)
    extra, extra_b = _bounds_rows(model, caps, frozen, value, n_a + n_A)
    A = _matrix([level, t_col, whole, *extra], n_a + n_A + len(extra_b))
    b = np.concatenate([np.zeros(n_a), model.b, extra_b])
    c = np.zeros(P + 1)
    c[-1] = -1.0
    t_max = float(np.min(caps[active] / scale[active]))
    upper = np.append(np.full(P, np.inf), t_max)
    res = solve_lp(c, A, b, upper=upper)
    if not res.optimal:
        raise SolverError(f"progressive filling LP failed: {res.message}")
    z = res.x[:P]
    duals = res.ineq_duals[: len(active)]
    return float(res.x[-1]), z, duals


def _blocked_by_lp(
    model: LinearModel,
    scale: FloatArray,
    caps: FloatArray,
    frozen: npt.NDArray[np.bool_],
    value: FloatArray,
    active: npt.NDArray[np.intp],
    level: float,
) -> npt.NDArray[np.bool_]:
    """For each active user: can it exceed ``level`` while every other active one keeps it?"""
    T = model.totals
    floor = frozen.copy()
    val = value.copy()
    val[active] = level * scale[active]
    floor[active] = True
    n_A = model.A.shape[0]
    extra, extra_b = _bounds_rows(model, caps, floor, val, n_A)
    A = _matrix([_rows_of(model.A, np.arange(n_A), np.ones(n_A), 0), *extra],
                n_A + len(extra_b))
    b = np.concatenate([model.b, extra_b])
    blocked = np.zeros(len(active), dtype=bool)
    for j, n in enumerate(active.tolist()):
        c = -np.asarray(T[n].todense()).ravel() / max(val[n], 1e-300)
        res = solve_lp(c, A, b)
        if not res.optimal:
            raise SolverError(f"progressive filling LP failed: {res.message}")
        blocked[j] = -res.objective <= 1.0 + 1e-7
    return blocked
