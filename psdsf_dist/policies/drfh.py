"""DRFH and C-DRFH: weighted max-min of the *global* dominant share.

User n's global dominant share is ``x[n] * mu[n]`` with ``mu[n] = max_r D[n, r] / pool[n, r]``:
the share of the pooled capacity one task takes.  The allocation is per server (each server's
capacities and the placement constraints hold); only the fairness measure pools.

* **DRFH** pools what the user may use: ``pool[n, r] = sum of C[i, r] over servers eligible for
  n`` (the "natural first thought" of the PS-DSF paper, section II-B).  Without placement
  constraints this is Wang, Li and Liang's DRFH.
* **C-DRFH** pools every server, as if there were no placement constraints (the strategy-proof
  variant the PS-DSF paper criticises: it violates sharing incentive and bottleneck fairness).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies.feasibility import task_model
from psdsf_dist.policies.progressive import Filling, progressive_fill

FloatArray = npt.NDArray[np.float64]


def global_dominant_share(scenario: Scenario, *, respect_placement: bool) -> FloatArray:
    """N: ``max_r D[n, r] / pool[n, r]``; ``inf`` if a demanded resource is absent from the pool."""
    C = scenario.capacity
    if respect_placement:
        pool = (scenario.gamma > 0).astype(float) @ C  # N x M
    else:
        pool = np.broadcast_to(C.sum(axis=0), scenario.demand.shape)
    D = scenario.demand
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(D > 0, np.where(pool > 0, D / pool, np.inf), 0.0)
    return np.asarray(share.max(axis=1))


def drfh(scenario: Scenario, mode: Mode, *, respect_placement: bool) -> tuple[FloatArray, Filling]:
    """DRFH (``respect_placement=True``) or C-DRFH (``False``): N x K tasks and the filling."""
    mu = global_dominant_share(scenario, respect_placement=respect_placement)
    ok = np.isfinite(mu) & (mu > 0)
    scale = np.where(ok, scenario.weight / np.where(ok, mu, 1.0), 0.0)
    model = task_model(scenario, mode)
    filling = progressive_fill(model, scale, scenario.max_tasks)
    return model.allocation(filling.z), filling
