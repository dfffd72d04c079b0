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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from psdsf_dist.model.scenario import Mode, Scenario

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
