"""A late user beside an incumbent whose tasks run for a minute: with preemption and without.

Regenerate (writes ``experiments/results/preemption.md`` and ``preemption.csv``)::

    .venv/bin/python -m experiments run bench_preemption           # 3 runs: ~6 minutes
    .venv/bin/python -m experiments run bench_preemption --runs 1

A local 3-node cluster (``ray.cluster_utils.Cluster``: 4, 4 and 2 CPUs), the allocator with
``servers: from-ray``, ``tenants: true`` and T = 0.5 s.  Per run and mode, an ``incumbent``
submits 30 one-CPU tasks of 60 s — ``preemptible=True`` or not — and fills the 10 CPUs; then
``late`` (the same weight, so a share of 5 tasks) connects with 1-CPU tasks of 0.2 s.  The
measure is the seconds from its connection until it runs 90 % of its share (5 tasks at once:
4.5 rounded up), sampled every 0.1 s, capped at 90 s; and how many of the incumbent's tasks
were stopped.  The incumbent's tasks end early when the phase is over (they poll a release
file), so the next phase starts on an idle cluster.  Target (issue: preemption): <= 10 s with
preemption; without, the share arrives only as the incumbent's tasks end (~60 s).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

import ray

from experiments.common.paths import RESULTS
from experiments.common.ray_cluster import local_cluster
from experiments.common.sim_common import write_atomic, write_csv
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.runtime.launcher import Run, launch
from psdsf_dist.runtime.settings import RunConfig
from psdsf_dist.runtime.tenant import Tenant

RUN_ID = "preemption-bench"
PERIOD = 0.5
LONG_SECONDS = 60.0
INCUMBENT_TASKS = 30
SHARE = 5
"""The late user's share of the 10 CPUs (equal weights, one-CPU tasks)."""
CAP_SECONDS = 90.0
SCENARIO = {"servers": "from-ray", "tenants": True, "resources": ["CPU"]}


def long_task(release: str) -> None:
    """Runs ``LONG_SECONDS``, or until the file ``release`` exists (short sleeps: Ray can
    interrupt it between them)."""
    end = time.time() + LONG_SECONDS
    while time.time() < end and not os.path.exists(release):
        time.sleep(0.01)


def quick_task(_: int = 0) -> None:
    time.sleep(0.2)


def runs_now(t: Tenant) -> int:
    st = t.status()
    return sum(k - st.pipelined.get(n, 0) for n, k in st.running.items())


def phase(run: Run, preemptible: bool) -> dict[str, float]:
    release = Path(tempfile.mkdtemp()) / "release"
    old = Tenant.connect("incumbent", run_id=RUN_ID)
    work = old.remote(num_cpus=1, preemptible=preemptible)(long_task)
    refs = [work.remote(str(release)) for _ in range(INCUMBENT_TASKS)]
    deadline = time.monotonic() + 60.0
    while runs_now(old) < 10 and time.monotonic() < deadline:
        time.sleep(0.1)
    late = Tenant.connect("late", run_id=RUN_ID)
    kept = late.remote(num_cpus=1)(quick_task).map_unordered(range(3000))
    began = time.monotonic()
    took = math.nan
    most = 0
    while time.monotonic() - began < CAP_SECONDS:
        now_running = runs_now(late)
        most = max(most, now_running)
        if now_running >= math.ceil(0.9 * SHARE):
            took = time.monotonic() - began
            break
        time.sleep(0.1)
    allocated = run.user_totals().get("late", math.nan)
    preempted = old.status().preempted
    release.touch()
    late.close()
    del kept
    ray.get(refs, timeout=120)
    failed = old.status().failed
    old.close()
    # most: the late user's most tasks running at once before the target or the cap (with
    # its allocation then), to see how far a run that missed the target got
    return {"seconds": took, "preempted": float(preempted), "failed": float(failed),
            "late_most_running": float(most), "late_allocated": allocated}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    rows: list[dict[str, float]] = []
    with local_cluster({"num_cpus": 4}, {"num_cpus": 4}, {"num_cpus": 2}):
        load = os.getloadavg()[0]
        ray.get([ray.remote(num_cpus=1)(quick_task).remote() for _ in range(30)])  # workers up
        run = launch(SCENARIO, RunConfig(ProtocolConfig(period=PERIOD)), run_id=RUN_ID)
        try:
            for k in range(args.runs):
                for preemptible in (True, False):
                    row = {"run": float(k + 1), "preemptible": float(preemptible),
                           **phase(run, preemptible), "load_1min": os.getloadavg()[0]}
                    rows.append(row)
                    print(row, flush=True)
                    write(rows, load)
        finally:
            run.stop()
    print(report(rows, load))


def write(rows: list[dict[str, float]], load: float) -> None:
    write_csv(RESULTS / "preemption.csv", rows)
    write_atomic(RESULTS / "preemption.md", report(rows, load) + "\n")


def report(rows: list[dict[str, float]], load: float) -> str:
    def cell(preemptible: bool, key: str) -> str:
        vals = [r[key] for r in rows if r["preemptible"] == float(preemptible)]
        done = [v for v in vals if not math.isnan(v)]
        if not done:
            return f">{CAP_SECONDS:g} (all {len(vals)})"
        med = statistics.median(done)
        return (f"{med:.1f} ({min(done):.1f}-{max(done):.1f})"
                + (f", {len(vals) - len(done)} over {CAP_SECONDS:g}" if len(done) < len(vals)
                   else ""))

    runs = len({r["run"] for r in rows})
    loads = ", ".join(f"{r['load_1min']:.1f}" for r in rows)
    return "\n".join([
        "# A late user beside minute-long tasks (`experiments/benchmarks/bench_preemption.py`)",
        "",
        f"Median (range) of {runs} run(s); 3 nodes (4, 4, 2 CPUs), T = {PERIOD} s; the "
        f"incumbent runs {INCUMBENT_TASKS} one-CPU tasks of {LONG_SECONDS:g} s, the late user "
        f"(same weight, share {SHARE} tasks) 0.2 s tasks.  Machine load (1-minute average) at "
        f"the start: {load:.1f}, after each phase: {loads} (2 cores, shared).",
        "",
        "| incumbent's tasks | seconds until the late user runs 90 % of its share | "
        "incumbent tasks preempted | incumbent tasks failed | target |",
        "|---|---|---|---|---|",
        f"| preemptible | {cell(True, 'seconds')} | {cell(True, 'preempted')} | "
        f"{cell(True, 'failed')} | <= 10 s |",
        f"| not preemptible | {cell(False, 'seconds')} | {cell(False, 'preempted')} | "
        f"{cell(False, 'failed')} | (as the tasks end) |",
    ])
