"""Guan thesis chapter 3: job response time of SWAG, BTAWJ, BTAAJ, SCTA, ATA and ATA-Greedy.

1. Table 3.1's worked example (three jobs, three one-slot sites, 1 s tasks): the average
   responses the text derives, 22/3, 20/3, 19/3 and 17/3 s, beside the simulator's.
2. The Facebook 2010 trace (``../shared/data/swim``, 24,024 jobs with input, 1,102,281 tasks at
   one task per GB) as section 3.3 sets it up: 10 sites of 20 slots, each task's input at a
   site drawn by a Zipf law over a random permutation of the sites, 2 available sites (that
   site and the next), Pareto durations (shape 1.259, mean 2 s) drawn once per job (all its
   tasks alike) and, separately, once per task (the thesis does not say which), submit times
   scaled to the target utilisation; every scheduler on the same workload (same placement,
   same durations).  Average response per Zipf skew (Fig. 3.12) with the thesis's order
   checked per seed, the response distribution at skew 1 (Fig. 3.14), the average response
   per number of available sites at skew 1 (Fig. 3.16), mean task wait, measured
   utilisation, and the simulator's speed (events per second: job arrivals plus task
   completions over wall-clock seconds, median over the runs).
3. The **synthetic** Google segment (``experiments.common.guan_traces``: the thesis's segment
   is not available here; generated with its published marginals), its first
   :data:`GOOGLE_JOBS` jobs: Figs. 3.11, 3.13 and 3.15 as the Facebook ones.
4. A control that is not in the thesis: the Facebook workload at skew 1 with every task
   lasting the mean, 2 s, so that the schedulers' placements and orders are compared without
   the Pareto tail.

The runs are independent and share the machine's cores (one process per core).  ``--quick``:
the first 2,000 Facebook jobs and 500 Google jobs, utilisation 70 %, fewer seeds; the full
run: every Facebook job, utilisation 60 %, seeds 2-4 per job and 1 per task.  Results:
``report/guan_jobs.csv``, figures ``report/guan_jobs_{zipf,cdf,google,sites}.png``.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from experiments.common.guan_traces import FACEBOOK, GOOGLE, trace_named
from experiments.common.paths import EXAMPLES
from experiments.common.processes import run_parallel
from experiments.common.repro_common import (
    Section,
    figure,
    save,
    save_csv,
    seconds_text,
    section_main,
)
from experiments.common.sim_common import table
from psdsf_dist.jobs.metrics import summary
from psdsf_dist.jobs.schedulers import SCHEDULERS
from psdsf_dist.jobs.simulator import simulate_jobs
from psdsf_dist.jobs.workload import PARETO_MEAN_S, build_workload, load_trace

TABLE_31 = EXAMPLES / "guan_table31.csv"
ZIPF = (0.0, 1.0, 2.0)
AVAILABLE = (1, 2, 3, 4)
"""Available sites per task for Figs. 3.15-3.16 (the text's default is 2)."""
THESIS_31 = {"btawj": Fraction(22, 3), "btaaj": Fraction(20, 3), "scta": Fraction(19, 3),
             "ata": Fraction(17, 3)}
QUICK_JOBS = 2000
GOOGLE_JOBS, QUICK_GOOGLE_JOBS = 2000, 500
"""Jobs of the synthetic Google segment simulated: at utilisation 60 % its whole 2,944 jobs
keep hundreds waiting at once and one ATA run takes 4-6 minutes (every plan re-estimates
every waiting job), so the figures use its first 2,000."""
LABEL = {"ata": "ATA", "ata-greedy": "ATA-Greedy", "scta": "SCTA", "btaaj": "BTAAJ",
         "btawj": "BTAWJ", "swag": "SWAG"}
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class JobCell:
    """One simulation: a scheduler on a workload built from a trace."""

    part: str
    trace: str
    jobs: int | None
    zipf: float
    seed: int
    utilisation: float
    scheduler: str
    available: int = 2
    pareto_per: str = "job"
    mean_durations: bool = False
    """Every task lasts the Pareto mean (the control)."""


def run_cell(c: JobCell) -> tuple[JobCell, dict[str, Any], FloatArray]:
    """The cell's summary (with the CPU seconds it took) and its sorted job responses."""
    cpu = time.process_time()
    w = build_workload(trace_named(c.trace, c.jobs), zipf=c.zipf, utilisation=c.utilisation,
                       seed=c.seed, available=c.available, pareto_per=c.pareto_per)
    if c.mean_durations:
        w = dataclasses.replace(w, durations=np.full(w.num_tasks, PARETO_MEAN_S))
    r = simulate_jobs(w, c.scheduler)
    m = summary(r, w)
    m.pop("site_utilisation")
    m["cpu_seconds"] = time.process_time() - cpu
    return c, m, np.sort(r.response)


def run_cells(cells: Sequence[JobCell]) -> dict[JobCell, tuple[dict[str, Any], FloatArray]]:
    """Every cell, one process per core (ATA's cells first: the longest)."""
    todo = sorted(cells, key=lambda c: (c.scheduler != "ata", c.jobs is not None))
    out: dict[JobCell, tuple[dict[str, Any], FloatArray]] = {}
    for c, m, resp in run_parallel(run_cell, todo):
        out[c] = (m, resp)
        print(f"  {c.part} zipf {c.zipf:g} seed {c.seed} available {c.available} "
              f"{c.scheduler}: mean response {m['mean_response_s']:.3f} s "
              f"({m['wall_seconds']:.0f} s, {m['events_per_second'] or 0:,.0f} events/s)",
              flush=True)
    return out


def table_31() -> tuple[str, list[dict[str, Any]]]:
    w = build_workload(load_trace(TABLE_31), slots=1)
    rows, csv = [], []
    for s, thesis in THESIS_31.items():
        order = "fifo" if s in ("btawj", "btaaj") else "swag"
        got = Fraction(float(simulate_jobs(w, s, order=order).response.mean())
                       ).limit_denominator(100)
        rows.append([LABEL[s], order, f"{thesis} s", f"{got} s", "yes" if got == thesis else "NO"])
        csv.append({"part": "table-3.1", "scheduler": s, "order": order,
                    "thesis_mean_response_s": float(thesis), "mean_response_s": float(got)})
    md = table(["scheduler", "job order", "thesis", "ours", "equal"], rows)
    return md, csv


Results = dict[tuple[float, str], list[dict[str, Any]]]


def thesis_order(v: dict[str, float]) -> bool:
    """The thesis's order of mean job response: ATA <= ATA-Greedy < SCTA < BTAAJ, BTAWJ."""
    return v["ata"] <= v["ata-greedy"] < v["scta"] < min(v["btaaj"], v["btawj"])


def by_key(done: dict[JobCell, tuple[dict[str, Any], FloatArray]], part: str,
           key: str = "zipf") -> Results:
    """The summaries of one part, per (skew or available sites, scheduler), in seed order."""
    out: Results = {}
    for c in sorted((c for c in done if c.part == part), key=lambda c: c.seed):
        out.setdefault((float(getattr(c, key)), c.scheduler), []).append(done[c][0])
    return out


def response_rows(results: Results, keys: Sequence[float], seeds: Sequence[int]
                  ) -> tuple[list[list[str]], int]:
    """One row per key (skew or available sites): the schedulers' mean responses averaged over
    the seeds, whether the thesis's order holds for that average, and in how many seeds it
    holds alone."""
    rows, holds_total = [], 0
    for z in keys:
        v = {s: float(np.mean([m["mean_response_s"] for m in results[(z, s)]]))
             for s in SCHEDULERS}
        per_seed = sum(thesis_order({s: results[(z, s)][i]["mean_response_s"]
                                     for s in SCHEDULERS}) for i in range(len(seeds)))
        holds = thesis_order(v)
        holds_total += holds
        rows.append([f"{z:g}", *[f"{v[s]:.3f}" for s in SCHEDULERS],
                     "yes" if holds else "no", f"{per_seed} of {len(seeds)}"])
    return rows, holds_total


def mean_of(results: Results, z: float, s: str, key: str = "mean_response_s") -> float:
    return float(np.mean([m[key] for m in results[(z, s)]]))


def run(quick: bool) -> Section:
    t0 = time.perf_counter()
    md31, csv_rows = table_31()
    fb_jobs = QUICK_JOBS if quick else None
    g_jobs = QUICK_GOOGLE_JOBS if quick else GOOGLE_JOBS
    util = 0.7 if quick else 0.6
    job_seeds, task_seeds = ((1, 2), (1,)) if quick else ((2, 3, 4), (1,))
    g_seeds = (1, 2) if quick else (2, 3, 4)
    fb, g = (FACEBOOK, fb_jobs), (GOOGLE, g_jobs)
    cells = [JobCell("facebook-pareto-per-job", *fb, z, k, util, s)
             for z in ZIPF for k in job_seeds for s in SCHEDULERS]
    cells += [JobCell("facebook-pareto-per-task", *fb, z, k, util, s, pareto_per="task")
              for z in ZIPF for k in task_seeds for s in SCHEDULERS]
    cells += [JobCell("control-2s-tasks", *fb, 1.0, job_seeds[0], util, s,
                      mean_durations=True) for s in SCHEDULERS]
    cells += [JobCell("facebook-available", *fb, 1.0, job_seeds[0], util, s, a)
              for a in AVAILABLE if a != 2 for s in SCHEDULERS]
    cells += [JobCell("google-zipf", *g, z, k, util, s)
              for z in ZIPF for k in g_seeds for s in SCHEDULERS]
    cells += [JobCell("google-available", *g, 1.0, k, util, s, a)
              for a in AVAILABLE if a != 2 for k in g_seeds for s in SCHEDULERS]
    done = run_cells(cells)
    for c in cells:
        csv_rows.append({"part": c.part, "trace": c.trace, "zipf": c.zipf, "seed": c.seed,
                         "available_sites": c.available, "target_utilisation": util,
                         **done[c][0]})
    save_csv("guan_jobs.csv", csv_rows)

    results = by_key(done, "facebook-pareto-per-job")
    task_results = by_key(done, "facebook-pareto-per-task")
    control = {c.scheduler: done[c][0]["mean_response_s"] for c in cells
               if c.part == "control-2s-tasks"}
    control_holds = thesis_order(control)
    g_results = by_key(done, "google-zipf")
    # available sites: 2 is the skew-1 cell of the zipf sweeps (the Facebook one: its first seed)
    fb_sites = by_key(done, "facebook-available", "available")
    g_sites = by_key(done, "google-available", "available")
    for s in SCHEDULERS:
        fb_sites[(2.0, s)] = results[(1.0, s)][:1]
        g_sites[(2.0, s)] = g_results[(1.0, s)]
    fb_cdf = {s: done[JobCell("facebook-pareto-per-job", *fb, 1.0, job_seeds[0], util, s)][1]
              for s in SCHEDULERS}
    g_cdf = {s: done[JobCell("google-zipf", *g, 1.0, g_seeds[0], util, s)][1]
             for s in SCHEDULERS}

    rows, job_holds = response_rows(results, ZIPF, job_seeds)
    task_rows, task_holds = response_rows(task_results, ZIPF, task_seeds)
    g_rows, g_holds = response_rows(g_results, ZIPF, g_seeds)
    sites = [float(a) for a in AVAILABLE]
    fb_site_rows, _ = response_rows(fb_sites, sites, job_seeds[:1])
    g_site_rows, _ = response_rows(g_sites, sites, g_seeds)
    wait_rows = [[f"{z:g}", *[f"{mean_of(results, z, s, 'mean_wait_s'):.2f}"
                              for s in SCHEDULERS]] for z in ZIPF]
    util_rows = [[f"{z:g}", *[f"{100 * mean_of(results, z, s, 'utilisation'):.1f}"
                              for s in SCHEDULERS]] for z in ZIPF]
    fb_runs = [done[c][0] for c in cells if c.trace == FACEBOOK]
    speed = [m["events_per_second"] for m in fb_runs if m["events_per_second"]]
    walls = {s: float(np.median([m["wall_seconds"] for z in ZIPF for m in results[(z, s)]]))
             for s in SCHEDULERS}
    g_walls = {s: float(np.median([m["wall_seconds"] for z in ZIPF for m in g_results[(z, s)]]))
               for s in SCHEDULERS}
    figs = [plot_zipf(results, task_results), plot_cdf(fb_cdf),
            plot_google(g_results, g_cdf), plot_sites(fb_sites, g_sites)]
    one_site = {name: max(mean_of(r, 1.0, s) for s in SCHEDULERS)
                / min(mean_of(r, 1.0, s) for s in SCHEDULERS) - 1
                for name, r in (("Facebook", fb_sites), ("Google", g_sites))}
    proposed = [s for s in SCHEDULERS if s != "swag"]
    faster = {name: sum(all(mean_of(r, float(a), s) > mean_of(r, float(b), s)
                            for a, b in itertools.pairwise(AVAILABLE))
                        for s in proposed)
              for name, r in (("Facebook", fb_sites), ("Google", g_sites))}
    several = [float(a) for a in AVAILABLE if a > 1]
    _, fb_site_holds = response_rows(fb_sites, several, job_seeds[:1])
    _, g_site_holds = response_rows(g_sites, several, g_seeds)
    cpu_total = sum(m["cpu_seconds"] for m, _ in done.values())
    first = results[(ZIPF[0], "ata")][0]
    g_first = g_results[(ZIPF[0], "ata")][0]

    def means(res: Results, z: float) -> list[float]:
        return [mean_of(res, z, s) for s in SCHEDULERS]

    swag_worst = sum(int(np.argmax(means(res, z))) == SCHEDULERS.index("swag")
                     for res in (results, task_results) for z in ZIPF)
    task_spread = max(100 * (max(means(task_results, z)) / min(means(task_results, z)) - 1)
                      for z in ZIPF)
    heads = ["Zipf skew", *[LABEL[s] for s in SCHEDULERS]]
    order_heads = [*heads, "thesis order (mean)", "holds per seed"]
    site_heads = ["available sites", *heads[1:], "thesis order (mean)", "holds per seed"]
    parts = [
        "Guan's thesis, chapter 3 (`psdsf_dist/jobs/`, `psdsf-dist replay`, guide "
        "`docs/jobs.md`).  Regenerate alone with "
        "`.venv/bin/python -m experiments run repro_guan_jobs [--quick]`.",
        "",
        "**Table 3.1** (section 3.2's example; BTAWJ and BTAAJ serve the jobs in arrival "
        "order there, as the text assumes, and in SWAG's order in the evaluation):",
        "",
        md31,
        "",
        f"**Facebook trace** ({first['jobs']:,} jobs, {first['tasks']:,} tasks"
        f"{', the first jobs of the trace' if quick else ''}; 10 sites x 20 slots, 2 "
        f"available sites per task, target utilisation {100 * util:.0f} %).  The thesis "
        "draws Pareto durations without saying whether per task or per job; both are run.  "
        f"**One draw per job** (every task of a job lasts as long; seeds "
        f"{', '.join(map(str, job_seeds))} averaged): mean job response time in seconds "
        "(Fig. 3.12), and whether the thesis's order ATA <= ATA-Greedy < SCTA < BTAAJ, "
        "BTAWJ holds for the mean over seeds and in each seed:",
        "",
        table(order_heads, rows),
        "",
        f"**One draw per task** (seed{'s' if len(task_seeds) > 1 else ''} "
        f"{', '.join(map(str, task_seeds))}), the same table:",
        "",
        table(order_heads, task_rows),
        "",
        "One draw per job: mean task wait (submit to start), seconds:",
        "",
        table(heads, wait_rows),
        "",
        "One draw per job: measured utilisation of the slots, % (the target is the offered "
        "load; a scheduler that leaves slots idle while tasks wait elsewhere measures less):",
        "",
        table(heads, util_rows),
        "",
        f"Control (not in the thesis): skew 1, seed {job_seeds[0]}, every task 2 s, mean "
        "job response in seconds:",
        "",
        table([*heads, "thesis order"], [["1", *[f"{control[s]:.3f}" for s in SCHEDULERS],
                                          "yes" if control_holds else "no"]]),
        "",
        f"![average response per Zipf skew]({figs[0]})",
        "",
        f"![response distribution at Zipf 1]({figs[1]})",
        "",
        f"**Google trace, synthetic** (the thesis's segment is not available here: its first "
        f"{g_first['jobs']:,} jobs, {g_first['tasks']:,} tasks, generated with the "
        "published marginals, see section 8; a job's tasks last alike; seeds "
        f"{', '.join(map(str, g_seeds))} averaged): mean job response time in seconds "
        "(Fig. 3.11):",
        "",
        table(order_heads, g_rows),
        "",
        f"![Google (synthetic): response per Zipf skew and its distribution]({figs[2]})",
        "",
        "**Available sites per task** at Zipf skew 1 (Figs. 3.15-3.16), mean job response "
        f"time in seconds.  Facebook (one draw per job, seed {job_seeds[0]}):",
        "",
        table(site_heads, fb_site_rows),
        "",
        "Google (synthetic), seeds " + ", ".join(map(str, g_seeds)) + ":",
        "",
        table(site_heads, g_site_rows),
        "",
        f"![response per number of available sites]({figs[3]})",
        "",
        f"Simulator speed (Facebook runs): {np.median(speed):,.0f} events/s median over "
        f"{len(speed)} runs (range {min(speed):,.0f}-{max(speed):,.0f}; one process per core, "
        "2 cores); median wall time per run (one draw per job): "
        + ", ".join(f"{LABEL[s]} {seconds_text(walls[s])}" for s in SCHEDULERS)
        + "; on the Google segment: "
        + ", ".join(f"{LABEL[s]} {seconds_text(g_walls[s])}" for s in SCHEDULERS) + ".  "
        f"CPU time of all {len(done)} runs: {cpu_total / 60:.1f} min (wall times vary with "
        "what else the machine runs; on two idle cores the runs take about half the CPU "
        "time).",
        "",
        "**Thesis vs ours.** Table 3.1 is reproduced exactly.  The thesis's figures are "
        "images without numbers in the text we have, so only the order can be compared.  "
        f"Facebook: with one Pareto draw per job the order holds at {job_holds} of "
        f"{len(ZIPF)} skews (mean over seeds); with one draw per task at {task_holds} of "
        f"{len(ZIPF)}.  Google (synthetic): at {g_holds} of {len(ZIPF)} skews.  Per "
        "task, the shape 1.259 (infinite variance) over a million draws gives a few tasks "
        "lasting hours or days; such a task alone sets its job's response, every scheduler "
        "suffers it alike because none sees durations, and the schedulers' means then "
        f"differ by at most {task_spread:.1f} % at a skew.  Per job the tail reaches fewer "
        "jobs and the placement and order weigh more.  SWAG, which cannot move a task off "
        f"its associated site, is worst in {swag_worst} of {2 * len(ZIPF)} Facebook "
        "(model, skew) cells.  With 2 s tasks (control) the thesis's order "
        f"{'holds' if control_holds else 'does not hold'} "
        f"(best: {LABEL[min(control, key=lambda k: control[k])]}).  "
        "With one available site every scheduler places each task at its site and orders "
        "the jobs by SWAG, so all six are the same schedule, as the thesis says: the means "
        f"differ by {100 * one_site['Facebook']:.2g} % (Facebook) and "
        f"{100 * one_site['Google']:.2g} % (Google).  More sites help, as the thesis "
        "reports: each added site lowers the mean response of "
        f"{faster['Facebook']} of {len(proposed)} proposed schedulers at every step on "
        f"Facebook and of {faster['Google']} of {len(proposed)} on Google; with 2 or more "
        f"sites the order holds at {fb_site_holds} (Facebook) and {g_site_holds} (Google) "
        f"of {len(several)} site counts.",
    ]
    return Section("Guan ch. 3: job scheduling across sites (Facebook and Google traces)",
                   "\n".join(parts), time.perf_counter() - t0)


def _lines(ax: Any, xs: Sequence[float], results: Results, key: str = "mean_response_s"
           ) -> None:
    for s in SCHEDULERS:
        ax.plot(xs, [mean_of(results, x, s, key) for x in xs], marker="o", label=LABEL[s])
    ax.grid(alpha=0.3)


def _cdf(ax: Any, responses: dict[str, FloatArray], title: str) -> None:
    for s, r in responses.items():
        ax.plot(r, np.arange(1, len(r) + 1) / len(r), label=LABEL[s])
    ax.set_xscale("log")
    ax.set_xlabel("job response time (s, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)


def plot_zipf(per_job: Results, per_task: Results) -> str:
    fig, axes = figure(1, 3)
    panels = ((per_job, "mean_response_s", "mean job response time (s)",
               "job response (Fig. 3.12),\none duration draw per job"),
              (per_task, "mean_response_s", "mean job response time (s)",
               "job response,\none duration draw per task"),
              (per_job, "mean_wait_s", "mean task wait (s)",
               "task wait before start,\none duration draw per job"))
    for ax, (results, key, ylabel, title) in zip(axes[0], panels, strict=True):
        _lines(ax, ZIPF, results, key)
        ax.set_xlabel("Zipf skew of the tasks' sites")
        ax.set_ylabel(ylabel)
        ax.set_title(f"Facebook trace: {title}", fontsize=8)
    axes[0][0].legend()
    return save(fig, "guan_jobs_zipf.png")


def plot_cdf(responses: dict[str, FloatArray]) -> str:
    fig, axes = figure()
    _cdf(axes[0][0], responses, "Facebook trace, Zipf skew 1, one duration draw per job: "
         "job response (Fig. 3.14)")
    axes[0][0].legend()
    return save(fig, "guan_jobs_cdf.png")


def plot_google(results: Results, responses: dict[str, FloatArray]) -> str:
    fig, axes = figure(1, 2)
    ax = axes[0][0]
    _lines(ax, ZIPF, results)
    ax.set_xlabel("Zipf skew of the tasks' sites")
    ax.set_ylabel("mean job response time (s)")
    ax.set_title("Google trace (SYNTHETIC): job response (Fig. 3.11)", fontsize=8)
    ax.legend()
    _cdf(axes[0][1], responses, "Google trace (SYNTHETIC), Zipf skew 1:\njob response "
         "(Fig. 3.13)")
    return save(fig, "guan_jobs_google.png")


def plot_sites(fb: Results, g: Results) -> str:
    fig, axes = figure(1, 2)
    for ax, results, title in ((axes[0][0], g, "Google trace (SYNTHETIC) (Fig. 3.15)"),
                               (axes[0][1], fb, "Facebook trace (Fig. 3.16)")):
        _lines(ax, [float(a) for a in AVAILABLE], results)
        ax.set_xticks(AVAILABLE)
        ax.set_xlabel("available sites per task")
        ax.set_ylabel("mean job response time (s)")
        ax.set_title(f"{title}, Zipf skew 1", fontsize=8)
    axes[0][0].legend()
    return save(fig, "guan_jobs_sites.png")


def main(argv: list[str] | None = None) -> None:
    section_main(__doc__, run, argv)
