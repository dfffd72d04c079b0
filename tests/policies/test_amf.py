"""AMF, AMF-SI, GAMF and GAMF-SI: the Guan thesis's worked examples (its numbers beside ours)
and, by hypothesis, the properties it proves (Theorems 4.3-4.5, 5.2-5.4; SI for the -si
versions) plus feasibility, task counts and groups on multi-resource clusters."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.model.random_scenarios import random_scenario_doc
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies import allocate, policy_view
from psdsf_dist.policies.amf import AMF_POLICIES, pair_floors, static_share_tasks
from psdsf_dist.policies.feasibility import fit_to_groups
from psdsf_dist.policies.properties import check_properties, true_tasks
from tests.conftest import example_scenario as example

FloatArray = npt.NDArray[np.float64]
SI_POLICIES = ("amf-si", "gamf-si")
PLAIN = ("amf", "gamf")




def slots(capacity: list[float], jobs: list[dict[str, Any]]) -> Scenario:
    """The thesis's model: sites of computing slots, each task one slot."""
    users = [{"name": f"J{n + 1}", "demand": {"slots": 1}, **job} for n, job in enumerate(jobs)]
    return Scenario.from_dict({
        "resources": ["slots"],
        "servers": [{"name": f"S{j + 1}", "capacity": {"slots": c}}
                    for j, c in enumerate(capacity)],
        "users": users,
    })


# -- the thesis's worked examples ------------------------------------------------------------


@pytest.mark.parametrize("policy", AMF_POLICIES)
def test_section_4_1_single_machine_max_min(policy: str) -> None:
    # one machine of 20, demands <2, 4, 10, 40>: the thesis's max-min vector is <2, 4, 7, 7>
    sc = slots([20], [{"server_tasks": {"S1": d}} for d in (2, 4, 10, 40)])
    np.testing.assert_allclose(allocate(sc, policy).totals, [2, 4, 7, 7], rtol=1e-7)


def test_theorem_4_6_amf_violates_sharing_incentive() -> None:
    sc = example("guan_amf")
    out = allocate(sc, "amf")
    # thesis: job-wise vector <3, 3>, produced only by the matrix J1 [2, 1], J2 [0, 3]
    np.testing.assert_allclose(out.totals, [3, 3], rtol=1e-7)
    np.testing.assert_allclose(out.allocation, [[2, 1], [0, 3]], atol=1e-8)
    si = check_properties(sc, "amf", trials=0).get("si")
    # J1 owning half of each site would run 2 + 2 = 4 > 3
    assert si.holds is False
    assert si.witness == {"user": "J1", "tasks": pytest.approx(3.0),
                          "uniform_split": pytest.approx(4.0)}
    assert allocate(sc, "gamf").totals == pytest.approx([3, 3])


@pytest.mark.parametrize("policy", SI_POLICIES)
def test_theorem_4_6_example_under_sig_amf(policy: str) -> None:
    # (4.3): J1's demands 2 <= 4/2 at A and B are met in full; (4.4): J2 gets >= 2 at B.
    # That fixes J1 [2, 2] and leaves J2 the other 2 slots of B: <4, 2> (derived, not printed)
    sc = example("guan_amf")
    out = allocate(sc, policy)
    np.testing.assert_allclose(out.allocation, [[2, 2], [0, 2]], atol=1e-7)
    report = check_properties(sc, policy, trials=0)
    assert report.get("si").holds and report.get("po").holds and report.get("ef").holds


def test_chapter_1_three_jobs_three_sites() -> None:
    # Figures 1.1/1.2: three jobs of 10 tasks runnable anywhere, three sites of 3 slots;
    # the fair allocation gives each job 3 slots (Figure 1.2 runs each job on one site)
    sc = slots([3, 3, 3], [{"task_groups": [{"servers": ["S1", "S2", "S3"], "tasks": 10}]}] * 3)
    for policy in AMF_POLICIES:
        if policy.startswith("gamf"):
            np.testing.assert_allclose(allocate(sc, policy).totals, [3, 3, 3], rtol=1e-7)
    # AMF binds every task to S1, the first site of its group: the three share 3 slots
    np.testing.assert_allclose(allocate(sc, "amf").totals, [1, 1, 1], rtol=1e-7)


def test_table_3_1_gamf_balances_what_amf_cannot() -> None:
    sc = example("guan_gamf")
    gamf = allocate(sc, "gamf")
    np.testing.assert_allclose(gamf.totals, [1, 1, 1], rtol=1e-7)
    # AMF (section 5.5's baseline) binds J1 and J2 to S1 and J3 to S2; S3 idles
    amf = allocate(sc, "amf")
    np.testing.assert_allclose(amf.totals, [0.5, 0.5, 1], rtol=1e-7)
    assert amf.allocation[:, 2].sum() == pytest.approx(0.0, abs=1e-9)
    for policy in AMF_POLICIES:
        report = check_properties(sc, policy, trials=5)
        assert report.get("feasible").holds and report.get("po").holds
        assert report.get("ef").holds and report.get("sp").holds is not False


@pytest.mark.parametrize("name", ["paper_fig1", "paper_fig2", "paper_cluster"])
@pytest.mark.parametrize("mode", ["rdm", "tdm"])
def test_without_task_counts_amf_and_gamf_are_c_drfh(name: str, mode: Mode) -> None:
    sc = example(name)
    ref = allocate(sc, "c-drfh", mode).totals
    for policy in PLAIN:
        np.testing.assert_allclose(allocate(sc, policy, mode).totals, ref, rtol=1e-7)


def test_other_policies_ignore_task_counts() -> None:
    sc = example("guan_amf")
    assert policy_view(sc, "psdsf").task_groups is None
    np.testing.assert_allclose(allocate(sc, "psdsf").totals, [4, 4], rtol=1e-7)


# -- the thesis's model, by hypothesis ---------------------------------------------------------


@st.composite
def thesis_scenarios(draw: st.DrawFn, *, groups: bool, weights: bool = True) -> Scenario:
    """Sites of integer slots; jobs with per-site counts (groups=False) or task groups of
    several sites; now and then an unbound job."""
    K = draw(st.integers(1, 4))
    capacity = draw(st.lists(st.integers(1, 6), min_size=K, max_size=K))
    N = draw(st.integers(1, 4))
    jobs: list[dict[str, Any]] = []
    sites = [f"S{j + 1}" for j in range(K)]
    for _ in range(N):
        job: dict[str, Any] = {}
        if weights:
            job["weight"] = draw(st.sampled_from([1, 1, 2, 0.5]))
        kind = draw(st.sampled_from(["bound", "bound", "bound", "free"]))
        if kind == "bound" and not groups:
            at = draw(st.lists(st.sampled_from(sites), min_size=1, max_size=K, unique=True))
            job["server_tasks"] = {s: draw(st.integers(0, 12)) for s in at}
        elif kind == "bound":
            job["task_groups"] = [
                {"servers": draw(st.lists(st.sampled_from(sites), min_size=1, max_size=K,
                                          unique=True)),
                 "tasks": draw(st.integers(0, 12))}
                for _ in range(draw(st.integers(1, 3)))
            ]
        elif draw(st.booleans()):
            job["max_tasks"] = draw(st.integers(1, 15))
        jobs.append(job)
    return slots([float(c) for c in capacity], jobs)


def group_view_fits(sc: Scenario, policy: str, X: FloatArray) -> bool:
    view = policy_view(sc, policy)
    x = X.sum(axis=1)
    return all(fit_to_groups(view, n, X[n]) >= x[n] - 1e-7 * max(1.0, x[n])
               for n in range(sc.num_users))


@settings(max_examples=30)
@given(sc=thesis_scenarios(groups=False))
def test_amf_family_on_per_site_counts(sc: Scenario) -> None:
    counts = sc.task_groups.per_server_tasks(sc.num_servers) if sc.task_groups else None
    bound = sc.task_groups.bound if sc.task_groups else np.zeros(sc.num_users, bool)
    for policy in AMF_POLICIES:
        out = allocate(sc, policy)
        X = out.allocation
        # feasible (4.1) and rational (4.2), checked directly
        assert (X >= -1e-9).all()
        assert (X.sum(axis=0) <= sc.capacity[:, 0] + 1e-7).all()
        if counts is not None:
            assert (X[bound] <= counts[bound] + 1e-7).all()
        report = check_properties(sc, policy, trials=0)
        assert report.get("feasible").holds, report.get("feasible").detail
        # Theorems 4.3 and 4.4 (and the text after (4.4) for SIG-AMF)
        assert report.get("po").holds, report.get("po").detail
        assert report.get("ef").holds, report.get("ef").detail
        if policy == "amf-si":
            # (4.3)-(4.4) at every site, and hence the aggregate sharing incentive
            per_server, total = pair_floors(sc)
            assert (X >= per_server * (1 - 1e-6) - 1e-9).all()
            assert (out.totals >= total * (1 - 1e-6) - 1e-9).all()
        if policy.endswith("-si"):
            assert report.get("si").holds, report.get("si").detail
        else:
            # Definition 4.2: the job-wise vector is (weighted) max-min fair
            assert report.get("srf").holds, report.get("srf").detail


@settings(max_examples=30)
@given(sc=thesis_scenarios(groups=True))
def test_gamf_family_on_task_groups(sc: Scenario) -> None:
    totals = {}
    for policy in AMF_POLICIES:
        out = allocate(sc, policy)
        X = out.allocation
        totals[policy] = out.totals
        assert (X.sum(axis=0) <= sc.capacity[:, 0] + 1e-7).all()
        assert group_view_fits(sc, policy, X)  # (5.2)-(5.3) for gamf, one site for amf
        report = check_properties(sc, policy, trials=0)
        assert report.get("feasible").holds, report.get("feasible").detail
        # Theorems 5.2 and 5.3
        assert report.get("po").holds, report.get("po").detail
        assert report.get("ef").holds, report.get("ef").detail
        if policy.endswith("-si"):
            assert report.get("si").holds, report.get("si").detail
            assert (out.totals >= static_share_tasks(policy_view(sc, policy)) * (1 - 1e-6)
                    - 1e-9).all()
        else:
            assert report.get("srf").holds, report.get("srf").detail
    # binding a task to its first site only shrinks the feasible set: GAMF's sorted vector
    # is leximin-at-least AMF's
    w = sc.weight
    g, a = np.sort(totals["gamf"] / w), np.sort(totals["amf"] / w)
    diff = np.flatnonzero(np.abs(g - a) > 1e-7)
    assert not len(diff) or g[diff[0]] > a[diff[0]]


def misreport(sc: Scenario, n: int, factors: list[float], extra: int | None) -> Scenario:
    groups = sc.task_groups
    assert groups is not None
    tasks = groups.tasks.copy()
    mine = groups.of_user(n)
    tasks[mine] *= np.resize(np.array(factors), len(mine))
    lied = groups.with_tasks(tasks)
    if extra is not None:
        from psdsf_dist.model.task_groups import TaskGroups

        lied = TaskGroups(np.append(lied.user, n), np.append(lied.tasks, 5.0),
                          np.append(lied.ptr, lied.ptr[-1] + 1),
                          np.append(lied.server, extra % sc.num_servers), lied.bound)
    return sc.replace_users(task_groups=lied)


@settings(max_examples=30)
@given(sc=thesis_scenarios(groups=True), policy=st.sampled_from(AMF_POLICIES),
       who=st.integers(0, 3), factors=st.lists(st.sampled_from([0.0, 0.5, 0.9, 1.5, 3.0]),
                                               min_size=1, max_size=3),
       extra=st.none() | st.integers(0, 3))
def test_misreporting_task_counts_does_not_pay(
    sc: Scenario, policy: str, who: int, factors: list[float], extra: int | None
) -> None:
    # Theorems 4.5 and 5.4: a job lying about its demand at any set of sites (or groups)
    # cannot increase its useful aggregate allocation; stated for the -si versions after
    # (4.4) and (5.24)
    n = who % sc.num_users
    if sc.task_groups is None or not sc.task_groups.bound[n]:
        return
    truth = policy_view(sc, policy)
    honest = allocate(sc, policy).totals[n]
    liar = misreport(truth, n, factors, extra)
    got = true_tasks(truth, liar, allocate(liar, policy), n)
    assert got <= honest * (1 + 1e-6) + 1e-7


@settings(max_examples=30)
@given(sc=thesis_scenarios(groups=False), who=st.integers(0, 3), site=st.integers(0, 3))
def test_a_demand_above_the_site_capacity_does_not_change_amf(
    sc: Scenario, who: int, site: int
) -> None:
    # section 4.5.3: where d[i, j] > u_j, the AMF job-wise vector does not depend on d[i, j]
    n, j = who % sc.num_users, site % sc.num_servers
    groups = sc.task_groups
    if groups is None:
        return
    d = groups.per_server_tasks(sc.num_servers)
    if d[n, j] <= sc.capacity[j, 0]:
        return
    mine = np.flatnonzero((groups.user == n) & (groups.server[groups.ptr[:-1]] == j))
    tasks = groups.tasks.copy()
    tasks[mine] *= 3
    more = sc.replace_users(task_groups=groups.with_tasks(tasks))
    np.testing.assert_allclose(allocate(more, "amf").totals, allocate(sc, "amf").totals,
                               rtol=1e-7, atol=1e-8)


# -- multi-resource clusters -------------------------------------------------------------------


def with_random_groups(rng: np.random.Generator, K: int, N: int, M: int) -> Scenario:
    doc = random_scenario_doc(rng, K=K, N=N, M=M)
    plain = Scenario.from_dict(doc)
    for n, user in enumerate(doc["users"]):
        allowed = np.flatnonzero(plain.placement[n])
        kind = rng.integers(3)
        if kind == 1:
            at = rng.choice(allowed, size=int(rng.integers(1, len(allowed) + 1)), replace=False)
            user["server_tasks"] = {plain.server_names[i]: float(rng.uniform(0, 10)) for i in at}
        elif kind == 2:
            user["task_groups"] = [
                {"servers": [plain.server_names[i] for i in
                             rng.choice(allowed, size=int(rng.integers(1, len(allowed) + 1)),
                                        replace=False)],
                 "tasks": float(rng.uniform(0, 10))}
                for _ in range(int(rng.integers(1, 4)))
            ]
    return Scenario.from_dict(doc)


@settings(max_examples=25)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(1, 6), N=st.integers(1, 4),
       M=st.integers(1, 3), mode=st.sampled_from(["rdm", "tdm"]))
def test_multi_resource_feasible_within_counts_and_groups(
    seed: int, K: int, N: int, M: int, mode: Mode
) -> None:
    sc = with_random_groups(np.random.default_rng(seed), K, N, M)
    for policy in AMF_POLICIES:
        out = allocate(sc, policy, mode)
        X = out.allocation
        view = policy_view(sc, policy)
        if policy.startswith("amf") and view.task_groups is not None:
            counts = view.task_groups.per_server_tasks(sc.num_servers)
            bound = view.task_groups.bound
            assert (X[bound] <= counts[bound] * (1 + 1e-7) + 1e-9).all()
            assert (X[bound][counts[bound] == 0] <= 1e-9).all()
        assert group_view_fits(sc, policy, X)
        assert (out.totals <= sc.max_tasks * (1 + 1e-7) + 1e-9).all()
        report = check_properties(sc, policy, mode, trials=0)
        assert report.get("feasible").holds, report.get("feasible").detail
        if policy != "amf-si":
            # SIG-AMF's per-server floors can cost Pareto optimality once users convert a
            # server's capacity into tasks at different rates (test_sig_amf_floors_...)
            assert report.get("po").holds, report.get("po").detail
        if policy in SI_POLICIES:
            assert report.get("si").holds, report.get("si").detail


def test_sig_amf_floors_cost_pareto_optimality_outside_the_slot_model() -> None:
    # the thesis's SIG-AMF stays Pareto efficient when every task takes one slot (hypothesis
    # above); with per-server rates that differ between users it need not: u1 runs twice as many
    # tasks per unit of time on B as on A, and (4.4) holds it to half of A, where u2's tasks are
    sc = Scenario.from_dict({
        "resources": ["cpu"],
        "servers": [{"name": "A", "capacity": {"cpu": 1}}, {"name": "B", "capacity": {"cpu": 1}}],
        "users": [{"name": "u1", "demand": {"cpu": 0.1}, "gamma": {"A": 10, "B": 20},
                   "max_tasks": 20},
                  {"name": "u2", "demand": {"cpu": 0.1}, "server_tasks": {"A": 10}}],
    })
    out = allocate(sc, "amf-si", "tdm")
    np.testing.assert_allclose(out.allocation, [[5, 15], [5, 0]], atol=1e-6)
    po = check_properties(sc, "amf-si", "tdm", trials=0).get("po")
    assert po.holds is False and po.witness is not None
    assert po.witness["user"] == "u2" and po.witness["improved"] == pytest.approx(10.0)
    # the aggregate floor of SIG-GAMF (5.24) does not bind u1 to A: u1 [0, 20], u2 [10, 0]
    gamf = allocate(sc, "gamf-si", "tdm")
    np.testing.assert_allclose(gamf.allocation, [[0, 20], [10, 0]], atol=1e-6)
    assert check_properties(sc, "gamf-si", "tdm", trials=0).get("po").holds
