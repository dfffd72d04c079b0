"""Unmanaged usage: sampled, filtered with hysteresis, and turned into the table's events."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from psdsf_dist.admission.unmanaged import (
    UNMANAGED_WEIGHT,
    UnmanagedEstimate,
    WorkerUsage,
    held_outside,
    is_unmanaged_user,
    left_out_first,
    node_sample,
    unmanaged_events,
    unmanaged_sample,
    unmanaged_user,
)
from psdsf_dist.core.certificate import certificate
from psdsf_dist.core.solver import solve
from psdsf_dist.model.entries import PlacementRule, UserSpec
from psdsf_dist.model.events import SetDemand, SetWeight, UserJoins, UserLeaves
from psdsf_dist.model.scenario import Scenario

CAP = np.array([8.0, 16.0])


def test_the_sample_is_what_neither_ray_nor_the_leases_account_for() -> None:
    # 8 CPUs: 1 free, our tenants run 3 => 4 taken by someone else
    got = unmanaged_sample(CAP, np.array([1.0, 16.0]), np.array([3.0, 0.0]))
    assert got.tolist() == [4.0, 0.0]
    # our own tasks not yet freed by Ray never make it negative
    assert unmanaged_sample(CAP, CAP, np.array([2.0, 1.0])).tolist() == [0.0, 0.0]


INDEX, DEMAND = {"a": 0, "b": 1}, np.array([[1.0, 2.0], [2.0, 1.0]])
"""Users a (1 CPU, 2 GB) and b (2 CPU, 1 GB)."""
JOBS = {"a": "01000000", "b": "02000000"}


def worker(job: str, cpu: float, mem: float = 0.0) -> WorkerUsage:
    return WorkerUsage(job, np.array([cpu, mem]))


def test_workers_of_other_jobs_count_and_a_tenants_own_beyond_its_leases() -> None:
    workers = [worker("01000000", 1, 2), worker("01000000", 1, 2), worker("02000000", 2, 1),
               worker("03000000", 3), worker("04000000", 0.5, 4)]
    # a's two workers and b's one are within their leases; jobs 3 and 4 are nobody's
    got = held_outside(workers, JOBS, {"a": 2, "b": 1}, INDEX, DEMAND, CAP)
    assert got.tolist() == [3.5, 4.0]
    # a's leases admit one task here: its second worker is work outside them
    got = held_outside(workers, JOBS, {"a": 1, "b": 1}, INDEX, DEMAND, CAP)
    assert got.tolist() == [4.5, 6.0]
    # a user without a live lease is not judged (its tasks were admitted by an earlier one)
    got = held_outside(workers, JOBS, {"b": 1}, INDEX, DEMAND, CAP)
    assert got.tolist() == [3.5, 4.0]
    # a job no queue named: all of it is unmanaged
    assert held_outside(workers, {}, {}, INDEX, DEMAND, CAP).tolist() == [7.5, 9.0]
    # one driver, two tenants: their job's workers are judged against both users' leases
    both = {"a": "01000000", "b": "01000000"}
    ours = [worker("01000000", 1, 2), worker("01000000", 1, 2), worker("01000000", 2, 1)]
    assert held_outside(ours, both, {"a": 2, "b": 1}, INDEX, DEMAND, CAP).tolist() == [0, 0]
    assert held_outside(ours, both, {"a": 1, "b": 1}, INDEX, DEMAND, CAP).tolist() == [1, 2]
    assert held_outside(ours, both, {"a": 1}, INDEX, DEMAND, CAP).tolist() == [0, 0]


def test_a_node_sample_is_the_larger_of_the_job_bound_and_the_books() -> None:
    """An 8-CPU, 16 GB node: a reports 2 running, b 1 (4 CPU, 5 GB by their demands)."""
    reported = {"a": 2, "b": 1}
    # the books: 1 CPU, 10 GB free => 3 CPU, 1 GB held by someone else; no other job's worker
    # is listed (a placement group's reservation, a worker starting): the books count it
    mine = [worker("01000000", 1, 2), worker("02000000", 2, 1)]
    got = node_sample(CAP, np.array([1.0, 10.0]), mine, JOBS, reported, reported, INDEX, DEMAND)
    assert got.tolist() == [3.0, 1.0]
    # an intruder's four 1-CPU actors hold the node while a's and b's tasks wait there for
    # room: nothing is free, so the books (less every reported task) see 4 CPUs at most —
    # the workers show all of the intruder's, whatever waits
    intruder = [worker("09000000", 1) for _ in range(4)]
    got = node_sample(CAP, np.array([0.0, 16.0]), intruder + mine[:1], JOBS, reported,
                      reported, INDEX, DEMAND)
    assert got.tolist() == [4.0, 0.0]
    got = node_sample(np.array([4.0, 16.0]), np.array([0.0, 16.0]), intruder, JOBS,
                      reported, reported, INDEX, DEMAND)
    assert got.tolist() == [4.0, 0.0]  # the books alone would say 0: the tasks wait
    # a user the table does not know holds nothing
    got = node_sample(CAP, np.array([1.0, 10.0]), [], {}, {"zed": 5}, {}, INDEX, DEMAND)
    assert got.tolist() == [7.0, 6.0]


def test_a_transient_is_ignored_and_persistent_usage_counts_after_the_window() -> None:
    e = UnmanagedEstimate(CAP)
    intruder = np.array([4.0, 0.0])
    assert e.observe(np.array([2.0, 0.0])).tolist() == [0.0, 0.0]  # window not full
    assert e.observe(np.zeros(2)).tolist() == [0.0, 0.0]  # the 2 was one sample only
    assert e.observe(intruder).tolist() == [0.0, 0.0]  # first sample of it
    assert e.observe(intruder).tolist() == [4.0, 0.0]  # persisted a window: counted
    assert e.observe(np.array([5.0, 0.0])).tolist() == [4.0, 0.0]  # a spike above: ignored
    assert e.observe(np.zeros(2)).tolist() == [0.0, 0.0]  # gone: released at once


@given(st.lists(st.lists(st.floats(0, 8), min_size=2, max_size=2), min_size=1, max_size=12))
def test_the_estimate_never_exceeds_any_recent_sample(samples: list[list[float]]) -> None:
    e = UnmanagedEstimate(CAP)
    seen: list[np.ndarray] = []
    for s in samples:
        got = e.observe(np.array(s))
        seen.append(np.array(s))
        assert np.all(got >= 0)
        assert np.all(got <= np.min(np.stack(seen[-e.window:]), axis=0) + 1e-12)
        assert np.all((got == 0) | (got >= 0.05 * CAP))


def test_events_make_the_table_follow_the_usage() -> None:
    user = unmanaged_user("s1")
    assert is_unmanaged_user(user) and not is_unmanaged_user("alice")
    res = ("CPU", "memory")
    assert unmanaged_events("s1", {"CPU": 0.0}, known=False, present=False, demand=None,
                            resources=res) == []
    joins = unmanaged_events("s1", {"CPU": 4.0, "memory": 0.0}, known=False, present=False,
                             demand=None, resources=res)
    assert joins == [UserJoins(0.0, -1, user, UserSpec(
        user, {"CPU": 4.0, "memory": 0.0}, weight=UNMANAGED_WEIGHT, max_tasks=1,
        placement=PlacementRule(servers=("s1",))))]
    same = {"CPU": 4.0}
    assert unmanaged_events("s1", {"CPU": 4.1}, known=True, present=True, demand=same,
                            resources=res) == []
    assert unmanaged_events("s1", {"CPU": 2.0}, known=True, present=True, demand=same,
                            resources=res) == [
        SetDemand(0.0, -1, user, {"CPU": 2.0, "memory": 0.0})]
    assert unmanaged_events("s1", {"CPU": 0.0}, known=True, present=True, demand=same,
                            resources=res) == [UserLeaves(0.0, -1, user)]
    assert unmanaged_events("s1", {"CPU": 4.0}, known=True, present=False, demand=same,
                            resources=res) == [UserJoins(0.0, -1, user, None)]


def test_the_operators_unmanaged_weight_joins_and_follows_changes() -> None:
    user, res = unmanaged_user("s1"), ("CPU",)
    (joins,) = unmanaged_events("s1", {"CPU": 4.0}, known=False, present=False, demand=None,
                                resources=res, weight=1.0)
    assert isinstance(joins, UserJoins) and joins.spec is not None
    assert joins.spec.weight == 1.0
    same = {"CPU": 4.0}
    assert unmanaged_events("s1", same, known=True, present=True, demand=same, resources=res,
                            weight=1.0, known_weight=1.0) == []
    assert unmanaged_events("s1", same, known=True, present=True, demand=same, resources=res,
                            weight=3.0, known_weight=1.0) == [SetWeight(0.0, -1, user, 3.0)]
    # the policy's weight removed: back to being left out first
    assert unmanaged_events("s1", same, known=True, present=True, demand=same, resources=res,
                            known_weight=3.0) == [SetWeight(0.0, -1, user, UNMANAGED_WEIGHT)]
    assert left_out_first(1 - 1 / UNMANAGED_WEIGHT) and not left_out_first(0.5)


def test_unmanaged_work_that_fills_its_nodes_leaves_a_certifiable_allocation() -> None:
    """Unmanaged work fills two nodes and most of a third, and a tenant may run only there: the
    allocation certifies (with a weight of 1e6 the solver stalled at residual 1e-6 for seconds
    and gave up), and each unmanaged user keeps all but 1/UNMANAGED_WEIGHT of its task."""
    def unmanaged(server: str, cpus: float) -> dict[str, object]:
        return {"name": unmanaged_user(server), "demand": {"CPU": cpus}, "servers": [server],
                "max_tasks": 1, "weight": UNMANAGED_WEIGHT}

    scenario = Scenario.from_dict({
        "resources": ["CPU", "memory"],
        "servers": [{"name": "a", "capacity": {"CPU": 2, "memory": 8}},
                    {"name": "b", "capacity": {"CPU": 1, "memory": 2}},
                    {"name": "c", "capacity": {"CPU": 2, "memory": 4}},
                    {"name": "d", "capacity": {"CPU": 2, "memory": 4}}],
        "users": [unmanaged("a", 2), unmanaged("c", 2), unmanaged("b", 1),
                  {"name": "nested", "demand": {"CPU": 1}, "servers": ["a", "b", "c"],
                   "max_tasks": 6}]})
    result = solve(scenario, "rdm")
    assert certificate(scenario, result.allocation, mode="rdm").holds
    assert np.all(result.totals[:3] >= 1 - 2 / UNMANAGED_WEIGHT)
