"""Whole-task policies: utilisation, distance from the fractional PS-DSF allocation, solve time.

Regenerate (writes ``experiments/results/whole_tasks.md`` and ``whole_tasks.csv``)::

    .venv/bin/python -m experiments run whole_task_comparison

Options: ``--sizes`` (Google-mix K, default 100 1000), ``--users N`` (default 10), ``--seed S``
(``rrr-psdsf``'s seed, default 0), ``--quick`` (K = 100 only).

Clusters: the paper's 120 servers (``psdsf_dist/examples/paper_cluster.yaml``, ORACLES example 3)
and Google-mix clusters built exactly as ``bench_baselines.py`` builds them (same seeds, so the
same instances).  For every whole-task policy and for ``solve --whole-tasks`` (``psdsf-round``:
the PS-DSF allocation floored, then filled by the PS-DSF criterion), against the certified
fractional PS-DSF allocation ``X*`` of the same instance (RDM):

* utilisation: used / capacity of each resource summed over the cluster;
* ``max rel``: ``max_n |x[n] - x*[n]| / x*[n]``, the largest relative change of a user's total;
* ``L1``: ``sum_{n,i} |X[n, i] - X*[n, i]| / sum X*``, how far the placement moved;
* the time of the policy alone, beside the PS-DSF solve and two LP baselines (drfh, tsf) on the
  same instance (one run each).
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from experiments.benchmarks.bench_baselines import cluster, commit, fmt_seconds
from experiments.common.paths import EXAMPLES, RESULTS
from psdsf_dist.core.solver import solve
from psdsf_dist.model.scenario import Scenario, load_scenario
from psdsf_dist.policies import allocate
from psdsf_dist.policies.psdsf_rounding import round_psdsf
from psdsf_dist.policies.whole_task_policies import WHOLE_TASK_POLICIES

FloatArray = npt.NDArray[np.float64]
PAPER = EXAMPLES / "paper_cluster.yaml"
ROUNDING = "psdsf-round"
LP_BASELINES = ("drfh", "tsf")


def measure(name: str, sc: Scenario, seed: int) -> list[dict[str, Any]]:
    t0 = time.perf_counter()
    sol = solve(sc, "rdm")
    t_psdsf = time.perf_counter() - t0
    X_star = sol.allocation
    x_star = X_star.sum(axis=1)
    rows = [row(name, sc, "psdsf", X_star, X_star, t_psdsf)]
    for policy in LP_BASELINES:
        out = allocate(sc, policy)
        rows.append(row(name, sc, policy, out.allocation, X_star, out.seconds))
    for policy in WHOLE_TASK_POLICIES:
        out = allocate(sc, policy, seed=seed)
        rows.append(row(name, sc, policy, out.allocation, X_star, out.seconds))
    r = round_psdsf(sc, "rdm", X_star)
    rounded = row(name, sc, ROUNDING, r.allocation.astype(float), X_star, r.seconds)
    bound_ok = bool((r.totals > x_star - r.split - 1e-6).all())
    rounded["note"] = (f"max split {int(r.split.max())} servers; bound holds: {bound_ok}; "
                       f"largest loss {float(r.loss.max()):.4g} tasks")
    rows.append(rounded)
    print(f"{name}: " + ", ".join(f"{x['policy']} {fmt_seconds(x['seconds'])}" for x in rows),
          file=sys.stderr)
    return rows


def row(name: str, sc: Scenario, policy: str, X: FloatArray, X_star: FloatArray,
        seconds: float) -> dict[str, Any]:
    x, x_star = X.sum(axis=1), X_star.sum(axis=1)
    used = (X.T @ sc.demand).sum(axis=0)
    cap = sc.capacity.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(x_star > 0, np.abs(x - x_star) / x_star, np.where(x > 0, np.inf, 0.0))
    out: dict[str, Any] = {"cluster": name, "K": sc.num_servers, "N": sc.num_users,
                           "policy": policy, "tasks": float(x.sum()),
                           "whole": bool(np.array_equal(X, np.round(X)))}
    for j, r in enumerate(sc.resources):
        out[f"util_{r}"] = float(used[j] / cap[j]) if cap[j] > 0 else float("nan")
    out["max_rel"] = float(rel.max())
    out["l1"] = float(np.abs(X - X_star).sum() / X_star.sum())
    out["seconds"] = seconds
    out["note"] = ""
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sizes = [k for k in args.sizes if k <= 100] if args.quick else args.sizes
    started = time.perf_counter()
    rows = measure("paper", load_scenario(PAPER), args.seed)
    for K in sizes:
        rows += measure(f"google K={K}", cluster("google", K, args.users), args.seed)
    elapsed = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = args.out / "whole_tasks.csv.tmp"
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        fields = sorted({k for r in rows for k in r}, key=lambda k: list(rows[0]).index(k)
                        if k in rows[0] else 99)
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, args.out / "whole_tasks.csv")
    (args.out / "whole_tasks.md").write_text(markdown(rows, args, elapsed), encoding="utf-8")
    return 0


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace, elapsed: float) -> str:
    lines = [
        "# Whole-task policies against the fractional PS-DSF allocation",
        "",
        "Regenerate with `.venv/bin/python -m experiments run whole_task_comparison` (the "
        "script's docstring says what is measured).",
        "",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}; commit {commit()}; N = {args.users} users on the Google "
        f"mix; rrr-psdsf seed {args.seed}; one run per cell (the machine is shared: read times "
        f"as orders of magnitude); the whole run took {elapsed / 60:.1f} min.",
        "",
        "`max rel` = max over users of |x - x*| / x*; `L1` = sum |X - X*| / sum X* over (user, "
        "server); both against the certified fractional PS-DSF allocation X* (RDM) of the same "
        "instance.  `psdsf-round` is `solve --whole-tasks`.  drfh and tsf are the fractional LP "
        "baselines, for scale.",
    ]
    for name in dict.fromkeys(r["cluster"] for r in rows):
        mine = [r for r in rows if r["cluster"] == name]
        res = [k[5:] for k in mine[0] if k.startswith("util_")]
        lines += ["", f"## {name} (K = {mine[0]['K']:,}, N = {mine[0]['N']})", "",
                  "| policy | whole | tasks | " + " | ".join(f"{r} used" for r in res)
                  + " | max rel | L1 | time |",
                  "|---|---|---:|" + "---:|" * len(res) + "---:|---:|---:|"]
        for r in mine:
            util = " | ".join(f"{100 * r['util_' + x]:.1f} %" for x in res)
            lines.append(f"| {r['policy']} | {'yes' if r['whole'] else 'no'} | "
                         f"{r['tasks']:,.1f} | {util} | {r['max_rel']:.3f} | {r['l1']:.3f} | "
                         f"{fmt_seconds(r['seconds'])} |")
        notes = [f"{r['policy']}: {r['note']}" for r in mine if r["note"]]
        if notes:
            lines += ["", *notes]
    return "\n".join(lines) + "\n"
