"""What does it cost the jobs that the per-server protocol, not an exact solver, shares the slots?

The allocated job simulator (:mod:`psdsf_dist.jobs.allocated`) can take its allocation from the
certified exact PS-DSF solve, recomputed at every arrival and sub-job completion, or from the
per-server protocol itself (:mod:`psdsf_dist.jobs.protocol_share`): every site a server that
updates its column once per period ``T`` of simulated time on the columns of the period
before, while jobs arrive (users join), run and finish (users leave).  The protocol is then
always a little behind the jobs.  This study measures by how much, on the Facebook trace:

- how often the servers' allocation is PS-DSF for the jobs of the moment (the paper's
  certificate, rtol 1e-3, after each round), and how far from it otherwise (the residual);
- what the jobs see: mean job response and the balance of the jobs' aggregate running tasks
  (the time-average standard deviation over the samples with two or more jobs active, the
  thesis's section 4.6 measure), against the exact solve and against IMF (each site max-min
  fair on its own) measured in the same run.

Cells: the first 2,000 jobs of the Facebook trace (``--jobs``), seed 1, utilisation 60 %, two
available sites per task, one Pareto duration per job (as the report's section 8), Zipf skews
0, 1, 2; the protocol with the default rule (``split``) at periods of 0.125 to 4 s (tasks
last 2 s on average).  The time from a job's arrival to its first task's start shows the
protocol's own delay: a job that arrives holds no slots until the servers' next round, and
the deployment rule gives a free slot to a job allocated nothing there last.
``results/protocol_jobs.{csv,md}`` and ``protocol_jobs.png``.

    .venv/bin/python -m experiments run protocol_jobs [--jobs 2000] [--workers 2]
"""

from __future__ import annotations

import argparse
import functools
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from experiments.common.guan_traces import FACEBOOK, trace_named
from experiments.common.paths import RESULTS
from experiments.common.processes import run_parallel
from experiments.common.repro_common import figure
from experiments.common.sim_common import table, write_atomic, write_csv
from psdsf_dist.jobs.allocated import IMF, PROTOCOL, simulate_allocated
from psdsf_dist.jobs.metrics import summary
from psdsf_dist.jobs.workload import build_workload
from psdsf_dist.protocol.config import ProtocolConfig

NAME = "protocol_jobs"
JOBS = 2000
SEED = 1
UTILISATION = 0.6
AVAILABLE = 2
ZIPFS = (0.0, 1.0, 2.0)
PERIODS = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0)
EXACT = "psdsf"


@dataclass(frozen=True)
class Cell:
    zipf: float
    policy: str
    period: float | None = None

    @property
    def label(self) -> str:
        if self.policy == PROTOCOL:
            return f"protocol T={self.period:g} s"
        return "PS-DSF exact" if self.policy == EXACT else "IMF"


def cells() -> list[Cell]:
    return [c for z in ZIPFS for c in (Cell(z, EXACT), Cell(z, IMF),
                                       *(Cell(z, PROTOCOL, T) for T in PERIODS))]


def run_cell(jobs: int, c: Cell) -> tuple[Cell, dict[str, Any]]:
    w = build_workload(trace_named(FACEBOOK, jobs), zipf=c.zipf, utilisation=UTILISATION,
                       seed=SEED, available=AVAILABLE, pareto_per="job")
    t0, cpu = time.perf_counter(), time.process_time()
    cfg = ProtocolConfig(period=c.period) if c.period is not None else None
    r = simulate_allocated(w, c.policy, protocol=cfg)
    m = summary(r.run, w)
    std = r.sample_job_std[r.sample_active >= 2]
    task_job = np.repeat(w.row_job, w.row_tasks)
    first = np.full(w.num_jobs, np.inf)
    np.minimum.at(first, task_job, r.run.task_start)
    res = r.residuals
    return c, {"zipf": c.zipf, "policy": c.label, "period_s": c.period or "",
               "mean_response_s": m["mean_response_s"],
               "mean_std": float(std.mean()) if len(std) else 0.0,
               "first_start_s": float(np.mean(first - w.submit)),
               "rounds": r.rounds, "certified_fraction":
                   r.certified_rounds / r.rounds if r.rounds else "",
               "median_residual": float(np.median(res)) if len(res) else "",
               "p90_residual": float(np.quantile(res, 0.9)) if len(res) else "",
               "changes": r.solves, "jobs": w.num_jobs, "tasks": w.num_tasks,
               "cpu_seconds": time.process_time() - cpu,
               "seconds": time.perf_counter() - t0}


def report(rows: list[dict[str, Any]], jobs: int, minutes: float) -> str:
    exact = {r["zipf"]: r for r in rows if r["policy"] == "PS-DSF exact"}
    body = []
    for r in rows:
        e = exact[r["zipf"]]
        cert = r["certified_fraction"]
        body.append([f"{r['zipf']:g}", r["policy"], f"{r['mean_response_s']:.2f}",
                     f"{r['mean_response_s'] / e['mean_response_s']:.3f}",
                     f"{r['mean_std']:.2f}", f"{r['mean_std'] / e['mean_std']:.3f}",
                     f"{r['first_start_s']:.2f}",
                     "-" if cert == "" else f"{r['rounds']:,}",
                     "-" if cert == "" else f"{100 * cert:.0f} %",
                     "-" if cert == "" else f"{r['median_residual']:.2g}",
                     f"{r['cpu_seconds']:.1f}"])
    return "\n".join([
        "## The per-server protocol sharing a job trace's slots",
        "",
        "Regenerate with `.venv/bin/python -m experiments run protocol_jobs` (see its "
        f"docstring).  The first {jobs:,} Facebook jobs, seed 1, utilisation 60 %, two sites "
        "per task; *vs exact*: the ratio to the exact PS-DSF solve's figure in the same "
        "skew; *certified*: the share of the protocol's rounds after which its allocation "
        "was PS-DSF for the jobs of that moment (rtol 1e-3); *residual*: the certificate's "
        "median residual over the rounds (0 when certified); *first task s*: mean time from a "
        "job's arrival to its first task's start.",
        "",
        table(["skew", "allocation", "mean resp s", "vs exact", "balance (std)", "vs exact",
               "first task s", "rounds", "certified", "residual", "CPU s"], body),
        "",
        f"CPU time of the runs: {minutes:.1f} min.",
        "",
    ])


def plot(rows: list[dict[str, Any]]) -> str:
    fig, axes = figure(1, 2, 3.8)
    a, b = axes[0]
    for z, marker in zip(ZIPFS, "osD^v", strict=False):
        prot = sorted((r for r in rows if r["zipf"] == z and r["period_s"] != ""),
                      key=lambda r: r["period_s"])
        exact = next(r for r in rows if r["zipf"] == z and r["policy"] == "PS-DSF exact")
        imf = next(r for r in rows if r["zipf"] == z and r["policy"] == "IMF")
        T = [r["period_s"] for r in prot]
        a.plot(T, [100 * r["certified_fraction"] for r in prot], marker=marker,
               label=f"Zipf skew {z:g}")
        line = b.plot(T, [r["mean_response_s"] / exact["mean_response_s"] for r in prot],
                      marker=marker, label=f"protocol, skew {z:g}")
        b.axhline(imf["mean_response_s"] / exact["mean_response_s"], ls=":",
                  color=line[0].get_color(), label=f"IMF, skew {z:g}")
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.set_xticks(PERIODS, [f"{T:g}" for T in PERIODS])
        ax.set_xlabel("protocol period T (s; tasks last 2 s on average)")
    a.set_ylabel("rounds ending PS-DSF (%)")
    a.set_title("How often the protocol's allocation is PS-DSF")
    b.axhline(1.0, color="black", lw=0.8)
    b.set_ylabel("mean job response / exact PS-DSF's")
    b.set_title("What the jobs see")
    a.legend(fontsize=8)
    b.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = RESULTS / f"{NAME}.png"
    fig.savefig(path, dpi=110)
    return path.name


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--jobs", type=int, default=JOBS)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    began = time.perf_counter()
    done = dict(run_parallel(functools.partial(run_cell, args.jobs), cells(),
                             workers=args.workers))
    rows = [done[c] for c in cells()]
    write_csv(RESULTS / f"{NAME}.csv", rows)
    md = report(rows, args.jobs, sum(r["cpu_seconds"] for r in rows) / 60)
    write_atomic(RESULTS / f"{NAME}.md", md)
    plot(rows)
    print(md)
    print(f"({time.perf_counter() - began:.0f} s)")


if __name__ == "__main__":
    main()
