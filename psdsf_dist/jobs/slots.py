"""Multi-resource jobs on heterogeneous servers: the Slots scheduler and DRFH (section VI of
Wang, Li and Liang's DRFH paper).

Every task of a job has one demand vector (a fraction of the largest server per resource) and
its own duration.  Servers have capacities in the same units.  Whenever jobs arrive or tasks
end, the scheduler repeatedly serves the user with the lowest share among those with unstarted
tasks, one task at a time, until no such user's next task fits anywhere (progressive filling
with whole tasks); a user whose next task fits nowhere is skipped until the next event, so a
big task does not block the others.  Within a user, jobs are served in arrival order.

* ``slots``: each server is cut into slots of ``1/k`` of the largest server in every
  resource (``k`` slots per maximum server, Hadoop's abstraction); a server of capacity ``c``
  has ``floor(k * min_r c_r)`` slots.  A task takes its slots on the first server, in server
  order, with that many free.  How many it takes is the ``task_slots`` reading (the paper
  does not say what happens to a task bigger than a slot; no reading ever over-commits):

  - ``"cover"``: ``ceil(k * max_r d_r)`` slots, one for every task that fits in one, as many
    as cover it for a bigger task;
  - ``"one"``: one slot, as a Hadoop slot runs one task; a task bigger than a slot never
    starts, so its user, whose jobs are served in arrival order, waits behind it for good.

  The user served next is the one holding the fewest slots (the Fair Scheduler's fairness
  in slots).
* ``drfh-bf`` (Best-Fit DRFH, the paper's equation (9)): the user of lowest global dominant
  share ``sum over its running tasks of max_r d_r / C_r`` (``C`` the pooled capacity) is
  served on the feasible server minimising ``H = || d / d_1 - a / a_1 ||_1`` (``a`` the
  server's available resources); ties to the lower server index.
* ``drfh-ff`` (First-Fit DRFH): the same user, on the first feasible server.

Everything is deterministic (ties in time by insertion order, in share by user index).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

SCHEDULERS = ("slots", "drfh-bf", "drfh-ff")
TASK_SLOTS = ("cover", "one")
"""The readings of how many slots a task takes (module docstring)."""
DEFAULT_SLOTS_PER_MAX = 14
"""Table II's best slot size: the largest server cut into 14 slots."""
EPS = 1e-9
"""Slack in fit tests: capacities are sums of floats."""


@dataclass(frozen=True)
class MultiWorkload:
    """Jobs in submit order; ``demand[j]`` is every task of job j's vector, ``durations``
    one value per task (job j's tasks at ``offset[j]:offset[j] + tasks[j]``)."""

    capacity: FloatArray
    """(S, R) per server, fractions of the largest server."""
    submit: FloatArray
    """(J,) seconds, non-decreasing."""
    user: IntArray
    """(J,) the job's user index."""
    tasks: IntArray
    """(J,) tasks per job, >= 1."""
    demand: FloatArray
    """(J, R) per task, > 0 in at least one resource."""
    durations: FloatArray
    """(T,) seconds, > 0."""

    def __post_init__(self) -> None:
        S, R = self.capacity.shape
        J = len(self.submit)
        if S < 1 or R < 1 or J < 1:
            raise ValueError("need at least one server, one resource and one job")
        if self.demand.shape != (J, R) or self.user.shape != (J,) or self.tasks.shape != (J,):
            raise ValueError("submit, user, tasks and demand must describe the same jobs")
        if np.any(np.diff(self.submit) < 0):
            raise ValueError("jobs must be in submit order")
        if np.any(self.tasks < 1) or len(self.durations) != int(self.tasks.sum()):
            raise ValueError("every job needs >= 1 task and one duration per task")
        if np.any(self.demand < 0) or np.any(self.demand.max(axis=1) <= 0):
            raise ValueError("every demand vector must be >= 0 and not all zero")
        if np.any(self.durations <= 0) or np.any(self.capacity < 0):
            raise ValueError("durations must be > 0 and capacities >= 0")

    @property
    def num_users(self) -> int:
        return int(self.user.max()) + 1

    @property
    def offset(self) -> IntArray:
        return np.concatenate(([0], np.cumsum(self.tasks)[:-1])).astype(np.int64)


@dataclass(frozen=True)
class MultiRun:
    """What a run records up to the horizon."""

    scheduler: str
    horizon: float
    finish: FloatArray
    """(J,) when the job's last task ended; NaN if it had not by the horizon."""
    task_start: FloatArray
    """(T,) NaN if the task had not started by the horizon."""
    task_end: FloatArray
    """(T,) NaN if the task had not ended by the horizon."""
    task_server: IntArray
    """(T,) -1 if never started."""
    sample_times: FloatArray
    sample_used: FloatArray
    """(samples, R) fraction of the pooled capacity in use (the demands of running tasks)."""

    def utilisation(self, start: float = 0.0) -> FloatArray:
        """(R,) mean used fraction over the samples at or after ``start``."""
        keep = self.sample_times >= start
        return np.asarray(self.sample_used[keep].mean(axis=0))


def slot_count(capacity: FloatArray, k: int) -> IntArray:
    """Slots per server: ``floor(k * min_r c_r)`` (slots of ``1/k`` in every resource)."""
    return np.asarray(np.floor(k * capacity.min(axis=1) + EPS), dtype=np.int64)


NEVER = np.iinfo(np.int64).max
"""The slots a task that can never start needs: more than any server has."""


def slots_needed(demand: FloatArray, k: int, task_slots: str = "cover") -> IntArray:
    """Slots per task of each demand vector under the ``task_slots`` reading: ``"cover"``,
    ``ceil(k * max_r d_r)`` and at least one; ``"one"``, one if the task fits in a slot,
    else :data:`NEVER`."""
    if task_slots not in TASK_SLOTS:
        raise ValueError(f"unknown task_slots {task_slots!r} (expected one of {TASK_SLOTS})")
    cover = np.maximum(np.ceil(k * demand.max(axis=1) - EPS), 1).astype(np.int64)
    if task_slots == "one":
        return np.asarray(np.where(cover == 1, 1, NEVER), dtype=np.int64)
    return np.asarray(cover, dtype=np.int64)


def best_fit(d: FloatArray, avail: FloatArray) -> int:
    """The feasible server of least ``H`` (equation (9)), or -1 if the task fits nowhere.
    Resource 0 normalises; a server with none of it left, or a task demanding none, is
    compared on the unnormalised vectors."""
    ok = np.all(avail >= d - EPS, axis=1)
    if not ok.any():
        return -1
    a = avail[ok]
    if d[0] > 0:
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(a[:, :1] > EPS, a / np.maximum(a[:, :1], EPS), np.inf)
        h = np.abs(d / d[0] - ratio).sum(axis=1)
    else:
        h = np.abs(d - a).sum(axis=1)
    return int(np.flatnonzero(ok)[int(np.argmin(h))])


def simulate_multi(w: MultiWorkload, scheduler: str, horizon: float, *,
                   slots_per_max: int = DEFAULT_SLOTS_PER_MAX, task_slots: str = "cover",
                   samples: int = 200) -> MultiRun:
    """Run ``w`` under ``scheduler`` until ``horizon`` seconds (see the module docstring;
    ``slots_per_max`` and ``task_slots`` concern ``slots`` only)."""
    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {scheduler!r} (expected one of {SCHEDULERS})")
    if not horizon > 0 or slots_per_max < 1 or samples < 1:
        raise ValueError("horizon must be > 0, slots_per_max and samples >= 1")
    R = w.capacity.shape[1]
    J, U = len(w.submit), w.num_users
    pool = w.capacity.sum(axis=0)
    dom = (w.demand / np.where(pool > 0, pool, np.inf)).max(axis=1)  # (J,) per task
    avail = w.capacity.astype(float).copy()
    free_slots = slot_count(w.capacity, slots_per_max)
    # the slot bookkeeping runs under every scheduler; only Slots reads it
    need = slots_needed(w.demand, slots_per_max, task_slots if scheduler == "slots" else "cover")
    offset = w.offset.tolist()
    tasks = w.tasks.tolist()
    submit = w.submit.tolist()
    user_of = w.user.tolist()
    started = [0] * J
    left = list(tasks)
    share = [0.0] * U
    queue: list[list[int]] = [[] for _ in range(U)]  # per user: jobs with unstarted tasks
    head = [0] * U
    used = np.zeros(R)
    finish = np.full(J, np.nan)
    t_start = np.full(len(w.durations), np.nan)
    t_end = np.full(len(w.durations), np.nan)
    t_server = np.full(len(w.durations), -1, dtype=np.int64)
    heap: list[tuple[float, int, int, int]] = []  # (end, task, server, job)
    step = horizon / samples
    s_times = [step * (i + 0.5) for i in range(samples)]
    s_used: list[FloatArray] = []
    nxt_sample = 0
    nxt = 0

    def place(i: int) -> int:
        d = w.demand[i]
        if scheduler == "slots":
            fits = np.flatnonzero(free_slots >= need[i])
            return int(fits[0]) if len(fits) else -1
        if scheduler == "drfh-bf":
            return best_fit(d, avail)
        fits = np.flatnonzero(np.all(avail >= d - EPS, axis=1))
        return int(fits[0]) if len(fits) else -1

    def schedule(t: float) -> None:
        nonlocal used
        ready = [(share[u], u) for u in range(U) if head[u] < len(queue[u])]
        heapq.heapify(ready)
        while ready:
            _, u = heapq.heappop(ready)
            i = queue[u][head[u]]
            s = place(i)
            if s < 0:
                continue  # its next task fits nowhere: skip the user until the next event
            k = offset[i] + started[i]
            started[i] += 1
            if started[i] == tasks[i]:
                head[u] += 1
            d = w.demand[i]
            avail[s] -= d
            free_slots[s] -= need[i]
            used = used + d
            share[u] += float(need[i]) if scheduler == "slots" else float(dom[i])
            t_start[k] = t
            t_server[k] = s
            heapq.heappush(heap, (t + float(w.durations[k]), k, s, i))
            if head[u] < len(queue[u]):
                heapq.heappush(ready, (share[u], u))

    while True:
        t_next = min(submit[nxt] if nxt < J else math.inf, heap[0][0] if heap else math.inf)
        while nxt_sample < samples and s_times[nxt_sample] < min(t_next, horizon + step):
            s_used.append(used / np.where(pool > 0, pool, np.inf))
            nxt_sample += 1
        if t_next > horizon:
            break
        t = t_next
        while heap and heap[0][0] <= t:
            end, k, s, i = heapq.heappop(heap)
            u = user_of[i]
            avail[s] += w.demand[i]
            free_slots[s] += need[i]
            used = used - w.demand[i]
            share[u] -= float(need[i]) if scheduler == "slots" else float(dom[i])
            t_end[k] = end
            left[i] -= 1
            if left[i] == 0:
                finish[i] = end
        while nxt < J and submit[nxt] <= t:
            queue[user_of[nxt]].append(nxt)
            nxt += 1
        schedule(t)
    return MultiRun(scheduler, horizon, finish, t_start, t_end, t_server,
                    np.array(s_times[:len(s_used)]), np.array(s_used).reshape(-1, R))


JOB_CLASSES = ((1, 50), (51, 100), (101, 500), (501, 1000), (1001, 2000))
"""Fig. 6b's job-size classes (tasks per job); the largest is capped at 2,000 tasks here."""


def google_servers(rng: np.random.Generator, count: int) -> FloatArray:
    """(count, 2) CPU and memory of ``count`` servers in the Google 2011 mix's proportions
    (Table I), in random order."""
    from psdsf_dist.model.random_scenarios import GOOGLE_2011_MACHINES, google_counts

    counts = google_counts(rng, count)
    caps = np.repeat(np.array([[c, m] for _, c, m in GOOGLE_2011_MACHINES]), counts, axis=0)
    return np.asarray(caps[rng.permutation(count)], dtype=float)


def synthetic_jobs(rng: np.random.Generator, capacity: FloatArray, *, users: int,
                   horizon: float, load: float, class_weights: tuple[float, ...],
                   cpu_median: float, mem_median: float, sigma: float,
                   mean_duration: float) -> MultiWorkload:
    """A job stream on ``capacity`` offering ``load`` times the pooled CPU over ``horizon``:
    Poisson arrivals, users uniform, job sizes by class (``class_weights`` over
    :data:`JOB_CLASSES`, uniform within a class), per-job demands lognormal (medians, one
    ``sigma``) clipped to [0.005, 0.5] of the largest server, task durations exponential."""
    if len(class_weights) != len(JOB_CLASSES) or not load > 0 or users < 1:
        raise ValueError("need one weight per job class, load > 0 and users >= 1")
    p = np.asarray(class_weights, dtype=float) / sum(class_weights)
    # jobs needed: load * CPU * horizon over the expected CPU-seconds of one job
    mean_tasks = float(sum(pi * (lo + hi) / 2 for pi, (lo, hi) in zip(p, JOB_CLASSES,
                                                                     strict=True)))
    mean_cpu = float(np.clip(cpu_median * np.exp(sigma * rng.standard_normal(20000)),
                             0.005, 0.5).mean())
    J = max(1, round(load * capacity[:, 0].sum() * horizon
                     / (mean_tasks * mean_cpu * mean_duration)))
    submit = np.sort(rng.uniform(0, horizon, J))
    cls = rng.choice(len(JOB_CLASSES), size=J, p=p)
    lo = np.array([JOB_CLASSES[c][0] for c in cls])
    hi = np.array([JOB_CLASSES[c][1] for c in cls])
    tasks = rng.integers(lo, hi + 1).astype(np.int64)
    med = np.array([cpu_median, mem_median])
    demand = np.clip(med * np.exp(sigma * rng.standard_normal((J, 2))), 0.005, 0.5)
    durations = rng.exponential(mean_duration, int(tasks.sum())) + 1e-3
    return MultiWorkload(capacity, submit, rng.integers(0, users, J).astype(np.int64), tasks,
                         demand, durations)
