"""Guan thesis chapters 4-5: AMF and GAMF against IMF on jobs over time (Figs. 4.3-4.7, 5.1-5.4).

Sections 4.6-4.7 and 5.5-5.6 of the thesis: jobs of a trace arrive at 10 sites of 20 slots,
each task needs one slot, each job's tasks are spread over the sites by a Zipf law (skew 0-2)
over a random permutation of the sites, arrivals are scaled to a target utilisation, and the
slots are shared among the active jobs by an allocation policy recomputed when a job arrives or
completes its tasks at a site (:func:`psdsf_dist.jobs.allocated.simulate_allocated`; the
deployment rule of section 4.5.3 starts the tasks).  Policies: IMF (max-min fairness at each
site on its own, the baseline), AMF and SIG-AMF (``amf``, ``amf-si``), each basic and optimized
(Algorithm 6), and in chapter 5, with 2 available sites per task, GAMF and SIG-GAMF (``gamf``,
``gamf-si``, optimized by Algorithm 8) beside the AMF policies, which keep each task at its
associated site.  Metrics: the standard deviation of the active jobs' aggregate running tasks,
sampled over time (its distribution: Figs. 4.3-4.5, 5.1-5.2), and the mean job response time
(Figs. 4.6-4.7, 5.3-5.4).

Traces (``experiments.common.guan_traces``): the Facebook 2010 trace the thesis uses
(``../shared/data/swim``, one task per GB, Pareto durations of shape 1.259 and mean 2 s drawn
per job); and a **synthetic** stand-in for the thesis's Google segment, which is not available
here (2,944 jobs, 48,504 tasks over 60 minutes, lognormal task counts and durations of the
stated mean 1,374.7 s).
Each policy call is a linear-program filling, so a run takes the first :data:`JOBS` jobs of a
trace (the thesis does not say how long its runs were).  Balance is measured while jobs
compete: over the samples with two or more active jobs.

``--quick``: the first 60 jobs, skews 0 and 2, utilisation 60 % only.  Results:
``report/guan_amf.csv`` and five figures ``report/guan_amf_*.png``.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from experiments.common.guan_traces import FACEBOOK, GOOGLE, trace_named
from experiments.common.processes import run_parallel
from experiments.common.repro_common import Section, figure, save, save_csv, section_main
from experiments.common.sim_common import table
from psdsf_dist.jobs.allocated import simulate_allocated
from psdsf_dist.jobs.metrics import summary
from psdsf_dist.jobs.workload import Trace, build_workload

JOBS = 200
QUICK_JOBS = 60
SEED = 1


@dataclass(frozen=True)
class Policy:
    label: str
    name: str
    optimized: bool = False


CH4 = (Policy("IMF", "imf"), Policy("AMF", "amf"), Policy("AMF optimized", "amf", True),
       Policy("SIG-AMF", "amf-si"), Policy("SIG-AMF optimized", "amf-si", True))
AMF_FAMILY = CH4[1:]
CH5 = (*AMF_FAMILY, Policy("GAMF", "gamf"), Policy("GAMF optimized", "gamf", True),
       Policy("SIG-GAMF", "gamf-si"), Policy("SIG-GAMF optimized", "gamf-si", True))
PROTOCOL_POLICIES = (Policy("PS-DSF exact", "psdsf"), Policy("protocol", "protocol"))
"""The exact PS-DSF solve and the per-server protocol (default settings: T = 1 s, rule split)
sharing the Facebook trace's slots (the synthetic Google trace's tasks last ~1,400 s: a
protocol of 1 s periods would take a round per second of it)."""
GAMF_OF = {"AMF": "GAMF", "AMF optimized": "GAMF optimized", "SIG-AMF": "SIG-GAMF",
           "SIG-AMF optimized": "SIG-GAMF optimized"}


@dataclass(frozen=True)
class Cell:
    trace: str
    zipf: float
    utilisation: float
    available: int
    recompute: str
    policy: Policy


def run_cell(jobs: int, c: Cell) -> tuple[Cell, dict[str, Any]]:
    """The cell's figures, the first ``jobs`` jobs of its trace."""
    w = build_workload(trace_named(c.trace, jobs), zipf=c.zipf, utilisation=c.utilisation,
                       seed=SEED, available=c.available, pareto_per="job")
    t0, cpu = time.perf_counter(), time.process_time()
    r = simulate_allocated(w, c.policy.name, recompute=c.recompute,
                           optimized=c.policy.optimized)
    m = summary(r.run, w)
    # the balance while jobs compete: the samples with two or more active jobs
    std = np.sort(r.sample_job_std[r.sample_active >= 2])
    if not len(std):
        std = np.zeros(1)
    return c, {"trace": c.trace, "zipf": c.zipf, "target_utilisation": c.utilisation,
            "available": c.available, "recompute": c.recompute, "policy": c.policy.label,
            "mean_response_s": m["mean_response_s"], "median_std": float(np.median(std)),
            "competing_fraction": float(np.mean(r.sample_active >= 2)),
            "p90_std": float(np.quantile(std, 0.9)), "mean_std": float(std.mean()),
            "solves": r.solves, "jobs": w.num_jobs, "tasks": w.num_tasks,
            "rounds": r.rounds, "certified_rounds": r.certified_rounds,
            "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - cpu,
            "std": std}


def run(quick: bool) -> Section:
    t0 = time.perf_counter()
    n = QUICK_JOBS if quick else JOBS
    traces = {FACEBOOK: trace_named(FACEBOOK, n), GOOGLE: trace_named(GOOGLE, n)}
    zipfs = (0.0, 2.0) if quick else (0.0, 1.0, 2.0)
    utils = (0.6,) if quick else (0.4, 0.6, 0.7)
    cells = (
        [Cell(GOOGLE, 0.0, 0.6, 1, rc, p) for p in AMF_FAMILY
         for rc in ("subjob", "task")]
        + [Cell(t, z, u, 1, "subjob", p) for t in traces for u in utils for z in zipfs
           for p in CH4]
        + [Cell(t, z, 0.6, 2, "subjob", p) for t in traces for z in zipfs for p in CH5]
        + [Cell(FACEBOOK, z, 0.6, 2, "subjob", p) for z in zipfs for p in PROTOCOL_POLICIES])
    rows: dict[Cell, dict[str, Any]] = {}
    # one process per core; the Facebook cells (longer jobs, more solves) first
    todo = sorted(dict.fromkeys(cells), key=lambda c: c.trace != FACEBOOK)
    for c, r in run_parallel(functools.partial(run_cell, n), todo):
        rows[c] = r
        print(f"  {c.trace} zipf {c.zipf:g} util {c.utilisation:g} avail {c.available} "
              f"{c.recompute} {c.policy.label}: response {r['mean_response_s']:.2f} s, "
              f"mean std {r['mean_std']:.2f} ({r['seconds']:.0f} s)", flush=True)
    csv_rows = [{k: v for k, v in rows[c].items() if k != "std"} for c in todo]
    save_csv("guan_amf.csv", csv_rows)

    def get(t: str, z: float, u: float, a: int, p: Policy, rc: str = "subjob") -> dict[str, Any]:
        return rows[Cell(t, z, u, a, rc, p)]

    # the thesis's claims, cell by cell
    recompute_gap = [abs(get(GOOGLE, 0.0, 0.6, 1, p, "task")["mean_std"]
                         / max(get(GOOGLE, 0.0, 0.6, 1, p)["mean_std"], 1e-9)
                         - 1) for p in AMF_FAMILY]
    fair = [(get(t, z, 0.6, 1, p)["mean_std"] < get(t, z, 0.6, 1, CH4[0])["mean_std"])
            for t in traces for z in zipfs for p in AMF_FAMILY]
    faster = [(get(t, z, u, 1, p)["mean_response_s"] < get(t, z, u, 1, CH4[0])["mean_response_s"])
              for t in traces for u in utils for z in zipfs for p in AMF_FAMILY]
    optimized = [(get(t, z, u, 1, opt)["mean_response_s"]
                  <= get(t, z, u, 1, basic)["mean_response_s"])
                 for t in traces for u in utils for z in zipfs
                 for basic, opt in ((CH4[1], CH4[2]), (CH4[3], CH4[4]))]
    gamf_fair = [(get(t, z, 0.6, 2, next(q for q in CH5 if q.label == GAMF_OF[p.label]))
                  ["mean_std"] < get(t, z, 0.6, 2, p)["mean_std"])
                 for t in traces for z in zipfs for p in AMF_FAMILY]
    gamf_faster = [(get(t, z, 0.6, 2, next(q for q in CH5 if q.label == GAMF_OF[p.label]))
                    ["mean_response_s"] < get(t, z, 0.6, 2, p)["mean_response_s"])
                   for t in traces for z in zipfs for p in AMF_FAMILY]
    sig_gap = max(abs(get(t, z, u, 1, sig)["mean_response_s"]
                      / get(t, z, u, 1, basic)["mean_response_s"] - 1)
                  for t in traces for u in utils for z in zipfs
                  for basic, sig in ((CH4[1], CH4[3]), (CH4[2], CH4[4])))

    figs = [plot_recompute(rows), plot_std(rows, traces, zipfs, 1, CH4, "guan_amf_std.png",
                                           "Figs. 4.4-4.5"),
            plot_response(rows, traces, zipfs, utils),
            plot_std(rows, traces, zipfs, 2, CH5, "guan_amf_gamf_std.png", "Figs. 5.1-5.2"),
            plot_gamf_response(rows, traces, zipfs)]

    def std_rows(a: int, policies: tuple[Policy, ...]) -> list[list[str]]:
        return [[t, f"{z:g}", *[f"{get(t, z, 0.6, a, p)['mean_std']:.2f}" for p in policies]]
                for t in traces for z in zipfs]

    def resp_rows() -> list[list[str]]:
        return [[t, f"{100 * u:.0f} %", f"{z:g}",
                 *[f"{get(t, z, u, 1, p)['mean_response_s']:.1f}" for p in CH4]]
                for t in traces for u in utils for z in zipfs]

    ch5_resp = [[t, f"{z:g}", *[f"{get(t, z, 0.6, 2, p)['mean_response_s']:.1f}" for p in CH5]]
                for t in traces for z in zipfs]
    exact, protocol = PROTOCOL_POLICIES
    thesis_rows = [r for r in csv_rows if r["policy"] not in (exact.label, protocol.label)]
    protocol_rows = []
    for z in zipfs:
        e, q = get(FACEBOOK, z, 0.6, 2, exact), get(FACEBOOK, z, 0.6, 2, protocol)
        protocol_rows.append([
            f"{z:g}", f"{e['mean_response_s']:.2f}", f"{q['mean_response_s']:.2f}",
            f"{e['mean_std']:.2f}", f"{q['mean_std']:.2f}", f"{q['rounds']:,}",
            f"{100 * q['certified_rounds'] / max(q['rounds'], 1):.0f} %"])
    n_jobs = {t: get(t, zipfs[0], 0.6, 1, CH4[0])["jobs"] for t in traces}
    n_tasks = {t: get(t, zipfs[0], 0.6, 1, CH4[0])["tasks"] for t in traces}
    speed = sorted(r["seconds"] for r in rows.values())

    def pct(xs: list[bool]) -> str:
        return f"{sum(xs)} of {len(xs)}"

    parts = [
        "Guan's thesis, chapters 4-5 (`psdsf_dist/jobs/allocated.py`, guide `docs/jobs.md`).  "
        "Regenerate alone with `.venv/bin/python -m experiments run repro_guan_amf [--quick]`.",
        "",
        "10 sites x 20 slots; the first "
        + ", ".join(f"{n_jobs[t]} jobs ({n_tasks[t]:,} tasks) of the {t} trace" for t in traces)
        + "; **the Google trace is synthetic** (the thesis's segment is not available here: "
        "2,944 jobs, 48,504 tasks, heavy-tailed task counts and durations of mean 1,374.7 s, "
        "generated with those published marginals).  Allocation recomputed at arrivals and "
        "sub-job completions unless marked aggressive; seed "
        f"{SEED}; the figures of the thesis are images without numbers, so its claims are "
        "checked cell by cell.",
        "",
        "**Fig. 4.3** (synthetic Google, skew 0, utilisation 60 %): recomputing at every task "
        "end (aggressive) against at sub-job ends; the time-average standard deviation of the "
        "jobs' aggregate slots differs by at most "
        f"{100 * max(recompute_gap):.1f} % between the two (thesis: little difference).",
        "",
        "**Figs. 4.4-4.5**: the standard deviation of the active jobs' aggregate running "
        "tasks, averaged over the time two or more jobs are active (lower: more balanced; "
        "the figures show its distribution over that time), utilisation 60 %:",
        "",
        table(["trace", "Zipf skew", *[p.label for p in CH4]], std_rows(1, CH4)),
        "",
        "**Figs. 4.6-4.7**: mean job response time, seconds:",
        "",
        table(["trace", "utilisation", "Zipf skew", *[p.label for p in CH4]], resp_rows()),
        "",
        "**Figs. 5.1-5.4**: 2 available sites per task, utilisation 60 %; the AMF policies "
        "keep each task at its associated site.  Time-average standard deviation:",
        "",
        table(["trace", "Zipf skew", *[p.label for p in CH5]], std_rows(2, CH5)),
        "",
        "Mean job response time, seconds:",
        "",
        table(["trace", "Zipf skew", *[p.label for p in CH5]], ch5_resp),
        "",
        "**The per-server protocol sharing the slots** (not in the thesis; Facebook, 2 "
        "available sites, utilisation 60 %): every site a server of the protocol, updating "
        "its column once per second of simulated time (the default period and rule) while "
        "jobs arrive and finish, against the exact PS-DSF solve at every arrival and sub-job "
        "completion; *certified*: the protocol's rounds after which its allocation was "
        "PS-DSF for the jobs of that moment (rtol 1e-3).  Longer runs and other periods: "
        "`experiments/results/protocol_jobs.md`.",
        "",
        table(["Zipf skew", "exact: mean resp s", "protocol: mean resp s", "exact: std",
               "protocol: std", "protocol rounds", "certified"], protocol_rows),
        "",
        *[f"![{name}]({name})" + "\n" for name in figs],
        "**Thesis vs ours**, each claim over the cells it covers: AMF policies more balanced "
        f"than IMF (lower average std): {pct(fair)}; AMF policies faster than IMF: "
        f"{pct(faster)}; optimized no slower than basic: {pct(optimized)}; SIG versions "
        f"within {100 * sig_gap:.1f} % of the basic ones in response (thesis: almost the "
        f"same); GAMF policies more balanced than their AMF counterparts: {pct(gamf_fair)}, "
        f"faster: {pct(gamf_faster)}.  {spread_text(thesis_rows)}  Run time per simulation: median "
        f"{np.median(speed):.1f} s, max {speed[-1]:.1f} s ({len(rows)} runs; CPU time of "
        f"all runs {sum(r['cpu_seconds'] for r in rows.values()) / 60:.1f} min, about twice "
        "the section's wall time on two idle cores).",
    ]
    return Section("Guan ch. 4-5: AMF and GAMF against IMF on jobs over time",
                   "\n".join(parts), time.perf_counter() - t0)


def spread_text(rows: list[dict[str, Any]]) -> str:
    """How much the policies differ, from the runs' rows (the run's or its CSV's): the time
    jobs compete, and the spread of the policies' mean responses within each setting."""
    compete = [float(r["competing_fraction"]) for r in rows]
    cells: dict[tuple[Any, ...], list[float]] = {}
    for r in rows:
        key = (r["trace"], r["zipf"], r["target_utilisation"], r["available"], r["recompute"])
        cells.setdefault(key, []).append(float(r["mean_response_s"]))
    spread = [max(v) / min(v) - 1 for v in cells.values() if len(v) > 1]
    return (f"Two or more jobs are active {100 * min(compete):.0f}-{100 * max(compete):.0f} % "
            "of the time, yet within a setting the policies' mean responses differ by a median "
            f"{100 * float(np.median(spread)):.1f} % (at most {100 * max(spread):.1f} %).  Our "
            "reading: tasks are whole and never preempted, so a policy only decides which job "
            "a freed slot goes to (the deployment rule), and its allocation differs from IMF's "
            "only for jobs whose sub-jobs compete unevenly at several sites at once.  Runs "
            f"longer than these {JOBS} jobs are measured by `experiments/studies/"
            "guan_amf_jobs.py` (`results/guan_amf_jobs.md`).")


def _cdf(ax: Any, std: Any, **style: Any) -> None:
    ax.plot(std, np.arange(1, len(std) + 1) / len(std), **style)


def plot_recompute(rows: dict[Cell, dict[str, Any]]) -> str:
    fig, axes = figure()
    ax = axes[0][0]
    for k, p in enumerate(AMF_FAMILY):
        for rc, ls in (("subjob", "-"), ("task", "--")):
            r = rows[Cell(GOOGLE, 0.0, 0.6, 1, rc, p)]
            _cdf(ax, r["std"], color=f"C{k}", ls=ls,
                 label=f"{p.label}{' (aggressive)' if rc == 'task' else ''}")
    ax.set_xlabel("standard deviation of the active jobs' aggregate slots (slots)")
    ax.set_ylabel("fraction of time (2+ jobs active)")
    ax.set_title("Fig. 4.3: synthetic Google trace, Zipf 0, utilisation 60 %")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, "guan_amf_recompute.png")


def plot_std(rows: dict[Cell, dict[str, Any]], traces: dict[str, Trace], zipfs: tuple[float, ...],
             available: int, policies: tuple[Policy, ...], name: str, label: str) -> str:
    fig, axes = figure(len(traces), len(zipfs), height=3.0 * len(traces))
    for a, t in enumerate(traces):
        for b, z in enumerate(zipfs):
            ax = axes[a][b]
            for k, p in enumerate(policies):
                _cdf(ax, rows[Cell(t, z, 0.6, available, "subjob", p)]["std"], color=f"C{k}",
                     label=p.label)
            ax.set_title(f"{label}: {t}, Zipf {z:g}", fontsize=8)
            ax.set_xlabel("std of jobs' aggregate slots (slots)")
            ax.set_ylabel("fraction of time (2+ jobs active)")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6)
    return save(fig, name)


def plot_response(rows: dict[Cell, dict[str, Any]], traces: dict[str, Trace],
                  zipfs: tuple[float, ...], utils: tuple[float, ...]) -> str:
    fig, axes = figure(len(traces), len(utils), height=3.0 * len(traces))
    for a, t in enumerate(traces):
        for b, u in enumerate(utils):
            ax = axes[a][b]
            for k, p in enumerate(CH4):
                ax.plot(zipfs, [rows[Cell(t, z, u, 1, "subjob", p)]["mean_response_s"]
                                for z in zipfs], marker="o", color=f"C{k}", label=p.label)
            ax.set_title(f"Figs. 4.6-4.7: {t},\nutilisation {100 * u:.0f} %", fontsize=8)
            ax.set_xlabel("Zipf skew")
            ax.set_ylabel("mean job response (s)")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6)
    return save(fig, "guan_amf_response.png")


def plot_gamf_response(rows: dict[Cell, dict[str, Any]], traces: dict[str, Trace],
                       zipfs: tuple[float, ...]) -> str:
    fig, axes = figure(1, len(traces))
    for a, t in enumerate(traces):
        ax = axes[0][a]
        for k, p in enumerate(CH5):
            ax.plot(zipfs, [rows[Cell(t, z, 0.6, 2, "subjob", p)]["mean_response_s"]
                            for z in zipfs], marker="o", color=f"C{k}",
                    ls="-" if p.name.startswith("g") else "--", label=p.label)
        ax.set_title(f"Figs. 5.3-5.4: {t},\n2 available sites, utilisation 60 %", fontsize=8)
        ax.set_xlabel("Zipf skew")
        ax.set_ylabel("mean job response (s)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6)
    return save(fig, "guan_amf_gamf_response.png")


def main(argv: list[str] | None = None) -> None:
    section_main(__doc__, run, argv)
