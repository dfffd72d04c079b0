"""The exact solver: the paper's examples (ORACLES 1-3) and properties on random scenarios."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.core.certificate import certificate
from psdsf_dist.core.solver import ServerClasses, Solution, solve, solve_tdm_convex
from psdsf_dist.errors import SolverError
from psdsf_dist.model.scenario import Mode, Scenario

FloatArray = npt.NDArray[np.float64]
MODES: tuple[Mode, ...] = ("rdm", "tdm")


def class_totals(scenario: Scenario, X: FloatArray) -> dict[str, FloatArray]:
    """Tasks of every user summed over the members of each server class."""
    out = {}
    for c in scenario.class_names:
        members = [i for i, k in enumerate(scenario.server_class) if k == c]
        out[c] = X[:, members].sum(axis=1)
    return out


# -- ORACLES.md 1-3 ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_oracle_1_fig1(fig1: Scenario, mode: Mode) -> None:
    sol = solve(fig1, mode)
    assert sol.certificate.holds
    np.testing.assert_allclose(sol.totals, [3, 3, 6], atol=1e-6)
    np.testing.assert_allclose(sol.allocation[2, 1], 6, atol=1e-6)  # u3 entirely on s2
    np.testing.assert_allclose(sol.allocation[:2, 1], 0, atol=1e-6)


def test_oracle_2_fig2_rdm(fig2: Scenario) -> None:
    sol = solve(fig2, "rdm")
    np.testing.assert_allclose(
        sol.allocation, np.array([[3.6, 0], [3.6, 0], [0, 8], [0, 8]]), atol=1e-6
    )
    V = sol.totals / (fig2.weight * fig2.gamma[:, 0])  # virtual dominant shares at s1
    np.testing.assert_allclose(V, np.array([0.6, 0.6, 8 / 12, 8 / 9]), atol=1e-6)


def test_oracle_2_fig2_tdm(fig2: Scenario) -> None:
    sol = solve(fig2, "tdm")
    np.testing.assert_allclose(sol.totals, [3, 3, 6, 6], atol=1e-6)
    assert sol.certificate.holds


@pytest.mark.parametrize("mode", MODES)
def test_oracle_3_paper_cluster_table_iv(cluster: Scenario, mode: Mode) -> None:
    sol = solve(cluster, mode)
    per = class_totals(cluster, sol.allocation)
    np.testing.assert_allclose(per["A"], [40, 20, 0, 0], atol=1e-6)
    np.testing.assert_allclose(per["B"], [170, 85, 0, 0], atol=1e-6)
    np.testing.assert_allclose(per["C"], [0, 0, 82.5, 0], atol=1e-6)
    np.testing.assert_allclose(per["D"], [0, 0, 0, 27.5], atol=1e-6)
    # Fig. 6: CPU of classes C and D fully used
    util = (sol.allocation.T @ cluster.demand) / cluster.capacity
    for c in "CD":
        members = [i for i, k in enumerate(cluster.server_class) if k == c]
        np.testing.assert_allclose(util[members, 0], 1.0, atol=1e-9)
    np.testing.assert_allclose(util[:, 1], 1.0, atol=1e-9)  # memory saturated everywhere


@pytest.mark.parametrize("mode", MODES)
def test_oracle_3_user_4_away(cluster: Scenario, mode: Mode) -> None:
    away = cluster.only_users(range(3))
    sol = solve(away, mode)
    np.testing.assert_allclose(sol.totals, [251.25, 125.625, 82.5], atol=1e-6)
    util = (sol.allocation.T @ away.demand) / away.capacity
    cd = [i for i, k in enumerate(away.server_class) if k in "CD"]
    np.testing.assert_allclose(util[cd, 0], 1.0, atol=1e-9)


def test_paper_cluster_is_four_classes(cluster: Scenario) -> None:
    classes = ServerClasses.of(cluster)
    assert classes.count.tolist() == [8, 68, 33, 11]
    assert [cluster.server_class[i] for i in classes.representative] == ["A", "B", "C", "D"]


def test_solver_raises_rather_than_return_an_uncertified_allocation(fig2: Scenario) -> None:
    # the starting point (per-server DRF) is not PS-DSF on Fig. 2, so no sweep -> no answer
    with pytest.raises(SolverError, match="no certified"):
        solve(fig2, "rdm", max_sweeps=0)


def test_solve_checks_the_mode(fig1: Scenario) -> None:
    with pytest.raises(ValueError, match="mode"):
        solve(fig1, "xdm")  # type: ignore[arg-type]


# -- random scenarios --------------------------------------------------------------------------


def _amount(lo: float, hi: float) -> st.SearchStrategy[float]:
    # two decimals: realistic, and ties (nearly degenerate instances) are common
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False).map(lambda v: round(v, 2))


@st.composite
def scenario_docs(draw: st.DrawFn, overrides: bool = False) -> dict[str, Any]:
    """A valid scenario document: K 1..12 servers (some in classes), N 1..8 users, M 1..3."""
    m = draw(st.integers(1, 3))
    resources = [f"r{j}" for j in range(m)]
    k_total = draw(st.integers(1, 12))
    servers: list[dict[str, Any]] = []
    members: list[str] = []
    while len(members) < k_total:
        count = min(draw(st.integers(1, 3)), k_total - len(members))
        name = f"s{len(servers)}"
        cap = {r: draw(st.one_of(_amount(0.5, 20), _amount(0.5, 20), _amount(0.5, 20),
                                 st.just(0.0))) for r in resources}
        if not any(cap.values()):
            cap[resources[0]] = 1.0
        entry: dict[str, Any] = {"name": name, "capacity": cap}
        if count > 1:
            entry["count"] = count
            members += [f"{name}-{j}" for j in range(1, count + 1)]
        else:
            members.append(name)
        servers.append(entry)
    n_users = draw(st.integers(1, 8))
    users: list[dict[str, Any]] = []
    for n in range(n_users):
        demand = {r: draw(st.one_of(_amount(0.1, 5), _amount(0.1, 5), st.just(0.0)))
                  for r in resources}
        if not any(demand.values()):
            demand[resources[0]] = 1.0
        user: dict[str, Any] = {"name": f"u{n}", "demand": demand,
                                "weight": draw(st.sampled_from([1, 1, 2, 0.5, 3.5]))}
        allowed = [s["name"] for s in servers] + members
        if draw(st.booleans()):
            user["servers"] = draw(st.lists(st.sampled_from(allowed), min_size=1, max_size=4,
                                            unique=True))
        if draw(st.integers(0, 3)) == 0:
            user["max_tasks"] = draw(_amount(0.5, 30))
        if overrides and draw(st.booleans()):
            placed = user.get("servers", allowed)
            plain = [s for s in placed if s in members]  # members only: unambiguous
            if plain:
                pick = draw(st.lists(st.sampled_from(plain), min_size=1, max_size=3, unique=True))
                user["gamma"] = {s: draw(_amount(0.5, 20)) for s in pick}
        users.append(user)
    return {"resources": resources, "servers": servers, "users": users}


@st.composite
def cases(draw: st.DrawFn) -> tuple[Mode, dict[str, Any]]:
    mode: Mode = draw(st.sampled_from(MODES))
    return mode, draw(scenario_docs(overrides=mode == "tdm"))


def build(doc: dict[str, Any]) -> Scenario:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # users eligible nowhere are legal
        return Scenario.from_dict(doc)


def check_allocation(scenario: Scenario, X: FloatArray, mode: Mode) -> None:
    """Feasibility, caps and eligibility, computed here from the scenario's own numbers."""
    assert (X >= 0).all()
    assert (X[~scenario.eligible] == 0).all(), "tasks on an ineligible server"
    x = X.sum(axis=1)
    assert (x <= scenario.max_tasks * (1 + 1e-9)).all()
    if mode == "tdm":
        with np.errstate(divide="ignore", invalid="ignore"):
            time = np.where(scenario.eligible, X / scenario.gamma, 0.0).sum(axis=0)
        assert (time <= 1 + 1e-9).all()
    else:
        used = np.stack([scenario.consumption(i, "rdm").T @ X[:, i]
                         for i in range(scenario.num_servers)])
        assert (used <= scenario.capacity * (1 + 1e-9) + 1e-12).all()


@given(cases())
def test_random_solution_is_certified_and_feasible(case: tuple[Mode, dict[str, Any]]) -> None:
    mode, doc = case
    scenario = build(doc)
    sol = solve(scenario, mode)
    assert sol.allocation.shape == (scenario.num_users, scenario.num_servers)
    cert = certificate(scenario, sol.allocation, mode=mode, rtol=1e-9)
    assert cert.holds, cert.violations
    check_allocation(scenario, sol.allocation, mode)


def _renamed(doc: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    names = {s["name"]: f"zz{s['name']}" for s in out["servers"]}
    for s in out["servers"]:
        s["name"] = names[s["name"]]
    for u in out["users"]:
        u["name"] = f"user-{u['name']}"
        for key in ("servers", "gamma"):
            if key in u:
                old = u[key]
                new = [_rename_server(s, names) for s in old]
                u[key] = new if key == "servers" else dict(zip(new, old.values(), strict=True))
    return out


def _rename_server(name: str, names: dict[str, str]) -> str:
    if name in names:
        return names[name]
    base, _, k = name.rpartition("-")
    return f"{names[base]}-{k}"


@given(cases())
def test_renaming_users_and_servers_changes_nothing(case: tuple[Mode, dict[str, Any]]) -> None:
    mode, doc = case
    a = solve(build(doc), mode).allocation
    b = solve(build(_renamed(doc)), mode).allocation
    np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12)


@given(cases(), st.randoms(use_true_random=False))
def test_reordering_users_and_servers(case: tuple[Mode, dict[str, Any]], rnd: Any) -> None:
    """The permuted solution, mapped back, must certify for the original scenario.  Without caps
    TDM totals are unique, so there they must also agree.  RDM PS-DSF is not unique, and with
    finite caps neither are TDM totals: where a capped user's tasks sit (it needs no bottleneck)
    changes the time left for the others."""
    mode, doc = case
    shuffled = copy.deepcopy(doc)
    rnd.shuffle(shuffled["servers"])
    rnd.shuffle(shuffled["users"])
    original = build(doc)
    permuted = build(shuffled)
    sol_o = solve(original, mode)
    sol_p = solve(permuted, mode)
    rows = [permuted.user_names.index(u) for u in original.user_names]
    cols = [permuted.server_names.index(s) for s in original.server_names]
    back = sol_p.allocation[np.ix_(rows, cols)]
    cert = certificate(original, back, mode=mode)
    assert cert.holds, cert.violations
    if mode == "tdm" and np.isinf(original.max_tasks).all():
        np.testing.assert_allclose(back.sum(axis=1), sol_o.totals, rtol=1e-6, atol=1e-6)


def _scaled(doc: dict[str, Any], factor: float) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for s in out["servers"]:
        s["capacity"] = {r: v * factor for r, v in s["capacity"].items()}
    for u in out["users"]:
        u["demand"] = {r: v * factor for r, v in u["demand"].items()}
    return out


@given(cases(), st.sampled_from([1e-3, 0.3, 7.0, 1e3]))
def test_scaling_capacities_and_demands_together_changes_nothing(
    case: tuple[Mode, dict[str, Any]], factor: float
) -> None:
    mode, doc = case
    a = solve(build(doc), mode).totals
    b = solve(build(_scaled(doc, factor)), mode).totals
    np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6)


@given(cases())
def test_doubling_all_weights_changes_nothing(case: tuple[Mode, dict[str, Any]]) -> None:
    mode, doc = case
    doubled = copy.deepcopy(doc)
    for u in doubled["users"]:
        u["weight"] = 2 * u["weight"]
    a = solve(build(doc), mode).totals
    b = solve(build(doubled), mode).totals
    np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6)


def test_solution_totals_are_row_sums(cluster: Scenario) -> None:
    sol: Solution = solve(cluster, "rdm")
    np.testing.assert_allclose(sol.totals, sol.allocation.sum(axis=1))
    assert sol.sweeps >= 1 and sol.seconds > 0


def test_tdm_totals_with_caps_are_not_unique() -> None:
    """Why the reordering test compares TDM totals only without caps: u0 (capped at 0.5, one task
    per unit of time on either server) may sit on s0, where u1 runs one task per unit of time, or
    on s1, where u1 runs two; u1 gets 2.5 or 2 and both certify."""
    scenario = Scenario.from_dict({
        "resources": ["cpu", "gpu"],
        "servers": [{"name": "s0", "capacity": {"cpu": 1, "gpu": 1}},
                    {"name": "s1", "capacity": {"cpu": 2, "gpu": 1}}],
        "users": [{"name": "u0", "demand": {"cpu": 1, "gpu": 1}, "max_tasks": 0.5},
                  {"name": "u1", "demand": {"cpu": 1}}],
    })
    a = np.array([[0.5, 0.0], [0.5, 2.0]])
    b = np.array([[0.0, 0.5], [1.0, 1.0]])
    assert certificate(scenario, a, mode="tdm").holds
    assert certificate(scenario, b, mode="tdm").holds
    assert a[1].sum() == 2.5 and b[1].sum() == 2.0


# -- the convex start (Eisenberg-Gale) ---------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(cases())
def test_convex_start_gives_certified_allocations(case: tuple[Mode, dict[str, Any]]) -> None:
    """TDM from the Eisenberg-Gale program (falling back to sweeps from its optimum), RDM from
    sweeps started at it: certified and feasible with caps, placement, weights, given gamma."""
    mode, doc = case
    scenario = build(doc)
    sol = solve(scenario, mode, convex=True)
    cert = certificate(scenario, sol.allocation, mode=mode, rtol=1e-9)
    assert cert.holds, cert.violations
    check_allocation(scenario, sol.allocation, mode)


def _uncapped(doc: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for u in out["users"]:
        u.pop("max_tasks", None)
    return out


@settings(max_examples=80, deadline=None)
@given(scenario_docs(overrides=True))
def test_convex_tdm_is_exact_without_caps_and_matches_the_sweeps(doc: dict[str, Any]) -> None:
    """Without caps TDM totals are unique: the polished optimum alone (no sweep) certifies and
    has the totals the sweeps find."""
    scenario = build(_uncapped(doc))
    convex = solve_tdm_convex(scenario)
    assert convex.sweeps == 0 and convex.certificate.holds
    check_allocation(scenario, convex.allocation, "tdm")
    sweeps = solve(scenario, "tdm", convex=False)
    np.testing.assert_allclose(convex.totals, sweeps.totals, rtol=1e-7, atol=1e-9)


def jittered_cluster(num_servers: int, num_users: int, seed: int) -> Scenario:
    """Servers of a few machine types, every capacity perturbed by its own factor in
    [0.9, 1.1] (so no two are identical), users with random cpu/memory demands."""
    rng = np.random.default_rng(seed)
    types = np.array([[0.5, 0.25], [0.5, 0.5], [0.5, 0.75], [1.0, 1.0], [0.25, 0.25]])
    capacity = types[rng.integers(len(types), size=num_servers)]
    capacity = capacity * rng.uniform(0.9, 1.1, size=capacity.shape)
    demand = rng.uniform(0.005, 0.05, size=(num_users, 2))
    return Scenario.from_dict({
        "resources": ["cpu", "mem"],
        "servers": [{"name": f"m{i}", "capacity": {"cpu": c[0], "mem": c[1]}}
                    for i, c in enumerate(capacity.tolist())],
        "users": [{"name": f"u{n}", "demand": {"cpu": d[0], "mem": d[1]},
                   "weight": float(rng.choice([1.0, 2.0]))}
                  for n, d in enumerate(demand.tolist())],
    })


@pytest.mark.parametrize("mode", MODES)
def test_all_distinct_servers_need_no_long_sweeps(mode: Mode) -> None:
    """100 distinct servers, 100 users: the sweeps alone needed ~1,000 sweeps here (TDM) and
    RDM was as slow; now TDM is the polished convex optimum and RDM settles in a few sweeps
    from it."""
    scenario = jittered_cluster(100, 100, seed=7)
    sol = solve(scenario, mode)
    assert sol.certificate.holds
    assert sol.sweeps <= (0 if mode == "tdm" else 10)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(MODES))
def test_a_warm_start_lands_on_a_certified_allocation(seed: int, mode: Mode) -> None:
    from psdsf_dist.model.random_scenarios import random_scenario

    rng = np.random.default_rng(seed)
    scenario = random_scenario(rng, K=int(rng.integers(1, 8)), N=int(rng.integers(1, 6)),
                               M=int(rng.integers(1, 4)))
    start = rng.exponential(size=(scenario.num_users, scenario.num_servers)) * 20.0
    sol = solve(scenario, mode, start=start)
    assert certificate(scenario, sol.allocation, mode=mode).holds


def test_a_warm_start_of_the_wrong_shape_is_refused(fig1: Scenario) -> None:
    with pytest.raises(ValueError, match="start must be 3 x 2"):
        solve(fig1, start=np.zeros((2, 2)))
