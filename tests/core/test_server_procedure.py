"""The server procedure: fixed points are PS-DSF, RDM vs TDM, stale totals, gain semantics."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from psdsf_dist.core.server_procedure import server_procedure, server_water_fill
from psdsf_dist.core.solver import solve
from psdsf_dist.model.scenario import Mode, Scenario
from tests.core.test_solver import cases

FloatArray = npt.NDArray[np.float64]


def respond(
    scenario: Scenario,
    server: int,
    totals: FloatArray,
    column: FloatArray,
    mode: Mode,
    gain: float | FloatArray | None = None,
) -> FloatArray:
    return server_procedure(
        scenario.capacity[server],
        scenario.consumption(server, mode),
        scenario.gamma[:, server],
        scenario.weight,
        totals,
        column,
        scenario.max_tasks,
        mode=mode,
        gain=gain,
    )


def assert_fixed_point(scenario: Scenario, mode: Mode, gain: float | None) -> None:
    X = solve(scenario, mode).allocation
    x = X.sum(axis=1)
    for i in range(scenario.num_servers):
        new = respond(scenario, i, x, X[:, i], mode, gain)
        scale = max(1.0, float(scenario.gamma[:, i].max(initial=0.0)))
        np.testing.assert_allclose(new, X[:, i], rtol=1e-7, atol=1e-7 * scale,
                                   err_msg=f"server {scenario.server_names[i]} moved")


@pytest.mark.parametrize("gain", [None, 3.0])
@pytest.mark.parametrize("mode", ["rdm", "tdm"])
@pytest.mark.parametrize("name", ["fig1", "fig2", "cluster"])
def test_a_certified_solution_is_a_fixed_point_of_every_server(
    name: str, mode: Mode, gain: float | None, request: pytest.FixtureRequest
) -> None:
    assert_fixed_point(request.getfixturevalue(name), mode, gain)


@given(cases(), st.sampled_from([None, 3.0]))
def test_random_certified_solutions_are_fixed_points(
    case: tuple[Mode, dict[str, Any]], gain: float | None
) -> None:
    mode, doc = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scenario = Scenario.from_dict(doc)
    assert_fixed_point(scenario, mode, gain)


def test_per_server_drf_on_fig2_s1(fig2: Scenario) -> None:
    zero = np.zeros(4)
    # RDM: x = gamma L; cpu 30 L = 9 saturates first (mem 34.5 L = 12, bw 120 L = 100)
    np.testing.assert_allclose(respond(fig2, 0, zero, zero, "rdm"), [1.8, 1.8, 3.6, 2.7])
    # TDM: time sum x / gamma = 4 L = 1
    np.testing.assert_allclose(respond(fig2, 0, zero, zero, "tdm"), [1.5, 1.5, 3, 2.25])


def test_tdm_equals_rdm_with_a_single_resource() -> None:
    scenario = Scenario.from_dict({
        "resources": ["cpu"],
        "servers": [{"name": "s", "capacity": {"cpu": 10}}],
        "users": [{"name": f"u{n}", "demand": {"cpu": d}, "weight": w}
                  for n, (d, w) in enumerate([(1, 1), (2, 1), (0.5, 3)])],
    })
    totals = np.array([4.0, 0.0, 7.0])
    column = np.array([1.0, 0.0, 2.0])
    np.testing.assert_allclose(respond(scenario, 0, totals, column, "tdm"),
                               respond(scenario, 0, totals, column, "rdm"))


def test_tdm_ignores_capacity_and_time_shares_by_gamma(fig1: Scenario) -> None:
    # at s2 only u3 is eligible (gamma 6): alone it gets the whole server
    zero = np.zeros(3)
    np.testing.assert_allclose(respond(fig1, 1, zero, zero, "tdm"), [0, 0, 6])
    np.testing.assert_allclose(respond(fig1, 1, zero, zero, "rdm"), [0, 0, 6])


def test_stale_totals_below_the_column_count_as_nothing_elsewhere(fig2: Scenario) -> None:
    column = np.array([2.0, 1.0, 0.0, 0.0])
    stale = np.zeros(4)  # older than the column: below it
    fresh = column.copy()  # the user holds nothing elsewhere
    for mode in ("rdm", "tdm"):
        a = respond(fig2, 0, stale, column, mode)
        b = respond(fig2, 0, fresh, column, mode)
        np.testing.assert_allclose(a, b)
        assert (a >= 0).all()
        assert (fig2.demand.T @ a <= fig2.capacity[0] * (1 + 1e-12)).all()


def test_ineligible_users_get_nothing(fig1: Scenario) -> None:
    out = respond(fig1, 1, np.zeros(3), np.array([5.0, 5.0, 0.0]), "rdm")
    assert out[0] == 0 and out[1] == 0


def test_gain_one_is_the_plain_best_response(fig2: Scenario) -> None:
    totals = np.array([5.0, 1.0, 4.0, 2.0])
    column = np.array([1.0, 0.5, 1.0, 0.0])
    np.testing.assert_array_equal(respond(fig2, 0, totals, column, "rdm", 1.0),
                                  respond(fig2, 0, totals, column, "rdm", None))


def test_cap_limits_the_best_response() -> None:
    scenario = Scenario.from_dict({
        "resources": ["cpu"],
        "servers": [{"name": "s", "capacity": {"cpu": 10}}],
        "users": [{"name": "a", "demand": {"cpu": 1}, "max_tasks": 5},
                  {"name": "b", "demand": {"cpu": 1}}],
    })
    # a holds 3 elsewhere: at most 2 more here
    out = respond(scenario, 0, np.array([3.0, 0.0]), np.zeros(2), "rdm")
    np.testing.assert_allclose(out, [2, 8])


@st.composite
def class_inputs(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(1, 7))
    m = draw(st.integers(1, 3))
    capacity = np.array([draw(st.floats(0.5, 20)) for _ in range(m)])
    consumption = np.array([[draw(st.one_of(st.just(0.0), st.floats(0.1, 3))) for _ in range(m)]
                            for _ in range(n)])
    consumption[consumption.sum(axis=1) == 0, 0] = 1.0
    with np.errstate(divide="ignore"):
        gamma = np.min(np.where(consumption > 0, capacity / consumption, np.inf), axis=1)
    gamma[[draw(st.booleans()) and j > 0 for j in range(n)]] = 0.0
    return {
        "capacity": capacity,
        "consumption": consumption,
        "gamma": gamma,
        "weight": np.array([draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])) for _ in range(n)]),
        "elsewhere": np.array([draw(st.one_of(st.just(0.0), st.floats(0, 40))) for _ in range(n)]),
        "column": np.array([draw(st.floats(0, 5)) for _ in range(n)]) * (gamma > 0),
        "max_tasks": np.array([draw(st.one_of(st.just(np.inf), st.floats(1, 60)))
                               for _ in range(n)]),
        "k": draw(st.integers(1, 12)),
        "mode": draw(st.sampled_from(["rdm", "tdm"])),
        "per_user": draw(st.booleans()),
    }


@given(class_inputs())
def test_gain_k_on_k_identical_servers_is_the_exact_class_best_response(p: dict[str, Any]) -> None:
    """k identical servers all holding Y, the user holding ``elsewhere`` outside the class.
    One call with gain k gives Y'; with every member at Y' the plain best response of each
    member (totals elsewhere + k Y') is Y' again: the class is at its symmetric best response."""
    k = p["k"]
    n = len(p["weight"])
    gain: float | FloatArray = np.full(n, float(k)) if p["per_user"] else float(k)
    common = (p["capacity"], p["consumption"], p["gamma"], p["weight"])
    Y = p["column"]
    elsewhere = np.minimum(p["elsewhere"], p["max_tasks"])
    # keep the current state within the caps (a real state never exceeds them)
    Y = np.minimum(Y, (p["max_tasks"] - elsewhere) / k)
    totals = elsewhere + k * Y
    new = server_procedure(*common, totals, Y, p["max_tasks"], mode=p["mode"], gain=gain)
    again = server_procedure(*common, elsewhere + k * new, new, p["max_tasks"],
                             mode=p["mode"], gain=None)
    scale = max(1.0, float(p["gamma"].max()))
    np.testing.assert_allclose(again, new, rtol=1e-9, atol=1e-9 * scale)
    assert (elsewhere + k * new <= p["max_tasks"] * (1 + 1e-9)).all()


def test_server_water_fill_exposes_the_structure(fig2: Scenario) -> None:
    wf = server_water_fill(fig2.capacity[0], fig2.demand, fig2.gamma[:, 0], fig2.weight,
                           np.zeros(4), np.zeros(4), fig2.max_tasks)
    assert [s.tolist() for s in wf.saturated] == [[0]]  # cpu
    np.testing.assert_allclose(wf.level, [0.3])
