"""The PS-DSF certificate: oracles hold, hand-made violations are caught and named, dust is
ignored, and the residual is scale-free."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from psdsf_dist.core.certificate import certificate
from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.document import read_document
from psdsf_dist.model.scenario import Mode, Scenario
from tests.conftest import example_path

FloatArray = npt.NDArray[np.float64]

FIG1_X = np.array([[3.0, 0], [3, 0], [0, 6]])
FIG2_RDM_X = np.array([[3.6, 0], [3.6, 0], [0, 8], [0, 8]])
FIG2_TDM_X = np.array([[3.0, 0], [3, 0], [0, 6], [0, 6]])


def with_users(scenario: Scenario, *, max_tasks: list[float | None]) -> Scenario:
    """The scenario with some users' ``max_tasks`` changed (None: the user's own)."""
    caps = [float(c) if c is not None else float(old)
            for c, old in zip(max_tasks, scenario.max_tasks, strict=True)]
    return scenario.replace_users(max_tasks=np.array(caps))


def cluster_allocation(cluster: Scenario) -> FloatArray:
    """ORACLES 3, Table IV, spread evenly over the members of each class."""
    per_server = {"A": [5, 2.5, 0, 0], "B": [2.5, 1.25, 0, 0], "C": [0, 0, 2.5, 0],
                  "D": [0, 0, 0, 2.5]}
    return np.array([per_server[c] for c in cluster.server_class], dtype=float).T


@pytest.mark.parametrize("mode", ["rdm", "tdm"])
def test_oracle_allocations_hold(
    fig1: Scenario, fig2: Scenario, cluster: Scenario, mode: Mode
) -> None:
    fig2_x = FIG2_RDM_X if mode == "rdm" else FIG2_TDM_X
    for scenario, X in ((fig1, FIG1_X), (fig2, fig2_x), (cluster, cluster_allocation(cluster))):
        cert = certificate(scenario, X, mode=mode)
        assert cert.holds, cert.violations
        assert cert.residual == pytest.approx(0.0, abs=1e-12)
        assert cert.violations == ()


def test_the_rdm_answer_of_fig2_is_not_tdm(fig2: Scenario) -> None:
    cert = certificate(fig2, FIG2_RDM_X, mode="tdm")
    assert not cert.holds
    assert any("over capacity" in v and "time" in v for v in cert.violations)


def test_infeasible_is_named(fig2: Scenario) -> None:
    cert = certificate(fig2, FIG2_RDM_X * 1.1, mode="rdm")
    assert not cert.holds
    assert cert.residual == pytest.approx(0.1)
    assert any(v.startswith("server s1: cpu over capacity") for v in cert.violations)


def test_cap_exceeded_is_named(fig2: Scenario) -> None:
    capped = with_users(fig2, max_tasks=[3, None, None, None])
    cert = certificate(capped, FIG2_RDM_X, mode="rdm")
    assert not cert.holds
    assert any("user u1: 3.6 tasks exceed its cap 3" in v for v in cert.violations)
    assert cert.residual == pytest.approx(0.2)


def test_user_at_its_cap_needs_no_bottleneck(fig2: Scenario) -> None:
    # u1 capped at 1: s1 then has spare cpu, yet u1 is satisfied; the others grow
    capped = with_users(fig2, max_tasks=[1, None, None, None])
    X = np.array([[1.0, 0], [3.6, 0], [0, 8], [0, 8]])
    cert = certificate(capped, X, mode="rdm")
    assert not cert.holds  # u2 still has spare cpu at s1: no bottleneck for u2
    assert all("user u1" not in v for v in cert.violations)
    assert any("user u2 at server s1: no bottleneck" in v for v in cert.violations)


def test_a_user_just_below_its_cap_scores_its_cap_gap(fig2: Scenario) -> None:
    # u1 capped at 1 and given 0.8 % less: it has no bottleneck at s1 (others' V are far
    # above its own), but reaching its cap would satisfy it, so it scores 0.008, not ~1
    capped = with_users(fig2, max_tasks=[1, None, None, None])
    X = np.array([[1.0, 0], [4.375, 0], [2.25, 6.5], [0, 8.75]])
    assert certificate(capped, X, mode="rdm").holds
    X[0] *= 0.992
    strict = certificate(capped, X, mode="rdm", rtol=1e-3)
    loose = certificate(capped, X, mode="rdm", rtol=1e-2)
    assert strict.residual == pytest.approx(0.008) == loose.residual  # rtol does not move it
    assert not strict.holds and loose.holds
    assert any(v.startswith("user u1 at server s1: no bottleneck") and
               v.endswith("0.008 below its cap") for v in strict.violations)


def test_no_bottleneck_is_named(fig2: Scenario) -> None:
    cert = certificate(fig2, FIG2_RDM_X * 0.5, mode="rdm")
    assert not cert.holds
    assert any("no bottleneck" in v and "unused" in v for v in cert.violations)
    assert cert.residual == pytest.approx(0.5)


def test_a_consumer_above_the_user_is_named(fig2: Scenario) -> None:
    # u1 takes u2's share at s1: s1 stays saturated but u2 (V lower) sees a richer consumer
    X = np.array([[4.8, 0], [1.8, 0], [0, 8], [0, 8]])
    used = fig2.demand.T @ X[:, 0]
    X[:, 0] *= 1 / np.max(used / fig2.capacity[0])  # saturate exactly
    cert = certificate(fig2, X, mode="rdm")
    assert not cert.holds
    assert any("user u2 at server s1: no bottleneck" in v and "a consumer has V=" in v
               for v in cert.violations)


def test_tasks_on_an_ineligible_server_are_named(fig1: Scenario) -> None:
    X = FIG1_X.copy()
    X[0, 1] = 0.5  # u1 cannot run on s2 (no bandwidth)
    cert = certificate(fig1, X, mode="tdm")
    assert not cert.holds
    assert "user u1: tasks on ineligible server s2" in cert.violations
    assert cert.residual >= 1.0


def test_negative_tasks_are_named(fig1: Scenario) -> None:
    X = FIG1_X.copy()
    X[1, 0] = -0.5
    cert = certificate(fig1, X, mode="rdm")
    assert not cert.holds
    assert "user u2: negative tasks on s1" in cert.violations


def test_unsaturated_server_fails_in_tdm(fig2: Scenario) -> None:
    X = FIG2_TDM_X.copy()
    X[2, 1] = 5.0  # s2 time 5/12 + 6/12 < 1
    cert = certificate(fig2, X, mode="tdm")
    assert not cert.holds
    assert any("server s2: no bottleneck" in v or "at server s2: no bottleneck" in v
               for v in cert.violations)


def test_dust_below_1e_12_is_ignored(fig1: Scenario, fig2: Scenario) -> None:
    X = FIG1_X.copy()
    X[0, 1] = 1e-14  # dust on an ineligible server
    X[1, 0] -= 1e-14
    assert certificate(fig1, X, mode="rdm").holds
    Y = FIG2_RDM_X.copy()
    Y[0, 1] = 1e-13  # dust: cannot make u1 a consumer at s2
    Y[2, 0] = 1e-14  # dust: u3 (V = 8/12 at s1) must not count as a consumer at s1
    assert certificate(fig2, Y, mode="rdm").holds
    Y[2, 0] = 1e-6  # not dust: u3 becomes a consumer above u1 and u2 at s1
    assert not certificate(fig2, Y, mode="rdm").holds


def _scaled(name: str, factor: float) -> Scenario:
    doc = read_document(example_path(name))
    for s in doc["servers"]:
        s["capacity"] = {r: v * factor for r, v in s["capacity"].items()}
    for u in doc["users"]:
        u["demand"] = {r: v * factor for r, v in u["demand"].items()}
    return Scenario.from_dict(doc)


@pytest.mark.parametrize("factor", [1e-4, 0.3, 1e5])
@pytest.mark.parametrize("damage", [1.1, 0.5, 0.97])
def test_residual_is_scale_free(fig2: Scenario, factor: float, damage: float) -> None:
    X = FIG2_RDM_X * damage
    X[2, 1] *= 1.02  # an uneven violation as well
    a = certificate(fig2, X, mode="rdm")
    b = certificate(_scaled("paper_fig2", factor), X, mode="rdm")
    assert a.residual > 0
    assert b.residual == pytest.approx(a.residual, rel=1e-9)
    assert b.holds == a.holds


def test_holds_exactly_when_residual_is_within_rtol(fig2: Scenario) -> None:
    X = FIG2_RDM_X * (1 - 1e-7)
    assert not certificate(fig2, X, mode="rdm", rtol=1e-9).holds
    loose = certificate(fig2, X, mode="rdm", rtol=1e-6)
    assert loose.holds and 0 < loose.residual <= 1e-6


def test_given_totals_are_used(fig2: Scenario) -> None:
    # with totals claiming u1 holds much more elsewhere, u1 becomes the richest consumer at s1
    totals = FIG2_RDM_X.sum(axis=1) + np.array([10.0, 0, 0, 0])
    assert not certificate(fig2, FIG2_RDM_X, mode="rdm", totals=totals).holds


def test_wrong_shape_is_rejected(fig2: Scenario) -> None:
    with pytest.raises(ValueError, match="4 x 2"):
        certificate(fig2, np.zeros((2, 4)), mode="rdm")


def test_rdm_certificate_refuses_tdm_only_gamma() -> None:
    scenario = Scenario.from_dict({
        "resources": ["cpu", "gpu"],
        "servers": [{"name": "s", "capacity": {"cpu": 4}}],
        "users": [{"name": "u", "demand": {"cpu": 1, "gpu": 1}, "gamma": {"s": 2}}],
    })
    assert certificate(scenario, np.array([[2.0]]), mode="tdm").holds
    with pytest.raises(ScenarioError):
        certificate(scenario, np.array([[2.0]]), mode="rdm")


def test_to_json_has_holds_and_residual(fig1: Scenario) -> None:
    assert certificate(fig1, FIG1_X).to_json() == {"holds": True, "residual": 0.0}


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_allocation_never_holds(fig1: Scenario, bad: float) -> None:
    X = FIG1_X.copy()
    X[1, 0] = bad
    cert = certificate(fig1, X)
    assert not cert.holds and cert.residual == np.inf
    assert "not a number of tasks" in cert.violations[0]
    assert cert.to_json() == {"holds": False, "residual": None}
    totals = FIG1_X.sum(axis=1)
    totals[0] = bad
    assert not certificate(fig1, FIG1_X, totals=totals).holds


def test_a_tenants_scenario_with_no_user_yet_holds() -> None:
    # a `tenants: true` cluster before anyone submits: nothing to share, nothing unfair
    s = Scenario.from_dict({"tenants": True, "resources": ["CPU"],
                            "servers": [{"name": "a", "capacity": {"CPU": 4}},
                                        {"name": "b", "capacity": {"CPU": 2}}]})
    cert = certificate(s, np.zeros((0, 2)))
    assert cert.holds and cert.residual == 0.0
