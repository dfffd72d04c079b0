"""DRF-alpha_er, TSF-alpha_er and DRF-ER against the TSF-ER paper: Fig. 2, Table 2's property
failures with their witnesses, and invariants on random environments with a link."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.policies import allocate, models_external, without_external
from psdsf_dist.policies.properties import check_properties
from psdsf_dist.policies.tsf_er_baselines import (
    dominant_share,
    drf_alpha_er,
    drf_er,
    reservation,
    reserved_monopoly_tasks,
    tsf_alpha_er,
)
from tests.conftest import example_scenario as example

FloatArray = npt.NDArray[np.float64]
RULES = ("drf-alpha-er", "tsf-alpha-er", "drf-er")


def test_registered_and_modelling_the_link() -> None:
    sc = example("tsfer_fig2")
    for rule in RULES:
        assert models_external(rule)
        out = allocate(sc, rule)
        assert not out.pooled and not out.whole


def test_fig2_reservations_lose_tasks_for_both_users() -> None:
    """Fig. 2: CRU and MNW give each user 5 tasks (one server each); DRF-eq and TSF-cpu
    (reservation as the servers' CPU, 1/3 and 2/3 of the link) give both users fewer, and
    TSF-cpu fewer than TSF-ER too (section 3.3)."""
    sc = example("tsfer_fig2")
    drf_eq, _ = drf_alpha_er(sc, "rdm", "eq")
    tsf_cpu, _ = tsf_alpha_er(sc, "rdm", "cpu")
    tsf_er = allocate(sc, "tsf-er").totals
    assert (drf_eq.sum(axis=1) < 5 - 1e-6).all()
    assert (tsf_cpu.sum(axis=1) < tsf_er - 1e-6).all()
    np.testing.assert_allclose(reservation(sc, "cpu"), [1 / 3, 2 / 3])
    # each server keeps within its part of the link
    for X, alpha in ((drf_eq, [0.5, 0.5]), (tsf_cpu, [1 / 3, 2 / 3])):
        use = X.T @ sc.external_demand[:, 0]
        assert (use <= np.array(alpha) * sc.external_capacity[0] + 1e-9).all()


def test_dominant_share_counts_the_link() -> None:
    """Fig. 2's normalised demands: d1 = (2/15, 1/15, 2.5/15), d2 = (1/15, 2/15, 0.5/15)."""
    np.testing.assert_allclose(dominant_share(example("tsfer_fig2")), [2.5 / 15, 2 / 15])


def table2_failures(sc: Scenario, rule: str) -> dict[str, Any]:
    report = check_properties(sc, rule, trials=8)
    return {c.key: c for c in report.checks if c.holds is False}


@pytest.mark.parametrize("rule", ["drf-alpha-er", "tsf-alpha-er"])
def test_reserving_the_link_breaks_pareto_optimality(rule: str) -> None:
    """Table 2, PO column (Theorems 3-4): witness Fig. 2 - u1 could run 5 tasks."""
    fails = table2_failures(example("tsfer_fig2"), rule)
    assert set(fails) == {"po"}
    assert fails["po"].witness["user"] == "u1"


@pytest.mark.parametrize("rule", ["drf-alpha-er", "drf-er"])
def test_dominant_shares_break_sharing_incentive(rule: str) -> None:
    """Table 2, SI column: u1 runs 4.512 tasks where the uniform split gives 5.198."""
    sc = example("tsfer_si_counterexample")
    fails = table2_failures(sc, rule)
    assert set(fails) == {"si"}
    assert fails["si"].witness["user"] == "u1"
    assert allocate(sc, rule).totals[0] == pytest.approx(4.51237, abs=1e-5)


def test_tsf_er_keeps_every_property_on_the_witnesses() -> None:
    for name in ("tsfer_fig2", "tsfer_si_counterexample"):
        assert not table2_failures(example(name), "tsf-er")


def test_bad_reservations_are_typed_errors() -> None:
    sc = example("tsfer_fig2")
    with pytest.raises(ScenarioError, match="unknown resource 'gpu'"):
        reservation(sc, "gpu")
    with pytest.raises(ScenarioError, match="need 2 nonnegative fractions"):
        reservation(sc, np.array([1.0, -1.0]))


# -- random environments with a link -------------------------------------------------------------


def environment(data: st.DataObject, K: int, N: int) -> Scenario:
    cap = st.integers(10, 200).map(lambda v: v / 100)
    dem = st.integers(1, 50).map(lambda v: v / 100)
    return Scenario.from_dict({
        "resources": ["cpu", "mem"],
        "external": {"bw": data.draw(st.integers(2, 30)) / 10},
        "servers": [{"name": f"s{i}", "capacity": {"cpu": data.draw(cap),
                                                   "mem": data.draw(cap)}} for i in range(K)],
        "users": [{"name": f"u{n}", "demand": {"cpu": data.draw(dem), "mem": data.draw(dem)},
                   "external_demand": {"bw": data.draw(st.integers(0, 30)) / 100}}
                  for n in range(N)],
    })


def level(X: FloatArray, scale: FloatArray) -> float:
    return float((X.sum(axis=1) / scale).min())


@settings(max_examples=25, deadline=None)
@given(data=st.data(), K=st.integers(1, 3), N=st.integers(1, 3))
def test_reservations_only_shrink_the_feasible_set(data: st.DataObject, K: int, N: int) -> None:
    """chi_alpha(E) is inside chi(E): DRF-ER's max-min dominant share is at least
    DRF-alpha_er's for any reservation; each server keeps within its part of the link; and
    eta_alpha <= eta (TSF-ER's normaliser)."""
    sc = environment(data, K, N)
    alpha = reservation(sc, np.array([data.draw(st.integers(1, 20)) / 20 for _ in range(K)]))
    mu = dominant_share(sc)
    fixed, _ = drf_alpha_er(sc, "rdm", alpha)
    free, _ = drf_er(sc, "rdm")
    assert level(free, 1 / mu) >= level(fixed, 1 / mu) * (1 - 1e-7) - 1e-9
    for X in (fixed, tsf_alpha_er(sc, "rdm", alpha)[0]):
        use = X.T @ sc.external_demand[:, 0]
        assert (use <= alpha * sc.external_capacity[0] * (1 + 1e-7) + 1e-9).all()
    from psdsf_dist.policies.tsf_er import monopoly_tasks

    assert (reserved_monopoly_tasks(sc, alpha) <= monopoly_tasks(sc) * (1 + 1e-9)).all()


@settings(max_examples=15, deadline=None)
@given(data=st.data(), K=st.integers(1, 3), N=st.integers(1, 3))
def test_without_the_link_they_are_drfh_and_tsf(data: st.DataObject, K: int, N: int) -> None:
    sc = without_external(environment(data, K, N))
    drfh = allocate(sc, "drfh").totals
    tsf = allocate(sc, "tsf").totals
    np.testing.assert_allclose(allocate(sc, "drf-alpha-er").totals, drfh, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(allocate(sc, "drf-er").totals, drfh, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(allocate(sc, "tsf-alpha-er").totals, tsf, rtol=1e-6, atol=1e-9)
