"""MNW: maximum Nash welfare (TSF-ER paper, section 3.2 and Appendix 9.2, problem (12)).

The allocation maximising the product of the users' task counts, weighted:

    maximise   sum_n phi[n] log x[n]
    subject to x = totals of X,  X in chi(E),

with ``chi(E)`` the paper's feasible set, eq. (2), as :func:`~feasibility.task_model` builds it:
per-server capacities (RDM: every resource; TDM: the server's time), placement, the external
resources shared by all servers (``sum_n x[n] e[n, q] <= E[q]``) and backlogs ``x[n] <= n_n``.
(Problem (12) in the appendix writes the external constraint per server with DRF-alpha's
reservation ``alpha_s``; section 3.2 defines MNW over ``chi(E)``, and Fig. 2(a) needs the link
pooled: user 1's five tasks on server 2 take 5/6 of it.)

Why it is right, and what it guarantees.  The program is concave (log of a linear function) over
a polytope, so its optimum is global and the totals ``x`` are unique (the split across servers
need not be).  Its KKT conditions, with ``p[r] >= 0`` the price of capacity row r and ``mu[n]``
of n's backlog, read ``phi[n] / x[n] <= (A^T p)[v] + mu[n]`` for each of n's variables v, with
equality where n runs tasks: each user buys, at prices p, the bundle that maximises its tasks on
the budget ``phi[n]`` - a competitive equilibrium with incomes ``phi`` (CEEI, the paper's proof of
Theorem 2).  Hence, without backlogs, envy-freeness (n can afford m's bundle scaled by
``phi[n] / phi[m]``) and sharing incentive (the uniform split costs n exactly ``phi[n]``);
Pareto optimality always.  Not strategy-proof (the paper's counterexample, reproduced in the
tests).  A weight counts a user as ``phi[n]`` identical users of weight 1.  TDM without external
resources is the Eisenberg-Gale program of :mod:`psdsf_dist.core.eisenberg_gale`, so there MNW is
TDM PS-DSF.

Solved by Clarabel (an interior-point conic solver): one exponential cone per user for its log,
variables scaled to order 1 (each task variable in units of the tasks that fill its tightest
capacity alone, each total in units of the user's tasks alone over the number of users).  Users
that cannot run anything (eligible nowhere, backlog 0, or needing an external resource of
capacity 0) get nothing and are left out (their log would be -inf).  Near the optimum the
duality gap is quadratic in the totals' error, so the interior point alone gives them to ~1e-6
only (gap 1e-12, tight iterative refinement, Clarabel's equilibration off as in
:mod:`psdsf_dist.core.eisenberg_gale`).  They are then polished: the structure (which variables
run tasks, which rows are full, who is at its backlog) is read off the iterate, as in
``eisenberg_gale.on_support``, and Newton's method solves the optimum on it; the result is kept
only if every KKT condition of the whole program holds to 1e-9 (``exact``), else the interior
point's answer is returned.  On 300 random scenarios (K <= 40, N <= 12, with and without an
external link, RDM and TDM) 295 were polished.  Finally the allocation is scaled down onto the
feasible set (each server by its worst overshoot, then the external resources, then the
backlogs), so it never exceeds a capacity by round-off.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import clarabel  # type: ignore[import-untyped]  # ships no type information
import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from psdsf_dist.core.eisenberg_gale import log_program_settings
from psdsf_dist.errors import SolverError
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies.feasibility import task_model
from psdsf_dist.policies.lp import solve_lp

FloatArray = npt.NDArray[np.float64]

SOLVER_TOL = 1e-12  # Clarabel's gap and feasibility tolerances (its defaults are 1e-8)
ACCEPTED = ("Solved", "AlmostSolved")
NEWTON_STEPS = 12  # of the polish, at most (quadratic convergence: 2-4 steps from the iterate)
NEWTON_REG = 1e-13  # regularisation of the polish's KKT system (does not move its solution)
NEWTON_RTOL = 1e-13  # relative change of the totals at which the polish stops
KKT_RTOL = 1e-9  # the polished optimum's KKT conditions must hold to this
# Readings of the structure, the usual one first: a pair tight but empty at the optimum has a
# primal/dual ratio near 1, and then only a stricter or looser reading is right.
READINGS = (1.0, 1e3, 1e-3)


@dataclass(frozen=True)
class NashWelfare:
    """The MNW allocation with its equilibrium prices."""

    allocation: FloatArray  # N x K tasks
    # per row of ``task_model(scenario, mode, external=True)``: at the optimum
    # phi[n] / x[n] = (A^T prices)[v] + cap_prices[n] on every variable v where n runs tasks
    prices: FloatArray
    cap_prices: FloatArray  # N: of the backlogs, per task
    iterations: int
    exact: bool  # the KKT conditions hold to round-off (polished), not only to the solver's tol

    @property
    def totals(self) -> FloatArray:
        return np.asarray(self.allocation.sum(axis=1))


def max_nash_welfare(scenario: Scenario, mode: Mode, *, tol: float = SOLVER_TOL) -> NashWelfare:
    """The MNW allocation. Raises :class:`SolverError` if the conic solver does not succeed."""
    N = scenario.num_users
    model = task_model(scenario, mode, external=True)
    A = model.A.tocsc()
    b = model.b
    caps = scenario.max_tasks
    # a variable with a positive coefficient in a row with nothing to share must stay 0
    empty = b <= 0
    dead = np.asarray((A[np.flatnonzero(empty)] > 0).sum(axis=0)).ravel() > 0
    live = np.flatnonzero(~dead & (caps[model.user] > 0))
    prices = np.zeros(len(b))
    X = np.zeros((N, scenario.num_servers))
    if len(live) == 0:
        return NashWelfare(X, prices, np.zeros(N), 0, True)
    users, owner = np.unique(model.user[live], return_inverse=True)
    U, P = len(users), len(live)
    Al = A[:, live].tocsr()
    rows = np.flatnonzero(~empty & (np.diff(Al.indptr) > 0))
    Al = Al[rows]
    w = 1.0 / np.asarray(Al.max(axis=0).todense()).ravel()  # tasks filling the tightest row
    unit = np.bincount(owner, weights=w, minlength=U) / U
    phi = scenario.weight[users] / scenario.weight[users].sum()
    cap_u = caps[users]
    capped = np.flatnonzero(np.isfinite(cap_u))
    iy = P + np.arange(U)
    iz = P + U + np.arange(U)
    R = len(rows)
    # zero cone: y[u] - sum over u's variables v of (w[v] / unit[u]) zhat[v] = 0
    zero_block = sp.csr_matrix(
        (np.concatenate([np.ones(U), -w / unit[owner]]),
         (np.concatenate([np.arange(U), owner]), np.concatenate([iy, np.arange(P)]))),
        shape=(U, P + 2 * U),
    )
    nonneg_block = sp.vstack([
        sp.hstack([-sp.identity(P), sp.csr_matrix((P, 2 * U))]),  # zhat >= 0
        sp.hstack([Al @ sp.diags(w), sp.csr_matrix((R, 2 * U))]),  # capacities
        sp.csr_matrix((np.ones(len(capped)), (np.arange(len(capped)), iy[capped])),
                      shape=(len(capped), P + 2 * U)),  # backlogs
    ])
    # exponential cones (s, 1, y): exp(s) <= y
    er = np.concatenate([3 * np.arange(U), 3 * np.arange(U) + 2])
    ec = np.concatenate([iz, iy])
    exp_block = sp.csr_matrix((-np.ones(2 * U), (er, ec)), shape=(3 * U, P + 2 * U))
    Acon = sp.vstack([zero_block, nonneg_block, exp_block], format="csc")
    bcon = np.concatenate([np.zeros(U), np.zeros(P), b[rows], cap_u[capped] / unit[capped],
                           np.tile([0.0, 1.0, 0.0], U)])
    q = np.zeros(P + 2 * U)
    q[iz] = -phi
    cones = [
        clarabel.ZeroConeT(U),
        clarabel.NonnegativeConeT(P + R + len(capped)),
        *[clarabel.ExponentialConeT() for _ in range(U)],
    ]
    solution = clarabel.DefaultSolver(sp.csc_matrix((P + 2 * U, P + 2 * U)), q, Acon, bcon,
                                      cones, log_program_settings(tol)).solve()
    status = str(solution.status)
    if status not in ACCEPTED:
        raise SolverError(f"max Nash welfare: the conic solver stopped with status {status}")
    v = np.asarray(solution.x)
    dual = np.asarray(solution.z)
    slack = np.asarray(solution.s)
    program = _Program(
        B=sp.csr_matrix((w / unit[owner], (owner, np.arange(P))), shape=(U, P)),
        A=sp.csr_matrix(Al @ sp.diags(w)),
        b=b[rows],
        ycap=np.where(np.isfinite(cap_u), cap_u / np.where(np.isfinite(cap_u), unit, 1.0),
                      np.inf),
        phi=phi,
    )
    share, reduced = np.clip(v[:P], 0.0, None), dual[U: U + P]
    price, room = dual[U + P: U + P + R], slack[U + P: U + P + R]
    cap_dual = _spread(dual[U + P + R: U + P + R + len(capped)], capped, U)
    cap_room = _spread(slack[U + P + R: U + P + R + len(capped)], capped, U)
    polished = None
    for reading in READINGS:  # at an interior-point iterate: primal against dual, see there
        approx = _Iterate(share, price, cap_dual, share > reading * reduced,
                          price > reading * room, cap_dual > reading * cap_room)
        polished = _polish(program, approx)
        if polished is not None:
            break
    best = polished if polished is not None else approx
    X[model.user[live], model.server[live]] = best.zhat * w
    scale = scenario.weight[users].sum()  # the program's objective is divided by it
    prices[rows] = scale * best.row_price
    cap_prices = np.zeros(N)
    cap_prices[users] = scale * best.cap_price / unit
    return NashWelfare(onto_feasible(scenario, X, mode), prices, cap_prices,
                       int(solution.iterations), polished is not None)


def _spread(values: FloatArray, index: npt.NDArray[np.intp], size: int) -> FloatArray:
    out = np.zeros(size)
    out[index] = values
    return out


@dataclass(frozen=True)
class _Program:
    """The live part of the program in scaled units: max phi . log y, y = B zhat,
    A zhat <= b, y <= ycap, zhat >= 0."""

    B: sp.csr_matrix  # U x P
    A: sp.csr_matrix  # R x P
    b: FloatArray
    ycap: FloatArray  # U, inf where unlimited
    phi: FloatArray  # U, summing to 1


@dataclass(frozen=True)
class _Iterate:
    """A solution with its multipliers and the structure read off it."""

    zhat: FloatArray
    row_price: FloatArray
    cap_price: FloatArray
    support: npt.NDArray[np.bool_]  # variables that run tasks
    tight: npt.NDArray[np.bool_]  # rows that are full
    at_cap: npt.NDArray[np.bool_]  # users at their backlog


def _polish(program: _Program, approx: _Iterate) -> _Iterate | None:
    """The exact optimum on the structure read off the interior-point iterate, or None.

    On that structure (support, full rows, users at their backlog) the optimum solves
    ``max phi . log y`` with ``y = B z`` and the full rows and backlogs ``E z = rhs`` as
    equalities: Newton's method on its KKT system in ``(z, y, nu, lam)`` (tiny regularisations
    keep it non-singular where the split is not unique or the full rows are redundant; they
    shift its solution by ~1e-13 relative).  The result is accepted only if
    it satisfies every KKT condition of the whole program to round-off: feasible, multipliers
    >= 0, and no variable offering a user more tasks per unit of price than it pays.
    """
    rows = np.flatnonzero(approx.tight)
    capped = np.flatnonzero(approx.at_cap & np.isfinite(program.ycap))
    rhs = np.concatenate([program.b[rows], program.ycap[capped]])
    zhat = np.where(approx.support, np.maximum(approx.zhat, 1e-300), 0.0)
    lam = np.zeros(len(rhs))
    for _ in range(NEWTON_STEPS):
        S = np.flatnonzero(zhat > 0)
        BS = program.B[:, S]
        E = sp.vstack([program.A[rows][:, S], BS[capped]], format="csr")
        z = zhat[S]
        y = BS @ z
        if len(S) == 0 or (y <= 0).any():
            return None
        # with the totals as variables of their own (y = B z, multiplier nu = phi / y) the
        # system stays as sparse as B and E: the Hessian of phi . log y is diagonal in y
        U, s, m = len(y), len(S), len(rhs)
        I_u = sp.identity(U)
        KKT = sp.bmat([
            [-NEWTON_REG * sp.identity(s), None, BS.T, -E.T],
            [None, -sp.diags(program.phi / y**2), -I_u, None],
            [BS, -I_u, NEWTON_REG * I_u, None],
            [-E, None, None, NEWTON_REG * sp.identity(m)],
        ], format="csc")
        with warnings.catch_warnings():
            warnings.simplefilter("error", spla.MatrixRankWarning)
            try:
                step = spla.spsolve(KKT, np.concatenate([
                    np.zeros(s), -program.phi / y, np.zeros(U), E @ z - rhs]))
            except (RuntimeError, spla.MatrixRankWarning):
                return None
        if not np.all(np.isfinite(step)):
            return None
        dz, lam = step[:s], step[s + 2 * U:]
        # a share the step would make negative belongs to no optimum on this structure: it
        # leaves the support (the KKT check below judges the outcome)
        crossing = z + dz <= 0
        if crossing.any():  # stop at the first to reach 0; all that would cross leave
            first = float((z[crossing] / -dz[crossing]).min())
            zhat[S] = np.where(crossing, 0.0, np.maximum(z + first * dz, 0.0))
            continue
        zhat[S] = z + dz
        # the split need not be unique, the totals are: stop when they no longer move
        if np.abs(BS @ dz).max() <= NEWTON_RTOL * y.max():
            break
    row_price = np.zeros(len(program.b))
    row_price[rows] = lam[: len(rows)]
    cap_price = np.zeros(len(program.phi))
    cap_price[capped] = lam[len(rows):]
    if not _kkt_holds(program, zhat, row_price, cap_price):
        # degenerate (more full rows than needed): the regularised multipliers need not be the
        # nonnegative ones that exist; find those by an LP
        found = _multipliers(program, zhat)
        if found is None or not _kkt_holds(program, zhat, *found):
            return None
        row_price, cap_price = found
    return _Iterate(zhat, row_price, cap_price, approx.support, approx.tight, approx.at_cap)


def _multipliers(program: _Program, zhat: FloatArray) -> tuple[FloatArray, FloatArray] | None:
    """Nonnegative prices of the full rows and reached backlogs at which every variable costs at
    least its user's ``phi / y`` per task, exactly that where it runs tasks; None if none."""
    y = program.B @ zhat
    full = np.flatnonzero(program.A @ zhat >= program.b * (1 - KKT_RTOL))
    capped = np.flatnonzero(y >= program.ycap * (1 - KKT_RTOL))
    B = program.B.tocsc()
    owner, rate = B.indices, B.data
    bang = program.phi[owner] / y[owner] * rate
    P = len(zhat)
    C = sp.csr_matrix((rate[np.isin(owner, capped)],
                       (np.flatnonzero(np.isin(owner, capped)),
                        np.searchsorted(capped, owner[np.isin(owner, capped)]))),
                      shape=(P, len(capped)))
    M = sp.hstack([program.A[full].T, C], format="csr")  # P x (rows + caps): cost per variable
    if M.shape[1] == 0:
        return None
    runs = zhat > 0
    res = solve_lp(np.ones(M.shape[1]), -M[~runs], -bang[~runs], M[runs], bang[runs])
    if not res.optimal:
        return None
    row_price = np.zeros(len(program.b))
    row_price[full] = res.x[: len(full)]
    cap_price = np.zeros(len(program.phi))
    cap_price[capped] = res.x[len(full):]
    return row_price, cap_price


def _kkt_holds(program: _Program, zhat: FloatArray, row_price: FloatArray,
               cap_price: FloatArray) -> bool:
    """Every KKT condition of the scaled program, to ``KKT_RTOL``."""
    y = program.B @ zhat
    if (y <= 0).any():
        return False
    load = program.A @ zhat
    if (load > program.b * (1 + KKT_RTOL)).any() or (y > program.ycap * (1 + KKT_RTOL)).any():
        return False
    top = max(float(np.abs(row_price).max(initial=0.0)), float(np.abs(cap_price).max()))
    if (row_price < -KKT_RTOL * top).any() or (cap_price < -KKT_RTOL * top).any():
        return False
    # per variable: tasks bought per unit of price <= what the user pays for its tasks
    B = program.B.tocsc()
    owner = B.indices  # one entry per column: the variable's user
    rate = B.data  # tasks of y per unit of zhat
    bang = program.phi[owner] / y[owner] * rate
    cost = program.A.T @ row_price + cap_price[owner] * rate
    if (bang > cost * (1 + KKT_RTOL) + KKT_RTOL * top * rate).any():
        return False
    return bool(np.all(np.abs(bang - cost)[zhat > 0] <= KKT_RTOL * (np.abs(cost[zhat > 0]) + top
                                                                     * rate[zhat > 0])))


def onto_feasible(scenario: Scenario, X: FloatArray, mode: Mode) -> FloatArray:
    """Scale an allocation that overshoots by the solver's tolerance down into the feasible set.

    Each step only lowers entries, so it keeps what the earlier ones established: every server's
    column by its largest relative overshoot, then everything by the external resources' largest,
    then each user's row to its backlog.  A feasible allocation is returned unchanged.
    """
    cons = scenario.consumption_tensor(mode)  # K x N x M'
    cap = scenario.server_capacity(mode)  # K x M'
    used = np.einsum("nk,knm->km", X, cons)
    with np.errstate(divide="ignore", invalid="ignore"):
        load = np.where(cap > 0, used / cap, 0.0).max(axis=1, initial=0.0)
    X = X / np.maximum(load, 1.0)[None, :]
    E = scenario.external_capacity
    if len(E):
        use = X.sum(axis=1) @ scenario.external_demand
        with np.errstate(divide="ignore", invalid="ignore"):
            over = np.where(E > 0, use / E, 0.0).max(initial=0.0)
        X = X / max(over, 1.0)
    x = X.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        shrink = np.where(x > scenario.max_tasks, scenario.max_tasks / x, 1.0)
    return np.asarray(X * shrink[:, None])
