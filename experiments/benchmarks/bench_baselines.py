"""Benchmark: the LP baselines against the number of servers K, beside the PS-DSF solve.

Regenerate the tables (writes ``experiments/results/baselines.md`` and ``baselines.csv``)::

    .venv/bin/python -m experiments run bench_baselines

Options: ``--runs R`` (timed runs per cell, median reported; default 3), ``--sizes`` (default
10 30 100 300 1000 2000), ``--users N`` (default 10), ``--cap S`` (a policy whose median passes S
seconds - or one run does, which then stands alone - is not run at larger K of that cluster
kind; default 10), ``--quick`` (K <= 100, for
checking the script).

For every K, in the same run and on the same instance, each policy is timed end to end through
``psdsf_dist.policies.allocate`` (building the LPs included); the reference is the PS-DSF solve
(``psdsf``) of that instance, and each policy's median is also given as a ratio to it.
Clusters (seeded, ``SEED``):

* ``google``: K machines in the proportions of Google's 2011 machine mix (10 configurations,
  cpu and memory normalised to the largest machine); at most 10 classes of identical servers,
  which the PS-DSF solver exploits and the LPs do not;
* ``hetero``: the same machines with each capacity scaled by its own factor in [0.9, 1.1], so no
  two servers are identical.

Users: N users with demands 0.2-5 % of the largest machine, weights in {1, 2, 4}, each restricted
to a random subset of machine configurations with probability 0.2; unlimited backlogs.  Each user
also declares three task groups (read only by the AMF family, ignored by every other policy): a
group of a random tenth of its allowed machines (at least one), of 5-20 tasks per machine in it.

``--policies P ...`` times only those (the reference ``psdsf`` is always run) and ``--name STEM``
writes ``STEM.md``/``STEM.csv`` instead of ``baselines.*``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy

from experiments.common.paths import RESULTS, ROOT
from experiments.common.sim_common import write_csv
from psdsf_dist.model.random_scenarios import google_cluster_doc
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.policies import allocate

SEED = 20260
POLICIES = ("psdsf", "drfh", "c-drfh", "tsf", "cdrf", "drf", "per-server-drf", "mnw", "cru", "amf",
            "amf-si", "gamf", "gamf-si")
REFERENCE = "psdsf"
KINDS = ("google", "hetero")


def cluster(kind: str, K: int, N: int) -> Scenario:
    rng = np.random.default_rng(SEED + K)
    doc: dict[str, Any] = google_cluster_doc(rng, K=K, N=N, placement_prob=0.2)
    if kind == "hetero":
        servers = []
        for entry in doc["servers"]:
            for k in range(entry["count"]):
                cap = {r: round(v * float(rng.uniform(0.9, 1.1)), 6)
                       for r, v in entry["capacity"].items()}
                servers.append({"name": f"{entry['name']}-{k + 1}", "capacity": cap})
        # placement by configuration name becomes the list of that configuration's machines
        members = {e["name"]: [f"{e['name']}-{k + 1}" for k in range(e["count"])]
                   for e in doc["servers"]}
        for user in doc["users"]:
            if "servers" in user:
                user["servers"] = [m for c in user["servers"] for m in members[c]]
        doc["servers"] = servers
    add_task_groups(doc, rng)
    return Scenario.from_dict(doc, f"{kind} K={K}")


def add_task_groups(doc: dict[str, Any], rng: np.random.Generator) -> None:
    """Three task groups per user over random tenths of its allowed machines (AMF family)."""
    members = {e["name"]: [f"{e['name']}-{k + 1}" if "count" in e else e["name"]
                           for k in range(e.get("count", 1))] for e in doc["servers"]}
    everywhere = [m for ms in members.values() for m in ms]
    for user in doc["users"]:
        allowed = ([m for c in user["servers"] for m in members.get(c, [c])]
                   if "servers" in user else everywhere)
        groups = []
        for _ in range(3):
            size = max(1, len(allowed) // 10)
            at = [str(m) for m in rng.choice(allowed, size=size, replace=False)]
            groups.append({"servers": at, "tasks": round(float(rng.uniform(5, 20)) * size, 3)})
        user["task_groups"] = groups


def time_policy(scenario: Scenario, policy: str, runs: int, cap: float) -> tuple[float, int]:
    """Median seconds over ``runs`` calls (fewer once one passes ``cap``), LP solves of one."""
    seconds = []
    lp_solves = 0
    for _ in range(runs):
        t0 = time.perf_counter()
        out = allocate(scenario, policy)
        seconds.append(time.perf_counter() - t0)
        lp_solves = out.lp_solves
        if seconds[-1] > cap:
            break
    return statistics.median(seconds), lp_solves


def fmt_seconds(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1.0:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 30, 100, 300, 1000, 2000])
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--cap", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument("--name", default="baselines")
    args = parser.parse_args(argv)
    chosen = [p for p in POLICIES if p == REFERENCE or p in args.policies]
    sizes = [k for k in args.sizes if k <= 100] if args.quick else args.sizes
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for kind in KINDS:
        skipped: set[str] = set()
        for K in sizes:
            sc = cluster(kind, K, args.users)
            timings: dict[str, tuple[float, int]] = {}
            for policy in chosen:
                if policy in skipped:
                    continue
                timings[policy] = time_policy(sc, policy, args.runs, args.cap)
                if timings[policy][0] > args.cap:
                    skipped.add(policy)
            ref = timings.get(REFERENCE)
            for policy, (sec, lps) in timings.items():
                rows.append({"cluster": kind, "K": K, "N": args.users, "policy": policy,
                             "median_s": sec, "lp_solves": lps,
                             "ratio_to_psdsf": sec / ref[0] if ref else float("nan")})
            print(f"{kind} K={K}: " + ", ".join(f"{p} {fmt_seconds(t)}"
                                                for p, (t, _) in timings.items()),
                  file=sys.stderr)
    elapsed = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / f"{args.name}.csv", rows)
    (args.out / f"{args.name}.md").write_text(markdown(rows, args, elapsed), encoding="utf-8")
    return 0


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace, elapsed: float) -> str:
    lines = [
        "# Baselines benchmark: LP policies against K, beside the PS-DSF solve",
        "",
        "Regenerate with `.venv/bin/python -m experiments run bench_baselines` (from the "
        "repository root; the script's docstring says what is measured).",
        "",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}; "
        f"commit {commit()}; N = {args.users} users; median of {args.runs} runs per cell; "
        f"the whole run took {elapsed / 60:.1f} min.",
        "",
        "Each cell: median time of `allocate(scenario, policy)` (LP building included), and in "
        "brackets its ratio to the PS-DSF solve of the same instance in the same run.  LP policies "
        "are solved by HiGHS (`psdsf_dist/policies/lp.py`), one LP per progressive-filling round "
        "(counted under each table).  Beyond a policy's cap (`--cap`) larger K are not run; "
        "ratios then have no reference.",
    ]
    for kind in KINDS:
        mine = [r for r in rows if r["cluster"] == kind]
        sizes = sorted({r["K"] for r in mine})
        policies = [p for p in POLICIES if any(r["policy"] == p for r in mine)]
        what = ("at most 10 classes of identical servers" if kind == "google"
                else "every server different")
        lines += ["", f"## {kind} cluster ({what})", "",
                  "| K | " + " | ".join(policies) + " |",
                  "|---:|" + "---:|" * len(policies)]
        for K in sizes:
            cells = []
            for p in policies:
                hit = [r for r in mine if r["K"] == K and r["policy"] == p]
                if not hit:
                    cells.append(f"> {args.cap:g} s at smaller K")
                    continue
                r = hit[0]
                cell = fmt_seconds(r["median_s"])
                if p != REFERENCE and np.isfinite(r["ratio_to_psdsf"]):
                    cell += f" ({r['ratio_to_psdsf']:.3g}x)"
                cells.append(cell)
            lines.append(f"| {K:,} | " + " | ".join(cells) + " |")
        largest = max(sizes)
        lps = {r["policy"]: r["lp_solves"] for r in mine if r["K"] == largest}
        lines += ["", f"LP solves at K = {largest:,}: " + ", ".join(
            f"{p} {n}" for p, n in lps.items() if p not in (REFERENCE, "per-server-drf", "mnw"))
            + "."]
    return "\n".join(lines) + "\n"
