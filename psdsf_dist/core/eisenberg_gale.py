"""TDM PS-DSF as a convex program: the Eisenberg-Gale program of a linear Fisher market.

With servers time-shared, give user n the share ``t[n, i]`` of server i's time; it runs
``gamma[n, i] * t[n, i]`` tasks there.  The program

    maximise   sum_n phi[n] log x[n]
    subject to x[n] = sum_i gamma[n, i] t[n, i],  sum_n t[n, i] <= 1,  t >= 0,  x[n] <= cap[n]

has the KKT conditions (``p[i]`` the price of server i's time, ``mu[n] >= 0`` of n's cap)

    (phi[n] / x[n] - mu[n]) gamma[n, i] <= p[i],  with equality where t[n, i] > 0,
    p[i] > 0  =>  server i fully shared.

For a user below its cap (``mu = 0``) this says ``1 / V[n, i] <= p[i]`` with
``V[n, i] = x[n] / (phi[n] gamma[n, i])``, with equality where it holds time: at every server
only users at the minimum V get time, and a server any such user is eligible for has a positive
price, so it is fully shared -- Theorem 2.  A capped user m holding time at i has
``1 / V[m, i] >= p[i] >= 1 / V[n, i]`` for every uncapped n eligible there, which is all the
certificate asks of it.  So an optimum is a TDM PS-DSF allocation.  The objective is strictly
concave in x, so without caps the totals are unique (with caps, Theorem 2 admits other
allocations too; the program picks one).  Users eligible nowhere, or with cap 0, get nothing and
are left out (their log would be -inf).

Servers in a class of ``count[c]`` identical members share one time variable per user (the
program is symmetric, so averaging an optimum over a class is an optimum).

The program is solved by Clarabel, an interior-point solver for conic programs (one exponential
cone per user for its log).  The result is accurate to the solver's tolerance, not to round-off;
:mod:`solver` polishes it to its certificate.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import clarabel  # type: ignore[import-untyped]  # ships no type information
import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.sparse import csgraph

FloatArray = npt.NDArray[np.float64]

SOLVER_TOL = 1e-9  # Clarabel's gap and feasibility tolerances (its defaults are 1e-8)
CAP_RTOL = 1e-7  # a user this close to its cap at the approximate optimum counts as capped
STRUCTURE_ROUNDS = 8  # corrections of the structure by the exact levels
EXACT_SLACK = 1e-11  # relative level gap that the exact levels count as a real one
# Readings of the support, the usual one first: a pair that is tight but empty in every
# equilibrium has a ratio near 1, and then only a stricter or looser reading is consistent.
READINGS = (1.0, 1e3, 1e-3)
CAPPED_SHARE_FLOOR = 1e-6  # of a capped user's largest share: below it a share is dropped
MIN_SHARE = 1e-12  # starting share of a pair the approximate optimum left (nearly) empty
SCALING_ROUNDS = 40  # Newton steps of the time-share scaling, at most
FILL_RTOL = 1e-6  # a class this close to full with only capped users on it is filled
IDENTITY_RTOL = 1e-11  # how far the left-out class equations may miss
MAX_FALL = 0.9  # largest relative decrease of a share in one Newton step
SCALING_RTOL = 1e-14  # relative row/column-sum error at which the scaling stops


@dataclass(frozen=True)
class FisherEquilibrium:
    """An approximate optimum of the Eisenberg-Gale program."""

    time_share: FloatArray  # N x C: share of each member's time per user
    totals: FloatArray  # N: x
    price: FloatArray  # C: p, the dual of each member's time constraint
    reduced_cost: FloatArray  # N x C: dual of t >= 0 relative to the class's price (inf: none)
    iterations: int


def log_program_settings(tol: float) -> clarabel.DefaultSettings:
    """Clarabel's settings for a sum-of-logs program over exponential cones (this module's,
    and max Nash welfare's), quiet, with gap and feasibility tolerances ``tol``."""
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.tol_gap_abs = tol
    settings.tol_gap_rel = tol
    settings.tol_feas = tol
    settings.tol_ktratio = tol
    # Tight iterative refinement of each Newton step: with the defaults the iterates stall
    # near a gap of 1e-7 on clusters of many near-identical servers, where the support of the
    # optimum cannot yet be told from the pairs that are merely nearly tight.
    settings.iterative_refinement_reltol = 1e-15
    settings.iterative_refinement_abstol = 1e-15
    settings.iterative_refinement_max_iter = 30
    # Clarabel's own equilibration stalls on these programs (InsufficientProgress after a few
    # iterations at N = 100); the programs are scaled to be well balanced already.
    settings.equilibrate_enable = False
    return settings


def eisenberg_gale(
    gamma: FloatArray,
    count: FloatArray,
    weight: FloatArray,
    max_tasks: FloatArray,
    *,
    tol: float = SOLVER_TOL,
) -> FisherEquilibrium | None:
    """Solve the program for ``gamma`` (N x C, 0 = ineligible) over classes of ``count`` members.

    Returns None if the conic solver reports anything but success (the caller falls back).
    """
    N, C = gamma.shape
    eligible = gamma > 0
    cap = np.asarray(max_tasks, dtype=float)
    users = np.flatnonzero(eligible.any(axis=1) & (cap > 0))
    time_share = np.zeros((N, C))
    totals = np.zeros(N)
    if len(users) == 0:
        return FisherEquilibrium(time_share, totals, np.zeros(C), np.full((N, C), np.inf), 0)
    un, uc = np.nonzero(eligible[users])  # edges: (index into users, class)
    E, U = len(un), len(users)
    tasks = count[uc] * gamma[users[un], uc]  # tasks per unit of t on the edge, whole class
    # Each user's x is measured in units of what it would get with the whole cluster to itself
    # split U ways, so that every variable is of order 1 whatever the scale of the scenario.
    unit = np.bincount(un, weights=tasks, minlength=U) / U
    # variables: t (E), y = x / unit (U), s (U) with s <= log y
    nt, ny = E, U
    iy = nt + np.arange(U)
    iz = nt + ny + np.arange(U)
    nvar = nt + 2 * U
    capped = np.flatnonzero(np.isfinite(cap[users]))
    blocks_r: list[npt.NDArray[np.int64]] = []
    blocks_c: list[npt.NDArray[np.int64]] = []
    blocks_v: list[FloatArray] = []
    rhs: list[FloatArray] = []
    row = 0

    def block(r: npt.NDArray[np.int64], c: npt.NDArray[np.int64], v: FloatArray) -> None:
        blocks_r.append(r + row)
        blocks_c.append(c)
        blocks_v.append(v)

    # zero cone: unit[n] y[n] - sum_e tasks[e] t[e] = 0, scaled by 1/unit
    block(np.arange(U), iy, np.ones(U))
    block(un, np.arange(E), -tasks / unit[un])
    rhs.append(np.zeros(U))
    row += U
    # nonnegative cone: t >= 0 (as -t + s = 0), time per member <= 1, caps
    block(np.arange(E), np.arange(E), -np.ones(E))
    rhs.append(np.zeros(E))
    row += E
    block(uc, np.arange(E), np.ones(E))
    rhs.append(np.ones(C))
    row += C
    time_row = row - C
    block(np.arange(len(capped)), iy[capped], np.ones(len(capped)))
    rhs.append(cap[users[capped]] / unit[capped])
    row += len(capped)
    nonneg = E + C + len(capped)
    # exponential cones: (s, 1, y) with 1 * exp(s / 1) <= y
    for n in range(U):
        block(np.array([3 * n, 3 * n + 2]), np.array([iz[n], iy[n]]), np.array([-1.0, -1.0]))
    rhs.append(np.tile([0.0, 1.0, 0.0], U))
    row += 3 * U
    A = sp.csc_matrix(
        (np.concatenate(blocks_v), (np.concatenate(blocks_r), np.concatenate(blocks_c))),
        shape=(row, nvar),
    )
    b = np.concatenate(rhs)
    q = np.zeros(nvar)
    q[iz] = -weight[users] / weight[users].sum()
    P = sp.csc_matrix((nvar, nvar))
    cones = [
        clarabel.ZeroConeT(U),
        clarabel.NonnegativeConeT(nonneg),
        *[clarabel.ExponentialConeT() for _ in range(U)],
    ]
    solution = clarabel.DefaultSolver(P, q, A, b, cones, log_program_settings(tol)).solve()
    # InsufficientProgress near the end still leaves an iterate good enough to read the
    # structure from; the caller certifies whatever it builds from it.
    if str(solution.status) not in ("Solved", "AlmostSolved", "InsufficientProgress"):
        return None
    z = np.asarray(solution.x)
    t = np.clip(z[:E], 0.0, None)
    time_share[users[un], uc] = t
    totals[users] = np.bincount(un, weights=tasks * t, minlength=U)
    dual = np.asarray(solution.z)
    price = dual[time_row : time_row + C]
    reduced_cost = np.full((N, C), np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        reduced_cost[users[un], uc] = dual[U : U + E] / price[uc]
    return FisherEquilibrium(time_share, totals, price, reduced_cost, int(solution.iterations))


def exact_equilibrium(
    gamma: FloatArray,
    count: FloatArray,
    weight: FloatArray,
    max_tasks: FloatArray,
    approx: FisherEquilibrium,
    *,
    thresholds: tuple[float, ...] = READINGS,
) -> FloatArray | None:
    """Tasks per member (N x C) of the equilibrium on the structure read off ``approx``, with
    the first of ``thresholds`` that gives a consistent structure (see :func:`on_support`);
    None if none does."""
    for threshold in thresholds:
        Y = on_support(gamma, count, weight, max_tasks, approx, threshold=threshold)
        if Y is not None:
            return Y
    return None


def on_support(
    gamma: FloatArray,
    count: FloatArray,
    weight: FloatArray,
    max_tasks: FloatArray,
    approx: FisherEquilibrium,
    *,
    threshold: float,
) -> FloatArray | None:
    """Tasks per member (N x C) of the equilibrium on the structure read off ``approx``.

    The structure: the (user, class) pairs whose time share exceeds ``threshold`` times its
    relative reduced cost.  At an interior-point iterate their product is about the barrier
    parameter, so pairs in the support of the optimum have a ratio far above 1 and the others
    far below, even where the totals are still only accurate to 1e-4 (the objective's gap is
    quadratic in their error).  Users at their cap are pinned to their split, rescaled to the
    cap.  On that structure the equilibrium follows by direct computation (to round-off):

    * levels: along the pairs, ``x[n] = phi[n] gamma[n, c] L[c]``, so in each connected
      component of the pair graph the levels are fixed up to one factor (a spanning tree);
    * that factor: every free user spends its weight, ``sum_c count[c] t[n, c] / L[c] =
      phi[n]``, and the classes of a component sell all the time the capped users left, so
      ``sum_n phi[n] = sum_c count[c] rest[c] / L[c]`` over the component;
    * the time shares: positive on the pairs, with the row sums the totals and the column sums
      the rest -- found from the approximate shares by Newton's method on the row and column
      scaling factors (see :func:`_time_shares`), which keeps the support.

    Pairs the exact levels show to be slack leave the structure, and pairs at a level below the
    class's join it; the last two steps repeat until the structure is consistent.  Returns None
    when it cannot be made so (the caller then reads the structure another way or falls back).
    """
    N, C = gamma.shape
    cap = np.asarray(max_tasks, dtype=float)
    eligible = gamma > 0
    x0 = approx.totals
    capped = np.isfinite(cap) & (x0 >= cap * (1.0 - CAP_RTOL)) & (cap > 0)
    free_user = eligible.any(axis=1) & (cap > 0) & ~capped
    with np.errstate(invalid="ignore"):
        held = eligible & (approx.time_share > threshold * approx.reduced_cost)
    pairs = held & free_user[:, None]

    Y = np.zeros((N, C))
    for m in np.flatnonzero(capped):
        # A capped user's reduced costs say little (its cap, not the prices, stops it, and a
        # class only capped users want has price 0); its split needs no structure: keep the
        # pairs where it holds a real part of its time.
        share = approx.time_share[m]
        kept = share > CAPPED_SHARE_FLOOR * share.max(initial=0.0)
        row = np.where(kept, gamma[m] * share, 0.0)
        total = float(row @ count)
        if total <= 0:
            return None
        Y[m] = row * (cap[m] / total)
    # Rescaled to their caps, the capped users may overfill a class by the optimum's error;
    # moving the excess to their other classes converges in a few passes where there is room.
    for _ in range(STRUCTURE_ROUNDS):
        with np.errstate(divide="ignore", invalid="ignore"):
            used = np.where(eligible, Y / gamma, 0.0).sum(axis=0)
        over = used > 1.0
        if not over.any():
            break
        Y[:, over] /= used[over]
        Y[capped] *= (cap[capped] / np.maximum(Y[capped] @ count, 1e-300))[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        used = np.where(eligible, Y / gamma, 0.0).sum(axis=0)
    # A class that only capped users hold but a free user may use must be full (Theorem 2); the
    # optimum leaves a sliver of its time there to the free user, off the support: the capped
    # users take it, and give the same tasks back on their other classes.
    wanted = (eligible & free_user[:, None]).any(axis=0) & ~pairs.any(axis=0)
    fill = wanted & (used > 1.0 - FILL_RTOL) & (used < 1.0)
    if fill.any():
        Y[:, fill] /= used[fill]
        for m in np.flatnonzero(capped):
            fixed = float(Y[m, fill] @ count[fill])
            others = float(Y[m, ~fill] @ count[~fill])
            if fixed > cap[m] or (others <= 0 and fixed < cap[m] * (1.0 - CAP_RTOL)):
                return None
            if others > 0:
                Y[m, ~fill] *= (cap[m] - fixed) / others
        with np.errstate(divide="ignore", invalid="ignore"):
            used = np.where(eligible, Y / gamma, 0.0).sum(axis=0)
    if (used > 1.0 + CAP_RTOL).any():
        return None
    Y /= np.maximum(used, 1.0)[None, :]  # feasibility first: a cap may be missed by round-off
    rest = np.maximum(1.0 - np.minimum(used, 1.0), 0.0)

    for _ in range(STRUCTURE_ROUNDS):
        levels = _levels(gamma, count, weight, pairs, rest, free_user)
        if levels is None:
            return None
        logx, logL = levels
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ratio = np.exp(logx[:, None] - np.log(weight[:, None] * gamma) - logL[None, :])
        # ratio = V / L: 1 on the structure, >= 1 elsewhere for every free user
        relevant = eligible & free_user[:, None] & np.isfinite(logL)[None, :]
        slack = pairs & (ratio > 1.0 + EXACT_SLACK)
        below = relevant & ~pairs & (ratio < 1.0 - EXACT_SLACK)
        if not slack.any() and not below.any():
            break
        pairs = (pairs & ~slack) | below
    else:
        return None

    n_idx, c_idx = np.nonzero(pairs)
    share = _time_shares(
        n_idx,
        c_idx,
        count[c_idx] * gamma[n_idx, c_idx],
        np.maximum(approx.time_share[n_idx, c_idx], MIN_SHARE),
        np.exp(logx),
        rest,
    )
    if share is None:
        return None
    Y[n_idx, c_idx] = gamma[n_idx, c_idx] * share
    return Y


def _levels(
    gamma: FloatArray,
    count: FloatArray,
    weight: FloatArray,
    pairs: npt.NDArray[np.bool_],
    rest: FloatArray,
    free_user: npt.NDArray[np.bool_],
) -> tuple[FloatArray, FloatArray] | None:
    """log x of the free users and log L of the classes on the structure ``pairs`` (see
    :func:`exact_equilibrium`); classes outside it get log L = inf.  None if a free user is in
    no pair or a component has no time left to sell."""
    N, C = gamma.shape
    if (free_user & ~pairs.any(axis=1)).any():
        return None
    n_idx, c_idx = np.nonzero(pairs)
    graph = sp.csr_matrix(
        (np.ones(len(n_idx)), (n_idx, N + c_idx)), shape=(N + C, N + C)
    )
    ncomp, label = csgraph.connected_components(graph, directed=False)
    log_w = np.log(np.where(pairs, weight[:, None] * gamma, 1.0))
    logx = np.full(N, -np.inf)
    logL = np.full(C, np.inf)
    for comp in range(ncomp):
        nodes = np.flatnonzero(label == comp)
        root = int(nodes[-1])  # a class, if the component has one
        if root < N:
            continue  # a user in no pair (ruled out above) or with cap 0 / ineligible
        order, pred = csgraph.breadth_first_order(
            graph, root, directed=False, return_predecessors=True
        )
        logL[root - N] = 0.0
        for j in order[1:].tolist():
            p = int(pred[j])
            if j < N:  # user reached from class p
                logx[j] = log_w[j, p - N] + logL[p - N]
            else:  # class reached from user p
                logL[j - N] = logx[p] - log_w[p, j - N]
        cls = order[order >= N] - N
        usr = order[order < N]
        if len(usr) == 0:  # a class nobody (free) holds time at
            logL[cls] = np.inf
            continue
        sell = float(np.sum(count[cls] * rest[cls] * np.exp(-logL[cls])))
        spend = float(weight[usr].sum())
        if sell <= 0 or spend <= 0:
            return None
        shift = np.log(sell / spend)
        logL[cls] += shift
        logx[usr] += shift
    return logx, logL


def _time_shares(
    user: npt.NDArray[np.int64],
    cls: npt.NDArray[np.int64],
    rate: FloatArray,
    share: FloatArray,
    totals: FloatArray,
    rest: FloatArray,
) -> FloatArray | None:
    """Positive shares on the pairs with ``sum rate * share`` = totals per user and ``sum share``
    = rest per class, starting from ``share``.

    Each step changes every share by the same relative amount as its user's and class's scaling
    factors, linearised: ``share *= 1 + a[user] + b[cls]``, with (a, b) solving the sparse
    system ``J diag(share) J^T (a, b) = residual`` (J the row and column sums).  That keeps
    small shares small and converges quadratically from a good start, where alternating
    row and column scaling can take thousands of passes on these near-degenerate supports.  The
    system is singular once per connected component (rows and columns carry the same total),
    so one class equation per component is left out: the budget identity makes it hold anyway.
    """
    N, C = len(totals), len(rest)
    E = len(share)
    graph = sp.csr_matrix((np.ones(E), (user, N + cls)), shape=(N + C, N + C))
    _, label = csgraph.connected_components(graph, directed=False)
    keep_class = np.ones(C, dtype=bool)
    present = np.zeros(C, dtype=bool)
    present[cls] = True
    keep_class[~present] = False
    # one class per component leaves the system (the last one, in index order)
    last = {}
    for c in np.flatnonzero(present).tolist():
        last[int(label[N + c])] = c
    keep_class[list(last.values())] = False
    row_of_class = -np.ones(C, dtype=np.int64)
    row_of_class[keep_class] = N + np.arange(int(keep_class.sum()))
    users = totals > 0
    scale = np.where(users, 1.0 / np.where(users, totals, 1.0), 0.0)
    edge_rate = rate * scale[user]  # user rows measured relative to the total
    crow = row_of_class[cls]
    has_c = crow >= 0
    nrow = N + int(keep_class.sum())
    for _ in range(SCALING_ROUNDS):
        got_user = np.bincount(user, weights=edge_rate * share, minlength=N)
        got_class = np.bincount(cls, weights=share, minlength=C)
        res_user = np.where(users, 1.0 - got_user, 0.0)
        res_class = np.where(present, rest - got_class, 0.0)  # time nobody free can use
        kept = np.abs(res_class[keep_class]).max(initial=0.0)
        if max(np.abs(res_user).max(initial=0.0), kept) <= SCALING_RTOL:
            # the equations left out hold through the budget identity, up to its round-off
            return share if np.abs(res_class).max(initial=0.0) <= IDENTITY_RTOL else None
        # J: row n has edge_rate on its edges, row of class c has 1 on its edges
        jr = np.concatenate([user, crow[has_c]])
        jc = np.concatenate([np.arange(E), np.flatnonzero(has_c)])
        jv = np.concatenate([edge_rate, np.ones(int(has_c.sum()))])
        J = sp.csr_matrix((jv, (jr, jc)), shape=(nrow, E))
        M = (J @ sp.diags(share) @ J.T).tocsc()
        # users in no equation (total 0) get a unit diagonal so the system stays regular
        M = M + sp.diags(np.concatenate([np.where(users, 0.0, 1.0), np.zeros(nrow - N)]))
        rhs = np.concatenate([res_user, res_class[keep_class]])
        with warnings.catch_warnings():
            warnings.simplefilter("error", spla.MatrixRankWarning)
            try:
                y = spla.spsolve(M, rhs)
            except (RuntimeError, spla.MatrixRankWarning):
                return None
        if not np.all(np.isfinite(y)):
            return None
        step = J.T @ y  # relative change of each share
        # damped where a share would fall by more than 90 %: it may belong to no solution
        # (tight, but every equilibrium leaves it empty) and then shrinks geometrically
        fall = float(-step.min(initial=0.0))
        share = share * (1.0 + step * min(1.0, MAX_FALL / fall if fall > 0 else 1.0))
    return None
