"""MNW (TSF-ER paper, section 3.2): ORACLES example 4, the Appendix 9.2 counterexample, the
optimality conditions, a scipy reference, and the properties Theorem 2 proves."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog, minimize

from psdsf_dist.core.solver import solve
from psdsf_dist.model.random_scenarios import random_scenario
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies import allocate
from psdsf_dist.policies.feasibility import task_model
from psdsf_dist.policies.mnw import max_nash_welfare, onto_feasible
from psdsf_dist.policies.properties import (
    envy_freeness,
    feasible,
    pareto_optimality,
    sharing_incentive,
    true_tasks,
)
from tests.conftest import example_scenario as example
from tests.policies.tsfer_scenarios import dense_constraints, linked_scenario, totals_matrix

# -- the paper's numbers -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["rdm", "tdm"])
def test_oracle_4_mnw_gives_each_user_one_server(mode: Mode) -> None:
    # ORACLES example 4 / TSF-ER Fig. 2(a): u1 on s2, u2 on s1, five tasks each; the link is
    # used up (5 * 2.5/15 + 5 * 0.5/15 = 1)
    sc = example("tsfer_fig2")
    X = allocate(sc, "mnw", mode).allocation
    np.testing.assert_allclose(X, [[0, 5], [5, 0]], atol=1e-7)
    assert X.sum(axis=1) @ sc.external_demand[:, 0] == pytest.approx(1.0, rel=1e-9)


def test_appendix_9_2_mnw_is_not_strategy_proof() -> None:
    # one server of 10 CPU, a link of 10; A = (6 cpu, 3 bw), B = (2 cpu, 9 bw)
    sc = example("tsfer_sp_counterexample")
    truth = allocate(sc, "mnw")
    # paper: B gets 0.625 tasks (both rows tight: 6a + 2b = 10, 3a + 9b = 10)
    np.testing.assert_allclose(truth.totals, [35 / 24, 0.625], rtol=1e-8)
    liar = sc.replace_users(demand=np.array([[6.0], [4.0]]),
                            external_demand=np.array([[3.0], [7.0]]))
    lied = allocate(liar, "mnw")
    # paper: B reporting (4 cpu, 7 bw) gets 1 task, really worth min(4/2, 7/9) = 0.777 tasks
    assert lied.totals[1] == pytest.approx(1.0, rel=1e-8)
    assert true_tasks(sc, liar, lied, 1) == pytest.approx(7 / 9, rel=1e-8)


def test_tdm_mnw_without_external_resources_is_tdm_psdsf() -> None:
    # the Eisenberg-Gale program of core/eisenberg_gale.py is MNW on time shares
    for name in ("paper_fig1", "paper_fig2", "paper_cluster"):
        sc = example(name)
        free = sc.replace_users(max_tasks=np.full(sc.num_users, np.inf))
        np.testing.assert_allclose(allocate(free, "mnw", "tdm").totals,
                                   solve(free, "tdm").allocation.sum(axis=1), rtol=1e-7)


@pytest.mark.parametrize("name", ["tsfer_fig2", "tsfer_sp_counterexample", "paper_fig1",
                                  "paper_cluster"])
@pytest.mark.parametrize("mode", ["rdm", "tdm"])
def test_the_paper_examples_are_polished_to_round_off(name: str, mode: Mode) -> None:
    # the interior point alone is accurate to ~1e-6; the polish makes the KKT conditions hold
    # to 1e-9 (checked inside) and the numbers exact
    assert max_nash_welfare(example(name), mode).exact


def test_weights_are_exponents() -> None:
    # one resource, capacity 12: max log a + 2 log b on a + b = 12 gives 4 and 8
    sc = Scenario.from_dict({
        "resources": ["cpu"],
        "servers": [{"name": "s", "capacity": {"cpu": 12}}],
        "users": [{"name": "a", "demand": {"cpu": 1}},
                  {"name": "b", "demand": {"cpu": 1}, "weight": 2}],
    })
    np.testing.assert_allclose(allocate(sc, "mnw").totals, [4, 8], rtol=1e-9)


def test_users_that_cannot_run_get_nothing_and_the_others_are_unaffected() -> None:
    sc = Scenario.from_dict({
        "resources": ["cpu"],
        "external": {"bw": 0.0},
        "servers": [{"name": "s", "capacity": {"cpu": 12}}],
        "users": [{"name": "a", "demand": {"cpu": 1}},
                  {"name": "b", "demand": {"cpu": 1}, "external_demand": {"bw": 1}},
                  {"name": "c", "demand": {"cpu": 1}, "max_tasks": 0},
                  {"name": "d", "demand": {"cpu": 1}, "max_tasks": 2}],
    })
    np.testing.assert_allclose(allocate(sc, "mnw").totals, [10, 0, 0, 2], rtol=1e-9, atol=1e-12)


def test_onto_feasible_scales_overshoot_back_and_keeps_feasible_allocations() -> None:
    sc = example("tsfer_fig2")
    X = np.array([[0.0, 5.0], [5.0, 0.0]])
    np.testing.assert_array_equal(onto_feasible(sc, X, "rdm"), X)
    over = onto_feasible(sc, X * (1 + 1e-6), "rdm")
    assert feasible(sc, over, "rdm").holds
    np.testing.assert_allclose(over, X, rtol=1e-12)


# -- optimality: conditions and an independent reference ------------------------------------------

shapes = {"K": st.integers(1, 6), "N": st.integers(1, 5), "M": st.integers(1, 3),
          "mode": st.sampled_from(["rdm", "tdm"])}


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), **shapes)
def test_no_feasible_direction_raises_the_weighted_log_sum(
    seed: int, K: int, N: int, M: int, mode: Mode
) -> None:
    # x maximises sum phi log x over a convex set iff no feasible y has
    # sum phi (y - x) / x > 0: one LP over the feasible set written out here
    sc = linked_scenario(seed, K=K, N=N, M=M)
    X = allocate(sc, "mnw", mode).allocation
    x = X.sum(axis=1)
    assert (x > 0).all()
    A, b, bounds = dense_constraints(sc, mode)
    assert (A @ X.ravel() <= b * (1 + 1e-9) + 1e-12).all()
    assert (X[sc.gamma <= 0] == 0).all()
    T = totals_matrix(N, K)
    res = linprog(-(sc.weight / x) @ T, A_ub=A, b_ub=b, bounds=bounds, method="highs")
    assert res.status == 0
    assert -res.fun <= sc.weight.sum() * (1 + 1e-6)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), **shapes)
def test_kkt_conditions_hold_with_the_returned_prices(
    seed: int, K: int, N: int, M: int, mode: Mode
) -> None:
    sc = linked_scenario(seed, K=K, N=N, M=M)
    result = max_nash_welfare(sc, mode)
    model = task_model(sc, mode, external=True)
    z = result.allocation[model.user, model.server]
    x = result.totals
    p, mu = result.prices, result.cap_prices
    assert (p >= -1e-9).all() and (mu >= -1e-9).all()
    load = model.A @ z
    # complementary slackness: a priced row is full, a priced backlog is reached
    assert (p * (1 - load) <= 1e-6 * max(p.max(initial=0.0), 1e-9)).all()
    reached = np.where(mu > 0, sc.max_tasks - x, 0.0)
    assert (mu * reached <= 1e-6 * np.maximum(mu * x, 1e-9)).all()
    cost = np.asarray(model.A.T @ p) + mu[model.user]  # per task of each variable
    bang = sc.weight[model.user] / x[model.user]  # phi[n] / x[n]
    # nobody can buy more tasks per unit of budget elsewhere, and where it runs tasks it pays
    # exactly that price: each user spends its weight
    assert (bang <= cost * (1 + 1e-5) + 1e-9).all()
    spend = np.bincount(model.user, weights=z * cost, minlength=N)
    np.testing.assert_allclose(spend, sc.weight, rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(1, 3), N=st.integers(1, 3),
       M=st.integers(1, 2), mode=st.sampled_from(["rdm", "tdm"]))
def test_matches_a_general_purpose_solver(seed: int, K: int, N: int, M: int, mode: Mode) -> None:
    sc = linked_scenario(seed, K=K, N=N, M=M)
    A, b, bounds = dense_constraints(sc, mode)
    T = totals_matrix(N, K)
    phi = sc.weight

    def welfare(v: np.ndarray) -> float:
        return float(phi @ np.log(np.maximum(T @ v, 1e-300)))

    # start inside: a thousandth of the uniform split (it fits the link and the backlogs)
    start = (1e-3 * (phi / phi.sum())[:, None] * sc.gamma).ravel()
    ref = minimize(lambda v: -welfare(v), start, method="SLSQP", bounds=bounds,
                   constraints=[{"type": "ineq", "fun": lambda v: b - A @ v,
                                 "jac": lambda v: -A}],
                   options={"ftol": 1e-14, "maxiter": 2000})
    ours = allocate(sc, "mnw", mode).allocation.ravel()
    assert welfare(ours) >= welfare(ref.x) - 1e-7 * max(1.0, abs(welfare(ref.x)))
    if ref.success:  # the totals are unique
        np.testing.assert_allclose(T @ ours, T @ ref.x, rtol=1e-4, atol=1e-6)


# -- Theorem 2 and the properties checkers ---------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), **shapes)
def test_feasible_and_pareto_optimal(seed: int, K: int, N: int, M: int, mode: Mode) -> None:
    sc = linked_scenario(seed, K=K, N=N, M=M)
    X = allocate(sc, "mnw", mode).allocation
    assert feasible(sc, X, mode).holds
    assert pareto_optimality(sc, X, mode).holds


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), **shapes)
def test_without_backlogs_envy_free_and_sharing_incentive(
    seed: int, K: int, N: int, M: int, mode: Mode
) -> None:
    # a competitive equilibrium with incomes phi (Theorem 2's proof): every weight-scaled bundle
    # of another user, and the uniform split, cost n no more than its own, so it is no better;
    # placement and weights do not change the argument
    sc = linked_scenario(seed, K=K, N=N, M=M, cap_prob=0.0)
    X = allocate(sc, "mnw", mode).allocation
    assert envy_freeness(sc, X, mode).holds
    assert sharing_incentive(sc, X).holds


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(1, 6), N=st.integers(1, 5),
       M=st.integers(1, 3))
def test_plain_scenarios_feasible_with_caps_and_placement(seed: int, K: int, N: int,
                                                          M: int) -> None:
    sc = random_scenario(np.random.default_rng(seed), K=K, N=N, M=M, cap_prob=0.5)
    X = allocate(sc, "mnw").allocation
    x = X.sum(axis=1)
    assert (x <= sc.max_tasks * (1 + 1e-12)).all()
    assert (X[sc.gamma <= 0] == 0).all()
    assert (X.T @ sc.demand <= sc.capacity * (1 + 1e-12) + 1e-15).all()
