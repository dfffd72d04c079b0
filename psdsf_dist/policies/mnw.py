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
capacity 0) get nothing and are left out (their log would be -inf).  The duality gap is driven
to 1e-12 with tight iterative refinement and Clarabel's own equilibration off (the variables are
already scaled), as in :mod:`psdsf_dist.core.eisenberg_gale`: near the optimum the gap is
quadratic in the totals' error, so a gap of 1e-9 would leave them accurate to only ~3e-5; at
1e-12 they are to ~1e-7 or better.  The optimum is then scaled down onto the feasible set (each
server by its worst overshoot, then the external resources, then the backlogs), so the
allocation returned never exceeds a capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

import clarabel  # type: ignore[import-untyped]  # ships no type information
import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from psdsf_dist.errors import SolverError
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies.feasibility import task_model

FloatArray = npt.NDArray[np.float64]

SOLVER_TOL = 1e-12  # Clarabel's gap and feasibility tolerances (its defaults are 1e-8)
ACCEPTED = ("Solved", "AlmostSolved")


@dataclass(frozen=True)
class NashWelfare:
    """The MNW allocation with its equilibrium prices."""

    allocation: FloatArray  # N x K tasks
    # per row of ``task_model(scenario, mode, external=True)``: at the optimum
    # phi[n] / x[n] = (A^T prices)[v] + cap_prices[n] on every variable v where n runs tasks
    prices: FloatArray
    cap_prices: FloatArray  # N: of the backlogs, per task
    iterations: int

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
        return NashWelfare(X, prices, np.zeros(N), 0)
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
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.tol_gap_abs = tol
    settings.tol_gap_rel = tol
    settings.tol_feas = tol
    settings.tol_ktratio = tol
    settings.iterative_refinement_reltol = 1e-15
    settings.iterative_refinement_abstol = 1e-15
    settings.iterative_refinement_max_iter = 30
    settings.equilibrate_enable = False
    solution = clarabel.DefaultSolver(sp.csc_matrix((P + 2 * U, P + 2 * U)), q, Acon, bcon,
                                      cones, settings).solve()
    status = str(solution.status)
    if status not in ACCEPTED:
        raise SolverError(f"max Nash welfare: the conic solver stopped with status {status}")
    z = np.clip(np.asarray(solution.x)[:P], 0.0, None) * w
    np.add.at(X, (model.user[live], model.server[live]), z)
    dual = np.asarray(solution.z)
    scale = scenario.weight[users].sum()  # the solver's objective is divided by it
    prices[rows] = scale * dual[U + P: U + P + R]
    cap_prices = np.zeros(N)
    cap_prices[users[capped]] = scale * dual[U + P + R: U + P + R + len(capped)] / unit[capped]
    return NashWelfare(onto_feasible(scenario, X, mode), prices, cap_prices,
                       int(solution.iterations))


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
