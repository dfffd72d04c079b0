"""A discrete-event simulator of jobs whose tasks run on the slots of sites.

Jobs arrive at their submit times; whenever a job arrives or completes, a scheduler
(:func:`psdsf_dist.jobs.schedulers.plan`) places the unstarted tasks on sites and orders the
jobs; every site then serves its placed tasks in that order on its free slots, one task per
slot, without preemption.  A task's duration is the workload's (drawn in advance, one array);
no scheduler sees it.  At one instant, completions are handled first, then arrivals, then one
plan, then free slots are filled — so a task finishing at t frees its slot for a job arriving
at t.  The jobs arriving at one instant are planned together, in submit order: for every
scheduler but SCTA that places them exactly as planning each on its own would (ATA re-places
everything anyway; the others place new jobs one after another on the loads before them), and
SCTA takes them all as its new jobs.  A burst of n arrivals is then one plan, not n.

The state is small lists per outstanding job (unstarted tasks per group and site) and a heap
of (finish time, sequence number, site, job) tuples for running tasks; each site keeps the
ordered list of jobs that have tasks placed on it, so filling a slot costs O(1) amortised.
Everything is deterministic: the workload carries the durations, and ties in time are broken
by insertion order.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from psdsf_dist.jobs.balance import grid
from psdsf_dist.jobs.schedulers import PlanWork, Queue, Sites, plan
from psdsf_dist.jobs.workload import Workload

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DEFAULT_SAMPLES = 200
"""Observations of the slots in use, per site and per user, over a run."""


@dataclass(frozen=True)
class JobRun:
    """What a run records."""

    scheduler: str
    order: str
    submit: FloatArray
    """(J,) seconds."""
    finish: FloatArray
    """(J,) seconds: when the job's last task ended."""
    task_start: FloatArray
    """(T,) seconds, indexed like the workload's durations."""
    task_wait: FloatArray
    """(T,) seconds from the job's submit to the task's start."""
    task_site: IntArray
    """(T,) the site that ran each task."""
    busy_seconds: FloatArray
    """(m,) slot-seconds of work each site did."""
    sample_times: FloatArray
    sample_site_busy: IntArray
    """(S, m) slots in use at each sample time."""
    sample_user_busy: IntArray
    """(S, U) slots each user's tasks hold at each sample time."""
    plans: int
    plan_seconds: float
    wall_seconds: float
    events: int
    estimates: int = 0
    """Job estimates the plans made (:class:`~psdsf_dist.jobs.schedulers.PlanWork`); 0 under
    an allocation policy (:mod:`psdsf_dist.jobs.allocated`), which makes none."""
    most_waiting: int = 0
    """The most jobs with unstarted tasks a plan found (0 under an allocation policy)."""
    """Arrivals plus task completions handled."""

    @property
    def response(self) -> FloatArray:
        return np.asarray(self.finish - self.submit)

    @property
    def events_per_second(self) -> float:
        return self.events / self.wall_seconds if self.wall_seconds > 0 else float("inf")


def simulate_jobs(w: Workload, scheduler: str, *, order: str = "swag",
                  samples: int = DEFAULT_SAMPLES, work: PlanWork | None = None) -> JobRun:
    """Run the workload under a scheduler to the last task's end (see the module docstring).
    ``work`` bounds the plans' work (PlanLimitError past its limits; default none)."""
    t_wall = time.perf_counter()
    m, J = w.num_sites, w.num_jobs
    sites = Sites(w.slots, w.group_sites, w.group_home, grid(w.slots))
    est_end = float(w.submit[-1]) + w.least_present_seconds() + 1.0
    sample_step = max(est_end - float(w.submit[0]), 1e-9) / samples
    next_sample = float(w.submit[0])
    s_times: list[float] = []
    s_site: list[IntArray] = []
    s_user: list[IntArray] = []

    slots = [int(u) for u in w.slots]
    free = slots[:]
    user_of = [int(u) for u in w.job_user]
    submit = [float(t) for t in w.submit]
    row_start = [int(r) for r in np.searchsorted(w.row_job, np.arange(J + 1))]
    row_offset = [int(o) for o in w.row_offset]
    durations = w.durations.tolist()
    busy_user = [0] * len(w.user_names)
    busy_seconds = [0.0] * m
    finish = np.full(J, np.nan)
    start = np.full(w.num_tasks, np.nan)
    site_of = np.full(w.num_tasks, -1, dtype=np.int64)
    left = [0] * J  # unstarted + running tasks per job
    active: list[int] = []  # jobs with unstarted tasks, in arrival order
    groups: dict[int, IntArray] = {}
    demand: dict[int, list[int]] = {}  # per job: unstarted tasks per row
    alloc: dict[int, list[list[int]]] = {}  # per job: unstarted tasks per row and site
    drawn: dict[int, list[int]] = {}  # per job: tasks of each row started so far
    at_site: dict[int, list[int]] = {}  # per job: unstarted tasks placed at each site
    # per job: the arrays of its unstarted tasks and placement the scheduler saw last, kept
    # until a task of the job starts (most waiting jobs start none between two plans)
    queue: dict[int, Queue] = {}
    site_jobs: list[deque[int]] = [deque() for _ in range(m)]
    heap: list[tuple[float, int, int, int]] = []
    seq = 0
    plans, plan_seconds, events = 0, 0.0, 0
    spent = PlanWork() if work is None else work
    nxt = 0

    def replan() -> None:
        nonlocal plans, plan_seconds, active
        t0 = time.perf_counter()
        active = [i for i in active if sum(demand[i])]
        qs = []
        for i in active:
            q = queue.get(i)
            if q is None:
                q = queue[i] = Queue(groups[i], np.array(demand[i], dtype=np.int64),
                                     np.array(alloc[i], dtype=np.int64) if i in alloc
                                     else None)
            qs.append(q)
        chosen, allocs = plan(scheduler, qs, sites, order, spent)
        for i, q, a in zip(active, qs, allocs, strict=True):
            if a is not q.alloc:  # placed anew (a job kept where it was is returned as is)
                alloc[i] = a.tolist()
                at_site[i] = a.sum(axis=0).tolist()
                q.alloc = a
        ordered = [active[k] for k in chosen]
        for j in range(m):
            site_jobs[j] = deque(i for i in ordered if at_site[i][j] > 0)
        plans += 1
        plan_seconds += time.perf_counter() - t0

    def fill(t: float) -> None:
        nonlocal seq
        for j in range(m):
            dq = site_jobs[j]
            while free[j] and dq:
                i = dq[0]
                a, dem, got = alloc[i], demand[i], drawn[i]
                for k in range(len(a)):
                    if not a[k][j]:
                        continue
                    take = min(a[k][j], free[j])
                    first = row_offset[row_start[i] + k] + got[k]
                    start[first:first + take] = t
                    site_of[first:first + take] = j
                    for d in durations[first:first + take]:
                        heapq.heappush(heap, (t + d, seq, j, i))
                        busy_seconds[j] += d
                        seq += 1
                    got[k] += take
                    queue.pop(i, None)
                    a[k][j] -= take
                    dem[k] -= take
                    at_site[i][j] -= take
                    free[j] -= take
                    busy_user[user_of[i]] += take
                    if not free[j]:
                        break
                if at_site[i][j] == 0:
                    dq.popleft()

    while nxt < J or heap:
        t = min(submit[nxt] if nxt < J else np.inf, heap[0][0] if heap else np.inf)
        while next_sample <= t:
            s_times.append(next_sample)
            s_site.append(np.array([u - f for u, f in zip(slots, free, strict=True)]))
            s_user.append(np.array(busy_user))
            next_sample += sample_step
        done_job = False
        while heap and heap[0][0] <= t:
            t_end, _, j, i = heapq.heappop(heap)
            events += 1
            free[j] += 1
            busy_user[user_of[i]] -= 1
            left[i] -= 1
            if left[i] == 0:
                finish[i] = t_end
                done_job = True
                for d in (groups, demand, alloc, drawn, at_site, queue):
                    d.pop(i, None)
        if done_job:
            active = [i for i in active if i in groups]
        arrived = False
        while nxt < J and submit[nxt] <= t:
            i = nxt
            nxt += 1
            events += 1
            lo, hi = row_start[i], row_start[i + 1]
            groups[i] = w.row_group[lo:hi].copy()
            demand[i] = w.row_tasks[lo:hi].tolist()
            drawn[i] = [0] * (hi - lo)
            left[i] = sum(demand[i])
            active.append(i)
            arrived = True
        if arrived or (done_job and active):
            replan()
        fill(t)
    waits = start - np.repeat(w.submit[w.row_job], w.row_tasks)
    return JobRun(scheduler, order, w.submit.copy(), finish, start, waits, site_of,
                  np.array(busy_seconds),
                  np.array(s_times), np.array(s_site, dtype=np.int64).reshape(-1, m),
                  np.array(s_user, dtype=np.int64).reshape(-1, len(w.user_names)),
                  plans, plan_seconds, time.perf_counter() - t_wall, events, spent.estimates,
                  spent.most_waiting)

