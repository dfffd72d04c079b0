"""Does the thesis's order of the ch. 3 schedulers hold on the Facebook trace?  Paired seeds.

Guan's thesis (Figs. 3.12, 3.14, 3.16) reports, on the Facebook trace with two available sites,
ATA <= ATA-Greedy < SCTA < BTAAJ, BTAWJ at every Zipf skew.  The report's section 6 runs
three seeds per skew and finds the order in the mean at none of the three skews; the
schedulers' means move with the seed far more than they differ (one draw per job of a
Pareto law with shape 1.259, infinite variance: a seed's few longest jobs set its mean).  The
schedulers see the same jobs, tasks, sites and durations under one seed, so the comparison
that can tell is the *paired* one: per seed, does scheduler a beat scheduler b?

For each skew and each pair the thesis orders, this study counts the seeds in which the pair
holds, the median paired relative gap ``(mean_b - mean_a) / mean_a``, and the two-sided
sign-test p-value of "a and b are as likely to win" (exact binomial; ties count against the
pair).  A pair the thesis states strictly is *supported* when it holds in most seeds and the
sign test rejects a coin toss at 5 %; *reversed* when the reverse does; otherwise the trace
cannot tell them apart at this many seeds.

The runs are :func:`experiments.reproductions.repro_guan_jobs.run_cell`'s, the whole trace
(24,024 jobs), target utilisation 60 %, one Pareto draw per job (the reading under which the
schedulers differ at all, section 6).  Each finished run is put in ``results/guan_orders.csv``
(a rerun resumes: cells already there are not run again), and ``results/guan_orders.md`` is
written at the end.

    .venv/bin/python -m experiments run guan_orders [--seeds 2-9] [--zipf 0,1,2] [--workers 2]
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from experiments.common.guan_traces import FACEBOOK
from experiments.common.paths import RESULTS
from experiments.common.processes import run_parallel
from experiments.common.sim_common import table, write_atomic
from experiments.reproductions.repro_guan_jobs import LABEL, JobCell, run_cell

NAME = "guan_orders"
CSV = RESULTS / f"{NAME}.csv"
FIELDS = ["utilisation", "zipf", "seed", "scheduler", "mean_response_s", "cpu_seconds"]
UTILISATION = 0.6
"""The report's utilisation; ``--utilisation`` runs others (the thesis: 40 % to 70 %)."""
Key = tuple[float, float, int, str]
"""(utilisation, Zipf skew, seed, scheduler)."""
PROPOSED = ("ata", "ata-greedy", "scta", "btaaj", "btawj")
PAIRS = (("ata", "ata-greedy", False), ("ata-greedy", "scta", True), ("scta", "btaaj", True),
         ("scta", "btawj", True))
"""The thesis's order as (a, b, strict): a <= b, or a < b when strict."""
ALPHA = 0.05


def seeds_arg(text: str) -> list[int]:
    """``2-9`` or ``2,3,5``."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def sign_test(wins: int, n: int) -> float:
    """Two-sided exact binomial p-value of ``wins`` of ``n`` under p = 1/2."""
    k = min(wins, n - wins)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n
    return min(1.0, 2.0 * tail)


def read() -> dict[Key, dict[str, str]]:
    if not CSV.exists():
        return {}
    with CSV.open() as f:
        rows = [{"utilisation": f"{UTILISATION:g}", **r} for r in csv.DictReader(f)]
    return {(float(r["utilisation"]), float(r["zipf"]), int(r["seed"]), r["scheduler"]): r
            for r in rows}


def write(rows: dict[Key, dict[str, str]]) -> None:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=FIELDS)
    w.writeheader()
    w.writerows(rows[k] for k in sorted(rows))
    write_atomic(CSV, out.getvalue())


def verdict(holds: int, n: int, p: float) -> str:
    if p < ALPHA:
        return "supported" if 2 * holds > n else "reversed"
    return "cannot tell"


def report(rows: dict[Key, dict[str, str]], zipfs: Sequence[float],
           seconds: float | None) -> str:
    body: list[list[Any]] = []
    order_rows: list[list[Any]] = []
    for u, z in sorted({(u, z) for (u, z, _, _) in rows if z in zipfs}):
        seeds = sorted({s for (uu, zz, s, k) in rows if (uu, zz) == (u, z)
                        and all((u, z, s, q) in rows for q in PROPOSED)})
        if not seeds:
            continue
        mean = {(s, q): float(rows[(u, z, s, q)]["mean_response_s"]) for s in seeds
                for q in PROPOSED}
        for a, b, strict in PAIRS:
            gaps = np.array([(mean[(s, b)] - mean[(s, a)]) / mean[(s, a)] for s in seeds])
            holds = int(np.sum(gaps > 0) if strict else np.sum(gaps >= 0))
            p = sign_test(holds, len(seeds))
            body.append([f"{100 * u:g} %", f"{z:g}",
                         f"{LABEL[a]} {'<' if strict else '<='} {LABEL[b]}",
                         f"{holds} of {len(seeds)}", f"{100 * float(np.median(gaps)):+.1f} %",
                         f"{100 * float(gaps.min()):+.1f} to {100 * float(gaps.max()):+.1f} %",
                         f"{p:.3f}", verdict(holds, len(seeds), p)])
        whole = sum(all((mean[(s, b)] > mean[(s, a)]) if st else (mean[(s, b)] >= mean[(s, a)])
                        for a, b, st in PAIRS) for s in seeds)
        avg = {q: float(np.mean([mean[(s, q)] for s in seeds])) for q in PROPOSED}
        order_rows.append([f"{100 * u:g} %", f"{z:g}", len(seeds),
                           *(f"{avg[q]:.3f}" for q in PROPOSED),
                           f"{whole} of {len(seeds)}"])
    cpu = sum(float(r["cpu_seconds"]) for r in rows.values())
    return "\n".join([
        "## The thesis's scheduler order on the Facebook trace, seed by seed",
        "",
        "Regenerate with `.venv/bin/python -m experiments run guan_orders` (see its docstring). "
        "Whole Facebook trace (24,024 jobs), 10 sites x 20 slots, 2 available sites per task, "
        "one Pareto draw per job, target utilisation 60 % (the report's) and where measured "
        "40 % and 70 % (the ends of the thesis's range).  Mean job response (s), averaged "
        "over the seeds, and the seeds in which the thesis's whole order "
        "ATA <= ATA-Greedy < SCTA < BTAAJ, BTAWJ holds:",
        "",
        table(["utilisation", "Zipf skew", "seeds", *(LABEL[q] for q in PROPOSED),
               "whole order holds"],
              order_rows),
        "",
        "Each pair, paired by seed: the seeds in which it holds, the median and range of the "
        "gap (b - a) / a, and the two-sided sign test of a coin toss (exact binomial; "
        f"*supported* / *reversed* at p < {ALPHA:g}):",
        "",
        table(["utilisation", "Zipf skew", "pair (a, b)", "holds", "median gap", "range",
               "sign test p",
               "verdict"], body),
        "",
        f"CPU time of the {len(rows)} runs: {cpu / 60:.1f} min"
        + ("" if seconds is None else f"; this invocation {seconds / 60:.1f} min wall") + ".",
    ])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="2-9")
    ap.add_argument("--zipf", default="0,1,2")
    ap.add_argument("--utilisation", default=f"{UTILISATION:g}",
                    help=f"target utilisations, comma-separated (default {UTILISATION:g})")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--report", action="store_true", help="only re-render the markdown")
    args = ap.parse_args(argv)
    zipfs = [float(z) for z in args.zipf.split(",")]
    loads = [float(u) for u in args.utilisation.split(",")]
    rows = read()
    began = time.perf_counter()
    if not args.report:
        # seed by seed, so that a run stopped early leaves whole seeds to compare
        todo = [JobCell("facebook-pareto-per-job", FACEBOOK, None, z, s, u, q)
                for u in loads for s in seeds_arg(args.seeds) for z in zipfs for q in PROPOSED
                if (u, z, s, q) not in rows]
        for c, m, _ in run_parallel(run_cell, todo, args.workers):
            rows[(c.utilisation, c.zipf, c.seed, c.scheduler)] = {
                "utilisation": f"{c.utilisation:g}", "zipf": f"{c.zipf:g}",
                "seed": str(c.seed), "scheduler": c.scheduler,
                "mean_response_s": repr(float(m["mean_response_s"])),
                "cpu_seconds": f"{float(m['cpu_seconds']):.1f}"}
            write(rows)
            print(f"  utilisation {c.utilisation:g} zipf {c.zipf:g} seed {c.seed} {c.scheduler}: "
                  f"{m['mean_response_s']:.3f} s ({m['cpu_seconds']:.0f} s CPU)", flush=True)
    md = report(rows, zipfs, None if args.report else time.perf_counter() - began)
    write_atomic(RESULTS / f"{NAME}.md", md + "\n")
    print(md)


if __name__ == "__main__":
    main()
