"""The schedulers' plans: every unstarted task placed at one of its sites, every job with
unstarted tasks ordered once, and SWAG's lazy greedy order equal to re-estimating every job at
every step (Algorithms 3-4 as written)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.jobs.balance import balance, greedy, grid, level
from psdsf_dist.jobs.schedulers import (
    FIXED,
    SCHEDULERS,
    PlanLimitError,
    PlanWork,
    Queue,
    Sites,
    plan,
)
from psdsf_dist.jobs.workload import ring_groups

IntArray = npt.NDArray[np.int64]


def make_sites(m: int, available: int, slots: int) -> Sites:
    u = np.full(m, slots, dtype=np.int64)
    return Sites(u, ring_groups(m, available), np.arange(m, dtype=np.int64), grid(u))


@st.composite
def queues(draw: st.DrawFn, m: int) -> list[Queue]:
    out = []
    for _ in range(draw(st.integers(1, 6))):
        groups = np.array(sorted(draw(st.sets(st.integers(0, m - 1), min_size=1, max_size=3))),
                          dtype=np.int64)
        demand = np.array(draw(st.lists(st.integers(0, 9), min_size=len(groups),
                                        max_size=len(groups))), dtype=np.int64)
        out.append(Queue(groups, demand))
    return out


def eager_ata(qs: list[Queue], sites: Sites, scheduler: str) -> list[int]:
    """Algorithm 4 as written: every unordered job re-placed at every step."""
    m = len(sites.slots)
    loads = np.zeros(m, dtype=np.int64)
    left = [i for i, q in enumerate(qs) if q.demand.sum() > 0]
    order = []
    fn = greedy if scheduler == "ata-greedy" else balance
    while left:
        best = min(left, key=lambda i: (fn(qs[i].demand, qs[i].groups, sites.lists,
                                           sites.slots, loads, sites.L)[0], i))
        x = fn(qs[best].demand, qs[best].groups, sites.lists, sites.slots, loads, sites.L)[1]
        loads = loads + x.sum(axis=0)
        order.append(best)
        left.remove(best)
    return order


@settings(max_examples=40, deadline=None)
@given(st.data(), st.integers(2, 5), st.integers(1, 3), st.integers(1, 2))
def test_plans_place_every_task_and_order_every_job(data: st.DataObject, m: int,
                                                     available: int, slots: int) -> None:
    sites = make_sites(m, min(available, m), slots)
    qs = data.draw(queues(m))
    for s in SCHEDULERS:
        fresh = [Queue(q.groups, q.demand.copy()) for q in qs]
        order, allocs = plan(s, fresh, sites)
        live = [i for i, q in enumerate(qs) if q.demand.sum() > 0]
        assert sorted(order) == live
        for q, a in zip(qs, allocs, strict=True):
            assert (a.sum(axis=1) == q.demand).all()
            assert (a[~sites.group_sites[q.groups]] == 0).all()
        if s in ("ata", "ata-greedy"):
            assert order == eager_ata(fresh, sites, s)


@settings(max_examples=25, deadline=None)
@given(st.data(), st.integers(2, 4), st.integers(1, 2))
def test_jobs_alike_are_ordered_as_if_each_were_estimated_alone(data: st.DataObject, m: int,
                                                               slots: int) -> None:
    """Jobs of one kind (same demand on the same sites) share one estimate per loads; the
    order is still Algorithm 4's, and each job gets its own allocation array."""
    sites = make_sites(m, 2 if m > 2 else 1, slots)
    base = data.draw(queues(m))
    copies = data.draw(st.lists(st.integers(0, len(base) - 1), min_size=1, max_size=8))
    qs = base + [Queue(base[k].groups.copy(), base[k].demand.copy()) for k in copies]
    qs = [qs[i] for i in data.draw(st.permutations(range(len(qs))))]
    for s in ("ata", "ata-greedy", "scta"):
        fresh = [Queue(q.groups, q.demand.copy()) for q in qs]
        order, allocs = plan(s, fresh, sites)
        if s != "scta":
            assert order == eager_ata(fresh, sites, s)
        for q, a in zip(qs, allocs, strict=True):
            assert (a.sum(axis=1) == q.demand).all()
        assert len({id(a) for a in allocs}) == len(allocs)
        assert not any(np.shares_memory(a, b) for i, a in enumerate(allocs)
                       for b in allocs[i + 1:])


def test_swag_orders_by_estimated_completion_and_fifo_by_arrival() -> None:
    sites = make_sites(2, 1, 1)
    x0 = np.array([[5, 0]], dtype=np.int64)
    x1 = np.array([[0, 2]], dtype=np.int64)
    x2 = np.array([[1, 0]], dtype=np.int64)
    qs = [Queue(np.array([0]), np.array([5]), x0), Queue(np.array([1]), np.array([2]), x1),
          Queue(np.array([0]), np.array([1]), x2)]
    # estimates: 5, 2, 1 alone -> job 2 first; then job 0 at 6 vs job 1 at 2 -> 1, then 0
    assert plan("swag", qs, sites)[0] == [2, 1, 0]
    assert plan("btaaj", qs, sites, order="fifo")[0] == [0, 1, 2]
    assert level(np.array([1, 0]), sites.slots, np.array([5, 0]), sites.L) == 6


def test_bad_names_raise() -> None:
    sites = make_sites(2, 1, 1)
    with pytest.raises(ValueError, match="unknown scheduler"):
        plan("fcfs", [], sites)
    with pytest.raises(ValueError, match="orders the jobs itself"):
        plan("ata", [], sites, order="fifo")
    assert set(FIXED) < set(SCHEDULERS)


@settings(max_examples=30, deadline=None)
@given(st.data(), st.integers(2, 5), st.integers(1, 2))
def test_jobs_arriving_together_are_placed_as_if_they_came_one_by_one(
        data: st.DataObject, m: int, slots: int) -> None:
    """The simulator plans a burst of arrivals once: for every scheduler but SCTA, that places
    and orders the jobs exactly as planning after each arrival did (the last plan's order, and
    every placement)."""
    sites = make_sites(m, 2, slots)
    placed, burst = data.draw(queues(m)), data.draw(queues(m))
    for s in ("ata", "ata-greedy", *FIXED):
        for order in ("swag", "fifo") if s in FIXED else ("swag",):
            before = [Queue(q.groups, q.demand.copy()) for q in placed]
            _, allocs = plan(s, before, sites, order)
            for q, a in zip(before, allocs, strict=True):
                q.alloc = a
            together = before + [Queue(q.groups, q.demand.copy()) for q in burst]
            one_by_one = [Queue(q.groups, q.demand.copy(), q.alloc) for q in before]
            got = plan(s, together, sites, order)
            for q in burst:
                one_by_one.append(Queue(q.groups, q.demand.copy()))
                want = plan(s, one_by_one, sites, order)
                for qq, a in zip(one_by_one, want[1], strict=True):
                    qq.alloc = a
            assert got[0] == want[0]
            for a, b in zip(got[1], want[1], strict=True):
                assert (a == b).all()


def test_plan_work_counts_estimates_and_refuses_past_its_limits() -> None:
    """Every job estimate is counted; a plan finding more waiting jobs than ``max_waiting``
    is refused before any estimate, and one needing more than ``max_estimates`` when it
    gets there."""
    sites = make_sites(3, 2, 1)
    qs = [Queue(np.array([i % 3]), np.array([2])) for i in range(6)]
    work = PlanWork()
    plan("ata", qs, sites, work=work)
    assert work.most_waiting == 6 and work.estimates >= 6
    made = work.estimates
    with pytest.raises(PlanLimitError, match="6 jobs wait at once, more than the limit of 5"
                       ) as err:
        plan("ata", qs, sites, work=PlanWork(max_waiting=5))
    assert err.value.limit == "waiting_jobs"
    plan("ata", qs, sites, work=PlanWork(max_estimates=made, max_waiting=6))
    with pytest.raises(PlanLimitError, match=f"more than {made - 1} job estimates") as err:
        plan("ata", qs, sites, work=PlanWork(max_estimates=made - 1))
    assert err.value.limit == "estimates"


@settings(max_examples=40, deadline=None)
@given(st.data(), st.integers(2, 4), st.integers(1, 2))
def test_placed_jobs_alike_are_ordered_as_if_each_were_estimated_alone(
        data: st.DataObject, m: int, slots: int) -> None:
    """Placed jobs with the same tasks at every site share one estimate per loads (one heap
    entry); the order is still SWAG's: the least (level, index) on the loads so far."""
    sites = make_sites(m, 2, slots)
    base = data.draw(queues(m))
    copies = data.draw(st.lists(st.integers(0, len(base) - 1), min_size=1, max_size=8))
    qs = base + [Queue(base[k].groups.copy(), base[k].demand.copy()) for k in copies]
    qs = [qs[i] for i in data.draw(st.permutations(range(len(qs))))]
    for s in FIXED:
        fresh = [Queue(q.groups, q.demand.copy()) for q in qs]
        order, allocs = plan(s, fresh, sites)
        loads = np.zeros(m, dtype=np.int64)
        left = [i for i, q in enumerate(qs) if q.demand.sum() > 0]
        eager = []
        while left:
            best = min(left, key=lambda i: (level(allocs[i].sum(axis=0), sites.slots, loads,
                                                  sites.L), i))
            loads = loads + allocs[best].sum(axis=0)
            eager.append(best)
            left.remove(best)
        assert order == eager
