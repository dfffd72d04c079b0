"""Jobs under an allocation policy: IMF's per-site water-filling, a two-job trace whose AMF
and IMF schedules are worked out by hand, and on random workloads (every policy family, both
recomputation modes) no site above its slots, every task run once at one of its sites, and the
same run twice."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.jobs.allocated import allocation, imf, job_scenario, simulate_allocated
from psdsf_dist.jobs.workload import Workload, build_workload, load_csv
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.model.task_groups import TaskGroups
from psdsf_dist.policies.registry import UnknownPolicyError
from tests.jobs.test_simulator import check_run, random_workload

# A: 4 tasks at S1; B: 4 at S1 and 4 at S2; two slots per site, every task 1 s
TWO_JOBS = """job,submit_s,tasks,sites,duration_s
A,0,4,S1,1
B,0,4,S1,1
B,0,4,S2,1
"""


def two_jobs() -> Workload:
    return build_workload(load_csv("two.csv", TWO_JOBS), slots=2)


def test_imf_section_4_1_and_met_demands() -> None:
    # one site of 20 slots, demands <2, 4, 10, 40>: max-min gives <2, 4, 7, 7>
    got = imf(np.array([[2.0, 1.0], [4.0, 0.0], [10.0, 3.0], [40.0, 0.0]]), np.array([20.0, 5.0]))
    np.testing.assert_allclose(got, [[2, 1], [4, 0], [7, 3], [7, 0]])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=8), st.integers(1, 40))
def test_imf_is_max_min_at_each_site(demands: list[int], slots: int) -> None:
    d = np.array(demands, dtype=float)[:, None]
    a = imf(d, np.array([float(slots)]))[:, 0]
    assert (a >= -1e-12).all() and (a <= d[:, 0] + 1e-9).all()
    assert a.sum() <= slots + 1e-9
    short = a < d[:, 0] - 1e-9
    if short.any():  # the site is full and every unmet job has the largest share
        assert a.sum() == pytest.approx(slots)
        assert a[short] == pytest.approx(np.full(short.sum(), a.max()))


def test_two_jobs_amf_balances_aggregates_imf_does_not() -> None:
    w = two_jobs()
    # AMF: A can only use S1, so A gets S1 and B gets S2 (2 slots each); A ends at 2 s, then
    # B takes S1 for its 4 tasks there: responses 2 and 4 s
    amf = simulate_allocated(w, "amf")
    assert amf.run.finish.tolist() == [2.0, 4.0]
    # IMF: S1 split 1/1 and S2 all B's (aggregates 1 and 3): both end at 4 s
    run = simulate_allocated(w, "imf")
    assert run.run.finish.tolist() == [4.0, 4.0]
    assert amf.sample_job_std.max() == 0.0 and run.sample_job_std.max() == 1.0
    # both jobs active until 2 s, then B alone under AMF; both until the end under IMF
    assert set(amf.sample_active.tolist()) <= {0, 1, 2} and amf.sample_active.max() == 2
    assert (run.sample_active[run.sample_job_std > 0] == 2).all()
    assert len(amf.sample_active) == len(amf.sample_job_std)
    for r in (amf, run):
        check_run(w, r.run)
    # one solve per instant with a change: the arrivals (0 s), A's end and B's S2 sub-job's
    # (2 s), B's end (4 s); "task" mode also at 1 and 3 s
    assert amf.solves == 3 and simulate_allocated(w, "amf", recompute="task").solves == 5


@settings(max_examples=3, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 8), st.integers(2, 3), st.integers(1, 2),
       st.sampled_from([0.0, 1.0, 2.0]), st.integers(1, 3))
def test_every_policy_respects_slots_and_sites(seed: int, jobs: int, sites: int,
                                                available: int, zipf: float, slots: int) -> None:
    w = random_workload(seed, jobs, sites, available, zipf, slots)
    for policy in ("imf", "amf", "gamf-si", "psdsf", "drf"):
        check_run(w, simulate_allocated(w, policy).run)
    check_run(w, simulate_allocated(w, "gamf", recompute="task").run)


def test_same_workload_same_run() -> None:
    w = random_workload(11, 8, 3, 2, 1.0, 2)
    a, b = simulate_allocated(w, "gamf"), simulate_allocated(w, "gamf")
    assert a.run.finish.tolist() == b.run.finish.tolist()
    assert a.run.task_site.tolist() == b.run.task_site.tolist()


def test_unknown_policy_and_recompute() -> None:
    w = two_jobs()
    with pytest.raises(UnknownPolicyError):
        simulate_allocated(w, "nope")
    with pytest.raises(ValueError, match="recompute"):
        simulate_allocated(w, "amf", recompute="never")


@pytest.mark.parametrize("policy", ["amf", "amf-si", "gamf", "gamf-si"])
def test_algorithms_6_and_8_spread_each_job_over_its_sub_jobs(policy: str) -> None:
    # two sites of 2 slots, two jobs of 2 tasks at each: AMF totals 2 and 2, which a basic
    # allocation may give as [2, 0] and [0, 2] (a job's other sub-job then waits); the
    # optimized one gives each job 1 slot per site (estimated completion 2 rounds, not inf)
    sc = job_scenario(["j0", "j1"], np.zeros((2, 2), dtype=np.int64),
                      [[([0], 2), ([1], 2)], [([0], 2), ([1], 2)]], np.array([2, 2]),
                      ("S1", "S2"))
    np.testing.assert_allclose(allocation(policy, sc, optimized=True), [[1, 1], [1, 1]],
                               atol=1e-6)


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 6), st.integers(2, 3), st.integers(1, 2),
       st.sampled_from(["amf", "gamf", "amf-si"]))
def test_optimized_keeps_amf_totals_and_capacities(seed: int, jobs: int, sites: int,
                                                   available: int, policy: str) -> None:
    rng = np.random.default_rng(seed)
    names = [f"j{i}" for i in range(jobs)]
    groups = [[([int(j) for j in rng.choice(sites, size=available, replace=False)],
                int(rng.integers(1, 9))) for _ in range(int(rng.integers(1, 3)))]
              for _ in range(jobs)]
    slots = rng.integers(1, 5, sites)
    sc = job_scenario(names, np.zeros((jobs, sites), dtype=np.int64), groups, slots,
                      tuple(f"S{j + 1}" for j in range(sites)))
    basic = allocation(policy, sc)
    opt = allocation(policy, sc, optimized=True)
    np.testing.assert_allclose(opt.sum(axis=1), basic.sum(axis=1), rtol=1e-6, atol=1e-6)
    assert (opt.sum(axis=0) <= slots + 1e-6).all() and (opt >= -1e-9).all()
    w = random_workload(seed, jobs, sites, available, 1.0, 2)
    check_run(w, simulate_allocated(w, policy, optimized=True).run)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 6), st.integers(2, 4))
def test_job_scenario_is_the_scenario_of_the_document_listing_the_jobs(
        seed: int, jobs: int, sites: int) -> None:
    """The jobs join the sites' scenario as users: every array and task group equal to the
    ones the scenario document with the jobs as users builds."""
    rng = np.random.default_rng(seed)
    names = [f"j{i}" for i in range(jobs)]
    site_names = tuple(f"S{j + 1}" for j in range(sites))
    running = rng.integers(0, 3, (jobs, sites)) * (rng.random((jobs, sites)) < 0.4)
    groups = [[(sorted(int(j) for j in rng.choice(sites, size=int(rng.integers(1, sites + 1)),
                                                   replace=False)), int(rng.integers(0, 9)))
               for _ in range(int(rng.integers(1, 3)))] for _ in range(jobs)]
    for i in range(jobs):  # a job has something left
        if not running[i].any() and not any(k for _, k in groups[i]):
            groups[i][0] = (groups[i][0][0], 1)
    slots = rng.integers(1, 5, sites)
    users = []
    for i, name in enumerate(names):
        grp: dict[tuple[int, ...], int] = {}
        for j in np.flatnonzero(running[i]).tolist():
            grp[(j,)] = grp.get((j,), 0) + int(running[i, j])
        for lst, k in groups[i]:
            if k:
                grp[tuple(lst)] = grp.get(tuple(lst), 0) + k
        used = sorted({j for key in grp for j in key})
        users.append({"name": name, "demand": {"slots": 1},
                      "servers": [site_names[j] for j in used],
                      "max_tasks": sum(grp.values()),
                      "task_groups": [{"servers": [site_names[j] for j in key], "tasks": k}
                                      for key, k in grp.items()]})
    doc = Scenario.from_dict({
        "resources": ["slots"],
        "servers": [{"name": s, "capacity": {"slots": int(u)}}
                    for s, u in zip(site_names, slots, strict=True)],
        "users": users})
    got = job_scenario(names, running.astype(np.int64), groups, slots, site_names)
    for f in dataclasses.fields(Scenario):
        a, b = getattr(got, f.name), getattr(doc, f.name)
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b, err_msg=f.name)
        elif isinstance(a, TaskGroups):
            for g in dataclasses.fields(TaskGroups):
                np.testing.assert_array_equal(getattr(a, g.name), getattr(b, g.name))
        else:
            assert a == b, f.name
