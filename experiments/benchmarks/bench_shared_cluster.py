"""Shares that hold on a shared cluster, against plain Ray in the same run.

PS-DSF with a tenant policy: a greedy weight, forged calls, an intruder placed first and one
arriving.

Regenerate (writes ``experiments/results/shared_cluster.md`` and ``shared_cluster.csv``)::

    .venv/bin/python -m experiments run bench_shared_cluster           # 3 runs: ~10 minutes
    .venv/bin/python -m experiments run bench_shared_cluster --runs 1  # ~4 minutes

A local 3-node cluster (``ray.cluster_utils.Cluster``: 4, 4 and 2 CPUs), the allocator with
``servers: from-ray``, ``tenants: true``, T = 0.5 s and a ``tenant_policy`` declaring
``honest``, ``greedy`` and ``etl`` with weight 1 (unknown tenants refused); tenants connect
with the tokens the run issues.  Every task is 1 CPU and sleeps 0.2 s; each tenant submits
more than it can run in the phase.  Per run:

* **greedy**: ``honest`` (weight as declared) and ``greedy`` (asks for weight 1000) for
  ``--window`` seconds: each one's allocated tasks (the coordinator's, sampled every 0.25 s)
  and running tasks (its queue's, tasks waiting at a node excluded), time averages; the
  target is greedy / honest allocation = 1 +- 5 %.
* **forged**: the same two, while a second driver without tokens sends, every 0.5 s, a
  ``tenant_report`` for ``honest`` with weight 1e-15, a ``tenant_leave`` for ``honest`` and a
  ``tenant_report`` for a phantom ``mallory`` with weight 1e15 and 10^9 tasks: how many were
  refused, and ``honest``'s running tasks against its allocation during the forgery.
* **intruder**: another driver (plain Ray, no tenant) places four 1-CPU actors holding all
  of a 4-CPU node while the tenants are idle; then ``honest`` and ``etl`` connect and
  submit: periods from their connection until their allocation leaves those CPUs out, then
  each tenant's running / allocated and allocation over ``--window`` seconds (target >= 0.9
  each, 3 / 3).
* **arriving intruder**: ``honest`` and ``etl`` keep every CPU busy; then the other driver
  pins four 1-CPU actors to a 4-CPU node.  Ray places each between two of the tenants' tasks
  there; for each placed actor, the periods from its placement (the driver's clock) until the
  tenants' allocation (sampled every 0.1 s) leaves its CPU out (target <= 3), and how long
  Ray took to place all four.
* **plain Ray**: the same two users' tasks and the same intruder under Ray's own scheduler
  (no allocator): each user's running tasks over the same window, for reference.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from experiments.common.intruder import Intruder
from experiments.common.paths import RESULTS
from experiments.common.ray_cluster import local_cluster
from experiments.common.sim_common import write_csv
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.runtime.launcher import Run, launch
from psdsf_dist.runtime.settings import RunConfig
from psdsf_dist.runtime.tenant import Tenant

RUN_ID = "shared-bench"
PERIOD = 0.5
TASK_SECONDS = 0.2
TASKS = 800
KEPT: list[Any] = []
"""Tasks each tenant submits in a phase (more than it runs in one)."""
POLICY = {"unknown": "refuse", "tenants": [{"name": "honest", "weight": 1},
                                           {"name": "greedy", "weight": 1},
                                           {"name": "etl", "weight": 1}]}
SCENARIO = {"servers": "from-ray", "tenants": True, "resources": ["CPU"],
            "tenant_policy": POLICY}


def sleep_task(_: int = 0) -> None:
    time.sleep(TASK_SECONDS)


class Hog:
    """A plain-Ray actor holding its CPUs until killed."""

    def ready(self) -> bool:
        return True


def runs_now(t: Tenant) -> int:
    st = t.status()
    return sum(k - st.pipelined.get(n, 0) for n, k in st.running.items())


class Sampler:
    """Allocation (the coordinator's) and running tasks (each queue's) per tenant, every
    0.25 s, each source in a thread of its own (a busy queue answers late: the allocation is
    still sampled)."""

    def __init__(self, run: Run, tenants: dict[str, Tenant]) -> None:
        self.run, self.tenants = run, tenants
        self.alloc: list[tuple[float, dict[str, float]]] = []
        self.running: dict[str, list[tuple[float, int]]] = {u: [] for u in tenants}
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._poll, args=(self._alloc,), daemon=True),
                        *(threading.Thread(target=self._poll, args=(self._runs(u),),
                                           daemon=True) for u in tenants)]
        for t in self.threads:
            t.start()

    def _alloc(self) -> None:
        self.alloc.append((time.monotonic(), self.run.user_totals()))

    def _runs(self, user: str) -> Any:
        def sample() -> None:
            self.running[user].append((time.monotonic(), runs_now(self.tenants[user])))
        return sample

    def _poll(self, sample: Any) -> None:
        while not self.stop.is_set():
            try:
                sample()
            except Exception as err:  # a slow answer: skip the sample
                self.errors.append(f"{type(err).__name__}: {err}"[:200])
            time.sleep(0.25)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()

    def means(self, since: float) -> dict[str, tuple[float, float]]:
        """user -> (mean allocated, mean running) over the samples since ``since`` (NaN
        without a sample)."""
        out: dict[str, tuple[float, float]] = {}
        for u in self.tenants:
            a = [x.get(u, 0.0) for t, x in self.alloc if t >= since]
            r = [float(k) for t, k in self.running[u] if t >= since]
            out[u] = (statistics.fmean(a) if a else math.nan,
                      statistics.fmean(r) if r else math.nan)
        return out


def connect(run: Run, *users: tuple[str, float | None]) -> list[Tenant]:
    """Connect the tenants (their queues up), then submit each one's tasks: one message
    each (closing a tenant drops what is left)."""
    tenants = [Tenant.connect(u, weight=w, run_id=RUN_ID, token=run.tenant_token(u))
               for u, w in users]
    works = [t.remote(num_cpus=1)(sleep_task) for t in tenants]
    # the streams are kept (a dropped one may end its submission)
    KEPT[:] = [work.map_unordered(range(TASKS)) for work in works]
    return tenants


def wait_for(what: Any, seconds: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if what():
            return time.monotonic() - start
        time.sleep(0.05)
    return None


def greedy_phase(run: Run, window: float) -> dict[str, float]:
    honest, greedy = connect(run, ("honest", None), ("greedy", 1000.0))
    sampler = Sampler(run, {"honest": honest, "greedy": greedy})
    try:
        time.sleep(4 * PERIOD)  # both in
        since = time.monotonic()
        time.sleep(window)
        m = sampler.means(since)
    finally:
        sampler.close()
        honest.close()
        greedy.close()
    return {"greedy_alloc": m["greedy"][0], "honest_alloc": m["honest"][0],
            "greedy_running": m["greedy"][1], "honest_running": m["honest"][1],
            "alloc_ratio": m["greedy"][0] / max(m["honest"][0], 1e-9)}


FORGER = """
import time, ray
from psdsf_dist.runtime.names import NAMESPACE, coordinator_name
ray.init(address={address!r}, log_to_driver=False)
c = ray.get_actor(coordinator_name({run!r}), namespace=NAMESPACE)
refused = sent = 0
end = time.monotonic() + {seconds!r}
while time.monotonic() < end:
    for user, weight, backlog in (("honest", 1e-15, 50), ("mallory", 1e15, 10**9)):
        reply = ray.get(c.tenant_report.remote(user, {{"CPU": 1.0}}, weight, backlog))
        sent += 1
        refused += reply.error is not None and "refused" in reply.error
    ray.get(c.tenant_leave.remote("honest"))
    time.sleep(0.5)
print("forged", sent, refused, flush=True)
"""


def forged_phase(run: Run, address: str, window: float) -> dict[str, float]:
    honest, greedy = connect(run, ("honest", None), ("greedy", None))
    sampler = Sampler(run, {"honest": honest, "greedy": greedy})
    try:
        time.sleep(4 * PERIOD)
        before = time.monotonic()
        time.sleep(window / 2)
        m0 = sampler.means(before)
        during = time.monotonic()
        out = subprocess.run([sys.executable, "-c", FORGER.format(
            address=address, run=RUN_ID, seconds=window)], capture_output=True, text=True,
            timeout=300, env=os.environ.copy())
        m1 = sampler.means(during)
        present = "mallory" in run.status()["present_users"]
    finally:
        sampler.close()
        honest.close()
        greedy.close()
    words = next((line.split() for line in out.stdout.splitlines()
                  if line.startswith("forged")), ["forged", "0", "0"])
    return {"forged_sent": float(words[1]), "forged_refused": float(words[2]),
            "honest_alloc_before": m0["honest"][0], "honest_running_before": m0["honest"][1],
            "honest_alloc_during": m1["honest"][0], "honest_running_during": m1["honest"][1],
            "phantom_present": float(present)}


def intruder_node() -> str:
    nodes: Any = ray.nodes
    return str(next(n["NodeID"] for n in nodes() if n["Alive"]
                    and n["Resources"].get("CPU") == 4
                    and "node:__internal_head__" not in n["Resources"]))


def hog_on(node: str, cpus: int = 4) -> list[Any]:
    """``cpus`` 1-CPU plain-Ray actors on ``node``, once placed (one 4-CPU actor would wait
    for 4 CPUs free at once, which a busy node rarely has: Ray does not reserve them)."""
    hogs: list[Any] = [ray.remote(num_cpus=1)(Hog).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
        for _ in range(cpus)]
    ray.get([h.ready.remote() for h in hogs], timeout=300)
    return hogs


def intruder_phase(run: Run, address: str, window: float) -> dict[str, float]:
    """The intruder first (placed while the tenants are idle), then the tenants: periods from
    their connection until their allocation leaves the intruder's CPUs out, then each one's
    running / allocated.  (Placed while the tenants keep every CPU busy, Ray gives the
    intruder no CPU until their backlog drains: docs/tenants.md.)"""
    hog = Intruder(address, intruder_node())
    if wait_for(lambda: len(hog.placed) == hog.cpus, 300.0) is None:
        raise RuntimeError("the intruder's actors were not placed in 300 s")
    honest, etl = connect(run, ("honest", None), ("etl", None))
    began = time.monotonic()
    sampler = Sampler(run, {"honest": honest, "etl": etl})
    try:
        total = 10.0 - 4.0

        def excluded() -> bool:
            got = run.user_totals()
            return abs(got.get("honest", 0.0) + got.get("etl", 0.0) - total) < 0.05

        took = wait_for(excluded, 60.0)
        took = None if took is None else time.monotonic() - began
        since = time.monotonic()
        time.sleep(window)
        m = sampler.means(since)
        unmanaged = sum(u.get("CPU", 0.0) for u in run.status()["unmanaged"].values())
    finally:
        sampler.close()
        hog.close()
        honest.close()
        etl.close()
    out = {"exclude_periods": float("nan") if took is None else took / PERIOD,
           "unmanaged_cpu": unmanaged}
    for u in ("honest", "etl"):
        out[f"intruder_{u}_alloc"], out[f"intruder_{u}_running"] = m[u]
        out[f"intruder_{u}_ratio"] = m[u][1] / max(m[u][0], 1e-9)
    return out


def arriving_phase(run: Run, address: str, window: float) -> dict[str, float]:
    """The intruder arrives while ``honest`` and ``etl`` keep every CPU busy: per placed
    actor, the periods from its placement until the tenants' allocation leaves its CPU out,
    and the seconds Ray took to place all four (NaN: not within the phase)."""
    honest, etl = connect(run, ("honest", None), ("etl", None))
    totals: list[tuple[float, float]] = []
    try:
        def saturated() -> bool:
            got = run.user_totals()
            return abs(got.get("honest", 0.0) + got.get("etl", 0.0) - 10.0) < 0.05

        if wait_for(saturated, 60.0) is None:
            raise RuntimeError("the tenants did not fill the cluster in 60 s")
        time.sleep(4 * PERIOD)
        hog = Intruder(address, intruder_node())
        began = time.time()
        try:
            end = began + window + 45.0
            while time.time() < end and (len(hog.placed) < hog.cpus
                                         or time.time() < hog.placed[-1] + 6 * PERIOD):
                got = run.user_totals()
                totals.append((time.time(), got.get("honest", 0.0) + got.get("etl", 0.0)))
                time.sleep(0.1)
        finally:
            hog.close()
    finally:
        honest.close()
        etl.close()
    delays = []
    for k, placed in enumerate(hog.placed, start=1):
        left_out = next((t for t, total in totals if t >= placed and total <= 10 - k + 0.05),
                        None)
        delays.append(math.inf if left_out is None else (left_out - placed) / PERIOD)
    all_placed = hog.placed[-1] - began if len(hog.placed) == hog.cpus else math.nan
    return {"arriving_placed": float(len(hog.placed)), "arriving_all_placed_s": all_placed,
            "arriving_median_periods": statistics.median(delays) if delays else math.nan,
            "arriving_max_periods": max(delays) if delays else math.nan}


def timed_task() -> tuple[float, float]:
    began = time.time()
    time.sleep(TASK_SECONDS)
    return began, time.time()


def plain_phase(window: float) -> dict[str, float]:
    """The two users' tasks and the intruder under plain Ray: each user's mean running tasks
    over the window, from the tasks' own start and end times."""
    task = ray.remote(num_cpus=1)(timed_task)
    refs: dict[str, list[Any]] = {"honest": [], "etl": []}
    count = int(2 * 10 * (window + 10) / TASK_SECONDS)  # more than the phase can run
    for _ in range(count // 2):
        for u in refs:
            refs[u].append(task.remote())
    time.sleep(3.0)
    hog = hog_on(intruder_node())
    time.sleep(2.0)
    a = time.time()
    time.sleep(window)
    b = time.time()
    for h in hog:
        ray.kill(h)
    time.sleep(2 * TASK_SECONDS)  # the tasks running at the window's end have ended
    out: dict[str, float] = {}
    for u, rs in refs.items():
        ready, rest = ray.wait(rs, num_returns=len(rs), timeout=0)
        for r in rest:
            ray.cancel(r)
        busy = 0.0
        for began, ended in ray.get(ready):
            busy += max(0.0, min(ended, b) - max(began, a))
        out[f"plain_{u}_running"] = busy / (b - a)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--window", type=float, default=15.0,
                    help="seconds each phase is measured over")
    args = ap.parse_args(argv)
    rows: list[dict[str, float]] = []
    with local_cluster({"num_cpus": 4}, {"num_cpus": 4}, {"num_cpus": 2}) as cluster:
        load = os.getloadavg()[0]
        # workers on every CPU first: neither the first tenant queue nor the first phase
        # pays Ray's worker start-up
        ray.get([ray.remote(num_cpus=1)(sleep_task).remote() for _ in range(30)])
        for k in range(args.runs):
            run = launch(SCENARIO, RunConfig(ProtocolConfig(period=PERIOD)), run_id=RUN_ID)
            try:
                row: dict[str, float] = {"run": float(k + 1)}
                print(f"run {k + 1}: greedy", flush=True)
                row |= greedy_phase(run, args.window)
                print(f"run {k + 1}: forged", flush=True)
                row |= forged_phase(run, cluster.address, args.window)
                print(f"run {k + 1}: intruder", flush=True)
                row |= intruder_phase(run, cluster.address, args.window)
                print(f"run {k + 1}: arriving intruder", flush=True)
                row |= arriving_phase(run, cluster.address, args.window)
            finally:
                run.stop()
            print(f"run {k + 1}: plain Ray", flush=True)
            row |= plain_phase(args.window)
            row["load_1min"] = os.getloadavg()[0]
            rows.append(row)
            print(row, flush=True)
            write(rows, load)  # after every run: a long benchmark keeps what it measured
    print(report(rows, load))


def write(rows: list[dict[str, float]], load: float) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_csv(RESULTS / "shared_cluster.csv",
              [{k: f"{v:.6g}" for k, v in r.items()} for r in rows])
    (RESULTS / "shared_cluster.md").write_text(report(rows, load) + "\n")


def med(rows: list[dict[str, float]], key: str, fmt: str = ".2f") -> str:
    values = [r[key] for r in rows]
    return (f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})")


def report(rows: list[dict[str, float]], load: float) -> str:
    n = len(rows)
    after = ", ".join(f"{r['load_1min']:.1f}" for r in rows)
    lines = [
        "# Shares on a shared cluster (`experiments/benchmarks/bench_shared_cluster.py`)",
        "",
        f"Median (range) of {n} run(s); 3 nodes (4, 4, 2 CPUs), T = {PERIOD} s, 1-CPU tasks of "
        f"{TASK_SECONDS} s. Machine load (1-minute average) at the start: {load:.1f}, after "
        f"each run: {after} (2 cores, shared).",
        "",
        "| measure | value | target |",
        "|---|---|---|",
        f"| greedy (asks 1000, operator 1) / honest allocation | {med(rows, 'alloc_ratio', '.3f')}"
        " | 1 +- 0.05 |",
        f"| greedy allocated / running tasks | {med(rows, 'greedy_alloc')} / "
        f"{med(rows, 'greedy_running')} | |",
        f"| honest allocated / running tasks | {med(rows, 'honest_alloc')} / "
        f"{med(rows, 'honest_running')} | |",
        f"| forged calls sent / refused | {med(rows, 'forged_sent', '.0f')} / "
        f"{med(rows, 'forged_refused', '.0f')} | all refused |",
        f"| honest allocated / running, before forgery | {med(rows, 'honest_alloc_before')} / "
        f"{med(rows, 'honest_running_before')} | |",
        f"| honest allocated / running, during forgery | {med(rows, 'honest_alloc_during')} / "
        f"{med(rows, 'honest_running_during')} | unaffected |",
        f"| phantom tenant present after forgery (0/1) | {med(rows, 'phantom_present', '.0f')}"
        " | 0 |",
        "| intruder (4 CPUs, placed first) left out of the tenants' allocation after (periods "
        f"from their connection) | "
        f"{med(rows, 'exclude_periods', '.1f')} | <= 3 |",
        f"| unmanaged CPU reported | {med(rows, 'unmanaged_cpu')} | 4 |",
        f"| honest running / allocated with the intruder | "
        f"{med(rows, 'intruder_honest_ratio', '.3f')} |"
        " >= 0.9 |",
        f"| etl running / allocated with the intruder | "
        f"{med(rows, 'intruder_etl_ratio', '.3f')} |"
        " >= 0.9 |",
        f"| honest / etl allocated with the intruder | {med(rows, 'intruder_honest_alloc')} / "
        f"{med(rows, 'intruder_etl_alloc')} | 3 / 3 |",
        "| intruder arriving while the tenants keep every CPU busy: actors placed (of 4) / "
        f"seconds Ray took to place all | {med(rows, 'arriving_placed', '.0f')} / "
        f"{med(rows, 'arriving_all_placed_s', '.1f')} | |",
        "| each placed actor's CPU left out of the tenants' allocation after (periods from its "
        f"placement): median / largest | {med(rows, 'arriving_median_periods', '.1f')} / "
        f"{med(rows, 'arriving_max_periods', '.1f')} | <= 3 |",
        f"| plain Ray with the intruder: honest / etl running | "
        f"{med(rows, 'plain_honest_running')} / {med(rows, 'plain_etl_running')} | |",
    ]
    return "\n".join(lines)
