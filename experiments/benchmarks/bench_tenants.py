"""Tenants sharing a Ray cluster by PS-DSF, against plain Ray, in the same run.

Regenerate (writes ``experiments/results/tenants.md``, ``tenants.csv``, ``tenants.png``)::

    .venv/bin/python -m experiments run bench_tenants            # 3 runs: ~15 minutes
    .venv/bin/python -m experiments run bench_tenants --quick --runs 1   # the example: ~2 minutes

The cluster is local and heterogeneous (``ray.cluster_utils.Cluster``, three nodes on this
machine): a CPU-rich node (8 CPU, 8 GiB), a memory-rich node (2 CPU, 24 GiB) and a node with 2
units of a custom ``gpu`` resource (4 CPU, 8 GiB).  The allocator runs with ``servers:
from-ray``, ``tenants: true``, T = 1 s (``cluster_configs/tenants.yaml``).  Three users share
it, each with its own task shape:

============  ==============================  ======  ====================================
user          shape                           weight  workload
============  ==============================  ======  ====================================
``batch``     1 CPU, 0.5 GiB                  1       5,000 tasks of 50-200 ms, at t = 0
``analytics`` 0.5 CPU, 2 GiB                  1       tasks of 100-200 ms, from t = 10 s
``training``  1 CPU, 2 GiB, 1 gpu             2       tasks of 0.5-1.5 s, from t = 20 s
============  ==============================  ======  ====================================

Each user submits its tasks in one bulk call (``map_unordered``: one message to its queue;
``--submit remote`` sends one ``.remote`` call per task instead, results suffixed ``_remote``).
The late users submit more than they can finish while ``batch`` has work; when ``batch``'s last
task has started, the others close their queues (what is still queued is dropped) and the phase
ends.  The same tasks, at the same times, then go to plain Ray (same shapes, Ray's own
scheduler).  Before the first phase, tasks of every shape fill the cluster once, so that
neither phase pays Ray's worker start-up.  Every task reports its node and its start and end
on the wall clock; a user's running tasks at time t are counted from those intervals.

Measured
    * per user, running tasks over time against its allocation (the coordinator's, sampled
      every 0.5 s) — ``tenants.png``;
    * the gap ``max_n |achieved_n - allocated_n| / allocated_n`` on 30 s windows, one starting
      every 10 s, from when every user is in until ``batch`` runs out (achieved and allocated: time
      averages over the window); plain Ray's against the same allocation;
    * on the same windows, fairness between the users: the largest ratio achieved/allocated
      over the smallest (``max/min``: 1 when every user gets the same fraction of its
      allocation, whatever the dead time between tasks costs all of them), and all users'
      running tasks against plain Ray's;
    * per window, each fractional entry (a user's mean allocation on a server at least 0.1
      from a whole number of tasks): its allocation against the user's mean running tasks on
      that server (``tenants_fractional.csv``);
    * time from a late user's first submission to 90 % of its allocation;
    * overhead on the same cluster, PS-DSF, the relay floor (:class:`Relay`: an actor that
      only forwards each call to a Ray task) and plain Ray, alternating, median of
      ``--repeats``: throughput of 1,000 empty tasks and of 280 100 ms tasks (1 CPU each),
      submitted with ``.remote`` each and with one ``map`` (the relay: one call for all;
      plain Ray: ``.remote`` each, its own bulk path), latency of one task submitted and
      awaited alone (p50, p99 of 200);
    * the allocator's CPU (seconds of CPU per second of wall clock) and memory (PSS) — the
      coordinator, the server actors and the tenants' queues — over the PS-DSF phase.

Ray's semantics (``--semantics``: ``tenants_semantics.md``, ``.csv``; ~5 minutes), on a
cluster of its own (one 8-CPU node with a 2 GiB object store: ``ray.cluster_utils``' default of
150 MB spills a 100 MB result the moment a second copy exists, and a result through the
queue has two for a moment), PS-DSF and plain Ray alternating, ``--runs`` runs each:

    * nested: 20 outer tasks each waiting (``ray.get``) for one inner task of the same user,
      every task 1 CPU and 0.2 s of work: wall time;
    * cancel: a task queued behind 8 running ones is cancelled (``ray.cancel``), then a
      running one: whether the queued one ever started, and how long the running one took
      to stop (from ``ray.cancel`` to ``ray.get`` raising; its marker file shows it never
      reached its end);
    * a 100 MB numpy argument (the task returns its sum), and a 100 MB result: wall time
      (per run, the median of :data:`LARGE_CALLS` calls);
    * the overhead rows above (empty tasks with ``map``, 100 ms tasks, latency);
    * restart: a driver that started the allocator is killed with SIGKILL, and a new
      allocator of the same name started at once: seconds from the kill to a reconnected
      tenant's task returning its value, and the run's named actors afterwards (none left
      over from the dead one);
    * beside: ``psdsf-dist run`` without ``--address`` while the cluster runs and
      ``RAY_ADDRESS`` names it: its exit status, and whether any of its actors appeared in
      the cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from experiments.common.paths import CLUSTER_CONFIGS, EXAMPLES, RESULTS
from experiments.common.ray_cluster import local_cluster
from psdsf_dist.admission.shapes import GIB, task_shape
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.runtime.from_ray import node_capacity
from psdsf_dist.runtime.launcher import Run, launch
from psdsf_dist.runtime.names import NAMESPACE, coordinator_name, run_actor_names
from psdsf_dist.runtime.settings import RunConfig
from psdsf_dist.runtime.tenant import Tenant
from psdsf_dist.runtime.tenant_queue import AllocatorGoneError, TaskWithdrawnError

SCENARIO = CLUSTER_CONFIGS / "tenants.yaml"
RUN_ID = "bench-tenants"
WINDOW = 30.0
WINDOW_STEP = 10.0
"""The windows start every this many seconds (they overlap: every 30 s stretch is near one)."""
SAMPLE = 0.5


@dataclass(frozen=True)
class UserLoad:
    name: str
    options: dict[str, Any]
    weight: float
    start: float
    tasks: int
    seconds: tuple[float, float]


def workload(quick: bool, analytics_gib: float = 2.0) -> list[UserLoad]:
    scale = 0.2 if quick else 1.0
    return [
        UserLoad("batch", {"num_cpus": 1, "memory": GIB // 2}, 1.0, 0.0,
                 int(5000 * scale), (0.05, 0.2)),
        UserLoad("analytics", {"num_cpus": 0.5, "memory": int(analytics_gib * GIB)}, 1.0,
                 10.0 * scale,
                 int(5000 * scale), (0.1, 0.2)),
        UserLoad("training", {"num_cpus": 1, "memory": 2 * GIB, "resources": {"gpu": 1}},
                 2.0, 20.0 * scale, int(1000 * scale), (0.5, 1.5)),
    ]


def task(seconds: float) -> tuple[str, float, float]:
    t0 = time.time()
    time.sleep(seconds)
    return ray.get_runtime_context().get_node_id(), t0, time.time()


def empty(*_: Any) -> None:
    return None


def hundred_ms(*_: Any) -> tuple[float, float]:
    t0 = time.time()
    time.sleep(0.1)
    return t0, time.time()


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


@dataclass
class Phase:
    """One submission of the workload: every task's (user, start, end) and the samples."""

    started: float
    intervals: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    allocation: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    placed: list[tuple[float, dict[str, dict[str, float]]]] = field(default_factory=list)
    """Samples of each user's allocation per server (PS-DSF phase only)."""
    nodes: dict[str, list[str]] = field(default_factory=dict)
    """Each user's tasks' servers (``node-<8 hex digits>``), as ``intervals``."""
    first_submit: dict[str, float] = field(default_factory=dict)
    ended: float = 0.0


def submit_on_schedule(loads: list[UserLoad], submit: Callable[[UserLoad, list[float]], Any],
                       t0: float, rng: np.random.Generator) -> dict[str, Any]:
    """Each user's tasks at its start time (durations drawn once per user, same seed)."""
    handles: dict[str, Any] = {}
    for load in sorted(loads, key=lambda u: u.start):
        wait = t0 + load.start - time.time()
        if wait > 0:
            time.sleep(wait)
        durations = rng.uniform(*load.seconds, size=load.tasks)
        handles[load.name] = submit(load, [float(d) for d in durations])
    return handles


DROPPED = (AllocatorGoneError, TaskWithdrawnError, ray.exceptions.TaskCancelledError)


def collect(values: Iterator[Any], count: int, name: str, *,
            dropped_ok: bool) -> tuple[list[tuple[float, float]], list[str]]:
    """The intervals of the tasks that ran, from an iterator that raises a task's error at its
    place (``TaskResults``, or ``ray.get`` over refs); tasks dropped when the phase ended are
    expected (closed queue, cancelled) only where ``dropped_ok``, any other failure stops the
    run.  A bulk submission's stream ends with its queue: what it did not deliver was dropped.
    Returns the intervals and, in the same order, the servers (nodes) the tasks ran on."""
    out = []
    nodes = []
    why: set[str] = set()
    while True:
        try:
            node, s, e = next(values)
            out.append((s, e))
            nodes.append(f"node-{node[:8]}")
        except StopIteration:
            break
        except DROPPED as err:
            if not dropped_ok:
                raise
            lines = str(err).strip().splitlines() or [type(err).__name__]
            why.add(lines[-1][:160])  # the cause, not Ray's header
        except ray.exceptions.RayActorError:
            if not dropped_ok:
                raise
            why.add("the closed queue ended the stream")
            break
    dropped = count - len(out)
    print(f"  {name}: {len(out)} ran, {dropped} dropped at the end {sorted(why)}", flush=True)
    return out, nodes


class EachValue(Iterator[Any]):
    """``ray.get`` of each ref in turn; an error is raised at its place, and reading goes on."""

    def __init__(self, refs: list[Any]) -> None:
        self.refs = refs
        self.at = 0

    def __next__(self) -> Any:
        if self.at == len(self.refs):
            raise StopIteration
        self.at += 1
        return ray.get(self.refs[self.at - 1])


def psdsf_phase(run: Run, loads: list[UserLoad], seed: int,
                bulk: bool) -> tuple[Phase, dict[str, float]]:
    tenants = {u.name: Tenant.connect(u.name, weight=u.weight, run_id=RUN_ID) for u in loads}
    functions = {u.name: tenants[u.name].remote(**u.options)(task) for u in loads}
    pids = allocator_pids(run, tenants)
    cpu0 = {p: cpu_seconds(p) for p in pids}
    phase = Phase(time.time())
    stop = threading.Event()

    pss: list[float] = []

    def sample() -> None:
        k = 0
        while not stop.is_set():
            at, placed = time.time() - phase.started, run.user_allocation()
            phase.placed.append((at, placed))
            phase.allocation.append((at, {u: sum(row.values()) for u, row in placed.items()}))
            if k % 10 == 0:  # every 5 s: the allocator's memory, all its processes
                pss.append(sum(pss_kib(p) for p in pids) / 1024)
            k += 1
            time.sleep(SAMPLE)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    def submit(load: UserLoad, seconds: list[float]) -> Any:
        phase.first_submit.setdefault(load.name, time.time() - phase.started)
        if bulk:
            return functions[load.name].map_unordered(seconds)
        return EachValue([functions[load.name].remote(d) for d in seconds])

    values = submit_on_schedule(loads, submit, phase.started, np.random.default_rng(seed))
    counts = {u.name: u.tasks for u in loads}
    phase.intervals["batch"], phase.nodes["batch"] = collect(
        values["batch"], counts["batch"], "batch", dropped_ok=False)
    for name, t in tenants.items():
        if name != "batch":
            t.close()  # the phase ends: what the others still queue is dropped
    for name in values:
        if name != "batch":
            phase.intervals[name], phase.nodes[name] = collect(values[name], counts[name], name,
                                                               dropped_ok=True)
    phase.ended = time.time()
    stop.set()
    sampler.join()
    wall = phase.ended - phase.started
    usage = {"cpu_per_second": sum(max(cpu_seconds(p) - cpu0[p], 0.0) for p in pids) / wall,
             "pss_mib": max(pss, default=0.0), "processes": float(len(pids))}
    tenants["batch"].close()
    return phase, usage


def plain_phase(loads: list[UserLoad], seed: int) -> Phase:
    functions = {u.name: ray.remote(task).options(**u.options) for u in loads}
    phase = Phase(time.time())

    def submit(load: UserLoad, seconds: list[float]) -> Any:
        phase.first_submit.setdefault(load.name, time.time() - phase.started)
        return [functions[load.name].remote(d) for d in seconds]

    refs = submit_on_schedule(loads, submit, phase.started, np.random.default_rng(seed))
    phase.intervals["batch"], phase.nodes["batch"] = collect(
        EachValue(refs["batch"]), len(refs["batch"]), "batch", dropped_ok=False)
    for name in refs:
        if name != "batch":
            for r in refs[name]:
                ray.cancel(r)
            phase.intervals[name], phase.nodes[name] = collect(
                EachValue(refs[name]), len(refs[name]), name, dropped_ok=True)
    phase.ended = time.time()
    return phase


def warm_up(loads: list[UserLoad]) -> None:
    """Start the worker processes the phases will use (Ray keeps them for the job): on every
    node, as many tasks of each shape at once as fit there.  Otherwise the first phase alone
    pays seconds of process start-up on this 2-core machine."""
    nodes = [n for n in ray.nodes() if n["Alive"]]  # type: ignore[no-untyped-call]
    for u in loads:
        refs = []
        shape = task_shape(u.options).as_dict()  # memory in GiB, as node_capacity gives it
        for n in nodes:
            have = node_capacity(n, list(shape))
            fit = min(int(have[k] // v) for k, v in shape.items())
            pinned = ray.remote(task).options(
                **u.options, scheduling_strategy=NodeAffinitySchedulingStrategy(
                    n["NodeID"], soft=False))
            refs += [pinned.remote(0.5) for _ in range(fit)]
        ray.get(refs)


# -- analysis ---------------------------------------------------------------------------------
def running_series(intervals: list[tuple[float, float]], origin: float,
                   times: np.ndarray) -> np.ndarray:
    starts = np.sort([s - origin for s, _ in intervals])
    ends = np.sort([e - origin for _, e in intervals])
    return (np.searchsorted(starts, times, side="right")
            - np.searchsorted(ends, times, side="right")).astype(float)


def mean_running(intervals: list[tuple[float, float]], origin: float, a: float,
                 b: float) -> float:
    """Time-average of running tasks over [a, b) (exact, from the intervals)."""
    busy = sum(max(0.0, min(e - origin, b) - max(s - origin, a)) for s, e in intervals)
    return busy / (b - a)


def mean_allocation(samples: list[tuple[float, dict[str, float]]], name: str, a: float,
                    b: float) -> float:
    """Mean of the samples' ``name`` entries (a user, or a server) over [a, b)."""
    vals = [row.get(name, 0.0) for t, row in samples if a <= t < b]
    return float(np.mean(vals)) if vals else 0.0


def windows(psdsf: Phase, loads: list[UserLoad]) -> list[tuple[float, float]]:
    """30 s windows, one every 10 s, from when every user is in until batch's last task
    started."""
    start = max(psdsf.first_submit.values())
    last_batch = max(s for s, _ in psdsf.intervals["batch"]) - psdsf.started
    out = []
    a = start
    while a + WINDOW <= last_batch:
        out.append((a, a + WINDOW))
        a += WINDOW_STEP
    if not out and last_batch - start > 5.0:  # --quick: one shorter window
        out.append((start, last_batch))
    return out


def gaps(phase: Phase, reference: Phase, loads: list[UserLoad],
         wins: list[tuple[float, float]]) -> list[dict[str, float]]:
    """Per window: each user's mean allocation (``reference``'s) and mean running tasks
    (``phase``'s); ``gap``, the largest |running - allocated| / allocated; ``spread``, the
    largest run/allocation ratio over the smallest (1: every user gets the same fraction of
    its allocation); ``total``, the running tasks of all users."""
    out = []
    for a, b in wins:
        row: dict[str, float] = {"from": a, "to": b}
        ratios = []
        for u in loads:
            x = mean_allocation(reference.allocation, u.name, a, b)
            got = mean_running(phase.intervals[u.name], phase.started, a, b)
            row[f"{u.name}_allocated"] = x
            row[f"{u.name}_running"] = got
            if x > 0:
                ratios.append(got / x)
        row["gap"] = max((abs(r - 1.0) for r in ratios), default=0.0)
        row["spread"] = max(ratios) / min(ratios) if ratios and min(ratios) > 0 else math.inf
        row["total"] = sum(row[f"{u.name}_running"] for u in loads)
        out.append(row)
    return out


FRACTION = 0.1
"""An entry whose mean allocation over a window is this far or further from a whole number
is fractional (:func:`fractional_entries`)."""


def fractional_entries(phase: Phase, loads: list[UserLoad],
                       wins: list[tuple[float, float]]) -> list[dict[str, Any]]:
    """Per window, each (user, server) entry whose mean allocation is fractional: its mean
    allocation and the user's mean running tasks on that server (credits meet a fractional
    entry on average where the capacity the floors leave holds the extra task:
    ``admission/rounding.py``)."""
    entries = {}
    for u in loads:
        samples = [(t, row.get(u.name, {})) for t, row in phase.placed]
        for server in sorted({s for _, row in samples for s in row}):
            mine = [iv for iv, node in zip(phase.intervals[u.name], phase.nodes[u.name],
                                           strict=True) if node == server]
            entries[u.name, server] = (samples, mine)
    out = []
    for k, (a, b) in enumerate(wins):
        for (user, server), (samples, mine) in entries.items():
            x = mean_allocation(samples, server, a, b)
            if abs(x - round(x)) < FRACTION:
                continue
            out.append({"window": k, "from": a, "to": b, "user": user, "server": server,
                        "allocated": x, "running": mean_running(mine, phase.started, a, b)})
    return out


def time_to_share(phase: Phase, reference: Phase, user: str, share: float = 0.9) -> float:
    """Seconds from the user's first submission until it runs >= 90 % of its allocation."""
    t0 = phase.first_submit[user]
    times = np.arange(t0, t0 + 120.0, 0.05)
    running = running_series(phase.intervals[user], phase.started, times)
    for t, r in zip(times, running, strict=True):
        rows = [row for ts, row in reference.allocation if ts <= t and user in row]
        if rows and rows[-1][user] > 0 and r >= share * rows[-1][user]:
            return float(t - t0)
    return float("nan")


# -- overhead ---------------------------------------------------------------------------------
@ray.remote(num_cpus=0)
class Relay:
    """The least any queue between a caller and its tasks costs: an async actor that forwards
    each call to one Ray task and returns its awaited value (no admission, no bookkeeping)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    async def call(self, *args: Any) -> Any:
        return await self.fn.remote(*args)

    async def many(self, items: list[Any]) -> list[Any]:
        return list(await asyncio.gather(*(self.fn.remote(x) for x in items)))


PATHS = ("psdsf", "relay", "plain")
OVERHEAD_ROWS = (("empty_tps", "empty tasks / s (`.remote` each)", ""),
                 ("empty_map_tps", "empty tasks / s (`map`)", ""),
                 ("100ms_tps", "100 ms tasks / s (`.remote` each)", ""),
                 ("100ms_map_tps", "100 ms tasks / s (`map`)", ""),
                 ("latency_p50", "latency p50", " ms"),
                 ("latency_p99", "latency p99", " ms"))


def overhead(repeats: int) -> dict[str, list[float]]:
    """Throughput and latency through a tenant's queue, through a :class:`Relay` and in plain
    Ray, interleaved: ``{row}_{path}`` of :data:`OVERHEAD_ROWS` and :data:`PATHS`."""
    t = Tenant.connect("probe", run_id=RUN_ID)
    plain = {"empty": ray.remote(empty).options(num_cpus=1),
             "100ms": ray.remote(hundred_ms).options(num_cpus=1)}
    tenant = {"empty": t.remote(num_cpus=1)(empty), "100ms": t.remote(num_cpus=1)(hundred_ms)}
    relay = {k: Relay.remote(fn) for k, fn in plain.items()}  # type: ignore[attr-defined]
    out: dict[str, list[float]] = {f"{key}_{path}": [] for key, _, _ in OVERHEAD_ROWS
                                   for path in PATHS}

    cpus = int(sum(n["Resources"].get("CPU", 0.0)
                   for n in ray.nodes() if n["Alive"]))  # type: ignore[no-untyped-call]

    def submit(path: str, kind: str, n: int, bulk: bool) -> list[Any]:
        if path == "psdsf":
            fn = tenant[kind]
            return list(fn.map(range(n))) if bulk else ray.get([fn.remote() for _ in range(n)])
        if path == "relay":
            r = relay[kind]
            return list(ray.get(r.many.remote(list(range(n))))) if bulk else \
                ray.get([r.call.remote() for _ in range(n)])
        return ray.get([plain[kind].remote() for _ in range(n)])  # plain Ray has no bulk call

    def rate(path: str, kind: str, n: int, bulk: bool = False) -> float:
        """Tasks per second: ``n`` submitted at once (in one call where ``bulk``)."""
        t0 = time.perf_counter()
        values = submit(path, kind, n, bulk)
        seconds = time.perf_counter() - t0
        if values and values[0] is not None:  # 100 ms tasks: never more at once than CPUs
            most = most_at_once(values)
            if most > cpus:
                raise RuntimeError(f"{most} one-CPU tasks ran at once on {cpus} CPUs")
        return n / seconds

    def latency(path: str, n: int = 200) -> tuple[float, float]:
        seen = []
        for _ in range(n):
            t0 = time.perf_counter()
            submit(path, "empty", 1, False)
            seen.append(time.perf_counter() - t0)
        q = np.percentile(seen, [50, 99])
        return float(q[0]), float(q[1])

    for path in PATHS:  # warm every path (workers, the queue's leases)
        rate(path, "empty", 200)
    for _ in range(repeats):
        for path in PATHS:
            out[f"empty_tps_{path}"].append(rate(path, "empty", 1000))
            out[f"100ms_tps_{path}"].append(rate(path, "100ms", 280))
            out[f"empty_map_tps_{path}"].append(rate(path, "empty", 1000, bulk=True))
            out[f"100ms_map_tps_{path}"].append(rate(path, "100ms", 280, bulk=True))
            p50, p99 = latency(path)
            out[f"latency_p50_{path}"].append(p50)
            out[f"latency_p99_{path}"].append(p99)
    for r in relay.values():
        ray.kill(r)
    t.close()
    return out


def overhead_table(over: dict[str, list[float]]) -> list[str]:
    """The overhead rows as a markdown table: PS-DSF, the relay floor and plain Ray (medians),
    and the ratios to plain Ray."""
    med = {k: statistics.median(v) for k, v in over.items()}
    lines = [f"| overhead (median of {len(over['empty_tps_psdsf'])}) | PS-DSF | relay floor | "
             "plain Ray | PS-DSF / plain | relay / plain |", "|---|---|---|---|---|---|"]
    for key, label, unit in OVERHEAD_ROWS:
        a, r, b = (med[f"{key}_{path}"] for path in PATHS)
        scale = 1000.0 if unit else 1.0
        lines.append(f"| {label} | {a * scale:.1f}{unit} | {r * scale:.1f}{unit} | "
                     f"{b * scale:.1f}{unit} | {a / b:.2f} | {r / b:.2f} |")
    return [*lines, "", "Relay floor: an async actor that forwards each call to one Ray task "
                    "and returns its awaited value, nothing else — what any queue between the "
                    "caller and its tasks costs at least."]


def nested_seconds(outer: Any) -> float:
    """Wall time of 20 outer tasks, each waiting for one inner task of 0.2 s."""
    t0 = time.perf_counter()
    ray.get([outer.remote(0.2) for _ in range(20)], timeout=300)
    return time.perf_counter() - t0


def work_for(seconds: float) -> int:
    time.sleep(seconds)
    return 1


def mark(path: str, seconds: float) -> None:
    """Write ``started``, work ``seconds`` (10 ms sleeps), write ``ended`` — or, interrupted
    by a cancel, ``interrupted <wall clock>``.  (Short sleeps: Ray interrupts a task between two
    Python bytecodes, so one long ``time.sleep`` would be interrupted only when it ends.)"""
    with open(path, "a") as f:
        f.write("started\n")
    end = time.time() + seconds
    try:
        while time.time() < end:
            time.sleep(0.01)
    except KeyboardInterrupt:
        with open(path, "a") as f:
            f.write(f"interrupted {time.time()}\n")
        raise
    with open(path, "a") as f:
        f.write("ended\n")


def cancel_probe(fn: Any, folder: Path) -> tuple[bool, float, bool]:
    """8 running 6 s tasks and one queued behind them: cancel the queued one, then a running
    one.  Returns (the queued one started, seconds from ``ray.cancel`` to the running one's
    interruption — inf if it never was, it reached its end)."""
    for f in folder.iterdir():
        f.unlink()
    blockers = [fn.remote(str(folder / f"b{i}"), 6.0) for i in range(8)]
    queued = fn.remote(str(folder / "queued"), 0.0)
    end = time.monotonic() + 60
    while len([f for f in folder.iterdir() if f.name.startswith("b")]) < 8 \
            and time.monotonic() < end:
        time.sleep(0.02)
    ray.cancel(queued)
    # the one that started last: the furthest from its end
    started = sorted((f for f in folder.iterdir() if f.name.startswith("b")),
                     key=lambda f: f.stat().st_mtime, reverse=True)
    victim = blockers[int(started[0].name[1:])]
    t0 = time.time()
    ray.cancel(victim)
    with contextlib.suppress(ray.exceptions.RayError):
        ray.get(victim, timeout=30)
    for b in blockers:
        with contextlib.suppress(ray.exceptions.RayError):
            ray.get(b, timeout=60)
    time.sleep(0.5)
    text = started[0].read_text()
    stop = math.inf
    for line in text.splitlines():
        if line.startswith("interrupted "):
            stop = float(line.split()[1]) - t0
    return (folder / "queued").exists(), stop, "ended" in text


def array_sum(a: np.ndarray) -> float:
    return float(a[::4096].sum())


def array_of(mb: int) -> np.ndarray:
    return np.ones(mb * 2**20 // 8)


LARGE_CALLS = 5
"""Calls with a 100 MB argument (and result) per run; the run's figure is their median."""


def timed(call: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


RESTART_DRIVER = textwrap.dedent("""
    import ray, sys
    from psdsf_dist.protocol.config import ProtocolConfig
    from psdsf_dist.runtime.launcher import launch
    from psdsf_dist.runtime.settings import RunConfig
    ray.init(address=sys.argv[1], log_to_driver=False)
    launch({"servers": "from-ray", "tenants": True, "resources": ["CPU", "memory"]},
           RunConfig(ProtocolConfig(period=1.0)), run_id=sys.argv[2])
    print("up", flush=True)
    import time
    time.sleep(600)
""")


def restart_probe(address: str, name: str) -> tuple[float, int]:
    """Start an allocator from a driver, SIGKILL the driver, start one of the same name at
    once; seconds from the kill to a new tenant's task value, and the actors of the run then
    left from the dead one (by actor id)."""
    driver = subprocess.Popen([sys.executable, "-c", RESTART_DRIVER, address, name],
                              stdout=subprocess.PIPE, text=True)
    assert driver.stdout is not None
    driver.stdout.readline()
    old = {ray.get_actor(n, namespace=NAMESPACE)._actor_id.hex()
           for n in run_actor_names(name, list(ray.util.list_named_actors(all_namespaces=True)))}
    t0 = time.perf_counter()
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    run = launch({"servers": "from-ray", "tenants": True, "resources": ["CPU", "memory"]},
                 RunConfig(ProtocolConfig(period=1.0)), run_id=name)
    try:
        t = Tenant.connect("after-restart", run_id=name)
        ray.get(t.remote(num_cpus=1)(work_for).remote(0.0), timeout=120)
        seconds = time.perf_counter() - t0
        t.close()
        now = {ray.get_actor(n, namespace=NAMESPACE)._actor_id.hex()
               for n in run_actor_names(name,
                                        list(ray.util.list_named_actors(all_namespaces=True)))}
    finally:
        run.stop()
    return seconds, len(old & now)


def beside_probe(address: str) -> tuple[int, bool]:
    """``psdsf-dist run`` without --address while RAY_ADDRESS names this cluster: its exit
    status, and whether its coordinator ever appeared here."""
    env = {**os.environ, "RAY_ADDRESS": address}
    proc = subprocess.Popen(
        [sys.executable, "-m", "psdsf_dist.cli.main", "run",
         str(EXAMPLES / "paper_fig1.yaml"), "--period", "0.3",
         "--duration", "2", "--num-cpus", "1", "--name", "beside", "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    seen = False
    while proc.poll() is None:
        names = {e["name"] for e in ray.util.list_named_actors(all_namespaces=True)}
        seen |= coordinator_name("beside") in names
        time.sleep(0.2)
    return proc.returncode, seen


SEMANTICS_STORE_BYTES = 2 * 2**30
"""The semantics cluster's object store (module docstring)."""


def semantics(runs: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """The measurements of ``--semantics`` (module docstring); returns them by name, and the
    overhead rows."""
    with local_cluster({"num_cpus": 8, "memory": 8 * 2**30,
                        "object_store_memory": SEMANTICS_STORE_BYTES}) as cluster:
        return semantics_on(cluster.address, runs)


def semantics_on(address: str, runs: int) -> tuple[dict[str, list[float]],
                                                   dict[str, list[float]]]:
    """:func:`semantics` on the cluster at ``address`` (the driver connected to it)."""
    out: dict[str, list[float]] = {}

    def note(key: str, value: float) -> None:
        out.setdefault(key, []).append(value)

    run = launch({"servers": "from-ray", "tenants": True, "resources": ["CPU", "memory"]},
                 RunConfig(ProtocolConfig(period=1.0)), run_id=RUN_ID)
    try:
        t = Tenant.connect("semantics", run_id=RUN_ID)
        inner = t.remote(num_cpus=1)(work_for)

        def outer_body(seconds: float) -> int:
            return int(ray.get(inner.remote(seconds))) + 1

        outer = t.remote(num_cpus=1)(outer_body)
        plain_inner = ray.remote(work_for).options(num_cpus=1)

        def plain_outer_body(seconds: float) -> int:
            return int(ray.get(plain_inner.remote(seconds))) + 1

        plain_outer = ray.remote(plain_outer_body).options(num_cpus=1)
        tenant_mark = t.remote(num_cpus=1)(mark)
        plain_mark = ray.remote(mark).options(num_cpus=1)
        tenant_sum = t.remote(num_cpus=1)(array_sum)
        plain_sum = ray.remote(array_sum).options(num_cpus=1)
        tenant_array = t.remote(num_cpus=1)(array_of)
        plain_array = ray.remote(array_of).options(num_cpus=1)
        big = array_of(100)
        for fn in (tenant_sum, plain_sum):  # warm: the first call of a function loads it
            ray.get(fn.remote(array_of(1)))
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            for _ in range(runs):
                # before the nested phase: placed after it, the probe saw no interruption for
                # plain Ray either (cause not found; alone, on the same kind of cluster, it did)
                started, stop, ended = cancel_probe(tenant_mark, folder)
                note("cancel_queued_started_psdsf", float(started))
                note("cancel_stop_s_psdsf", stop)
                note("cancel_ran_to_end_psdsf", float(ended))
                started, stop, ended = cancel_probe(plain_mark, folder)
                note("cancel_queued_started_plain", float(started))
                note("cancel_stop_s_plain", stop)
                note("cancel_ran_to_end_plain", float(ended))
            nested_seconds(outer)  # warm: workers, leases
            nested_seconds(plain_outer)
            for k in range(runs):
                print(f"semantics run {k + 1} of {runs} ...", flush=True)
                note("nested_psdsf", nested_seconds(outer))
                note("nested_plain", nested_seconds(plain_outer))
                # one call is a noisy sample (plain Ray's own vary 7x): the median of a few,
                # PS-DSF and plain Ray alternating
                samples: dict[str, list[float]] = {}
                for _ in range(LARGE_CALLS):
                    for key, call in (
                            ("arg100_psdsf", lambda: ray.get(tenant_sum.remote(big))),
                            ("arg100_plain", lambda: ray.get(plain_sum.remote(big))),
                            ("ret100_psdsf", lambda: ray.get(tenant_array.remote(100))),
                            ("ret100_plain", lambda: ray.get(plain_array.remote(100)))):
                        samples.setdefault(key, []).append(timed(call))
                for key, values in samples.items():
                    note(key, statistics.median(values))
        t.close()
    finally:
        run.stop()
    run = launch({"servers": "from-ray", "tenants": True, "resources": ["CPU", "memory"]},
                 RunConfig(ProtocolConfig(period=1.0)), run_id=RUN_ID)
    try:
        over = overhead(runs)
    finally:
        run.stop()
    for k in range(runs):
        seconds, left = restart_probe(address, f"restart-{k}")
        note("restart_s", seconds)
        note("restart_leftover_actors", float(left))
        status, seen = beside_probe(address)
        note("beside_exit", float(status))
        note("beside_seen", float(seen))
    return out, over


def semantics_report(out: dict[str, list[float]], over: dict[str, list[float]]) -> str:
    med = {k: statistics.median(v) for k, v in out.items()}
    runs = len(out["nested_psdsf"])

    def each(key: str, fmt: str) -> str:
        return ", ".join(f"{v:{fmt}}" for v in out[key])

    lines = [f"| measure (median of {runs}; each run) | PS-DSF | plain Ray | ratio |",
             "|---|---|---|---|"]
    for key, label in (("nested", "nested: 20 outer + 20 inner, 8 CPUs (s)"),
                       ("cancel_stop_s", "cancel: running task stopped after (s)"),
                       ("arg100", "100 MB argument (s)"),
                       ("ret100", "100 MB result (s)")):
        a, b = med[f"{key}_psdsf"], med[f"{key}_plain"]
        lines.append(f"| {label} | {a:.3f} ({each(f'{key}_psdsf', '.3f')}) | {b:.3f} "
                     f"({each(f'{key}_plain', '.3f')}) | {a / b:.2f} |")
    for key, label in (("cancel_queued_started", "cancel: the queued task started (runs)"),
                       ("cancel_ran_to_end", "cancel: the running task reached its end (runs)")):
        lines.append(f"| {label} | {int(sum(out[f'{key}_psdsf']))} of {runs} | "
                     f"{int(sum(out[f'{key}_plain']))} of {runs} | |")
    lines += ["", *overhead_table(over)]
    lines += ["", f"| lifecycle (each of {runs} runs) | result |", "|---|---|",
              f"| kill -9 of the driver, new run of the name: to a tenant's task value (s) | "
              f"{med['restart_s']:.1f} ({each('restart_s', '.1f')}) |",
              f"| actors of the dead run left after the new one started | "
              f"{each('restart_leftover_actors', '.0f')} |",
              f"| `run` without --address beside this cluster (RAY_ADDRESS set): exit status | "
              f"{each('beside_exit', '.0f')} |",
              f"| ... its coordinator seen in this cluster | "
              f"{', '.join('yes' if v else 'no' for v in out['beside_seen'])} |"]
    return "\n".join(lines)


def pid_of(actor: Any) -> int:
    return int(ray.get(actor.__ray_call__.remote(lambda _self: os.getpid())))


def allocator_pids(run: Run, tenants: dict[str, Tenant]) -> list[int]:
    """The coordinator's, the server actors' and the tenants' queues' processes."""
    actors = [run.coordinator, *run.handles().values(),
              *(t.queue for t in tenants.values() if t.queue is not None)]
    return sorted({pid_of(a) for a in actors})


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pss_kib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return float(line.split()[1])
    except FileNotFoundError:
        pass
    return 0.0


# -- output -----------------------------------------------------------------------------------
def plot(psdsf: Phase, plain: Phase, loads: list[UserLoad], wins: list[tuple[float, float]],
         path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(10, 7.5), sharex=True, sharey=True)
    end = max(psdsf.ended - psdsf.started, plain.ended - plain.started)
    times = np.arange(0.0, end, 0.1)
    colors = {"batch": "tab:blue", "analytics": "tab:orange", "training": "tab:green"}
    for ax, phase, title in ((axes[0], psdsf, "PS-DSF tenants (allocator's leases)"),
                             (axes[1], plain, "plain Ray (its own scheduler)")):
        for u in loads:
            running = running_series(phase.intervals[u.name], phase.started, times)
            ax.plot(times, running, color=colors[u.name], lw=1.0,
                    label=f"{u.name}: running tasks")
            ts = [t for t, row in psdsf.allocation]
            xs = [row.get(u.name, 0.0) for _, row in psdsf.allocation]
            ax.plot(ts, xs, color=colors[u.name], lw=1.8, ls="--",
                    label=f"{u.name}: PS-DSF allocation")
        if wins:
            ax.axvspan(wins[0][0], wins[-1][1], color="0.92", zorder=0)
        ax.set_title(title)
        ax.set_ylabel("tasks")
        ax.grid(alpha=0.3)
    axes[1].set_xlabel("time since batch submitted (s); grey: the span of the 30 s windows "
                       "(one every 10 s) of the tables")
    axes[0].legend(ncol=3, fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a fifth of the workload (example)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3,
                    help="runs of the workload, PS-DSF and plain Ray alternating (seeds "
                         "seed, seed + 1, ...); the plot shows the first")
    ap.add_argument("--submit", choices=("map", "remote"), default="map",
                    help="how the PS-DSF phase's users submit their tasks: one bulk call "
                         "(map_unordered) or one .remote call per task (results suffixed "
                         "_remote)")
    ap.add_argument("--analytics-gib", type=float, default=2.0,
                    help="memory of an analytics task (GiB); 3 makes the allocation ask for "
                         "1.33 of them where one fits (results suffixed _3gib)")
    ap.add_argument("--semantics", action="store_true",
                    help="measure Ray's semantics under the allocator instead (nested tasks, "
                         "cancel, large arguments, overhead, restart; tenants_semantics.md)")
    args = ap.parse_args(argv)
    loads = workload(args.quick, args.analytics_gib)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.semantics:
        out, over = semantics(args.runs)
        with open(RESULTS / "tenants_semantics.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["measure", *[f"run_{k + 1}" for k in range(args.runs)]])
            for key, values in [*out.items(), *over.items()]:
                w.writerow([key, *[f"{v:.6g}" for v in values]])
        table = semantics_report(out, over)
        (RESULTS / "tenants_semantics.md").write_text(table + "\n")
        print(table)
        return

    runs: list[tuple[Phase, Phase, dict[str, float]]] = []
    with local_cluster({"num_cpus": 8, "memory": 8 * 2**30},
                       {"num_cpus": 2, "memory": 24 * 2**30},
                       {"num_cpus": 4, "memory": 8 * 2**30, "resources": {"gpu": 2}}):
        run = launch(SCENARIO, RunConfig(ProtocolConfig(period=1.0)), run_id=RUN_ID)
        try:
            warm_up(loads)
            for k in range(args.runs):
                print(f"run {k + 1} of {args.runs}: PS-DSF phase ...", flush=True)
                psdsf, usage = psdsf_phase(run, loads, args.seed + k, args.submit == "map")
                print(f"run {k + 1} of {args.runs}: plain Ray phase ...", flush=True)
                runs.append((psdsf, plain_phase(loads, args.seed + k), usage))
            print("overhead ...", flush=True)
            over = overhead(2 if args.quick else args.repeats)
        finally:
            run.stop()

    suffix = "_quick" if args.quick else ""  # an example run: not kept in the repository
    if args.analytics_gib != 2.0:
        suffix += f"_{args.analytics_gib:g}gib"
    if args.submit != "map":
        suffix += f"_{args.submit}"
    table = report(runs, over, loads, suffix)
    (RESULTS / f"tenants{suffix}.md").write_text(table + "\n")
    print(table)
    # last: a failing plot must not lose the measurements written above
    psdsf, plain, _ = runs[0]
    plot(psdsf, plain, loads, windows(psdsf, loads), RESULTS / f"tenants{suffix}.png")


def report(runs: list[tuple[Phase, Phase, dict[str, float]]], over: dict[str, list[float]],
           loads: list[UserLoad], suffix: str) -> str:
    """The tables (one row per run and window, medians over runs); writes the CSV."""
    rows: list[tuple[int, dict[str, float], dict[str, float]]] = []
    by_window: dict[int, list[tuple[dict[str, float], dict[str, float]]]] = {}
    """Window index -> (PS-DSF, plain Ray) rows of every run that has it."""
    late: dict[str, list[tuple[float, float]]] = {u.name: [] for u in loads if u.start > 0}
    for k, (psdsf, plain, _) in enumerate(runs):
        wins = windows(psdsf, loads)
        for i, (a, b) in enumerate(zip(gaps(psdsf, psdsf, loads, wins),
                                       gaps(plain, psdsf, loads, wins), strict=True)):
            rows.append((k, a, b))
            by_window.setdefault(i, []).append((a, b))
        for name in late:
            late[name].append((time_to_share(psdsf, psdsf, name),
                               time_to_share(plain, psdsf, name)))
    with open(RESULTS / f"tenants{suffix}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "scheduler", "from_s", "to_s", "gap", "spread", "total",
                    *[f"{u.name}_{k}" for u in loads for k in ("allocated", "running")]])
        for k, a, b in rows:
            for name, r in (("psdsf", a), ("plain", b)):
                w.writerow([k + 1, name, f"{r['from']:.1f}", f"{r['to']:.1f}",
                            f"{r['gap']:.4f}", f"{r['spread']:.4f}", f"{r['total']:.3f}",
                            *[f"{r[f'{u.name}_{key}']:.3f}" for u in loads
                              for key in ("allocated", "running")]])

    def spread(values: list[float], fmt: str) -> str:
        ok = [v for v in values if not np.isnan(v)]
        if not ok:
            return "never"
        never = f", {len(values) - len(ok)} never" if len(ok) < len(values) else ""
        return (f"{statistics.median(ok):{fmt}} ({min(ok):{fmt}}-{max(ok):{fmt}}{never})"
                if len(values) > 1 else f"{ok[0]:{fmt}}")

    lines = [
        "| run | window (s) | PS-DSF gap | plain Ray gap | PS-DSF max/min | PS-DSF / plain "
        "running | " + " | ".join(f"{u.name} alloc / PS-DSF / plain" for u in loads) + " |",
        "|---|---|---|---|---|---|" + "---|" * len(loads),
    ]
    for k, a, b in rows:
        cells = " | ".join(
            f"{a[f'{u.name}_allocated']:.2f} / {a[f'{u.name}_running']:.2f} / "
            f"{b[f'{u.name}_running']:.2f}" for u in loads)
        lines.append(f"| {k + 1} | {a['from']:.0f}-{a['to']:.0f} | {a['gap']:.1%} | "
                     f"{b['gap']:.1%} | {a['spread']:.3f} | {a['total'] / b['total']:.1%} | "
                     f"{cells} |")
    lines += ["", f"| window | PS-DSF gap, median (range) of {len(runs)} runs | plain Ray gap | "
              "PS-DSF max/min of run/allocation | PS-DSF / plain Ray running |",
              "|---|---|---|---|---|"]
    for i, mine in sorted(by_window.items()):
        lines.append(f"| {i + 1} | "
                     f"{spread([a['gap'] * 100 for a, _ in mine], '.1f')} % | "
                     f"{spread([b['gap'] * 100 for _, b in mine], '.1f')} % | "
                     f"{spread([a['spread'] for a, _ in mine], '.3f')} | "
                     f"{spread([a['total'] / b['total'] * 100 for a, b in mine], '.1f')} % |")
    frac = [(k, e) for k, (psdsf, _, _) in enumerate(runs)
            for e in fractional_entries(psdsf, loads, windows(psdsf, loads))]
    with open(RESULTS / f"tenants{suffix}_fractional.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "from_s", "to_s", "user", "server", "allocated", "running"])
        for k, e in frac:
            w.writerow([k + 1, f"{e['from']:.1f}", f"{e['to']:.1f}", e["user"], e["server"],
                        f"{e['allocated']:.3f}", f"{e['running']:.3f}"])
    lines += ["", "| fractional entries (user @ server) | windows | allocated, median (range) | "
              "PS-DSF running, median (range) | running / allocated, median (range) |",
              "|---|---|---|---|---|"]
    entries: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for _, e in frac:
        entries.setdefault((e["user"], e["server"]), []).append(e)
    for (user, server), es in sorted(entries.items()):
        lines.append(f"| {user} @ {server} | {len(es)} | "
                     f"{spread([e['allocated'] for e in es], '.2f')} | "
                     f"{spread([e['running'] for e in es], '.2f')} | "
                     f"{spread([e['running'] / e['allocated'] for e in es], '.3f')} |")
    if not entries:
        lines.append("| (none: every entry within 0.1 of a whole task on every window) | | | | |")
    lines += ["", f"| late user | PS-DSF: to 90 % of its allocation (s), median (range) of "
              f"{len(runs)} runs | plain Ray (s) |", "|---|---|---|"]
    for name, pairs in late.items():
        lines.append(f"| {name} | {spread([p for p, _ in pairs], '.1f')} | "
                     f"{spread([q for _, q in pairs], '.1f')} |")
    lines += ["", *overhead_table(over)]
    usage = [u for _, _, u in runs]
    lines += ["", f"Allocator over the PS-DSF phases ({usage[0]['processes']:.0f} processes: "
              "coordinator, 3 server actors, the tenants' queues): "
              f"{spread([u['cpu_per_second'] for u in usage], '.3f')} CPU-seconds per second, "
              f"{max(u['pss_mib'] for u in usage):.0f} MiB PSS in all (largest sample)."]
    return "\n".join(lines)
