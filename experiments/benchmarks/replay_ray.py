"""Replay a scaled-down job trace on real Ray through the tenants API, beside the simulator.

The first ``--jobs`` jobs of the Facebook 2010 SWIM trace (``../shared/data/swim``) are built
into a workload as the job simulator does (:func:`psdsf_dist.jobs.workload.build_workload`):
one site per Ray node, every task runnable on any node (``available`` = all sites, so no
placement constraint the tenants API cannot express), Pareto durations of mean ``--mean`` s,
submit times scaled to an offered load of ``--utilisation``.  The same workload then runs

* in the simulator (FIFO order, one task per slot), its prediction;
* on a local ``ray.cluster_utils.Cluster`` (``--nodes`` nodes of ``--slots`` CPUs) under the
  allocator (``cluster_configs/tenants.yaml``): one tenant submits each job at its scaled
  submit time with ``map_unordered`` (one message per job) of 1-CPU tasks that sleep their
  duration; a job's response time ends when its last value arrives.

A second prediction states the one constant cost modelled: every task holds its slot for its
duration plus the launch latency measured in the same run (single 10 ms tasks, submit to
value, less 10 ms).  ``--runs`` replays (default 3) run on one cluster, each under a fresh
allocator, and the table gives each and the median ratio.  Writes
``experiments/results/replay_ray.{md,csv,png}``.  The Ray cluster
is a private one (``Cluster``): it never joins another Ray on the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import threading
import time
from typing import Any

import numpy as np

from experiments.common.paths import CLUSTER_CONFIGS, RESULTS, SWIM_FB2010
from experiments.common.ray_cluster import local_cluster
from experiments.common.sim_common import table, write_csv
from psdsf_dist.jobs.simulator import simulate_jobs
from psdsf_dist.jobs.workload import Trace, Workload, build_workload, load_trace
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.runtime.launcher import launch
from psdsf_dist.runtime.settings import RunConfig
from psdsf_dist.runtime.tenant import Tenant

SCENARIO = CLUSTER_CONFIGS / "tenants.yaml"
SWIM = SWIM_FB2010
RUN_ID = "replay"
PROBES = 7


def head(trace: Trace, jobs: int, max_tasks: int) -> Trace:
    """The first ``jobs`` jobs, each cut to at most ``max_tasks`` tasks (the scale-down)."""
    keep = np.arange(min(jobs, trace.num_jobs))
    return Trace(trace.source, tuple(trace.job_names[i] for i in keep),
                 tuple(trace.job_users[i] for i in keep), trace.submit[keep],
                 np.arange(len(keep), dtype=np.int64),
                 np.minimum(trace.row_tasks[keep], max_tasks),
                 ((),) * len(keep), np.full(len(keep), np.nan))


def sleep_task(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def replay_once(w: Workload, submit: np.ndarray, per_job: list[list[float]],
                slots: int) -> tuple[float, np.ndarray]:
    """One replay under a fresh allocator: (launch latency, each job's response time)."""
    run = launch(SCENARIO, RunConfig(ProtocolConfig(period=1.0)), run_id=RUN_ID)
    finish = np.full(len(per_job), np.nan)
    try:
        tenant = Tenant.connect("replay", run_id=RUN_ID)
        fn = tenant.remote(num_cpus=1, memory=2**28)(sleep_task)
        list(fn.map([0.01] * slots))  # workers started before the clock
        probes = []
        for _ in range(PROBES):  # one task alone: submit to value, less its 10 ms of sleep
            a = time.perf_counter()
            list(fn.map([0.01]))
            probes.append(time.perf_counter() - a - 0.01)
        t0 = time.time()

        def job(j: int) -> None:
            delay = t0 + float(submit[j]) - time.time()
            if delay > 0:
                time.sleep(delay)
            list(fn.map_unordered(per_job[j]))
            finish[j] = time.time() - t0

        threads = [threading.Thread(target=job, args=(j,)) for j in range(len(per_job))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        tenant.close()
    finally:
        run.stop()
    return float(np.median(probes)), finish - submit


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--max-tasks", type=int, default=8)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--mean", type=float, default=1.0)
    ap.add_argument("--utilisation", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3, help="replays on Ray (default: 3)")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()[0]
    trace = head(load_trace(SWIM), args.jobs, args.max_tasks)
    w = build_workload(trace, sites=args.nodes, slots=args.slots, available=args.nodes,
                       utilisation=args.utilisation, mean=args.mean, seed=args.seed)
    sim = simulate_jobs(w, "swag", order="fifo")
    submit = w.submit - w.submit[0]
    starts = np.searchsorted(w.row_job, np.arange(w.num_jobs + 1))
    per_job = [w.durations[w.row_offset[starts[j]]:
                           w.row_offset[starts[j]] + int(w.row_tasks[starts[j]:starts[j + 1]]
                                                          .sum())].tolist()
               for j in range(w.num_jobs)]

    runs: list[tuple[float, np.ndarray]] = []
    node = {"num_cpus": args.slots, "memory": 4 * 2**30}
    with local_cluster(*([node] * args.nodes)):
        for _ in range(args.runs):
            runs.append(replay_once(w, submit, per_job, args.nodes * args.slots))
    sim_resp = sim.response
    ms = float(np.median(sim_resp))
    rows: list[dict[str, object]] = []
    body: list[list[str]] = []
    lats = []
    for r, (launch_s, ray_resp) in enumerate(runs, start=1):
        # the stated model: every task holds its slot for its duration plus the launch latency
        lat = simulate_jobs(dataclasses.replace(w, durations=w.durations + launch_s), "swag",
                            order="fifo").response
        lats.append(lat)
        rows += [{"run": r, "job": w.job_names[j], "submit_s": submit[j],
                  "tasks": len(per_job[j]), "work_s": sum(per_job[j]),
                  "launch_s": launch_s, "sim_response_s": sim_resp[j],
                  "sim_with_launch_s": lat[j], "ray_response_s": ray_resp[j]}
                 for j in range(w.num_jobs)]
        mr, ml = float(np.median(ray_resp)), float(np.median(lat))
        body.append([str(r), f"{launch_s * 1000:.0f}", f"{ms:.2f}", f"{ml:.2f}", f"{mr:.2f}",
                     f"{mr / ms:.2f}", f"{mr / ml:.2f}"])
    ratios = [float(np.median(rr)) / ms for _, rr in runs]
    ratios_l = [float(np.median(rr)) / float(np.median(lt))
                for (_, rr), lt in zip(runs, lats, strict=True)]
    body.append(["median of runs", "", f"{ms:.2f}", "", "", f"{np.median(ratios):.2f}",
                 f"{np.median(ratios_l):.2f}"])
    RESULTS.mkdir(exist_ok=True)
    write_csv(RESULTS / "replay_ray.csv", rows)  # tables before the plot: a plot error loses none
    md = "\n".join([
        f"{w.num_jobs} jobs of the Facebook 2010 trace (at most {args.max_tasks} tasks each), "
        f"{args.nodes} nodes x {args.slots} CPUs, Pareto durations mean {args.mean:g} s, "
        f"offered load {args.utilisation:g}, seed {args.seed}; {args.runs} replays on one Ray "
        f"cluster, each under a fresh allocator; load average before the first: {load_before:.1f}.",
        "",
        "Median job response time (s) per replay:",
        "",
        table(["replay", "launch (ms)", "simulator", "simulator + launch", "Ray (tenants)",
               "Ray / simulator", "Ray / simulator + launch"], body),
        "",
        f"Launch latency: median of {PROBES} single 10 ms tasks, submit to value, less 10 ms, "
        "measured before each replay; the second prediction adds it to every task's duration "
        "(the task holds its CPU lease from submit to value).",
    ])
    (RESULTS / "replay_ray.md").write_text(md + "\n")
    print(md)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    curves: list[tuple[str, np.ndarray, dict[str, Any]]] = [
        ("simulator", sim_resp, {"color": "black", "lw": 2.5}),
        ("simulator + launch latency (replay 1)", lats[0], {"color": "grey", "ls": "--", "lw": 2})]
    curves += [(f"Ray (tenants API), replay {i}", rr, {"lw": 1})
               for i, (_, rr) in enumerate(runs, start=1)]
    for name, resp, style in curves:
        x = np.sort(resp)
        ax.plot(x, np.arange(1, len(x) + 1) / len(x), label=name, **style)
    ax.set_xlabel("job response time (s)")
    ax.set_ylabel("CDF of jobs")
    ax.set_title(f"Replay: {w.num_jobs} Facebook 2010 jobs, scaled", fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "replay_ray.png", dpi=110)
