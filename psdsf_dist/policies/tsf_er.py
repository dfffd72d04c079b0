"""TSF-ER: task share fairness with an external resource (the mobile-edge extension of TSF).

The servers' resources plus resources outside every server (a shared uplink: ``external`` in
the scenario, ``external_demand`` per user).  Weighted max-min of ``x[n] / eta[n]`` with
``eta[n] = min(sum_i gamma[n, i], min_q E[q] / e[n, q])`` - the tasks user n could run with all
servers *and* all of the external resource to itself (placement ignored, as in TSF) - subject to
the servers' capacities and ``sum_n x[n] e[n, q] <= E[q]``.  The external resource is not split
among the servers.  Without external resources TSF-ER is TSF.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies.feasibility import task_model
from psdsf_dist.policies.progressive import Filling, progressive_fill
from psdsf_dist.policies.tsf import unconstrained_gamma

FloatArray = npt.NDArray[np.float64]


def monopoly_tasks(scenario: Scenario, *, respect_placement: bool = False) -> FloatArray:
    """N: eta, the tasks a user could run alone on all servers (or, ``respect_placement``, on
    the servers eligible for it) and the external resources (TSF-ER paper, eq. (6))."""
    g = scenario.gamma if respect_placement else unconstrained_gamma(scenario)
    eta = g.sum(axis=1)
    E = scenario.external_capacity
    e = scenario.external_demand
    if len(E):
        with np.errstate(divide="ignore", invalid="ignore"):
            limit = np.where(e > 0, E[None, :] / e, np.inf).min(axis=1)
        eta = np.minimum(eta, limit)
    return np.asarray(eta)


def tsf_er(scenario: Scenario, mode: Mode) -> tuple[FloatArray, Filling]:
    """N x K tasks and the filling."""
    model = task_model(scenario, mode, external=True)
    scale = scenario.weight * monopoly_tasks(scenario)
    filling = progressive_fill(model, scale, scenario.max_tasks)
    return model.allocation(filling.z), filling
