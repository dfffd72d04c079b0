"""Jobs run under an allocation policy: each site's slots shared among the active jobs by a
fairness policy, as in chapters 4-5 of Guan's thesis.

Every active job is a user of one resource, ``slots``, each task one slot.  Its demand is its
unfinished tasks: the tasks running at a site (bound there, a one-site group) and the unstarted
tasks of each task group (runnable at any of the group's sites).  The allocation is recomputed
(``recompute``):

- ``"subjob"`` (the thesis's default, section 4.5.3): when a job arrives and when a job has no
  task left to run or running at a site (its sub-job there is complete);
- ``"task"`` (the thesis's "Aggressive"): also at every task completion.

The allocation ``a[i, j]`` (slots of job i at site j, fractional) comes from any registered
policy (:func:`psdsf_dist.policies.registry.allocate`: ``amf`` and ``gamf`` read the task
groups, the other policies see each job as a user placed on the sites of its groups with a
backlog of its unfinished tasks) or from ``imf``, max-min fairness at each site on its own
(:func:`imf`, section 4.3's baseline).

Or the slots are shared by the per-server protocol itself (``protocol``,
:mod:`psdsf_dist.jobs.protocol_share`): no solve; every site is a server that updates its
column once per period of simulated time, and the allocation at any moment is the columns the
servers hold then.  ``recompute`` then says when the servers learn the jobs' new state (the
coordinator's table: arrivals and completions always, backlogs at sub-job completions or at
every task completion).

Tasks are whole and never preempted: the deployment rule of section 4.5.3 starts them.  A free
slot at site j goes to the job with runnable tasks there whose running tasks ``v[i, j]`` are
furthest below its allocation, the least ``v[i, j] / a[i, j]`` (a job given nothing there
comes last; ties: the earlier job); the task is taken from the job's group, among those that
may run at j, with the most unstarted tasks.  The rule keeps each job's running tasks within
one of its allocation wherever the allocation fills the site, and never leaves a slot idle
while a task could run there, so no task waits for ever.  Durations are the workload's; no
policy sees them.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from psdsf_dist.errors import SolverError
from psdsf_dist.jobs.protocol_share import ProtocolShare
from psdsf_dist.jobs.simulator import DEFAULT_SAMPLES, JobRun
from psdsf_dist.jobs.workload import Workload
from psdsf_dist.model.entries import PlacementRule, UserSpec
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.model.task_groups import GroupSpec
from psdsf_dist.policies.amf import AMF_POLICIES, pair_floors, task_group_view
from psdsf_dist.policies.lp import solve_lp, sparse_rows
from psdsf_dist.policies.registry import POLICIES, UnknownPolicyError, allocate
from psdsf_dist.protocol.config import ProtocolConfig

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

RECOMPUTE = ("subjob", "task")
TOTAL_TOL = 1e-7
"""Relative slack on the AMF totals kept by :func:`optimize_completion`."""
ZERO = 1e-6
"""An allocation at or below this many slots counts as none (solver round-off)."""
IMF = "imf"
PROTOCOL = "protocol"
JOB_POLICIES: tuple[str, ...] = (IMF, PROTOCOL, *POLICIES)
"""What can drive the allocated simulator: IMF, the per-server protocol and every registered
policy."""


@dataclass(frozen=True)
class AllocatedRun:
    """A run under an allocation policy: the job-level record and the fairness of the jobs'
    aggregate slots over time (section 4.6's metric)."""

    run: JobRun
    recompute: str
    solves: int
    sample_job_std: FloatArray
    """(S,) standard deviation of the active jobs' aggregate running tasks at each sample."""
    sample_active: IntArray
    """(S,) active jobs (with unfinished tasks) at each sample: the std means something only
    where two or more compete."""
    residuals: FloatArray = field(default_factory=lambda: np.zeros(0))
    """``protocol``: the PS-DSF certificate's residual after each of its rounds, for the jobs
    of that moment (0: the allocation was PS-DSF; empty for the other policies)."""
    certified: BoolArray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    """``protocol``: whether the certificate held after each round (at the config's rtol)."""

    @property
    def rounds(self) -> int:
        """The protocol's rounds (periods with jobs to share the slots among)."""
        return len(self.residuals)

    @property
    def certified_rounds(self) -> int:
        return int(np.count_nonzero(self.certified))


def imf(counts: FloatArray, slots: FloatArray) -> FloatArray:
    """Independent max-min fairness: every site j shares its ``slots[j]`` max-min fairly among
    the jobs' demands ``counts[:, j]`` there, on its own (water-filling: the level t with
    ``sum_i min(counts[i, j], t) = slots[j]``, or every demand met)."""
    d = np.asarray(counts, dtype=float)
    out = np.zeros_like(d)
    for j in range(d.shape[1]):
        col = d[:, j]
        if col.sum() <= slots[j]:
            out[:, j] = col
            continue
        s = np.sort(col[col > 0])
        below = np.concatenate(([0.0], np.cumsum(s)[:-1]))  # sum of demands under each
        left = len(s) - np.arange(len(s))
        # the first demand that is not met in full fixes the level
        k = int(np.argmax(below + s * left > slots[j]))
        t = (slots[j] - below[k]) / left[k]
        out[:, j] = np.minimum(col, t)
    return out


def job_scenario(names: list[str], running: IntArray, groups: list[list[tuple[list[int], int]]],
                 slots: IntArray, site_names: tuple[str, ...]) -> Scenario:
    """The active jobs as users of one resource: ``running[i, j]`` tasks bound to site j and,
    per job, (sites, unstarted tasks) groups; placement the sites of its groups, backlog its
    unfinished tasks.  The jobs join the sites' scenario (:func:`sites_scenario`) as users
    join any scenario (:meth:`Scenario.with_users`): the arrays of the document listing them,
    without reading the sites again at every solve."""
    specs: list[UserSpec] = []
    for i, name in enumerate(names):
        grp: dict[tuple[int, ...], int] = {}
        for j in np.flatnonzero(running[i]).tolist():
            grp[(j,)] = grp.get((j,), 0) + int(running[i, j])
        for sites, k in groups[i]:
            if k:
                grp[tuple(sites)] = grp.get(tuple(sites), 0) + k
        used = sorted({j for key in grp for j in key})
        specs.append(UserSpec(
            name, {"slots": 1.0}, max_tasks=float(sum(grp.values())),
            placement=PlacementRule(tuple(site_names[j] for j in used)),
            task_groups=tuple(GroupSpec(tuple(site_names[j] for j in key), float(k))
                              for key, k in grp.items())))
    return sites_scenario(tuple(int(u) for u in slots), site_names).with_users(specs)


@lru_cache(maxsize=16)
def sites_scenario(slots: tuple[int, ...], site_names: tuple[str, ...]) -> Scenario:
    """The sites as servers of one resource, ``slots``, and no user yet (a document needs a
    user: one is declared and left out)."""
    return Scenario.from_dict({
        "resources": ["slots"],
        "servers": [{"name": s, "capacity": {"slots": u}}
                    for s, u in zip(site_names, slots, strict=True)],
        "users": [{"name": "none", "demand": {"slots": 1}}],
    }).only_users([])


def allocation(policy: str, sc: Scenario, *, optimized: bool = False) -> FloatArray:
    """(jobs, sites) slots per job and site under ``policy`` (:data:`JOB_POLICIES`);
    ``optimized``: then refined by :func:`optimize_completion` (the AMF family only).  The
    protocol has no such one-shot allocation: it runs over time (:func:`simulate_allocated`)."""
    if policy == PROTOCOL:
        raise ValueError("the protocol's allocation is the servers' columns over time, "
                         "not one solve: simulate_allocated runs it")
    if policy == IMF:
        groups = sc.task_groups
        assert groups is not None
        return imf(groups.first_server_only().per_server_tasks(sc.num_servers),
                   sc.capacity[:, 0])
    a = np.asarray(allocate(sc, policy, "rdm").allocation, dtype=float)
    if optimized:
        if policy not in AMF_POLICIES:
            raise ValueError(f"only the AMF family is optimized (Algorithms 6 and 8), "
                             f"not {policy!r}")
        a = optimize_completion(sc, policy, a.sum(axis=1))
    return a


def optimize_completion(sc: Scenario, policy: str, totals: FloatArray) -> FloatArray:
    """Algorithms 6 (AMF) and 8 (GAMF): another allocation with the same job-wise totals,
    chosen job by job in increasing order of unfinished tasks (ties: the earlier job) to
    minimise each one's estimated completion ``max_k d[k] / (slots of group k)``, the jobs
    optimized before it fixed.  Each step is the thesis's LP: maximise ``y`` subject to the
    sites' capacities, every group's slots within its tasks, every later job's total equal to
    its AMF total (so the result is still AMF), and the target's group k given at least
    ``d[k] y`` slots (``a = d y + z``, ``z >= 0``); ``amf-si`` keeps its per-site
    sharing-incentive floors (4.3)-(4.4), ``gamf-si``'s aggregate floor (5.24) holds with the
    totals.  Totals are kept to a relative 1e-7 (the progressive filling's round-off)."""
    view = task_group_view(sc, policy)
    groups = view.task_groups
    assert groups is not None
    m, N = view.num_servers, view.num_users
    g_of = groups.group_of_entry()  # one variable per (group, site it may use)
    site = groups.server
    user = groups.user[g_of]
    V = len(site)
    cap = view.capacity[:, 0].astype(float)
    floors = pair_floors(view)[0] if policy == "amf-si" else np.zeros((N, m))
    fixed = np.zeros(V)
    done = np.zeros(N, dtype=bool)
    size = groups.tasks @ (groups.user[:, None] == np.arange(N)).astype(float)
    for n in sorted(range(N), key=lambda n: (size[n], n)):
        free = ~done[user]
        cols = np.flatnonzero(free)
        k = len(cols)
        mine = np.flatnonzero(groups.user == n)
        used = np.bincount(site[~free], weights=fixed[~free], minlength=m)
        gc, uc, site_c = g_of[cols], user[cols], site[cols]
        gs, us = np.unique(gc), np.unique(uc)
        pos = np.arange(k)
        # rows over the variables a (cols), then y: capacity per site, each group within its
        # tasks, the target's groups (d[g] y - slots of g <= 0), every job's total at most
        # its AMF total; then, per job, its total at least that (within round-off) followed
        # by its sharing-incentive floors
        fl_u, fl_s = np.nonzero(floors[us] > 0)
        fl_u = us[fl_u]
        fl_key = fl_u * m + fl_s
        fl_hit = np.isin(uc * m + site_c, fl_key)
        ub_rows = m + len(gs) + len(mine) + len(us)
        # the lower-bound block: job u's total row, then its floors (ascending site)
        lo_of_u = np.searchsorted(us, fl_u) + np.arange(len(fl_u)) + 1
        tot_row = np.arange(len(us)) + np.searchsorted(fl_u, us)
        entries_r = [site_c, m + np.searchsorted(gs, gc), m + len(gs) + len(mine)
                     + np.searchsorted(us, uc), ub_rows + tot_row[np.searchsorted(us, uc)]]
        entries_c = [pos, pos, pos, pos]
        entries_v = [np.ones(k), np.ones(k), np.ones(k), -np.ones(k)]
        target = np.flatnonzero(np.isin(gc, mine))
        entries_r.append(m + len(gs) + np.searchsorted(mine, gc[target]))
        entries_c.append(target)
        entries_v.append(-np.ones(len(target)))
        entries_r.append(m + len(gs) + np.arange(len(mine)))
        entries_c.append(np.full(len(mine), k))
        entries_v.append(groups.tasks[mine].astype(float))
        hit = np.flatnonzero(fl_hit)
        entries_r.append(ub_rows + lo_of_u[np.searchsorted(fl_key, uc[hit] * m + site_c[hit])])
        entries_c.append(hit)
        entries_v.append(-np.ones(len(hit)))
        n_rows = ub_rows + len(us) + len(fl_u)
        A = sparse_rows(np.concatenate(entries_r), np.concatenate(entries_c),
                        np.concatenate(entries_v), n_rows)
        lower = np.empty(len(us) + len(fl_u))
        lower[tot_row] = -totals[us] * (1.0 - TOTAL_TOL)
        lower[lo_of_u] = -floors[fl_u, fl_s] * (1.0 - TOTAL_TOL)
        b = np.concatenate([cap - used, groups.tasks[gs].astype(float), np.zeros(len(mine)),
                            totals[us], lower])
        c = np.zeros(k + 1)
        c[-1] = -1.0
        res = solve_lp(c, A, b)
        if not res.optimal:
            raise SolverError(f"Algorithm 6/8 LP for job {view.user_names[n]}: {res.message}")
        x = res.x[:k]
        fixed[cols[user[cols] == n]] = x[user[cols] == n]
        done[n] = True
    out = np.zeros((N, m))
    np.add.at(out, (user, site), fixed)
    return out


def simulate_allocated(w: Workload, policy: str, *, recompute: str = "subjob",
                       optimized: bool = False, samples: int = DEFAULT_SAMPLES,
                       protocol: ProtocolConfig | None = None) -> AllocatedRun:
    """Run the workload with the slots shared by ``policy`` (see the module docstring);
    ``optimized``: the AMF family's allocation refined by Algorithm 6/8 at every solve;
    ``protocol``: the protocol's settings when ``policy`` is ``protocol`` (default: the
    protocol's defaults; its period is in the workload's seconds)."""
    if protocol is not None and policy != PROTOCOL:
        raise ValueError(f"protocol settings are for the protocol, not {policy!r}")
    if policy not in JOB_POLICIES:
        raise UnknownPolicyError(policy)
    if optimized and policy not in AMF_POLICIES:
        raise ValueError(f"only the AMF family is optimized (Algorithms 6 and 8), "
                         f"not {policy!r}")
    if recompute not in RECOMPUTE:
        raise ValueError(f"unknown recompute {recompute!r} (expected one of {RECOMPUTE})")
    t_wall = time.perf_counter()
    m, J, T = w.num_sites, w.num_jobs, w.num_tasks
    servers = ProtocolShare(protocol or ProtocolConfig(), m) if policy == PROTOCOL else None
    period = servers.config.period if servers is not None else np.inf
    tick = 0  # the protocol's next round is at ``tick * period``
    slots = w.slots.astype(np.int64)
    free = slots.copy()
    sites_of = [np.flatnonzero(row).tolist() for row in w.group_sites]
    home = w.group_home.tolist()
    # each group's sites with its associated site first (what AMF binds a group to)
    ordered = [[home[g]] + [j for j in s if j != home[g]] for g, s in enumerate(sites_of)]
    row_start = np.searchsorted(w.row_job, np.arange(J + 1)).tolist()
    row_offset = w.row_offset.tolist()
    durations = w.durations.tolist()
    submit = w.submit.tolist()
    user_of = w.job_user.tolist()
    finish = np.full(J, np.nan)
    start = np.full(T, np.nan)
    site_of = np.full(T, -1, dtype=np.int64)
    busy_seconds = np.zeros(m)
    busy_user = np.zeros(len(w.user_names), dtype=np.int64)
    est_end = float(w.submit[-1]) + w.least_present_seconds() + 1.0
    step = max(est_end - float(w.submit[0]), 1e-9) / samples
    next_sample = float(w.submit[0])
    s_times: list[float] = []
    s_site: list[IntArray] = []
    s_user: list[IntArray] = []
    s_std: list[float] = []
    s_active: list[int] = []

    left = [0] * J  # unfinished tasks per job
    unstarted: dict[int, list[int]] = {}  # per job: unstarted tasks per row
    drawn: dict[int, list[int]] = {}  # per job: tasks of each row started so far
    running: dict[int, IntArray] = {}  # per job: running tasks per site
    active: list[int] = []  # jobs with unfinished tasks, arrival order
    share = np.zeros((0, m))  # allocation of ``active`` as of the last solve
    heap: list[tuple[float, int, int, int]] = []
    seq = solves = events = 0
    plan_seconds = 0.0
    nxt = 0

    def runnable(i: int, j: int) -> bool:
        lo = row_start[i]
        return any(k and j in sites_of[int(w.row_group[lo + r])]
                   for r, k in enumerate(unstarted[i]))

    def solve() -> None:
        nonlocal share, solves, plan_seconds, active
        t0 = time.perf_counter()
        active = [i for i in active if left[i]]
        sc = None
        if active:
            groups = [[(ordered[int(w.row_group[row_start[i] + r])], k)
                       for r, k in enumerate(unstarted[i])] for i in active]
            sc = job_scenario([f"j{i}" for i in active],
                              np.array([running[i] for i in active]), groups, slots,
                              w.site_names)
        if servers is not None:  # the servers take the new table; their columns stay
            servers.follow(active, sc if sc is not None else sites_scenario(
                tuple(int(u) for u in slots), w.site_names))
            share = servers.columns
        elif sc is not None:
            share = allocation(policy, sc, optimized=optimized)
        else:
            share = np.zeros((0, m))
        solves += 1
        plan_seconds += time.perf_counter() - t0

    def fill(t: float) -> None:
        nonlocal seq
        for j in np.flatnonzero(free).tolist():
            while free[j]:
                best: tuple[float, int, int] | None = None
                for p, i in enumerate(active):  # ``share`` row p is job active[p]
                    if not runnable(i, j):
                        continue
                    a = float(share[p, j])
                    v = int(running[i][j])
                    key = (v / a if a > ZERO else np.inf, v, p)
                    if best is None or key < best:
                        best = key
                if best is None:
                    break
                i = active[best[2]]
                lo = row_start[i]
                cand = [r for r, k in enumerate(unstarted[i])
                        if k and j in sites_of[int(w.row_group[lo + r])]]
                r = max(cand, key=lambda r: (unstarted[i][r], -r))
                task = row_offset[lo + r] + drawn[i][r]
                drawn[i][r] += 1
                unstarted[i][r] -= 1
                start[task] = t
                site_of[task] = j
                d = durations[task]
                heapq.heappush(heap, (t + d, seq, j, i))
                seq += 1
                busy_seconds[j] += d
                running[i][j] += 1
                busy_user[user_of[i]] += 1
                free[j] -= 1

    def sample(t: float) -> None:
        nonlocal next_sample
        while next_sample <= t:
            s_times.append(next_sample)
            s_site.append(slots - free)
            s_user.append(busy_user.copy())
            agg = [int(running[i].sum()) for i in active if left[i]]
            s_std.append(float(np.std(agg)) if agg else 0.0)
            s_active.append(len(agg))
            next_sample += step

    while nxt < J or heap:
        t = min(submit[nxt] if nxt < J else np.inf, heap[0][0] if heap else np.inf)
        if servers is not None:
            if not active:  # idle servers: the next round is the first one after this event
                tick = max(tick, math.ceil(t / period - 1e-9))
            t = min(t, tick * period)
        sample(t)
        change = False
        while heap and heap[0][0] <= t:
            t_end, _, j, i = heapq.heappop(heap)
            events += 1
            free[j] += 1
            running[i][j] -= 1
            busy_user[user_of[i]] -= 1
            left[i] -= 1
            if left[i] == 0:
                finish[i] = t_end
                for dct in (unstarted, drawn, running):
                    dct.pop(i)
                change = True
            elif recompute == "task" or (running[i][j] == 0 and not runnable(i, j)):
                change = True
        while nxt < J and submit[nxt] <= t:
            i = nxt
            nxt += 1
            events += 1
            lo, hi = row_start[i], row_start[i + 1]
            unstarted[i] = w.row_tasks[lo:hi].tolist()
            drawn[i] = [0] * (hi - lo)
            running[i] = np.zeros(m, dtype=np.int64)
            left[i] = sum(unstarted[i])
            active.append(i)
            change = True
        if change:
            solve()
        if servers is not None and t >= tick * period:
            if active:  # a period with jobs to share the slots among
                t0 = time.perf_counter()
                share = servers.round()
                plan_seconds += time.perf_counter() - t0
            tick += 1
        fill(t)
    waits = start - np.repeat(w.submit[w.row_job], w.row_tasks)
    run = JobRun(policy, recompute, w.submit.copy(), finish, start, waits, site_of,
                 busy_seconds, np.array(s_times),
                 np.array(s_site, dtype=np.int64).reshape(-1, m),
                 np.array(s_user, dtype=np.int64).reshape(-1, len(w.user_names)),
                 solves, plan_seconds, time.perf_counter() - t_wall, events)
    if servers is None:
        return AllocatedRun(run, recompute, solves, np.array(s_std),
                            np.array(s_active, dtype=np.int64))
    return AllocatedRun(run, recompute, solves, np.array(s_std),
                        np.array(s_active, dtype=np.int64), np.array(servers.residuals),
                        np.array(servers.held, dtype=bool))
