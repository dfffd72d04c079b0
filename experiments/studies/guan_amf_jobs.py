"""Do the thesis's chapter 4-5 claims hold on longer runs than the report's 200 jobs?

The report's section 8 runs the first 200 jobs of each trace (each allocation is a linear
program, and the thesis does not say how long its runs were) and finds the thesis's balance
claims only in part: the AMF policies more balanced than IMF in 14 of 24 cells, GAMF more
balanced than AMF in 9 of 24.  Its reading was that longer runs may hold more moments in which
jobs' sub-jobs compete unevenly at several sites.  This study measures that: the same cells,
the first 200, 1,000 and 2,000 jobs of each trace.

Cells (seed 1, utilisation 60 %, allocation recomputed at arrivals and sub-job completions,
:func:`experiments.reproductions.repro_guan_amf.run_cell`): with one available site per task
IMF, AMF and SIG-AMF (Figs. 4.4-4.7); with two, AMF and SIG-AMF against GAMF and SIG-GAMF
(Figs. 5.1-5.4); Facebook and the synthetic Google trace; Zipf skews 0, 1, 2.  The optimized
variants (Algorithms 6 and 8) are left out: they keep every job's total, and they cost the most.
Claims, each counted over the cells it covers (2 policies x 2 traces x 3 skews = 12): the AMF
policies more balanced than IMF (lower time-average standard deviation of the active jobs'
aggregate running tasks, over the samples with two or more jobs active) and faster (lower mean
job response); the GAMF policies more balanced than and faster than their AMF counterparts.

Each finished run goes into ``results/guan_amf_jobs.csv`` (a rerun resumes: cells already
there are not run again); ``results/guan_amf_jobs.md`` is written at the end.

    .venv/bin/python -m experiments run guan_amf_jobs [--jobs 200,1000,2000] [--workers 2]
"""

from __future__ import annotations

import argparse
import csv
import functools
import io
import time
from collections.abc import Sequence
from typing import Any

from experiments.common.guan_traces import FACEBOOK, GOOGLE
from experiments.common.paths import RESULTS
from experiments.common.processes import run_parallel
from experiments.common.sim_common import table, write_atomic
from experiments.reproductions.repro_guan_amf import Cell, Policy, run_cell

NAME = "guan_amf_jobs"
CSV = RESULTS / f"{NAME}.csv"
FIELDS = ["jobs", "trace", "zipf", "available", "policy", "mean_std", "mean_response_s",
          "competing_fraction", "cpu_seconds"]
TRACES = (FACEBOOK, GOOGLE)
ZIPFS = (0.0, 1.0, 2.0)
UTILISATION = 0.6
IMF, AMF, SIG_AMF = Policy("IMF", "imf"), Policy("AMF", "amf"), Policy("SIG-AMF", "amf-si")
GAMF, SIG_GAMF = Policy("GAMF", "gamf"), Policy("SIG-GAMF", "gamf-si")
ONE_SITE = (IMF, AMF, SIG_AMF)
TWO_SITES = (AMF, SIG_AMF, GAMF, SIG_GAMF)
CLAIMS = (  # (claim, available sites, [(better, worse)], measure)
    ("AMF policies more balanced than IMF", 1, ((AMF, IMF), (SIG_AMF, IMF)), "mean_std"),
    ("AMF policies faster than IMF", 1, ((AMF, IMF), (SIG_AMF, IMF)), "mean_response_s"),
    ("GAMF policies more balanced than AMF", 2, ((GAMF, AMF), (SIG_GAMF, SIG_AMF)), "mean_std"),
    ("GAMF policies faster than AMF", 2, ((GAMF, AMF), (SIG_GAMF, SIG_AMF)),
     "mean_response_s"),
)
Key = tuple[int, str, float, int, str]
"""(jobs, trace, skew, available sites, policy label)."""


def cells(jobs: int) -> list[Cell]:
    return ([Cell(t, z, UTILISATION, 1, "subjob", p) for t in TRACES for z in ZIPFS
             for p in ONE_SITE]
            + [Cell(t, z, UTILISATION, 2, "subjob", p) for t in TRACES for z in ZIPFS
               for p in TWO_SITES])


def key(row: dict[str, Any]) -> Key:
    return (int(row["jobs"]), str(row["trace"]), float(row["zipf"]), int(row["available"]),
            str(row["policy"]))


def read() -> dict[Key, dict[str, Any]]:
    if not CSV.exists():
        return {}
    with CSV.open() as f:
        return {key(r): r for r in csv.DictReader(f)}


def save(rows: dict[Key, dict[str, Any]]) -> None:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=FIELDS, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows[k] for k in sorted(rows))
    write_atomic(CSV, out.getvalue())


def holds(rows: dict[Key, dict[str, Any]], jobs: int) -> list[tuple[str, int, int]]:
    """Per claim: (claim, cells where it holds, cells with both runs)."""
    out = []
    for claim, avail, pairs, measure in CLAIMS:
        held = total = 0
        for t in TRACES:
            for z in ZIPFS:
                for better, worse in pairs:
                    a = rows.get((jobs, t, z, avail, better.label))
                    b = rows.get((jobs, t, z, avail, worse.label))
                    if a is None or b is None:
                        continue
                    total += 1
                    held += float(a[measure]) < float(b[measure])
        out.append((claim, held, total))
    return out


def report(rows: dict[Key, dict[str, Any]], job_counts: Sequence[int]) -> str:
    counts = sorted({k[0] for k in rows} & set(job_counts))
    body = []
    for claim, *_ in CLAIMS:
        cells_ = []
        for n in counts:
            _, held, total = next(h for h in holds(rows, n) if h[0] == claim)
            cells_.append(f"{held} of {total}")
        body.append([claim, *cells_])
    competing = {n: sorted(float(r["competing_fraction"]) for k, r in rows.items() if k[0] == n)
                 for n in counts}
    cpu = sum(float(r["cpu_seconds"]) for k, r in rows.items() if k[0] in counts)
    return "\n".join([
        "## The thesis's chapter 4-5 claims against run length",
        "",
        "Regenerate with `.venv/bin/python -m experiments run guan_amf_jobs` (see its "
        "docstring).  The first n jobs of each trace (the Google one synthetic), seed 1, "
        "utilisation 60 %; each claim counted over the cells it covers (2 policies x 2 "
        "traces x 3 Zipf skews):",
        "",
        table(["claim", *[f"{n:,} jobs" for n in counts]], body),
        "",
        "Two or more jobs active: "
        + "; ".join(f"{n:,} jobs {100 * v[0]:.0f}-{100 * v[-1]:.0f} % of the time"
                    for n, v in competing.items() if v)
        + f".  CPU time of the runs: {cpu / 60:.1f} min.",
        "",
    ])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--jobs", default="200,1000,2000",
                    help="job counts, comma-separated (default 200,1000,2000)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    job_counts = [int(x) for x in args.jobs.split(",")]
    rows = read()
    began = time.perf_counter()
    for n in job_counts:  # shortest runs first: a stopped study has its early rows
        todo = [c for c in cells(n) if (n, c.trace, c.zipf, c.available, c.policy.label)
                not in rows]
        todo.sort(key=lambda c: c.trace != FACEBOOK)
        for c, r in run_parallel(functools.partial(run_cell, n), todo, workers=args.workers):
            r = dict(r, jobs=n)  # the run length asked for (a trace may hold fewer)
            rows[key(r)] = r
            save(rows)
            print(f"  {n} jobs {c.trace} zipf {c.zipf:g} avail {c.available} "
                  f"{c.policy.label}: std {r['mean_std']:.3f}, response "
                  f"{r['mean_response_s']:.3f} s ({r['cpu_seconds']:.0f} CPU-s)", flush=True)
    md = report(rows, job_counts)
    write_atomic(RESULTS / f"{NAME}.md", md)
    print(md)
    print(f"({time.perf_counter() - began:.0f} s)")
