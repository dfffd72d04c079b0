"""The TSF-ER paper's other egalitarian baselines with an external resource (section 3.3).

The external resources (``external`` in the scenario, ``external_demand`` per user) sit outside
every server.  Three ways to extend DRF and TSF to them, as the paper defines them:

* **DRF-alpha_er** (:func:`drf_alpha_er`): split each external resource among the servers by a
  fixed reservation ``alpha[i]`` (``sum_i alpha[i] = 1``), so server i owns ``alpha[i] E[q]`` of
  it - the feasible set ``chi_alpha(E)``: ``sum_n X[n, i] e[n, q] <= alpha[i] E[q]`` on top of
  the servers' capacities - then DRFH on these augmented servers: max-min of the global dominant
  share ``x[n] mu[n]``, ``mu[n] = max(max_r D[n, r] / sum_i C[i, r], max_q e[n, q] / E[q])``
  (the dominant resource of the pooled machine, the external resources included).
* **TSF-alpha_er** (:func:`tsf_alpha_er`): the same split, then TSF on the augmented servers:
  max-min of ``x[n] / eta_alpha[n]`` with ``eta_alpha[n] = sum_i min(gamma[n, i],
  min_q alpha[i] E[q] / e[n, q])`` (the paper's eq. (7c)), over ``chi_alpha(E)``.
* **DRF-ER** (:func:`drf_er`): DRF-alpha_er with the reservation a decision variable too.  Any
  split of ``E`` among the servers is allowed, so the feasible set is the union of
  ``chi_alpha(E)`` over all ``alpha``: exactly ``chi(E)``, the external resource pooled
  (``sum_{n, i} X[n, i] e[n, q] <= E[q]``); DRF-ER is max-min of ``x[n] mu[n]`` over it.
  (TSF's normaliser depends on ``alpha``, which is why the paper has no "TSF-ER by choosing
  alpha": that problem is not convex.)

The reservation is given as ``"eq"`` (``1/K`` each: the paper's DRF-eq, TSF-eq), a resource name
(``alpha[i]`` proportional to the servers' capacity of it: DRF-cpu, TSF-mem, ...) or explicit
per-server fractions.  Without external resources all three are DRFH / TSF.  Every one is
weighted (``x[n] / phi[n]``) and leximin by :func:`~.progressive.progressive_fill`, which makes
it Pareto optimal within *its* feasible set; DRF-alpha_er and TSF-alpha_er's sets are smaller
than ``chi(E)``, hence their Pareto and sharing-incentive failures (the paper's Theorems 3-4).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies.feasibility import LinearModel, task_model
from psdsf_dist.policies.progressive import Filling, progressive_fill
from psdsf_dist.policies.tsf import unconstrained_gamma

FloatArray = npt.NDArray[np.float64]

Reservation = str | FloatArray
"""``"eq"``, a resource name, or K fractions of each external resource per server."""
EQUAL = "eq"


def reservation(scenario: Scenario, alpha: Reservation = EQUAL) -> FloatArray:
    """K fractions summing to 1: each server's part of every external resource.  Raises
    :class:`ScenarioError` for an unknown resource or fractions that are not K nonnegative
    numbers with a positive sum."""
    K = scenario.num_servers
    if isinstance(alpha, str):
        if alpha == EQUAL:
            return np.full(K, 1.0 / K)
        if alpha not in scenario.resources:
            raise ScenarioError("reservation", f"unknown resource {alpha!r} (choose from "
                                f"{EQUAL!r}, {', '.join(map(repr, scenario.resources))})")
        a = np.asarray(scenario.capacity[:, scenario.resources.index(alpha)], dtype=float)
    else:
        a = np.asarray(alpha, dtype=float)
    if a.shape != (K,) or not np.isfinite(a).all() or (a < 0).any() or a.sum() <= 0:
        raise ScenarioError("reservation", f"need {K} nonnegative fractions with a positive "
                            f"sum, got {a.tolist()}")
    return np.asarray(a / a.sum())


def dominant_share(scenario: Scenario) -> FloatArray:
    """N: ``mu[n]``, one task's share of the pooled machine's resource the user demands most,
    the external resources counted (``inf`` if a demanded resource has capacity 0)."""
    D = np.hstack([scenario.demand, scenario.external_demand])
    pool = np.concatenate([scenario.capacity.sum(axis=0), scenario.external_capacity])
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(D > 0, np.where(pool > 0, D / pool, np.inf), 0.0)
    return np.asarray(share.max(axis=1, initial=0.0))


def reserved_model(scenario: Scenario, mode: Mode, alpha: FloatArray) -> LinearModel:
    """``chi_alpha(E)``: the servers' rows and, per server i and external resource q,
    ``sum_n X[n, i] e[n, q] / (alpha[i] E[q]) <= 1`` (a server owning none of a resource runs
    no task needing it)."""
    base = task_model(scenario, mode)
    E = scenario.external_capacity
    if not len(E):
        return base
    e = scenario.external_demand
    K = scenario.num_servers
    blocks, rhs = [], []
    for q in range(len(E)):
        own = alpha * E[q]  # K
        need = e[base.user, q]  # P
        srv = base.server
        ok = own[srv] > 0
        vals = np.where(ok, need / np.where(ok, own[srv], 1.0), (need > 0).astype(float))
        blocks.append(sp.csr_matrix((vals, (srv, np.arange(len(srv)))),
                                    shape=(K, base.num_variables)))
        rhs.append(np.where(own > 0, 1.0, 0.0))
    return replace(base, A=sp.vstack([base.A, *blocks], format="csr"),
                   b=np.concatenate([base.b, *rhs]))


def _by_dominant_share(scenario: Scenario, model: LinearModel) -> tuple[FloatArray, Filling]:
    mu = dominant_share(scenario)
    ok = np.isfinite(mu) & (mu > 0)
    scale = np.where(ok, scenario.weight / np.where(ok, mu, 1.0), 0.0)
    filling = progressive_fill(model, scale, scenario.max_tasks)
    return model.allocation(filling.z), filling


def drf_alpha_er(scenario: Scenario, mode: Mode,
                 alpha: Reservation = EQUAL) -> tuple[FloatArray, Filling]:
    """DRF-alpha_er: N x K tasks and the filling."""
    return _by_dominant_share(scenario, reserved_model(scenario, mode, reservation(scenario,
                                                                                   alpha)))


def drf_er(scenario: Scenario, mode: Mode) -> tuple[FloatArray, Filling]:
    """DRF-ER: N x K tasks and the filling."""
    return _by_dominant_share(scenario, task_model(scenario, mode, external=True))


def reserved_monopoly_tasks(scenario: Scenario, alpha: FloatArray) -> FloatArray:
    """N: ``eta_alpha[n] = sum_i min(gamma[n, i], min_q alpha[i] E[q] / e[n, q])``, the tasks
    user n could run alone on the augmented servers (placement ignored, as in TSF)."""
    g = unconstrained_gamma(scenario)  # N x K
    E, e = scenario.external_capacity, scenario.external_demand
    if len(E):
        own = alpha[:, None] * E[None, :]  # K x Q
        with np.errstate(divide="ignore", invalid="ignore"):
            limit = np.where(e[:, None, :] > 0, own[None, :, :] / e[:, None, :], np.inf)
        g = np.minimum(g, limit.min(axis=2))
    return np.asarray(g.sum(axis=1))


def tsf_alpha_er(scenario: Scenario, mode: Mode,
                 alpha: Reservation = EQUAL) -> tuple[FloatArray, Filling]:
    """TSF-alpha_er: N x K tasks and the filling."""
    a = reservation(scenario, alpha)
    model = reserved_model(scenario, mode, a)
    scale = scenario.weight * reserved_monopoly_tasks(scenario, a)
    filling = progressive_fill(model, scale, scenario.max_tasks)
    return model.allocation(filling.z), filling
