"""DRF on the pooled cluster, and per-server DRF (every server runs DRF alone).

* **Pooled DRF** treats all servers as one machine of capacity ``sum_i C[i]``: weighted max-min
  of the dominant share ``x[n] max_r D[n, r] / sum_i C[i, r]``, a user drawing each resource only
  from servers eligible for it.  Server boundaries are ignored, so its per-server numbers are
  task *equivalents* (see :func:`~psdsf_dist.policies.feasibility.pooled_model`): an upper
  reference for what fragmentation costs, not an allocation the servers could run.  Pooling is
  of resources, so the mode (RDM or TDM) does not change it.
* **Per-server DRF** is the coordination-free baseline and the paper's initialisation: each
  server water-fills its own capacity among the users eligible on it with weight
  ``phi[n] * gamma[n, i]`` and no offsets (the server procedure with totals = column = 0).
  A finite backlog binds on the user's total, which no server sees; we model the user submitting
  no more than its backlog: a user whose servers together hand it more than ``max_tasks`` has its
  grants scaled down to the cap and kept, and the servers refill the freed capacity among the
  others (repeat until nobody is over).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.water_fill import water_fill
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies.feasibility import pooled_model
from psdsf_dist.policies.progressive import Filling, progressive_fill

FloatArray = npt.NDArray[np.float64]


def pooled_dominant_share(scenario: Scenario) -> FloatArray:
    """N: ``max_r D[n, r] / sum_i C[i, r]`` (the share of the pool one task takes)."""
    pool = scenario.capacity.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(scenario.demand > 0, scenario.demand / pool, 0.0)
    return np.asarray(share.max(axis=1))


def drf(scenario: Scenario) -> tuple[FloatArray, Filling]:
    """Pooled DRF: returns the N x K task equivalents and the filling."""
    model = pooled_model(scenario)
    mu = pooled_dominant_share(scenario)
    scale = np.where(np.isfinite(mu) & (mu > 0), scenario.weight / np.where(mu > 0, mu, 1.0), 0.0)
    filling = progressive_fill(model, scale, scenario.max_tasks)
    return model.allocation(filling.z), filling


def per_server_drf(scenario: Scenario, mode: Mode) -> FloatArray:
    """Each server's DRF water-fill with zero offsets; caps as described in the module doc."""
    N, K = scenario.num_users, scenario.num_servers
    caps = scenario.max_tasks
    capacity = scenario.server_capacity(mode)
    consumption = [_consumption(scenario, i, mode) for i in range(K)]
    kept = np.zeros((N, K))  # grants of users frozen at their cap
    frozen = caps <= 0
    while True:
        X = kept.copy()
        for i in range(K):
            used = consumption[i].T @ kept[:, i]
            free = np.maximum(capacity[i] - used, 0.0)
            gamma = np.where(frozen, 0.0, scenario.gamma[:, i])
            weight = np.where(gamma > 0, scenario.weight * gamma, 0.0)
            X[:, i] += water_fill(free, consumption[i], weight, np.zeros(N), caps).column
        x = X.sum(axis=1)
        over = ~frozen & (x > caps)
        if not over.any():
            return X
        kept[over] = X[over] * (caps[over] / x[over])[:, None]
        frozen |= over


def _consumption(scenario: Scenario, server: int, mode: Mode) -> FloatArray:
    if mode == "tdm":  # one resource, time; a task takes 1/gamma of it
        return scenario.consumption(server, mode)
    cons = scenario.consumption(server, mode)
    return np.where((scenario.gamma[:, server] > 0)[:, None], cons, 0.0)
