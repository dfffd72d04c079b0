"""Baseline policies: ORACLES.md numbers, feasibility, caps, and max-min optimality by an
independent LP."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from psdsf_dist.core.server_procedure import server_procedure
from psdsf_dist.model.random_scenarios import random_scenario
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.policies import POLICIES, UnknownPolicyError, allocate, without_external
from tests.conftest import example_scenario as example

FloatArray = npt.NDArray[np.float64]
LP_POLICIES = ("drfh", "c-drfh", "tsf", "cdrf", "tsf-er")




def col(scenario: Scenario, X: FloatArray, user: str, server: str) -> float:
    return float(X[scenario.user_names.index(user), scenario.server_names.index(server)])


# -- ORACLES.md ----------------------------------------------------------------------------------


def test_oracle_1_cdrfh_and_tsf() -> None:
    sc = example("paper_fig1")
    cdrfh = allocate(sc, "c-drfh").allocation
    np.testing.assert_allclose(cdrfh.sum(axis=1), [60 / 23, 72 / 23, 144 / 23], rtol=1e-7)
    assert col(sc, cdrfh, "u3", "s1") == pytest.approx(6 / 23, rel=1e-7)
    assert col(sc, cdrfh, "u3", "s2") == pytest.approx(6.0, rel=1e-7)
    tsf = allocate(sc, "tsf").allocation
    np.testing.assert_allclose(tsf.sum(axis=1), [2, 2, 8], rtol=1e-7)
    assert col(sc, tsf, "u3", "s1") == pytest.approx(2.0, rel=1e-7)
    assert col(sc, tsf, "u3", "s2") == pytest.approx(6.0, rel=1e-7)


def test_oracle_1_psdsf_through_the_registry() -> None:
    sc = example("paper_fig1")
    out = allocate(sc, "psdsf")
    np.testing.assert_allclose(out.totals, [3, 3, 6], rtol=1e-7)
    assert out.certificate is not None and out.certificate.holds


def test_oracle_3_cluster_totals() -> None:
    sc = example("paper_cluster")
    tsf = allocate(sc, "tsf").totals
    # ORACLES.md prints these rounded to the digits shown
    np.testing.assert_allclose(tsf, [204.945, 107.527, 58.3425, 35.5525], rtol=0, atol=5e-4)
    cdrfh = allocate(sc, "c-drfh").totals
    np.testing.assert_allclose(cdrfh, [210.92, 105.46, 57.69, 35.15], rtol=0, atol=5e-3)


def test_oracle_4_tsf_er_and_tsf_without_the_uplink() -> None:
    sc = example("tsfer_fig2")
    X = allocate(sc, "tsf-er").allocation
    np.testing.assert_allclose(X, [[0, 30 / 7], [5, 5 / 14]], atol=1e-7)
    np.testing.assert_allclose(X.sum(axis=1), [4.286, 5.357], atol=1e-3)
    # the uplink binds the task shares (eta1 = 6 < 7.5) but is not used up: 25/28 of it
    assert X.sum(axis=1) @ sc.external_demand[:, 0] == pytest.approx(25 / 28, rel=1e-7)
    plain = allocate(without_external(sc), "tsf").allocation
    np.testing.assert_allclose(plain, [[0, 5], [5, 0]], atol=1e-7)


# -- behaviour -----------------------------------------------------------------------------------


def test_unknown_policy_is_a_typed_error() -> None:
    with pytest.raises(UnknownPolicyError, match="unknown policy 'fair'"):
        allocate(example("paper_fig1"), "fair")


def test_per_server_drf_is_the_server_procedure_with_zero_offsets() -> None:
    sc = example("paper_cluster")
    X = allocate(sc, "per-server-drf").allocation
    zero = np.zeros(sc.num_users)
    for i in range(sc.num_servers):
        expected = server_procedure(sc.capacity[i], sc.consumption(i, "rdm"), sc.gamma[:, i],
                                    sc.weight, zero, zero, sc.max_tasks)
        np.testing.assert_allclose(X[:, i], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("policy", POLICIES)
def test_backlog_caps_bind_and_freed_capacity_is_reused(policy: str) -> None:
    # u3 wants at most 4 tasks; on fig. 1 the others then share s1's memory: 3 tasks each
    sc = example("paper_fig1")
    capped = sc.replace_users(max_tasks=np.array([np.inf, np.inf, 4.0]))
    x = allocate(capped, policy).totals
    assert x[2] <= 4.0 + 1e-9
    if policy == "psdsf":
        # RDM PS-DSF is not unique: (3, 3, 4) and a dominated allocation with some of u3's
        # tasks on s1 both satisfy Theorem 1, and the solver may return either
        return
    free = allocate(sc, policy).totals
    assert x[0] + x[1] >= free[0] + free[1] - 1e-9
    if policy == "c-drfh":  # u1's dominant resource in the pool is bandwidth: 10 x1 = 12 x2
        np.testing.assert_allclose(x, [30 / 11, 36 / 11, 4], rtol=1e-7)
    elif policy in LP_POLICIES:
        np.testing.assert_allclose(x, [3, 3, 4], rtol=1e-7)


def test_weights_scale_the_lp_policies() -> None:
    # one server, one resource, weights 1 and 3: every weighted max-min policy splits 1:3
    sc = Scenario.from_dict({
        "resources": ["cpu"],
        "servers": [{"name": "s", "capacity": {"cpu": 8}}],
        "users": [{"name": "a", "demand": {"cpu": 1}}, {"name": "b", "demand": {"cpu": 1},
                                                         "weight": 3}],
    })
    for policy in POLICIES:
        np.testing.assert_allclose(allocate(sc, policy).totals, [2, 6], rtol=1e-7)


# -- properties of every policy on random scenarios -----------------------------------------------


def assert_feasible(sc: Scenario, X: FloatArray, *, pooled: bool) -> None:
    assert (X >= -1e-9).all()
    x = X.sum(axis=1)
    assert (x <= sc.max_tasks * (1 + 1e-7) + 1e-9).all()
    if pooled:
        assert (x @ sc.demand <= sc.capacity.sum(axis=0) * (1 + 1e-7) + 1e-9).all()
        return
    assert (X[sc.gamma <= 0] <= 1e-9).all()
    used = X.T @ sc.demand  # K x M (no per-user gamma overrides in these scenarios)
    assert (used <= sc.capacity * (1 + 1e-7) + 1e-9).all()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(1, 6), N=st.integers(1, 5),
       M=st.integers(1, 3))
def test_every_policy_is_feasible(seed: int, K: int, N: int, M: int) -> None:
    sc = random_scenario(np.random.default_rng(seed), K=K, N=N, M=M)
    for policy in POLICIES:
        out = allocate(sc, policy)
        assert_feasible(sc, out.allocation, pooled=out.pooled)


def normaliser(sc: Scenario, policy: str) -> FloatArray:
    """Each LP policy's scale, computed here from the definitions (not from the package)."""
    D, C, phi = sc.demand, sc.capacity, sc.weight
    eligible = sc.gamma > 0
    if policy in ("drfh", "c-drfh"):
        pool = eligible.astype(float) @ C if policy == "drfh" else np.tile(C.sum(0), (len(D), 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            mu = np.where(D > 0, D / pool, 0.0).max(axis=1)
        return np.asarray(phi / mu)
    alone = np.zeros(sc.gamma.shape)  # tasks alone on each server, placement ignored
    for n in range(len(D)):
        for i in range(len(C)):
            need = D[n] > 0
            alone[n, i] = (C[i, need] / D[n, need]).min()
    g = np.where(eligible, alone, 0.0) if policy == "cdrf" else alone
    return np.asarray(phi * g.sum(axis=1))


def best_min_level(sc: Scenario, scale: FloatArray) -> float:
    """max t s.t. x[n] >= t scale[n], per-server capacity, placement, caps: a dense LP."""
    N, K = sc.gamma.shape
    M = sc.capacity.shape[1]
    nv = N * K + 1
    c = np.zeros(nv)
    c[-1] = -1.0
    rows, rhs = [], []
    for n in range(N):
        r = np.zeros(nv)
        r[n * K:(n + 1) * K] = -1.0
        r[-1] = scale[n]
        rows.append(r)
        rhs.append(0.0)
        if np.isfinite(sc.max_tasks[n]):
            r = np.zeros(nv)
            r[n * K:(n + 1) * K] = 1.0
            rows.append(r)
            rhs.append(sc.max_tasks[n])
    for i in range(K):
        for m in range(M):
            r = np.zeros(nv)
            for n in range(N):
                r[n * K + i] = sc.demand[n, m]
            rows.append(r)
            rhs.append(sc.capacity[i, m])
    bounds = [(0.0, None if sc.gamma[n, i] > 0 else 0.0) for n in range(N) for i in range(K)]
    res = linprog(c, A_ub=np.array(rows), b_ub=np.array(rhs), bounds=[*bounds, (0.0, None)],
                  method="highs-ipm")
    assert res.status == 0
    return float(res.x[-1])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(1, 5), N=st.integers(1, 4),
       M=st.integers(1, 3), policy=st.sampled_from(LP_POLICIES[:4]))
def test_lp_policy_max_min_cannot_be_improved(
    seed: int, K: int, N: int, M: int, policy: str
) -> None:
    sc = random_scenario(np.random.default_rng(seed), K=K, N=N, M=M)
    scale = normaliser(sc, policy)
    x = allocate(sc, policy).totals
    achieved = float((x / scale).min())
    assert achieved == pytest.approx(best_min_level(sc, scale), rel=1e-6, abs=1e-9)


def test_spans_the_solvers_do_not_hold_are_refused_at_load() -> None:
    """Task counts spanning 1e30 (each number in the documented range) are refused at load in
    one line; at 1e8 every policy gives a finite allocation and psdsf a certified one."""
    from psdsf_dist.errors import ScenarioError
    from psdsf_dist.policies import POLICIES, allocate

    def spread(e: float) -> dict[str, Any]:
        a, b = 10.0 ** (-e / 2), 10.0 ** (e / 2)
        return {"resources": ["cpu", "mem"],
                "servers": [{"name": "s1", "capacity": {"cpu": a, "mem": b}},
                            {"name": "s2", "capacity": {"cpu": b, "mem": a}}],
                "users": [{"name": "u1", "demand": {"cpu": a, "mem": b}},
                          {"name": "u2", "demand": {"cpu": b, "mem": a}},
                          {"name": "u3", "demand": {"cpu": 1, "mem": 1}, "weight": b}]}

    with pytest.raises(ScenarioError, match=r"tasks alone .* span 1.0e\+30"):
        Scenario.from_dict(spread(30))
    s = Scenario.from_dict(spread(8))
    for policy in POLICIES:
        out = allocate(s, policy)
        assert np.all(np.isfinite(out.allocation)) and np.all(out.allocation >= -1e-9), policy
        if policy == "psdsf":
            assert out.certificate is not None and out.certificate.holds
