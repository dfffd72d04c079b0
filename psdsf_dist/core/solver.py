"""Centralised exact PS-DSF solver: convex start, class-aware Gauss-Seidel sweeps, exact finish.

Why not "sweep until nothing changes": on nearly degenerate instances sequential sweeps creep
by tiny steps while still far from a PS-DSF allocation.  This solver stops only on the
certificate (:mod:`certificate`, relative tolerance 1e-9 by default) and gets there fast by three
ideas:

1. **Classes of identical servers are solved as one.**  Servers with the same capacities and the
   same gamma for every user are grouped; we look for the PS-DSF allocation in which the members
   of a class hold identical columns.  A sweep visits each class once and runs the server
   procedure with ``gain`` = class size: the predicted total ``x + k (X_new - X_old)`` is then
   *exact* (all k members move together), so one visit is the exact best response of the whole
   class.  A symmetric fixed point is a PS-DSF allocation of the full cluster, and the certificate
   is checked on it.  The paper's 120 servers are 4 classes; the 12,583 Google machines are 10.

2. **A convex start where there are many classes** (``CONVEX_MIN_CLASSES``; all-distinct
   servers).  TDM PS-DSF is the equilibrium of a linear Fisher market, the optimum of the
   Eisenberg-Gale program (:mod:`eisenberg_gale`), which an interior-point method solves in
   20-60 iterations however degenerate the instance.  In TDM that is the whole solve: the
   optimum's support is read off the interior-point iterate and the equilibrium on it computed
   exactly (:func:`~psdsf_dist.core.eisenberg_gale.exact_equilibrium`), no sweep.  RDM PS-DSF is not
   a convex program, but a TDM allocation is RDM-feasible and on the clusters measured it has
   nearly the RDM structure already: the sweeps start from it and usually certify within a few
   sweeps, where from per-server DRF they needed hundreds (``experiments/results/core.md``).
   Should the polish not certify, the TDM sweeps start from the optimum too.

3. **Exact finish by an active-set linear solve.**  After a sweep, the water-fill at every class
   exposes the structure of the current allocation: which users hold tasks where, which users
   stopped at their cap, and which resources saturated in which phase of the water-fill.  On that
   structure the PS-DSF conditions are linear equations: for every positive (n, c),
   ``x[n] = phi[n] gamma[n, c] L[c, g]`` (users frozen in the same phase share a level),
   ``x[n] = sum_c count[c] Y[n, c]``, capped users have ``x[n] = max_tasks[n]``, and every
   saturated resource is used up.  The smallest change of the iterate that satisfies them (a
   sparse LU of the augmented system) gives a candidate; negative entries are clipped, columns
   scaled back into capacity, and the candidate is kept only if its certificate holds, else the
   sweeps continue.  Once sweeps have found the right structure (a few sweeps, even where they
   would need thousands to converge numerically) the solve lands on the allocation exactly.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from psdsf_dist.core.certificate import DEFAULT_RTOL, Certificate, certificate, certify_columns
from psdsf_dist.core.eisenberg_gale import FisherEquilibrium, eisenberg_gale, exact_equilibrium
from psdsf_dist.core.server_procedure import server_water_fill
from psdsf_dist.core.water_fill import WaterFill
from psdsf_dist.errors import SolverError
from psdsf_dist.model.arrays import demand_gamma
from psdsf_dist.model.defaults import DEFAULT_MODE
from psdsf_dist.model.scenario import Mode, Scenario

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

POSITIVE = 1e-13  # relative to gamma: below this an entry is treated as zero in the structure
ACTIVE_SET_ROUNDS = 6  # re-solves after dropping entries the solve drove negative
COARSE_MIN_CLASSES = 64  # distinct servers from which a coarse warm start is tried
COARSE_STEP = 1.25  # capacities within this factor fall into one coarse class
COARSE_RTOL = 1e-6  # the warm start need not be exact
COARSE_TIME_SHARE = 0.2  # of the time limit, at most, for the warm start
MAX_EXACT_WAIT = 32  # most sweeps between two exact attempts
DENSE_LIMIT = 100  # unknowns up to which the exact step uses a dense least-squares solve
AUGMENTED_EPS = 1e-12  # regularisation of the exact step's sparse solve, relative to A's scale
CONVEX_MIN_CLASSES = 8  # from this many classes the convex program starts (or ends) the solve


@dataclass(frozen=True)
class ServerClasses:
    """Servers grouped into classes of identical ones (same capacity and gamma for every user)."""

    representative: IntArray  # C: one member per class
    count: FloatArray  # C: members per class
    member_class: IntArray  # K: class of each server

    @classmethod
    def of(cls, scenario: Scenario) -> ServerClasses:
        key = np.hstack([scenario.capacity, scenario.gamma.T, scenario.demand_gamma.T])
        _, first, inverse, counts = np.unique(
            key, axis=0, return_index=True, return_inverse=True, return_counts=True
        )
        order = np.argsort(first)  # classes in order of first appearance
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        return cls(
            representative=first[order].astype(np.int64),
            count=counts[order].astype(float),
            member_class=rank[np.asarray(inverse).ravel()].astype(np.int64),
        )


@dataclass(frozen=True)
class Solution:
    """A certified PS-DSF allocation."""

    scenario: Scenario
    mode: Mode
    allocation: FloatArray  # N x K
    certificate: Certificate
    sweeps: int
    exact_solves: int
    seconds: float

    @property
    def totals(self) -> FloatArray:
        return np.asarray(self.allocation.sum(axis=1))


def solve(
    scenario: Scenario,
    mode: Mode = DEFAULT_MODE,
    *,
    rtol: float = DEFAULT_RTOL,
    max_sweeps: int = 20000,
    time_limit: float = 600.0,
    convex: bool | None = None,
    start: FloatArray | None = None,
) -> Solution:
    """Compute a PS-DSF allocation whose certificate holds to ``rtol``.

    ``convex`` says whether to start from the Eisenberg-Gale program (TDM: usually the whole
    solve); by default it is used from ``CONVEX_MIN_CLASSES`` classes of servers on.
    ``start`` (N x K): sweep from this allocation instead (each class from the mean of its
    members' columns, fitted into capacity; no convex start), so that where RDM PS-DSF is not
    unique the answer is one the sweeps reach from there rather than from per-server DRF.
    Raises :class:`SolverError` if the budget runs out first (never returns an uncertified one).
    """
    mode = scenario.check_mode(mode)
    t0 = time.perf_counter()
    classes = ServerClasses.of(scenario)
    if start is not None:
        state = _ClassState.from_allocation(scenario, mode, classes, start)
        state, sweeps, exact_solves = _iterate(state, rtol, max_sweeps, t0 + time_limit)
        return _solution(state, rtol, sweeps, exact_solves, t0)
    state = _ClassState.start(scenario, mode, classes)
    if convex is None:
        convex = len(classes.count) >= CONVEX_MIN_CLASSES
    if convex:
        market = _tdm_market(scenario, classes)
        if market is not None:
            if mode == "tdm":
                exact = _tdm_polish(scenario, classes, market, rtol)
                if exact is not None:
                    return _solution(exact, rtol, 0, 1, t0)
            # A TDM allocation is feasible in RDM too: the sweeps start from it.
            state = _ClassState(scenario, mode, classes, _market_columns(scenario, classes, market))
            state.fit_capacity()
        else:
            warm = _coarse_warm_start(scenario, mode, classes, time_limit)
            if warm is not None:
                state = _ClassState(scenario, mode, classes, warm)
    state, sweeps, exact_solves = _iterate(state, rtol, max_sweeps, t0 + time_limit)
    return _solution(state, rtol, sweeps, exact_solves, t0)


def solve_tdm_convex(scenario: Scenario, *, rtol: float = DEFAULT_RTOL) -> Solution:
    """TDM PS-DSF from the Eisenberg-Gale program alone (no sweeps), certified to ``rtol``.

    Raises :class:`SolverError` if the program fails or its polished optimum does not certify.
    """
    scenario.check_mode("tdm")
    t0 = time.perf_counter()
    classes = ServerClasses.of(scenario)
    market = _tdm_market(scenario, classes)
    state = None if market is None else _tdm_polish(scenario, classes, market, rtol)
    if state is None:
        raise SolverError("the Eisenberg-Gale optimum did not polish to a certified allocation")
    return _solution(state, rtol, 0, 1, t0)


def _solution(state: _ClassState, rtol: float, sweeps: int, exact: int, t0: float) -> Solution:
    X = state.expand()
    final = certificate(state.scenario, X, mode=state.mode, rtol=rtol)
    if not final.holds:  # defensive: the class certificate should imply the full one
        raise SolverError(f"expanded allocation failed its certificate: {final.violations[:1]}")
    return Solution(
        state.scenario, state.mode, X, final, sweeps, exact, time.perf_counter() - t0
    )


def _market_inputs(
    scenario: Scenario, classes: ServerClasses
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    gamma = np.ascontiguousarray(scenario.gamma[:, classes.representative])
    return gamma, classes.count, scenario.weight, scenario.max_tasks


def _tdm_market(scenario: Scenario, classes: ServerClasses) -> FisherEquilibrium | None:
    """The interior-point optimum of the Eisenberg-Gale program over the classes."""
    return eisenberg_gale(*_market_inputs(scenario, classes))


def _market_columns(
    scenario: Scenario, classes: ServerClasses, market: FisherEquilibrium
) -> FloatArray:
    """Tasks per class member of the (approximate) optimum."""
    return np.asarray(scenario.gamma[:, classes.representative] * market.time_share)


def _tdm_polish(
    scenario: Scenario, classes: ServerClasses, market: FisherEquilibrium, rtol: float
) -> _ClassState | None:
    """The Eisenberg-Gale optimum (:mod:`eisenberg_gale`), polished to the certificate.

    The interior-point optimum is accurate to ~1e-9 in the objective, which leaves the totals
    only ~1e-4 accurate, but it tells the support of the optimum (which users hold time at which
    classes) clearly; :func:`~psdsf_dist.core.eisenberg_gale.exact_equilibrium` solves the
    equilibrium on that support directly (to round-off).  None if that does not certify (the
    sweeps then start from the optimum).
    """
    Y = exact_equilibrium(*_market_inputs(scenario, classes), market)
    if Y is None:
        return None
    polished = _ClassState(scenario, "tdm", classes, Y)
    return polished if polished.certify(rtol).holds else None


def _iterate(
    state: _ClassState, rtol: float, max_sweeps: int, deadline: float
) -> tuple[_ClassState, int, int]:
    """Sweep, with exact attempts, until the certificate holds; returns (state, sweeps, exact)."""
    sweeps = exact = 0
    best = state.certify(rtol)
    last_structure: tuple[bytes, ...] | None = None
    since_exact = 0
    # Sweeps before the first exact attempt and between attempts; doubles after each miss (an
    # attempt costs a few sweeps; and where sweeps converge quickly their answer is the natural one,
    # e.g. the paper's own split of Table IV, among equally valid PS-DSF allocations).
    wait = 4
    while not best.holds:
        if sweeps >= max_sweeps or time.perf_counter() > deadline:
            raise SolverError(
                f"no certified PS-DSF allocation after {sweeps} sweeps and {exact} exact solves; "
                f"residual {best.residual:.3g} > {rtol:g}"
            )
        fills = state.sweep()
        sweeps += 1
        since_exact += 1
        best = state.certify(rtol)
        if best.holds:
            break
        structure = _structure_key(fills, state)
        stable = structure == last_structure
        last_structure = structure
        if since_exact < wait or not (stable or since_exact >= 2 * wait):
            continue
        since_exact = 0
        exact += 1
        candidate = state.exact_step(fills)
        if candidate is not None:
            # Only a certified candidate replaces the sweep state: a candidate built on a
            # not-yet-right structure can be closer by the residual yet farther for sweeps.
            trial = _ClassState(state.scenario, state.mode, state.classes, candidate)
            tcert = trial.certify(rtol)
            if tcert.holds:
                return trial, sweeps, exact
        wait = min(2 * wait, MAX_EXACT_WAIT)
    return state, sweeps, exact


def _coarse_warm_start(
    scenario: Scenario, mode: Mode, classes: ServerClasses, time_limit: float
) -> FloatArray | None:
    """Start a cluster of many distinct servers from the solution of its coarse version.

    Servers whose capacities agree within a factor ``COARSE_STEP`` (and with the same placement)
    are merged into one class with their mean capacity; that small problem is solved exactly
    (to a loose tolerance) and its columns, scaled into each server's own capacity, start the
    sweeps.  It roughly halves the sweeps on clusters of perturbed machine types.
    """
    if len(classes.count) < COARSE_MIN_CLASSES or not np.isnan(scenario.gamma_given).all():
        return None
    reps = classes.representative
    cap = scenario.capacity[reps]
    with np.errstate(divide="ignore"):
        grid = np.where(
            cap > 0, np.round(np.log(np.maximum(cap, 1e-300)) / np.log(COARSE_STEP)), -1e9
        )
    key = np.hstack([grid, scenario.placement[:, reps].T.astype(float)])
    _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
    inverse = np.asarray(inverse).ravel()
    ncoarse = len(first)
    if ncoarse > len(reps) // 2:
        return None
    members = np.asarray(np.bincount(inverse, weights=classes.count), dtype=float)
    coarse_cap = np.zeros((ncoarse, scenario.num_resources))
    np.add.at(coarse_cap, inverse, cap * classes.count[:, None])
    coarse_cap /= members[:, None]
    placement = scenario.placement[:, reps[first]]
    dg = demand_gamma(coarse_cap, scenario.demand) * placement
    names = tuple(f"coarse-{c}" for c in range(ncoarse))
    coarse = dataclasses.replace(
        scenario,
        server_names=names,
        server_class=names,
        server_labels=tuple({} for _ in names),
        capacity=coarse_cap,
        placement=placement,
        gamma=dg,
        demand_gamma=dg,
        gamma_given=np.full(dg.shape, np.nan),
    )
    coarse_classes = ServerClasses(
        representative=np.arange(ncoarse, dtype=np.int64),
        count=members,
        member_class=np.arange(ncoarse, dtype=np.int64),
    )
    start = _ClassState.start(coarse, mode, coarse_classes)
    try:
        solved, _, _ = _iterate(
            start, COARSE_RTOL, 2000, time.perf_counter() + COARSE_TIME_SHARE * time_limit
        )
    except SolverError:
        return None
    fine = _ClassState(scenario, mode, classes, solved.Y[:, inverse].copy())
    fine.fit_capacity()
    return fine.Y


class _ClassState:
    """Class-representative columns Y (N x C) and user totals x = Y @ count."""

    def __init__(self, scenario: Scenario, mode: Mode, classes: ServerClasses, Y: FloatArray):
        self.scenario = scenario
        self.mode = mode
        self.classes = classes
        self.Y = Y
        self.x = Y @ classes.count
        reps = classes.representative
        self.capacity = scenario.server_capacity(mode)[reps]
        self.consumption = [scenario.consumption(int(i), mode) for i in reps]
        self.gamma = np.ascontiguousarray(scenario.gamma[:, reps])

    @classmethod
    def start(cls, scenario: Scenario, mode: Mode, classes: ServerClasses) -> _ClassState:
        state = cls(scenario, mode, classes, np.zeros((scenario.num_users, len(classes.count))))
        # The paper's initialisation: per-server DRF (every server water-fills with no offsets).
        for c in range(state.Y.shape[1]):
            state.Y[:, c] = state._water_fill(c, np.zeros(scenario.num_users)).column
        state.x = state.Y @ classes.count
        state.cap_totals()
        return state

    @classmethod
    def from_allocation(cls, scenario: Scenario, mode: Mode, classes: ServerClasses,
                        allocation: FloatArray) -> _ClassState:
        """A start from an N x K allocation: each class from the mean of its members' columns
        (ineligible entries dropped), fitted into capacity, caps applied."""
        X0 = np.asarray(allocation, dtype=float)
        if X0.shape != (scenario.num_users, scenario.num_servers):
            raise ValueError(f"start must be {scenario.num_users} x {scenario.num_servers}, "
                             f"got {X0.shape}")
        sums = np.zeros((scenario.num_users, len(classes.count)))
        np.add.at(sums.T, classes.member_class, np.maximum(np.nan_to_num(X0), 0.0).T)
        Y = np.where(scenario.gamma[:, classes.representative] > 0, sums / classes.count, 0.0)
        state = cls(scenario, mode, classes, Y)
        state.fit_capacity()
        state.cap_totals()
        return state

    def cap_totals(self) -> None:
        """A user's cap binds on its total, not per server: a user over it has every column
        scaled down to it."""
        over = self.x > self.scenario.max_tasks
        if over.any():
            self.Y[over] *= (self.scenario.max_tasks[over] / self.x[over])[:, None]
            self.x = self.Y @ self.classes.count

    def _water_fill(self, c: int, totals: FloatArray | None = None) -> WaterFill:
        """The class's best response to ``totals`` (default: the current ones)."""
        k = self.classes.count[c]
        return server_water_fill(
            self.capacity[c],
            self.consumption[c],
            self.gamma[:, c],
            self.scenario.weight,
            self.x if totals is None else totals,
            self.Y[:, c],
            self.scenario.max_tasks,
            mode=self.mode,
            gain=None if k == 1 else k,
        )

    def sweep(self) -> list[WaterFill]:
        """One Gauss-Seidel pass over the classes with fresh totals."""
        fills = []
        for c in range(self.Y.shape[1]):
            wf = self._water_fill(c)
            new = wf.column
            self.x += self.classes.count[c] * (new - self.Y[:, c])
            self.Y[:, c] = new
            fills.append(wf)
        self.x = np.maximum(self.x, 0.0)
        return fills

    def certify(self, rtol: float) -> Certificate:
        return certify_columns(
            self.scenario,
            self.Y,
            self.x,
            self.classes.representative,
            mode=self.mode,
            rtol=rtol,
            explain=False,
        )

    def expand(self) -> FloatArray:
        return np.asarray(self.Y[:, self.classes.member_class])

    def exact_step(self, fills: list[WaterFill]) -> FloatArray | None:
        """Solve the PS-DSF equations on the structure of the last sweep (see module doc).

        Users at their cap are pinned to their current split, rescaled to the cap exactly: how a
        capped user's tasks are split is not determined by the conditions, and pinning keeps the
        system square.  Entries the solve drives negative leave the structure and the system is
        solved again (a few active-set rounds).
        """
        N, C = self.Y.shape
        positive = self.positive()
        capped = np.zeros(N, dtype=bool)
        for c, wf in enumerate(fills):
            capped |= wf.at_upper & positive[:, c]
        fixed = np.zeros((N, C))
        if capped.any():
            scale = self.scenario.max_tasks[capped] / np.maximum(self.x[capped], 1e-300)
            fixed[capped] = self.Y[capped] * scale[:, None]
        free = positive & ~capped[:, None]
        Y: FloatArray | None = None
        for _ in range(ACTIVE_SET_ROUNDS):
            Y = self._solve_structure(fills, free, fixed)
            if Y is None:
                return None
            negative = free & (Y < -POSITIVE * np.maximum(self.gamma, 1.0))
            if not negative.any():
                break
            free &= ~negative
        if Y is None:
            return None
        # back into capacity (round-off or a wrong structure may overshoot)
        return self.fitted(np.maximum(Y, 0.0))

    def fitted(self, Y: FloatArray) -> FloatArray:
        """``Y`` with every column scaled down just enough to fit its server's capacity."""
        used = np.einsum("nc,cnm->cm", Y, np.stack(self.consumption))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(self.capacity > 0, used / self.capacity, 0.0).max(axis=1)
        return np.asarray(Y / np.maximum(ratio, 1.0)[None, :])

    def fit_capacity(self) -> None:
        self.Y = self.fitted(self.Y)
        self.x = self.Y @ self.classes.count

    def _solve_structure(
        self, fills: list[WaterFill], free: npt.NDArray[np.bool_], fixed: FloatArray
    ) -> FloatArray | None:
        N, C = self.Y.shape
        count = self.classes.count
        phi = self.scenario.weight
        pn, pc = np.nonzero(free)
        nvar = len(pn)
        var = -np.ones((N, C), dtype=np.int64)
        var[pn, pc] = np.arange(nvar)
        rows: list[npt.NDArray[np.int64]] = []
        cols: list[npt.NDArray[np.int64]] = []
        vals: list[FloatArray] = []
        rhs: list[FloatArray] = []
        nrow = 0

        def add_rows(r: npt.NDArray[np.int64], c: npt.NDArray[np.int64], v: FloatArray,
                     b: FloatArray) -> None:
            nonlocal nrow
            rows.append(r + nrow)
            cols.append(c)
            vals.append(v)
            rhs.append(b)
            nrow += len(b)

        # Unknowns: the free entries, one level per (class, phase) holding them, and the total
        # of every user with free entries (a user's total as its own unknown keeps the system
        # as sparse as the structure: O(entries), not O(entries x servers per user)).
        group = np.array([fills[c].group[n] for n, c in zip(pn.tolist(), pc.tolist(),
                                                              strict=True)], dtype=np.int64)
        level_keys, level_of = np.unique(pc * (N + 2) + group + 1, return_inverse=True)
        level_of = np.asarray(level_of).ravel()
        nlevel = len(level_keys)
        users, user_of = np.unique(pn, return_inverse=True)
        user_of = np.asarray(user_of).ravel()
        level_var = {
            (int(k // (N + 2)), int(k % (N + 2)) - 1): nvar + j for j, k in enumerate(level_keys)
        }
        total_col = nvar + nlevel + np.arange(len(users))
        scale = 1.0 / np.maximum(self.x[users], 1e-300)  # rows about user n: relative to x[n]
        # x[n] = phi[n] gamma[n, c] L[c, g] for every free positive (n, c)
        ne = nvar
        w = phi[pn] * self.gamma[pn, pc] * scale[user_of]
        add_rows(
            np.concatenate([np.arange(ne), np.arange(ne)]),
            np.concatenate([total_col[user_of], nvar + level_of]),
            np.concatenate([scale[user_of], -w]),
            np.zeros(ne),
        )
        # x[n] = sum_c count[c] Y[n, c]
        add_rows(
            np.concatenate([np.arange(len(users)), user_of]),
            np.concatenate([total_col, np.arange(nvar)]),
            np.concatenate([scale, -count[pc] * scale[user_of]]),
            np.zeros(len(users)),
        )
        # every saturated resource is used up; scaled by 1/capacity
        for c, wf in enumerate(fills):
            cons = self.consumption[c]
            for r in np.unique(np.concatenate([np.zeros(0, np.int64), *wf.saturated])).tolist():
                capr = float(self.capacity[c, r])
                on = np.flatnonzero(free[:, c] & (cons[:, r] > 0))
                pinned = float(cons[:, r] @ fixed[:, c])
                add_rows(
                    np.zeros(len(on), dtype=np.int64),
                    var[on, c],
                    cons[on, r] / capr,
                    np.array([1.0 - pinned / capr]),
                )
        nunk = nvar + nlevel + len(users)
        Y = fixed.copy()
        if nunk == 0:
            return Y
        A = sp.csr_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
            shape=(nrow, nunk),
        )
        b = np.concatenate(rhs)
        # The conditions fix levels and totals but often leave how a user's tasks split across
        # servers free (PS-DSF is not unique).  Solve for the smallest change from the current
        # iterate, which is non-negative, so the solution rarely leaves the non-negative orthant.
        z0 = np.empty(nunk)
        z0[:nvar] = self.Y[pn, pc]
        for (c, g), j in level_var.items():
            lvl = float(fills[c].level[g])
            z0[j] = lvl if np.isfinite(lvl) else 0.0
        z0[total_col] = self.x[users]
        r = b - A @ z0
        if nunk <= DENSE_LIMIT:
            delta = np.linalg.lstsq(A.toarray(), r, rcond=None)[0]
        else:
            delta = _least_change(A, r)
            if delta is None:
                return None
        sol = z0 + delta
        if not np.all(np.isfinite(sol)):
            return None
        Y[pn, pc] = sol[:nvar]
        return Y

    def positive(self) -> npt.NDArray[np.bool_]:
        """Entries that count as held (above round-off relative to gamma)."""
        return np.asarray(self.Y > POSITIVE * np.maximum(self.gamma, 1.0))


def _least_change(A: sp.csr_matrix, r: FloatArray) -> FloatArray | None:
    """The smallest ``d`` with ``A d = r`` (consistent, possibly rank-deficient ``A``).

    A sparse LU of the augmented system ``[[I, A^T], [A, -eps I]] (d, -y) = (0, r)``, i.e.
    ``d = A^T y`` with ``(A A^T + eps I) y = r``, plus a refinement step: as sparse as ``A``
    itself, where an iterative least-squares solve needs thousands of iterations on these
    nearly singular systems.
    """
    m, n = A.shape
    eps = AUGMENTED_EPS * max(float(abs(A).max()), 1e-300) ** 2
    K = sp.block_array([[sp.eye_array(n), A.T], [A, -eps * sp.eye_array(m)]], format="csc")
    try:
        lu = spla.splu(K, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.1)
    except RuntimeError:
        return None
    d = np.zeros(n)
    for _ in range(2):
        sol = lu.solve(np.concatenate([np.zeros(n), r - A @ d]))
        if not np.all(np.isfinite(sol)):
            return None
        d = d + sol[:n]
    return d


def _structure_key(fills: list[WaterFill], state: _ClassState) -> tuple[bytes, ...]:
    parts = [state.positive().tobytes()]
    for wf in fills:
        parts.append(wf.group.tobytes())
        parts.append(b"|".join(s.tobytes() for s in wf.saturated))
    return tuple(parts)
