"""The largest scenarios ``psdsf-dist solve`` handles here: time and peak memory.

Regenerate (writes ``experiments/results/limits.md`` and ``limits.csv``; ~20 minutes)::

    .venv/bin/python -m experiments run bench_limits

Each case is a Google 2011 mix cluster (``google_cluster_doc``, seed 1, 2 resources, N users
with demands of 0.2-5 % of the largest machine) written as a JSON file, then solved by the
installed command in a fresh process — ``psdsf-dist solve FILE`` (the text report) and
``psdsf-dist solve FILE --json -o OUT`` (every server's allocation) — under ``/usr/bin/time``:
wall seconds and the process's peak resident memory.  Servers come either as the trace's
classes of identical machines (``count``; the solver works per class) or as that many distinct
servers (each its own class: the worst case for the solver).  Each case runs once (these are
capacity figures, minutes each; the machine is noisy, so read them to within 20 %), with a cap
of ``--cap`` seconds.  The last rows are inputs refused by the limits (``model/limits.py``):
how long the refusal takes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from experiments.common.paths import RESULTS
from experiments.common.sim_common import write_csv
from psdsf_dist.model.random_scenarios import google_cluster_doc

CASES: list[tuple[str, int, int]] = [
    ("classes", 12_583, 10),
    ("classes", 12_583, 100),
    ("classes", 12_583, 1_000),
    ("classes", 100_000, 100),
    ("classes", 1_000_000, 10),
    ("classes", 1_000_000, 20),
    ("distinct", 1_000, 10),
    ("distinct", 10_000, 10),
    ("distinct", 100_000, 10),
]


def scenario_doc(kind: str, K: int, N: int) -> dict[str, Any]:
    doc = google_cluster_doc(np.random.default_rng(1), K=K, N=N)
    if kind == "distinct":
        servers, members = [], {}
        for s in doc["servers"]:
            members[s["name"]] = [f"{s['name']}-{k + 1}" for k in range(s["count"])]
            servers += [{"name": m, "capacity": s["capacity"], "labels": s["labels"]}
                        for m in members[s["name"]]]
        doc["servers"] = servers
        for user in doc["users"]:  # placement by class name: by the members' names
            if "servers" in user:
                user["servers"] = [m for c in user["servers"] for m in members[c]]
    return doc


def timed(args: list[str], cap: float) -> dict[str, Any]:
    """Wall seconds and peak RSS of one command (``/usr/bin/time``), or why it stopped."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        command = ["/usr/bin/time", "-f", "%e %M", "-o", report.name,
                   "timeout", str(int(cap)), *args]
        proc = subprocess.run(command, capture_output=True, text=True, check=False)
        fields = (report.read().strip().splitlines() or [""])[-1].split()
    seconds = float(fields[0]) if len(fields) == 2 else float("nan")
    rss_mib = float(fields[1]) / 1024 if len(fields) == 2 else float("nan")
    status = {0: "ok", 124: f"over {cap:g} s"}.get(proc.returncode,
                                                   f"exit {proc.returncode}")
    return {"seconds": seconds, "rss_mib": rss_mib, "status": status,
            "stderr": proc.stderr.strip().splitlines()[-1:] if proc.returncode else []}


def solve_command(path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "psdsf_dist.cli.main", "solve", str(path), *extra]


def run_case(kind: str, K: int, N: int, cap: float, work: Path) -> dict[str, Any]:
    path = work / f"{kind}_{K}_{N}.json"
    began = time.perf_counter()
    path.write_text(json.dumps(scenario_doc(kind, K, N)))
    row: dict[str, Any] = {"servers": kind, "K": K, "N": N,
                           "file_mib": path.stat().st_size / 2**20,
                           "write_s": time.perf_counter() - began}
    text = timed(solve_command(path, "-o", str(work / "out.txt")), cap)
    row.update({f"text_{k}": v for k, v in text.items() if k != "stderr"})
    out = work / "out.json"
    js = timed(solve_command(path, "--json", "-o", str(out)), cap)
    row.update({f"json_{k}": v for k, v in js.items() if k != "stderr"})
    row["json_out_mib"] = out.stat().st_size / 2**20 if js["status"] == "ok" else float("nan")
    row["certified"] = (json.loads(out.read_text())["certificate"]["holds"]
                        if js["status"] == "ok" else None)
    out.unlink(missing_ok=True)
    path.unlink()
    print(f"  {kind} K={K:,} N={N:,}: text {text['seconds']:.1f} s {text['rss_mib']:.0f} MiB "
          f"({text['status']}), json {js['seconds']:.1f} s {js['rss_mib']:.0f} MiB "
          f"({js['status']}) {text['stderr'] + js['stderr']}", flush=True)
    return row


def refusals(work: Path) -> list[dict[str, Any]]:
    docs = {
        "one class of 1,000,000,000 servers": {
            "resources": ["cpu"], "servers": [{"name": "s", "count": 1_000_000_000,
                                               "capacity": {"cpu": 1}}],
            "users": [{"name": "u", "demand": {"cpu": 1}}]},
        "weights 1e-300 and 1e300": {
            "resources": ["cpu"], "servers": [{"name": "s", "capacity": {"cpu": 1}}],
            "users": [{"name": "a", "demand": {"cpu": 1}, "weight": 1e-300},
                      {"name": "b", "demand": {"cpu": 1}, "weight": 1e300}]},
    }
    rows = []
    for what, doc in docs.items():
        path = work / "refused.json"
        path.write_text(json.dumps(doc))
        began = time.perf_counter()
        proc = subprocess.run(solve_command(path), capture_output=True, text=True, check=False)
        rows.append({"input": what, "seconds": time.perf_counter() - began,
                     "exit": proc.returncode, "message": proc.stderr.strip()})
    (work / "refused.json").unlink()
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cap", type=float, default=600.0, help="seconds per command")
    ap.add_argument("--quick", action="store_true", help="the three smallest cases")
    args = ap.parse_args(argv)
    cases = CASES[:1] + CASES[6:7] if args.quick else CASES
    RESULTS.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for kind, K, N in cases:
            rows.append(run_case(kind, K, N, args.cap, work))
        refused = refusals(work)
    suffix = "_quick" if args.quick else ""
    write_csv(RESULTS / f"limits{suffix}.csv", rows)

    def cell(r: dict[str, Any], k: str) -> str:
        if r[f"{k}_status"] != "ok":
            return str(r[f"{k}_status"])
        return f"{r[f'{k}_seconds']:.1f} s, {r[f'{k}_rss_mib']:,.0f} MiB"

    lines = ["| servers | K | N | user x server cells | file (MiB) | `solve` (text) | "
             "`solve --json` | JSON out (MiB) | certified |", "|---" * 9 + "|"]
    for r in rows:
        lines.append(f"| {r['servers']} | {r['K']:,} | {r['N']:,} | {r['K'] * r['N']:,} | "
                     f"{r['file_mib']:.2f} | {cell(r, 'text')} | {cell(r, 'json')} | "
                     f"{r['json_out_mib']:.1f} | {r['certified']} |")
    lines += ["", "| refused input | seconds | exit | message |", "|---|---|---|---|"]
    for r in refused:
        lines.append(f"| {r['input']} | {r['seconds']:.2f} | {r['exit']} | `{r['message']}` |")
    table = "\n".join(lines)
    (RESULTS / f"limits{suffix}.md").write_text(table + "\n")
    print(table)
