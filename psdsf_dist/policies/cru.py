"""CRU: cautious relative utilitarianism (TSF-ER paper, section 3.1 and Appendix 9.1).

The largest sum of normalised task counts among the allocations that are envy-free and give
sharing incentive:

    maximise   sum_n x[n] / eta[n]
    subject to X in chi(E) (capacities, placement, external resources, backlogs; eq. (2)),
               x[n] >= the uniform-split tasks of n                          (SI, Definition 6)
               min(U[n, m], n_n) <= x[n] for every pair n != m              (EF, Definition 3)

``eta[n]`` is what n could run with everything to itself (eq. (6): all its eligible servers and
the external resources, not capped by its backlog), so each term is n's utility normalised to
[0, 1] - relative utilitarianism - and no user gains by rescaling its utility.  ``U[n, m]`` is
what n could run with m's bundle scaled by ``phi[n] / phi[m]`` (:mod:`bundles`): the smaller of
a computing term and an external term, each linear in m's allocation.  Weights follow the
checkers of :mod:`properties` (weight-scaled bundles, the ``phi[n] / sum(phi)`` uniform split);
the objective is unweighted, as for ``phi[n]`` identical users of weight 1 sharing n's tasks.

In the paper's model (no placement, no backlogs) both terms of ``U[n, m]`` are proportional to
``x[m]``, so every envy constraint is one linear inequality and CRU is one LP (section 3.1:
``|J||S|`` variables and ``|J|^2 + |S||R| + 1`` constraints); Theorem 1 proves it EF, PO and SI,
not SP.  With placement the two terms weigh m's servers differently, and with a backlog n also
envies nobody once ``x[n] = n_n``: the envy-free set is then a union of polyhedra, one per choice
of the binding piece (computing term, external term or backlog) per pair, and maximising over a
union is not a convex program.  Here the pieces are chosen where they bind: first at the uniform
split (envy-free and SI, so that LP is feasible), then at each LP's optimum, keeping a piece
unless another is strictly smaller there; the optimum stays feasible for the next LP, so the
objective never decreases, and the search stops when the choice repeats or the objective stops
rising (on 200 random scenarios with placement, backlogs and a link: one LP for 145, two for 54,
at most 4).  The result is always
feasible, envy-free and SI; it is CRU's optimum whenever one piece binds for every allocation
(``exact``), which includes the paper's model; otherwise it is the optimum of the polyhedral piece
found, which may fall short of CRU's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from psdsf_dist.errors import SolverError
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies.bundles import (
    bundle_values,
    external_values,
    uniform_split,
    uniform_split_tasks,
)
from psdsf_dist.policies.feasibility import LinearModel, task_model
from psdsf_dist.policies.lp import solve_lp
from psdsf_dist.policies.tsf_er import monopoly_tasks

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

KEEP = 1e-12  # slack on the SI floors against round-off (the uniform split sits on them)
SWITCH_RTOL = 1e-9  # a piece replaces the chosen one only when smaller by more than this
MAX_ROUNDS = 20  # LPs of the piece search, at most
COMPUTE, EXTERNAL, BACKLOG = 0, 1, 2


@dataclass(frozen=True)
class CautiousUtilitarian:
    """The CRU allocation and how it was found."""

    allocation: FloatArray  # N x K tasks
    lp_solves: int
    exact: bool  # one piece binds every envy constraint everywhere: the optimum is CRU's


@dataclass(frozen=True)
class _Envy:
    """The pieces of every envy constraint ``min(pieces) <= x[n]`` (n a judge)."""

    judge: BoolArray  # N: users whose envy is constrained
    value: FloatArray  # N x P: weight-scaled computing value of one unit of variable v to n
    external: FloatArray  # N x N: weight-scaled external value per task of m (inf: none)
    backlog: FloatArray  # N
    owner: sp.csr_matrix  # P x N: variable v belongs to user m

    def pieces(self, z: FloatArray) -> FloatArray:
        """3 x N x N: each piece's value at the allocation ``z``."""
        compute = np.asarray((self.owner.T @ (self.value * z[None, :]).T).T)
        x = np.asarray(self.owner.T @ z)
        with np.errstate(invalid="ignore"):
            ext = np.where(np.isfinite(self.external), self.external * x[None, :], np.inf)
        backlog = np.broadcast_to(self.backlog[:, None], compute.shape)
        return np.stack([compute, ext, backlog])


def cautious_relative_utilitarian(scenario: Scenario, mode: Mode) -> CautiousUtilitarian:
    """The CRU allocation (see the module docstring). Raises :class:`SolverError`."""
    model = task_model(scenario, mode, external=True)
    eta = monopoly_tasks(scenario, respect_placement=True)
    floor = uniform_split_tasks(scenario)
    envy = _envy(scenario, mode, model, eta, floor)
    X0 = uniform_split(scenario)
    z = X0[model.user, model.server]
    choice = _choose(envy, z, None)
    gain = np.asarray(model.totals.T @ np.where(eta > 0, 1.0 / np.where(eta > 0, eta, 1.0),
                                                    0.0)).ravel()  # objective per variable
    best, best_value = z, -np.inf
    lp_solves = 0
    for _ in range(MAX_ROUNDS):
        z = _solve(model, scenario, eta, floor, envy, choice)
        lp_solves += 1
        value = float(gain @ z)
        if value <= best_value * (1.0 + SWITCH_RTOL):
            break  # the new piece is no better: stop rather than cycle among equal ones
        best, best_value = z, value
        again = _choose(envy, z, choice)
        if np.array_equal(again, choice):
            break
        choice = again
    return CautiousUtilitarian(model.allocation(best), lp_solves, _exact(envy, eta))


def _envy(
    scenario: Scenario, mode: Mode, model: LinearModel, eta: FloatArray, floor: FloatArray
) -> _Envy:
    N, P = scenario.num_users, model.num_variables
    phi = scenario.weight
    ratio = phi[:, None] / phi[None, :]
    # a user whose SI floor is its backlog runs n_n tasks and envies nobody; one that cannot
    # run anything values every bundle at 0
    judge = (eta > 0) & (floor < scenario.max_tasks)
    value = bundle_values(scenario, mode, model.user, model.server) * ratio[:, model.user]
    owner = sp.csr_matrix((np.ones(P), (np.arange(P), model.user)), shape=(P, N))
    return _Envy(judge, value, ratio * external_values(scenario),
                 np.asarray(scenario.max_tasks, dtype=float), owner)


def _choose(envy: _Envy, z: FloatArray, current: IntArray | None) -> IntArray:
    """N x N: the binding piece of each envy constraint at ``z`` (keeping ``current`` on ties)."""
    vals = envy.pieces(z)
    best = np.argmin(vals, axis=0).astype(np.int64)
    if current is not None:
        held = np.take_along_axis(vals, current[None], axis=0)[0]
        low = np.take_along_axis(vals, best[None], axis=0)[0]
        best = np.where(held <= low * (1.0 + SWITCH_RTOL) + 1e-300, current, best)
    # the backlog piece binds only at x[n] = n_n, where n envies nobody: then it holds for all m
    best[(best == BACKLOG).any(axis=1)] = BACKLOG
    return np.asarray(best, dtype=np.int64)


def _solve(
    model: LinearModel,
    scenario: Scenario,
    eta: FloatArray,
    floor: FloatArray,
    envy: _Envy,
    choice: IntArray,
) -> FloatArray:
    """The LP on one piece: ``max sum x / eta`` with the chosen envy rows, SI and backlogs."""
    T = model.totals
    N = scenario.num_users
    caps = scenario.max_tasks
    parts = [model.A]
    rhs = [model.b]
    finite = np.flatnonzero(np.isfinite(caps))
    if len(finite):
        parts.append(T[finite])
        rhs.append(caps[finite])
    si = np.flatnonzero(floor > 0)
    if len(si):
        parts.append(-sp.diags(1.0 / floor[si]) @ T[si])
        rhs.append(np.full(len(si), -(1.0 - KEEP)))
    has_vars = np.asarray(T.sum(axis=1)).ravel() > 0
    pairs = envy.judge[:, None] & has_vars[None, :] & ~np.eye(N, dtype=bool)
    norm = 1.0 / np.where(eta > 0, eta, 1.0)  # envy rows measured in n's tasks alone
    # computing pieces: sum over m's variables of value - x[n] <= 0
    n_c, m_c = np.nonzero(pairs & (choice == COMPUTE))
    if len(n_c):
        mask = sp.csr_matrix((np.ones(len(n_c)), (np.arange(len(n_c)), m_c)),
                             shape=(len(n_c), N)) @ envy.owner.T  # row k: m_c[k]'s variables
        rows = mask.multiply(envy.value[n_c]) - T[n_c]
        parts.append(sp.diags(norm[n_c]) @ rows)
        rhs.append(np.zeros(len(n_c)))
    # external pieces: external[n, m] x[m] - x[n] <= 0
    n_e, m_e = np.nonzero(pairs & (choice == EXTERNAL))
    if len(n_e):
        rows = sp.diags(envy.external[n_e, m_e]) @ T[m_e] - T[n_e]
        parts.append(sp.diags(norm[n_e]) @ rows)
        rhs.append(np.zeros(len(n_e)))
    # backlog pieces: x[n] >= n_n
    n_b = np.unique(np.nonzero(pairs & (choice == BACKLOG))[0])
    if len(n_b):
        parts.append(-sp.diags(1.0 / caps[n_b]) @ T[n_b])
        rhs.append(-np.ones(len(n_b)))
    c = -np.asarray(T.T @ np.where(eta > 0, norm, 0.0)).ravel()  # max sum x / eta
    res = solve_lp(c, sp.vstack(parts, format="csr"), np.concatenate(rhs))
    if not res.optimal:
        raise SolverError(f"cautious relative utilitarian LP failed: {res.message}")
    return np.asarray(np.clip(res.x, 0.0, None), dtype=float)


def _exact(envy: _Envy, eta: FloatArray) -> bool:
    """Does one piece bind every envy constraint for every allocation?

    The backlog piece can bind only if n could reach its backlog; the two linear pieces are
    ordered everywhere when m's computing values per task all lie on one side of its external
    value.
    """
    N = len(eta)
    judge = envy.judge
    if (judge & (envy.backlog < eta)).any():
        return False
    owner = envy.owner.tocsc()
    for m in range(N):
        vars_m = owner.indices[owner.indptr[m]:owner.indptr[m + 1]]
        if len(vars_m) == 0:
            continue
        v = envy.value[:, vars_m]
        e = envy.external[:, m]
        ordered = ~np.isfinite(e) | (v.max(axis=1) <= e) | (v.min(axis=1) >= e)
        ordered[m] = True
        if not ordered[judge].all():
            return False
    return True
