"""The set of feasible allocations as sparse linear constraints, shared by every LP.

Two models of a cluster:

* **per-server tasks** (:func:`task_model`): one variable ``X[n, i] >= 0`` per eligible pair
  (gamma > 0).  RDM: ``sum_n X[n, i] c[n, i, r] <= C[i, r]``; TDM: ``sum_n X[n, i] / gamma[n, i]
  <= 1``.  Optionally the external resources (outside every server, TSF-ER):
  ``sum_{n, i} X[n, i] e[n, q] <= E[q]``.
* **pooled resources** (:func:`pooled_model`): the cluster as one machine.  A user receives amounts
  ``a[n, i, r]`` of each resource of each server eligible for it and runs
  ``x[n] <= sum_i a[n, i, r] / D[n, r]`` tasks: server boundaries are ignored, placement is not.

Rows are scaled to right-hand side 1 (or 0) so that the LP is well conditioned whatever the units.
Both models expose ``totals``: the sparse N x P matrix turning the variables into user totals.

With task groups (Guan thesis chapters 4-5, :mod:`psdsf_dist.model.task_groups`),
:func:`group_model` splits a bound user's per-server tasks by group and bounds each group by its
count; :func:`fit_to_groups` says how many of a user's tasks given per-server amounts can run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from psdsf_dist.errors import SolverError
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies.lp import solve_lp

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class LinearModel:
    """Variables z >= 0 with ``A z <= b`` and user totals ``x = totals @ z``."""

    A: sp.csr_matrix
    b: FloatArray
    totals: sp.csr_matrix  # N x P
    num_users: int
    num_servers: int
    user: IntArray  # P: user of each task variable (-1 for auxiliary variables)
    server: IntArray  # P: server of each task variable (-1 for auxiliary variables)
    task_equivalents: bool = False  # pooled: variables are amounts, rescale rows to totals

    @property
    def num_variables(self) -> int:
        return int(self.A.shape[1])

    def allocation(self, z: FloatArray) -> FloatArray:
        """The N x K task matrix of a solution (pooled model: task equivalents, see there)."""
        X = np.zeros((self.num_users, self.num_servers))
        task = self.user >= 0
        np.add.at(X, (self.user[task], self.server[task]), np.maximum(z[task], 0.0))
        if not self.task_equivalents:
            return X
        x = np.maximum(np.asarray(self.totals @ z), 0.0)
        drawn = X.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(drawn[:, None] > 0, X / drawn[:, None], 0.0)
        return np.asarray(share * x[:, None])


def task_model(scenario: Scenario, mode: Mode, *, external: bool = False) -> LinearModel:
    """Per-server task variables for every eligible (user, server) pair."""
    N, K = scenario.num_users, scenario.num_servers
    pn, pi = np.nonzero(scenario.gamma > 0)
    P = len(pn)
    cap = scenario.server_capacity(mode)  # K x M'
    M = cap.shape[1]
    if mode == "tdm":
        coef = 1.0 / scenario.gamma[pn, pi]  # one time row per server
        rows = pi.astype(np.int64)
        cols = np.arange(P)
        vals = coef
        b = np.ones(K)
        nrows = K
    else:
        cons = scenario.consumption_tensor(mode)  # K x N x M
        per = cons[pi, pn, :]  # P x M
        with np.errstate(divide="ignore", invalid="ignore"):
            scaled = np.where(cap[pi] > 0, per / cap[pi], 0.0)
        nz_p, nz_r = np.nonzero(scaled > 0)
        rows = pi[nz_p] * M + nz_r
        cols = nz_p
        vals = scaled[nz_p, nz_r]
        b = np.ones(K * M)
        nrows = K * M
    A = sp.csr_matrix((vals, (rows, cols)), shape=(nrows, P))
    if external and len(scenario.external_resources):
        A, b = _with_external(scenario, A, b, pn)
    totals = sp.csr_matrix((np.ones(P), (pn, np.arange(P))), shape=(N, P))
    return LinearModel(A, b, totals, N, K, pn.astype(np.int64), pi.astype(np.int64))


def _with_external(
    scenario: Scenario, A: sp.csr_matrix, b: FloatArray, pn: IntArray
) -> tuple[sp.csr_matrix, FloatArray]:
    ext_cap = scenario.external_capacity
    ext_dem = scenario.external_demand  # N x Q
    blocks = []
    rhs = []
    for q in range(len(ext_cap)):
        need = ext_dem[pn, q]
        if ext_cap[q] > 0:
            blocks.append(sp.csr_matrix(need[None, :] / ext_cap[q]))
            rhs.append(1.0)
        else:  # nothing of it exists: users needing it cannot run at all
            blocks.append(sp.csr_matrix((need > 0).astype(float)[None, :]))
            rhs.append(0.0)
    return sp.vstack([A, *blocks], format="csr"), np.concatenate([b, rhs])


def pooled_model(scenario: Scenario) -> LinearModel:
    """The cluster as one machine: resource variables ``a[n, i, r]`` plus one total per user.

    ``allocation`` then reports task *equivalents* per server: user n's total split in proportion
    to where its pooled dominant resource comes from.  They need not fit each server.
    """
    N, K = scenario.num_users, scenario.num_servers
    D = scenario.demand
    C = scenario.capacity
    pool = C.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(D > 0, np.where(pool > 0, D / pool, np.inf), 0.0)
    dominant = np.argmax(share, axis=1)
    elig = scenario.gamma > 0
    # resource variables: eligible (n, i) and r demanded by n and present at i
    an, ai, ar = np.nonzero(elig[:, :, None] & (D[:, None, :] > 0) & (C[None, :, :] > 0))
    Pa = len(an)
    x_col = Pa + np.arange(N)
    # server rows: sum_n a[n, i, r] / C[i, r] <= 1
    M = C.shape[1]
    srv_rows = ai * M + ar
    srv_vals = 1.0 / C[ai, ar]
    # user rows: x[n] D[n, r] / pool[r] - sum_i a[n, i, r] / pool[r] <= 0
    un, ur = np.nonzero(D > 0)
    user_row = -np.ones((N, M), dtype=np.int64)
    user_row[un, ur] = K * M + np.arange(len(un))
    rows = np.concatenate([srv_rows, user_row[an, ar], user_row[un, ur]])
    cols = np.concatenate([np.arange(Pa), np.arange(Pa), x_col[un]])
    scale = np.where(pool > 0, pool, 1.0)
    vals = np.concatenate([srv_vals, -1.0 / scale[ar], D[un, ur] / scale[ur]])
    nrows = K * M + len(un)
    A = sp.csr_matrix((vals, (rows, cols)), shape=(nrows, Pa + N))
    b = np.concatenate([np.ones(K * M), np.zeros(len(un))])
    totals = sp.csr_matrix((np.ones(N), (np.arange(N), x_col)), shape=(N, Pa + N))
    # task equivalents: only the dominant-resource variables map to servers
    on_dominant = ar == dominant[an]
    user = np.full(Pa + N, -1, dtype=np.int64)
    server = np.full(Pa + N, -1, dtype=np.int64)
    user[:Pa][on_dominant] = an[on_dominant]
    server[:Pa][on_dominant] = ai[on_dominant]
    return LinearModel(A, b, totals, N, K, user, server, task_equivalents=True)


@dataclass(frozen=True)
class GroupModel:
    """:func:`task_model` with bound users' tasks split by task group.

    ``model``'s variables are the unbound users' per-server tasks followed by one variable
    ``a[g, i]`` per task group g and eligible server i of it; its rows are the capacity rows of
    :func:`task_model` (the first ``capacity_rows``) and then one row per group with tasks,
    ``sum_i a[g, i] / tasks[g] <= 1``.  ``group`` gives each variable's group (-1: unbound).
    """

    model: LinearModel
    capacity_rows: int
    group: IntArray


def group_model(scenario: Scenario, mode: Mode, *, external: bool = False) -> GroupModel:
    """The feasible set with task groups: the Guan thesis's (5.1)-(5.3) (chapter 4's (4.1)-(4.2)
    when every group has one server), with the servers' capacities of :func:`task_model`.

    Built from :func:`task_model` by a column selection: a variable of group g on server i is a
    copy of the (user, i) column, so the capacity rows are task_model's, unchanged.  Groups with
    0 tasks and servers where the user is not eligible (gamma 0) get no variable.
    """
    base = task_model(scenario, mode, external=external)
    groups = scenario.task_groups
    R = int(base.A.shape[0])
    if groups is None:
        return GroupModel(base, R, np.full(base.num_variables, -1, dtype=np.int64))
    K = scenario.num_servers
    P = base.num_variables
    keys = base.user * K + base.server  # ascending: task_model takes np.nonzero's row order
    free = np.flatnonzero(~groups.bound[base.user])
    g_of = groups.group_of_entry()
    key = groups.user[g_of] * K + groups.server
    if P:
        pos = np.minimum(np.searchsorted(keys, key), P - 1)
        ok = (keys[pos] == key) & (groups.tasks[g_of] > 0)
    else:
        pos, ok = np.zeros(len(key), dtype=np.int64), np.zeros(len(key), dtype=bool)
    cols = np.concatenate([free, pos[ok]]).astype(np.int64)
    group = np.concatenate([np.full(len(free), -1), g_of[ok]]).astype(np.int64)
    V = len(cols)
    E = sp.csr_matrix((np.ones(V), (cols, np.arange(V))), shape=(P, V))
    live = np.unique(group[group >= 0])
    row_of = np.full(groups.num_groups, -1, dtype=np.int64)
    row_of[live] = np.arange(len(live))
    vg = np.flatnonzero(group >= 0)
    G = sp.csr_matrix((1.0 / groups.tasks[group[vg]], (row_of[group[vg]], vg)),
                      shape=(len(live), V))
    A = sp.vstack([base.A @ E, G], format="csr")
    b = np.concatenate([base.b, np.ones(len(live))])
    model = LinearModel(A, b, sp.csr_matrix(base.totals @ E), base.num_users, K,
                        base.user[cols], base.server[cols])
    return GroupModel(model, R, group)


def fit_to_groups(scenario: Scenario, n: int, per_server: FloatArray) -> float:
    """Most of user n's tasks that ``per_server[i]`` tasks on each server can run, given its
    task groups: ``max sum a[g, i]`` s.t. ``sum_g a[g, i] <= per_server[i]``,
    ``sum_i a[g, i] <= tasks[g]`` (a transportation problem; closed form
    ``sum_i min(per_server[i], tasks bound to i)`` when every group has one server).  An unbound
    user runs them all."""
    groups = scenario.task_groups
    t = np.maximum(np.asarray(per_server, dtype=float), 0.0)
    if groups is None or not groups.bound[n]:
        return float(t.sum())
    gs = groups.of_user(n)
    gs = gs[groups.tasks[gs] > 0]
    if not len(gs):
        return 0.0
    sizes = groups.ptr[gs + 1] - groups.ptr[gs]
    if (sizes == 1).all():
        limit = np.zeros(len(t))
        np.add.at(limit, groups.server[groups.ptr[gs]], groups.tasks[gs])
        return float(np.minimum(t, limit).sum())
    gi = np.concatenate([np.full(s, j) for j, s in enumerate(sizes)])
    si = np.concatenate([groups.servers_of(int(g)) for g in gs])
    V = len(gi)
    A = sp.vstack([sp.csr_matrix((np.ones(V), (si, np.arange(V))), shape=(len(t), V)),
                   sp.csr_matrix((np.ones(V), (gi, np.arange(V))), shape=(len(gs), V))],
                  format="csr")
    b = np.concatenate([t, groups.tasks[gs]])
    res = solve_lp(-np.ones(V), A, b)
    if not res.optimal:  # a transportation problem from 0 is always feasible and bounded
        raise SolverError(f"task-group fit LP failed: {res.message}")
    return float(-res.objective)
