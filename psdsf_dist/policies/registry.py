"""Every allocation policy by name: ``allocate(scenario, policy, mode) -> Allocation``.

``psdsf`` is the certified exact solver (:func:`psdsf_dist.core.solver.solve`); the others are the
baselines of :mod:`drf`, :mod:`drfh`, :mod:`tsf`, :mod:`tsf_er`, :mod:`mnw` and :mod:`cru`; the
whole-task schedulers (integer tasks, ``Allocation.whole``) are :mod:`whole_task_policies`,
``rrr-psdsf`` seeded by ``allocate``'s ``seed``.  Only the policies of :func:`models_external`
(``tsf-er``, ``mnw``, ``cru``) model the external resources of a scenario; every other policy
allocates as if they did not exist (as the mechanisms are defined), so its use of them may
exceed their capacity.  Likewise only the AMF family (:mod:`amf`) reads users' per-server task
counts and task groups.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.certificate import Certificate
from psdsf_dist.core.solver import solve
from psdsf_dist.errors import PsdsfError
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies.amf import AMF_POLICIES, amf, task_group_view
from psdsf_dist.policies.cru import cautious_relative_utilitarian
from psdsf_dist.policies.drf import drf, per_server_drf
from psdsf_dist.policies.drfh import drfh
from psdsf_dist.policies.mnw import max_nash_welfare
from psdsf_dist.policies.tsf import tsf
from psdsf_dist.policies.tsf_er import tsf_er
from psdsf_dist.policies.whole_task_policies import (
    DEFAULT_SEED,
    WHOLE_TASK_POLICIES,
    whole_task_allocation,
)

FloatArray = npt.NDArray[np.float64]

POLICIES: tuple[str, ...] = (
    "psdsf",
    "drf",
    "per-server-drf",
    "drfh",
    "c-drfh",
    "tsf",
    "cdrf",
    "tsf-er",
    *WHOLE_TASK_POLICIES,
    *AMF_POLICIES,
    "mnw",
    "cru",
)

DESCRIPTIONS: dict[str, str] = {
    "psdsf": "per-server dominant share fairness (certified exact solve)",
    "drf": "DRF on all servers pooled into one machine (task equivalents per server)",
    "per-server-drf": "each server runs DRF alone, no coordination",
    "drfh": "max-min global dominant share, pooled over each user's eligible servers",
    "c-drfh": "max-min global dominant share, pooled over all servers",
    "tsf": "max-min task share, tasks alone on the cluster counted ignoring placement",
    "cdrf": "max-min task share, tasks alone on the cluster counted respecting placement",
    "tsf-er": "TSF with the external resources (task share over servers and external)",
    "drfh-first-fit": "whole tasks: lowest DRFH global dominant share first, first server it fits",
    "drfh-best-fit": "whole tasks: lowest DRFH global dominant share first, best-fit server H",
    "psdsf-pf": "whole tasks: progressive filling, pair of smallest PS-DSF share x/(phi gamma)",
    "rpsdsf": "whole tasks: progressive filling by PS-DSF share on residual capacities",
    "rrr-psdsf": "whole tasks: random server each step (seeded), user by PS-DSF share there",
    "bf-drf": "whole tasks: lowest pooled DRF dominant share first, best-fit server H",
    "amf": "aggregate max-min fairness across servers, tasks bound to one server (Guan ch. 4)",
    "amf-si": "AMF with per-server sharing-incentive floors (SIG-AMF, Guan 4.4.4)",
    "gamf": "AMF with task groups runnable on any of several servers (Guan ch. 5)",
    "gamf-si": "GAMF with the sharing-incentive floor (SIG-GAMF, Guan 5.3.4)",
    "mnw": "max Nash welfare: max sum phi log x over servers and external (conic program)",
    "cru": "cautious relative utilitarian: max sum x / eta over the EF and SI allocations (LP)",
}


class UnknownPolicyError(PsdsfError, ValueError):
    """A policy name that is not in :data:`POLICIES`."""

    def __init__(self, policy: str) -> None:
        super().__init__(f"unknown policy {policy!r} (choose from {', '.join(POLICIES)})")


@dataclass(frozen=True)
class Allocation:
    """The outcome of one policy on one scenario."""

    policy: str
    mode: Mode
    allocation: FloatArray  # N x K tasks (pooled DRF: task equivalents)
    seconds: float
    lp_solves: int = 0
    pooled: bool = False  # server boundaries ignored: per-server feasibility is not claimed
    certificate: Certificate | None = None  # psdsf only: its own certificate
    whole: bool = False  # integer tasks (the whole-task policies)

    @property
    def totals(self) -> FloatArray:
        return np.asarray(self.allocation.sum(axis=1))


def models_external(policy: str) -> bool:
    """Whether the policy takes the scenario's external resources into account."""
    return policy in ("tsf-er", "mnw", "cru")


def without_external(scenario: Scenario) -> Scenario:
    """The scenario with its external resources removed (what non-TSF-ER policies see)."""
    if not scenario.external_resources:
        return scenario
    return dataclasses.replace(
        scenario,
        external_resources=(),
        external_capacity=np.zeros(0),
        external_demand=np.zeros((scenario.num_users, 0)),
    )


def policy_view(scenario: Scenario, policy: str) -> Scenario:
    """The scenario as the policy models it: external resources only for ``tsf-er``, task
    groups only for the AMF family (:func:`psdsf_dist.policies.amf.task_group_view`)."""
    env = scenario if models_external(policy) else without_external(scenario)
    return task_group_view(env, policy)


def allocate(
    scenario: Scenario, policy: str, mode: Mode = "rdm", *, seed: int = DEFAULT_SEED
) -> Allocation:
    """Run one policy (``seed``: of ``rrr-psdsf``'s server draws; the other policies are
    deterministic). Raises :class:`UnknownPolicyError`, ScenarioError or SolverError."""
    if policy not in POLICIES:
        raise UnknownPolicyError(policy)
    mode = scenario.check_mode(mode)
    t0 = time.perf_counter()
    if policy == "psdsf":
        sol = solve(scenario, mode)
        return Allocation(policy, mode, sol.allocation, time.perf_counter() - t0,
                          certificate=sol.certificate)
    if policy in WHOLE_TASK_POLICIES:
        W = whole_task_allocation(scenario, policy, mode, seed=seed)
        return Allocation(policy, mode, W.astype(float), time.perf_counter() - t0, whole=True)
    if policy == "mnw":
        X = max_nash_welfare(scenario, mode).allocation
        return Allocation(policy, mode, X, time.perf_counter() - t0)
    if policy == "cru":
        result = cautious_relative_utilitarian(scenario, mode)
        return Allocation(policy, mode, result.allocation, time.perf_counter() - t0,
                          result.lp_solves)
    if policy == "per-server-drf":
        X = per_server_drf(scenario, mode)
        return Allocation(policy, mode, X, time.perf_counter() - t0)
    if policy == "drf":
        X, filling = drf(scenario)
        return Allocation(policy, mode, X, time.perf_counter() - t0, filling.lp_solves, pooled=True)
    if policy in ("drfh", "c-drfh"):
        X, filling = drfh(scenario, mode, respect_placement=policy == "drfh")
    elif policy in ("tsf", "cdrf"):
        X, filling = tsf(scenario, mode, respect_placement=policy == "cdrf")
    elif policy in AMF_POLICIES:
        X, filling = amf(scenario, mode, policy)
    else:
        X, filling = tsf_er(scenario, mode)
    return Allocation(policy, mode, X, time.perf_counter() - t0, filling.lp_solves)
