"""Test helpers for the TSF-ER mechanisms: random scenarios with an external link, and the
feasible set written out densely from the scenario arrays (independently of
``psdsf_dist.policies.feasibility``), variables ``X[n, i]`` flattened as ``n * K + i``."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from psdsf_dist.model.random_scenarios import random_scenario_doc
from psdsf_dist.model.scenario import Mode, Scenario

FloatArray = npt.NDArray[np.float64]


def linked_scenario(
    seed: int,
    *,
    K: int,
    N: int,
    M: int,
    placement_prob: float = 0.3,
    cap_prob: float = 0.2,
    missing_prob: float = 0.1,
    link_prob: float = 0.8,
) -> Scenario:
    """A random scenario plus an uplink of capacity 1 that each user needs with ``link_prob``
    (0.002-0.2 of it per task: from never binding to binding before every server)."""
    rng = np.random.default_rng(seed)
    doc: dict[str, Any] = random_scenario_doc(rng, K=K, N=N, M=M, placement_prob=placement_prob,
                                              cap_prob=cap_prob, missing_prob=missing_prob)
    doc["external"] = {"uplink": 1.0}
    for user in doc["users"]:
        if rng.random() < link_prob:
            user["external_demand"] = {"uplink": round(float(np.exp(rng.uniform(-6.2, -1.6))), 6)}
    return Scenario.from_dict(doc, "linked")


def dense_constraints(sc: Scenario, mode: Mode) -> tuple[FloatArray, FloatArray,
                                                        list[tuple[float, float | None]]]:
    """``A_ub X <= b_ub`` and bounds of the feasible set chi(E) (TSF-ER paper, eq. (2)), with
    placement, backlogs and, in TDM, servers' time instead of their resources.  Scenarios
    without per-user gamma overrides only (RDM consumption is the demand)."""
    N, K = sc.gamma.shape
    rows: list[FloatArray] = []
    rhs: list[float] = []
    for i in range(K):
        if mode == "tdm":
            row = np.zeros(N * K)
            for n in range(N):
                if sc.gamma[n, i] > 0:
                    row[n * K + i] = 1.0 / sc.gamma[n, i]
            rows.append(row)
            rhs.append(1.0)
            continue
        for r in range(sc.num_resources):
            row = np.zeros(N * K)
            row[np.arange(N) * K + i] = sc.demand[:, r]
            rows.append(row)
            rhs.append(float(sc.capacity[i, r]))
    for q in range(len(sc.external_capacity)):
        row = np.zeros(N * K)
        for n in range(N):
            row[n * K:(n + 1) * K] = sc.external_demand[n, q]
        rows.append(row)
        rhs.append(float(sc.external_capacity[q]))
    for n in range(N):
        if np.isfinite(sc.max_tasks[n]):
            row = np.zeros(N * K)
            row[n * K:(n + 1) * K] = 1.0
            rows.append(row)
            rhs.append(float(sc.max_tasks[n]))
    bounds: list[tuple[float, float | None]] = [
        (0.0, None if sc.gamma[n, i] > 0 else 0.0) for n in range(N) for i in range(K)
    ]
    return np.array(rows), np.array(rhs), bounds


def totals_matrix(N: int, K: int) -> FloatArray:
    """N x NK: the user totals of the flattened variables."""
    T = np.zeros((N, N * K))
    for n in range(N):
        T[n, n * K:(n + 1) * K] = 1.0
    return T
