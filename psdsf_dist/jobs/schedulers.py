"""The job schedulers of Guan's thesis, chapter 3, as pure functions of the unstarted tasks.

Each outstanding job is a :class:`Queue`: its unstarted tasks per group and, once placed, per
site.  :func:`plan` is called whenever a job arrives (it is then the last queue, not yet placed)
and whenever a job completes; it returns where every unstarted task goes and the order in which
every site serves the jobs:

- ``swag``: every task at its group's associated site; SWAG order (Hung et al.): repeatedly
  append the job whose estimated completion, given the tasks of the jobs already ordered, is
  earliest.
- ``btawj`` (Algorithm 1): a new job's tasks balanced over its sites on their own (max-flow and
  binary search on the level); SWAG order.
- ``btaaj`` (Algorithm 2): the same with each site's unstarted tasks counted; SWAG order.
- ``scta`` (Algorithm 3): the new job (every job arriving at the instant) is placed anew,
  balanced on top of the jobs ordered before it, each time SWAG looks for the next job; other
  jobs keep their placement.
- ``ata`` (Algorithm 4): every outstanding job is placed anew like that.
- ``ata-greedy``: ATA with the greedy water-filling of Fig. 3.10 in place of the max-flow.

Estimated completions are levels (:mod:`psdsf_dist.jobs.balance`): rounds of tasks at the
job's busiest site, counting the tasks of the jobs ordered before it; no scheduler uses task
durations (section 3.3).  Ties go to the earlier job.  SWAG's greedy loop evaluates candidates
lazily: an estimate can only grow as jobs are appended, so a job whose fresh estimate is no
later than every other job's older one is the earliest — the same choice as re-estimating all
jobs at every step (exactly so where the estimate is monotone in the sites' loads: a fixed
placement and the max-flow level; ATA-Greedy's water-filled level is monotone in practice, and
tests compare both ways).  ``order="fifo"`` serves jobs in arrival order instead (the worked
example of BTAWJ and BTAAJ in section 3.2 does so).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from psdsf_dist.errors import PsdsfError
from psdsf_dist.jobs.balance import (
    JobRows,
    SiteLists,
    SiteUse,
    balance,
    balanced,
    filled,
    filled_level,
    least_level,
    site_lists,
    site_use,
    use_level,
)

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

SCHEDULERS = ("ata", "ata-greedy", "scta", "btaaj", "btawj", "swag")
ORDERS = ("swag", "fifo")
FIXED = ("swag", "btawj", "btaaj")
"""Schedulers that place a job once, at its arrival, and only reorder afterwards."""


@dataclass
class Queue:
    """A job's unstarted tasks: ``demand[i]`` of group ``groups[i]``; ``alloc`` (len(groups),
    m) their sites, or None before the job is placed.

    A queue remembers what the plans derive from its arrays (its tasks left, its rows as the
    estimates read them, the sites its placement uses) from one plan to the next, as long
    as the arrays are the same objects: they are never changed in place (the simulator
    makes a new queue when a task of the job starts, and assigns a new ``alloc`` when it is
    placed anew)."""

    groups: IntArray
    demand: IntArray
    alloc: IntArray | None = None
    _left: tuple[IntArray, int] | None = field(default=None, compare=False, repr=False)
    _rows: tuple[IntArray, Sites, JobRows] | None = field(default=None, compare=False,
                                                          repr=False)
    _use: tuple[IntArray, Sites, SiteUse, tuple[Hashable, ...]] | None = field(
        default=None, compare=False, repr=False)

    def left(self) -> int:
        """Its unstarted tasks."""
        c = self._left
        if c is None or c[0] is not self.demand:
            c = self._left = (self.demand, int(self.demand.sum()))
        return c[1]

    def rows(self, sites: Sites) -> JobRows:
        """Its rows as the estimates on ``sites`` read them."""
        c = self._rows
        if c is None or c[0] is not self.demand or c[1] is not sites:
            c = self._rows = (self.demand, sites, JobRows(self.demand, self.groups,
                                                          sites.lists, sites.slots, sites.L))
        return c[2]

    def use(self, sites: Sites) -> tuple[SiteUse, tuple[Hashable, ...]]:
        """The sites its placement uses, and its kind as a placed job (:func:`plan`)."""
        c = self._use
        if c is None or c[0] is not self.alloc or c[1] is not sites:
            use = site_use(_placed(self.alloc).sum(axis=0), sites.slots)
            c = self._use = (_placed(self.alloc), sites, use, ("placed", *use))
        return c[2], c[3]


@dataclass(frozen=True)
class Sites:
    """The sites: slots per site, the groups' sets of sites, their associated sites, the
    level grid L."""

    slots: IntArray
    group_sites: BoolArray
    group_home: IntArray
    L: int

    @property
    def lists(self) -> SiteLists:
        """The sites of every group (computed once)."""
        cached: SiteLists | None = self.__dict__.get("_lists")
        if cached is None:
            cached = site_lists(self.group_sites)
            object.__setattr__(self, "_lists", cached)
        return cached


class PlanLimitError(PsdsfError, RuntimeError):
    """A simulation's plans would do more work than its :class:`PlanWork` limits allow;
    ``limit`` names the limit as the input limits do ("waiting_jobs" or "estimates")."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


@dataclass
class PlanWork:
    """The work of a simulation's plans, and its limits (None: none).

    The unit is the *job estimate*: a level, or a balanced or greedy placement, of one job on
    given loads.  A plan weighs every waiting job (one with unstarted tasks) at least once, and
    most schedulers about a dozen times, so a trace that keeps W jobs waiting through P plans
    costs some W x P estimates: thousands of jobs waiting through thousands of plans is hours.
    ``max_waiting`` refuses such a trace at the first plan that finds too many jobs waiting
    (early, and in one step for a burst of arrivals); ``max_estimates`` bounds the total."""

    max_estimates: int | None = None
    max_waiting: int | None = None
    estimates: int = 0
    most_waiting: int = 0

    def waiting(self, jobs: int) -> None:
        """Note a plan of ``jobs`` waiting jobs; PlanLimitError past ``max_waiting``."""
        self.most_waiting = max(self.most_waiting, jobs)
        if self.max_waiting is not None and jobs > self.max_waiting:
            raise PlanLimitError(f"{jobs:,} jobs wait at once, more than the limit of "
                                 f"{self.max_waiting:,}", "waiting_jobs")

    def spend(self) -> None:
        """Count one estimate; PlanLimitError past ``max_estimates``."""
        self.estimates += 1
        if self.max_estimates is not None and self.estimates > self.max_estimates:
            raise PlanLimitError(f"the plans need more than {self.max_estimates:,} job "
                                 "estimates", "estimates")


Allocate = Callable[[int, IntArray, list[int], int, bool], tuple[int, IntArray | None]]
"""(job index, loads (as an array and as a list), lower bound, allocation wanted) -> (level,
allocation or None)."""
Spread = Callable[[int, IntArray], SiteUse]
"""(job index, its allocation) -> the sites the allocation uses."""


def plan(scheduler: str, queues: list[Queue], sites: Sites, order: str = "swag",
         work: PlanWork | None = None) -> tuple[list[int], list[IntArray]]:
    """Place every unplaced queue (and re-place all of them for SCTA's new job and ATA) and
    order the jobs with unstarted tasks.  Returns (order as queue indices, allocations).
    The waiting jobs and every job estimate are counted in ``work`` (PlanLimitError past its
    limits)."""
    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {scheduler!r} (expected one of {SCHEDULERS})")
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r} (expected one of {ORDERS})")
    m = len(sites.slots)
    spent = PlanWork() if work is None else work
    live = [i for i, q in enumerate(queues) if q.left() > 0]
    spent.waiting(len(live))
    allocs: list[IntArray | None] = [q.alloc for q in queues]
    if scheduler in FIXED:
        loads = np.zeros(m, dtype=np.int64)
        for q in queues:
            if q.alloc is not None:
                for j, t, _ in q.use(sites)[0]:
                    loads[j] += t
        for i, q in enumerate(queues):
            if allocs[i] is None:
                spent.spend()
                x = _place(scheduler, q, sites, loads)
                allocs[i] = x
                loads += x.sum(axis=0)
        flexible: set[int] = set()
    elif scheduler == "scta":  # the unplaced (new) jobs are placed within the ordering
        flexible = {i for i, a in enumerate(allocs) if a is None}
    else:
        flexible = set(range(len(queues)))
    if scheduler in FIXED and order == "fifo":
        return live, [_placed(a) for a in allocs]
    if scheduler not in FIXED and order != "swag":
        raise ValueError(f"{scheduler} orders the jobs itself (order must be 'swag')")

    uses: dict[int, tuple[SiteUse, tuple[Hashable, ...]]] = {}

    def use_of(i: int) -> tuple[SiteUse, tuple[Hashable, ...]]:
        """The sites a placed job uses and its kind (fixed within a plan)."""
        q = queues[i]
        if allocs[i] is q.alloc:
            return q.use(sites)
        got = uses.get(i)
        if got is None:
            use = site_use(_placed(allocs[i]).sum(axis=0), sites.slots)
            got = uses[i] = (use, ("placed", *use))
        return got

    def kind(i: int) -> tuple[Hashable, ...]:
        """Jobs of one kind get the same estimate on the same loads and add the same tasks
        to every site (:func:`swag_order`): flexible jobs with the same demand on groups of
        the same sites, placed jobs with the same tasks at every site (e.g. every one-task
        job placed at a site)."""
        if i not in flexible:
            return use_of(i)[1]
        q = queues[i]
        return (q.demand.tobytes(), tuple(sites.lists[g] for g in q.groups.tolist()))

    def allocate(i: int, loads: IntArray, load_list: list[int], lower: int,
                 want: bool) -> tuple[int, IntArray | None]:
        spent.spend()
        if i not in flexible:
            return use_level(use_of(i)[0], load_list, sites.L), allocs[i]
        job = queues[i].rows(sites)
        if scheduler == "ata-greedy":
            if not want:  # the allocation is made again, on the same loads, if chosen
                return filled_level(job, load_list), None
            return filled(job, load_list)
        if not want:
            return least_level(job, loads, load_list, lower), None
        return balanced(job, loads, load_list, lower)

    def spread(i: int, x: IntArray) -> SiteUse:
        return site_use(x.sum(axis=0), sites.slots) if i in flexible else use_of(i)[0]

    chosen, placed = swag_order(live, allocate, spread, m, [kind(i) for i in live])
    for i, x in placed.items():
        allocs[i] = x
    for i, q in enumerate(queues):  # a job with nothing left to start is placed nowhere
        if allocs[i] is None:
            allocs[i] = np.zeros((len(q.groups), m), dtype=np.int64)
    return chosen, [_placed(a) for a in allocs]


def _placed(a: IntArray | None) -> IntArray:
    assert a is not None
    return a


def _place(scheduler: str, q: Queue, sites: Sites, loads: IntArray) -> IntArray:
    """A new job's placement by a scheduler that places once (SWAG, BTAWJ, BTAAJ)."""
    m = len(sites.slots)
    if scheduler == "swag":
        x = np.zeros((len(q.groups), m), dtype=np.int64)
        x[np.arange(len(q.groups)), sites.group_home[q.groups]] = q.demand
        return x
    base = np.zeros(m, dtype=np.int64) if scheduler == "btawj" else loads
    return balance(q.demand, q.groups, sites.lists, sites.slots, base, sites.L)[1]


def swag_order(live: list[int], allocate: Allocate, spread: Spread, m: int,
               alike: Sequence[Hashable] | None = None) -> tuple[list[int], dict[int, IntArray]]:
    """SWAG's greedy order of the jobs ``live``: repeatedly the job of earliest estimated
    completion on top of the jobs already ordered (ties: lower index), evaluated lazily (see
    the module docstring).  Returns the order and each job's allocation when it was chosen.
    ``spread(i, x)`` gives the sites job i's allocation x uses (the loads it adds).

    ``alike[k]`` (optional) names the kind of ``live[k]``: jobs of one kind get the same
    estimate on the same loads, so of them only the lowest index can be next (ties go to it).
    The heap then holds one job per kind — its lowest index not yet ordered — instead of every
    job, which keeps a trace of many identical jobs from costing n^2 re-estimates per plan."""
    loads = np.zeros(m, dtype=np.int64)
    load_list = loads.tolist()
    version = 0
    kinds = list(live) if alike is None else list(alike)
    rest: dict[Hashable, deque[int]] = {}
    for kind, i in zip(kinds, live, strict=True):
        rest.setdefault(kind, deque()).append(i)
    kind_of = dict(zip(live, kinds, strict=True))
    heap: list[tuple[int, int, int]] = []
    cache: dict[int, IntArray | None] = {}
    for queue in rest.values():
        i = queue.popleft()
        K, x = allocate(i, loads, load_list, 0, False)
        cache[i] = x
        heap.append((K, i, version))
    heapq.heapify(heap)
    out: list[int] = []
    placed: dict[int, IntArray] = {}
    while heap:
        K, i, v = heapq.heappop(heap)
        if v != version:
            K, x = allocate(i, loads, load_list, K, False)
            cache[i] = x
            if heap and (K, i) > heap[0][:2]:
                heapq.heappush(heap, (K, i, version))
                continue
        x = cache.pop(i)
        if x is None:
            x = _placed(allocate(i, loads, load_list, K, True)[1])
        out.append(i)
        placed[i] = x
        following = rest[kind_of[i]]
        if following:  # the next of its kind: estimated as it was, re-estimated when popped
            heapq.heappush(heap, (K, following.popleft(), -1))
        use = spread(i, x)
        if use:  # the loads grow in place: no estimate keeps them
            for j, t, _ in use:
                loads[j] += t
                load_list[j] += t
            version += 1
    return out, placed
