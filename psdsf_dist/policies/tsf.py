"""TSF and CDRF: weighted max-min of the task share ``x[n] / gamma_n``.

``gamma_n = sum_i gamma[n, i]`` is the number of tasks user n could run with the whole cluster
to itself.

* **TSF** (Wang, Li, Liang, Li, SC 2016): ``gamma_n`` counts every server *as if there were no
  placement constraints* (a server lacking a demanded resource still counts 0), which makes it
  strategy-proof with respect to declared eligibility.
* **CDRF** (containerised DRF, Friedman, Ghodsi, Psomas): ``gamma_n`` over the eligible servers
  only.  Without placement constraints the two coincide.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from psdsf_dist.model.arrays import demand_gamma
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies.feasibility import task_model
from psdsf_dist.policies.progressive import Filling, progressive_fill

FloatArray = npt.NDArray[np.float64]


def unconstrained_gamma(scenario: Scenario) -> FloatArray:
    """N x K gamma ignoring placement (given per-user gammas still apply where given)."""
    dg = demand_gamma(scenario.capacity, scenario.demand)
    return np.asarray(np.where(np.isnan(scenario.gamma_given), dg, scenario.gamma_given))


def task_share_scale(scenario: Scenario, *, respect_placement: bool) -> FloatArray:
    """N: ``phi[n] * gamma_n``, the normaliser of the task share."""
    g = scenario.gamma if respect_placement else unconstrained_gamma(scenario)
    return np.asarray(scenario.weight * g.sum(axis=1))


def tsf(scenario: Scenario, mode: Mode, *, respect_placement: bool) -> tuple[FloatArray, Filling]:
    """TSF (``respect_placement=False``) or CDRF (``True``): N x K tasks and the filling."""
    model = task_model(scenario, mode)
    scale = task_share_scale(scenario, respect_placement=respect_placement)
    filling = progressive_fill(model, scale, scenario.max_tasks)
    return model.allocation(filling.z), filling
