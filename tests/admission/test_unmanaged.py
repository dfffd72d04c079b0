"""Unmanaged usage: sampled, filtered with hysteresis, and turned into the table's events."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from psdsf_dist.admission.unmanaged import (
    UNMANAGED_START_GRACE,
    UNMANAGED_WEIGHT,
    UnmanagedEstimate,
    is_unmanaged_user,
    node_blocked,
    node_congested,
    node_sample,
    unmanaged_events,
    unmanaged_sample,
    unmanaged_user,
)
from psdsf_dist.core.certificate import certificate
from psdsf_dist.core.solver import solve
from psdsf_dist.model.entries import PlacementRule, UserSpec
from psdsf_dist.model.events import SetDemand, UserJoins, UserLeaves
from psdsf_dist.model.scenario import Scenario

CAP = np.array([8.0, 16.0])


def test_the_sample_is_what_neither_ray_nor_the_leases_account_for() -> None:
    # 8 CPUs: 1 free, our tenants run 3 => 4 taken by someone else
    got = unmanaged_sample(CAP, np.array([1.0, 16.0]), np.array([3.0, 0.0]))
    assert got.tolist() == [4.0, 0.0]
    # our own tasks not yet freed by Ray never make it negative
    assert unmanaged_sample(CAP, CAP, np.array([2.0, 1.0])).tolist() == [0.0, 0.0]


def test_a_node_sample_counts_the_tenants_by_their_reports_or_their_marks() -> None:
    """Users a (1 CPU, 2 GB) and b (2 CPU, 1 GB) on an 8-CPU, 16 GB node with 1 CPU, 10 GB
    free; the queues report a 2 and b 1 running, marks show a 1 and b 1 started."""
    index, demand = {"a": 0, "b": 1}, np.array([[1.0, 2.0], [2.0, 1.0]])
    free = np.array([1.0, 10.0])
    # no task waits for room: the larger of reported (4 CPU, 5 GB) and marked (3, 3) is ours
    got = node_sample(CAP, free, index, demand, {"a": 2, "b": 1}, {"a": 1, "b": 1}, {})
    assert got.tolist() == [3.0, 1.0]
    # a's second task is overdue and not marked: it waits for room, so only marks are ours
    got = node_sample(CAP, free, index, demand, {"a": 2, "b": 1}, {"a": 1, "b": 1}, {"a": 2})
    assert got.tolist() == [4.0, 3.0]
    # a user the table does not know holds nothing
    got = node_sample(CAP, free, index, demand, {"zed": 5}, {}, {})
    assert got.tolist() == [7.0, 6.0]


def test_a_node_congested_for_the_grace_counts_by_its_marks() -> None:
    """A user's short tasks cycling through the room an intruder left: more reported than
    marked at every sample, none old.  Counted by the marks once that has lasted the grace,
    not before (workers starting for a burst look alike for a few seconds)."""
    index, demand = {"a": 0}, np.array([[1.0, 1.0]])
    free = np.array([0.0, 13.0])  # the intruder holds 7 CPUs, the one task started 1 of 8
    reported, marked = {"a": 4}, {"a": 1}
    assert node_congested(reported, marked) and not node_congested({"a": 2}, {"a": 1})
    assert node_congested({"a": 3, "b": 1}, {"a": 1, "b": 1})
    e = UnmanagedEstimate(CAP)
    seen = []
    for now in np.arange(0.0, UNMANAGED_START_GRACE + 3.0, 1.0):
        late = e.congested(float(now), reported, marked)
        seen.append(late)
        got = node_sample(CAP, free, index, demand, reported, marked, {}, late)
        # before the grace: the reports (4 CPUs) are ours, 4 unmanaged; after: the marks, 7
        assert got[0] == (7.0 if late else 4.0)
    assert seen.index(True) == int(UNMANAGED_START_GRACE)
    assert not e.congested(20.0, {"a": 4}, {"a": 3})  # one sample without: the count restarts
    assert not e.congested(21.0, reported, marked) and e.congested_since == 21.0


def test_a_transient_is_ignored_and_persistent_usage_counts_after_the_window() -> None:
    e = UnmanagedEstimate(CAP)
    intruder = np.array([4.0, 0.0])
    assert e.observe(np.array([2.0, 0.0])).tolist() == [0.0, 0.0]  # window not full
    assert e.observe(np.zeros(2)).tolist() == [0.0, 0.0]  # the 2 was one sample only
    assert e.observe(intruder).tolist() == [0.0, 0.0]  # first sample of it
    assert e.observe(intruder).tolist() == [4.0, 0.0]  # persisted a window: counted
    assert e.observe(np.array([5.0, 0.0])).tolist() == [4.0, 0.0]  # a spike above: ignored
    assert e.observe(np.zeros(2)).tolist() == [0.0, 0.0]  # gone: released at once


def test_a_period_measures_the_node_sample_and_keeps_what_persisted() -> None:
    """The node of the sample test above (4 CPU, 5 GB reported of a's and b's; 1 CPU, 10 GB
    free): its 3 CPUs, 1 GB of someone else's count once two periods found them."""
    index, demand = {"a": 0, "b": 1}, np.array([[1.0, 2.0], [2.0, 1.0]])
    e = UnmanagedEstimate(CAP)
    for now, counted in ((0.0, [0.0, 0.0]), (1.0, [3.0, 1.0])):
        got = e.measure(now, CAP, np.array([1.0, 10.0]), index, demand, {"a": 2, "b": 1},
                        {"a": 1, "b": 1}, {})
        assert got.tolist() == counted


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


def test_a_node_is_blocked_only_when_a_users_old_tasks_outnumber_its_marked_ones() -> None:
    """The upper bound (tasks reported but not marked) applies only with evidence that some
    wait at the node: more tasks launched over the grace ago than are marked running."""
    # short tasks in flight: none old, so never blocked however many are unmarked
    assert not node_blocked({}, {})
    assert not node_blocked({"alice": 0}, {"alice": 3})
    # long tasks, all started: old ones are marked
    assert not node_blocked({"alice": 4}, {"alice": 4})
    assert not node_blocked({"alice": 4}, {"alice": 5, "bob": 1})
    # an intruder holds the node: alice's tasks launched long ago are not marked
    assert node_blocked({"alice": 2}, {"alice": 1})
    assert node_blocked({"alice": 0, "bob": 1}, {"alice": 3})


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
