"""Benchmark of the core: the server procedure, the exact solver, and one DRFH linear program.

Regenerate the tables (writes ``experiments/results/core.md`` and ``core.csv``)::

    .venv/bin/python -m experiments run bench_core

Options: ``--runs R`` (timed runs per cell, default 3, at least 3 for the published table),
``--cap S`` (seconds one run may take before it is recorded as "> S s", default 300),
``--quick`` (small sizes only, for checking the script itself).

What is measured, all in one run so that the ratios compare like with like:

1. ``server_procedure`` per call against N users (10 .. 10,000), M = 4 random resources, random
   eligibility, totals and column; the median over batches of calls.  The reference in the same
   run is the floor any water-fill pays: one ``argsort`` of N numbers plus one N x M
   matrix-vector product.
2. ``solve`` in RDM and in TDM against K servers (10 .. 10,000) and N users (10, 100), and in the
   same run one ``scipy.optimize.linprog(method="highs")`` of the DRFH program on the same
   instance (the LP is written below; only the ``linprog`` call is timed, not building its
   matrices).  Clusters:

   * ``google``: K machines drawn with the proportions of Google's 2011 trace machine mix
     (``../shared/data/google2011_machines.csv``, 10 configurations), M = 2 (cpu, memory,
     normalised to the largest machine) -- at most 10 classes of identical servers, which the
     solver exploits;
   * ``hetero``: the same machines with every capacity multiplied by its own random factor in
     [0.9, 1.1], so no two servers are identical and the class shortcut does not apply (the
     solver starts from the Eisenberg-Gale program there, see
     ``psdsf_dist/core/eisenberg_gale.py``).

   Users: per-task cpu and memory demands uniform in [0.005, 0.05], weights 1 or 2, no placement
   constraints, unlimited backlog.  Every (variant, K, N) cell is its own random instance, seeded
   ``SEED + 7 K + N`` (machines and users both), so times across K compare different users too.
3. The paper's 120-server example (ORACLES 3): ``solve`` time (both modes) and the LP, target
   under 50 ms.

Times are CPU seconds of the process doing the work (``time.process_time``, all its threads):
other jobs sharing the machine inflate wall-clock times unevenly, CPU time much less.  On an
idle machine with single-threaded numpy the two agree.  Every timed run happens in a forked
child process that is killed after ``--cap`` wall-clock seconds; a
cell whose first run hits the cap is recorded as "> cap s" and larger K in the same series
are skipped (they would only be slower).  A run longer than ``REPEAT_LIMIT`` (60 s) is not
repeated, to keep the whole benchmark within about half an hour; such cells say "1 run".
"""

from __future__ import annotations

import argparse
import csv
import functools
import math
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy
import scipy.sparse as sp
from scipy.optimize import linprog

from experiments.common.paths import EXAMPLES, GOOGLE_MACHINES, RESULTS, ROOT
from psdsf_dist.core.server_procedure import server_procedure
from psdsf_dist.core.solver import solve
from psdsf_dist.model.scenario import MODES, Mode, Scenario, load_scenario

FloatArray = npt.NDArray[np.float64]

MACHINES = GOOGLE_MACHINES
PAPER_CLUSTER = EXAMPLES / "paper_cluster.yaml"
COMMAND = ".venv/bin/python -m experiments run bench_core"
SEED = 20110501
TARGET_CALL_SECONDS = 1e-3  # server_procedure at N = 1,000
TARGET_PAPER_SECONDS = 0.05  # solve of the 120-server example


# ---------------------------------------------------------------------------------------------
# instances


def google_mix() -> tuple[FloatArray, FloatArray]:
    """(machine counts, capacities 10 x 2) of the 2011 trace."""
    table = np.loadtxt(MACHINES, delimiter=",", skiprows=1, ndmin=2)
    return table[:, 0], table[:, 1:3]


def cluster_scenario(num_servers: int, num_users: int, variant: str, seed: int) -> Scenario:
    rng = np.random.default_rng(seed)
    counts, configs = google_mix()
    pick = rng.choice(len(configs), size=num_servers, p=counts / counts.sum())
    capacity = configs[pick]
    if variant == "hetero":
        capacity = capacity * rng.uniform(0.9, 1.1, size=capacity.shape)
    demand = rng.uniform(0.005, 0.05, size=(num_users, 2))
    weight = rng.choice([1.0, 2.0], size=num_users)
    doc = {
        "resources": ["cpu", "mem"],
        "servers": [
            {"name": f"m{i}", "capacity": {"cpu": float(c[0]), "mem": float(c[1])}}
            for i, c in enumerate(capacity)
        ],
        "users": [
            {"name": f"u{n}", "demand": {"cpu": float(d[0]), "mem": float(d[1])},
             "weight": float(w)}
            for n, (d, w) in enumerate(zip(demand, weight, strict=True))
        ],
    }
    return Scenario.from_dict(doc, f"{variant}-K{num_servers}-N{num_users}")


@dataclass(frozen=True)
class DrfhProgram:
    """The DRFH linear program in ``linprog`` form (variables: eligible X[n, i], then t)."""

    c: FloatArray
    a_ub: sp.csr_matrix
    b_ub: FloatArray

    def run(self) -> float:
        """Solve it; returns the optimal t (the common weighted global dominant share)."""
        res = linprog(self.c, A_ub=self.a_ub, b_ub=self.b_ub, bounds=(0, None), method="highs")
        if res.status != 0:
            raise RuntimeError(f"DRFH LP did not solve: {res.message}")
        return float(-res.fun)


def drfh_program(scenario: Scenario) -> DrfhProgram:
    """maximise t s.t. x_n = sum_i X[n, i], x_n * s_n / phi_n >= t, per-server capacities,
    X[n, i] = 0 where n is not eligible on i, X >= 0.  ``s_n`` is user n's dominant share of the
    pooled cluster per task, ``max_r D[n, r] / sum_i C[i, r]``."""
    D = scenario.demand
    C = scenario.capacity
    N, K = scenario.num_users, scenario.num_servers
    M = scenario.num_resources
    pooled = C.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(pooled > 0, D / pooled, np.where(D > 0, np.inf, 0.0)).max(axis=1)
    users, servers = np.nonzero(scenario.gamma > 0)
    nvar = len(users) + 1
    # capacity rows: (server i, resource r) -> row i*M + r; entries D[n, r] for eligible (n, i)
    r_idx = np.repeat(np.arange(M)[None, :], len(users), axis=0)
    cap_rows = (servers[:, None] * M + r_idx).ravel()
    cap_cols = np.repeat(np.arange(len(users)), M)
    cap_vals = D[users][:, :].ravel()
    keep = cap_vals > 0
    # fairness rows: t - (s_n / phi_n) * sum_i X[n, i] <= 0 -> row K*M + n
    fair_rows = K * M + users
    fair_vals = -(share / scenario.weight)[users]
    t_rows = K * M + np.arange(N)
    rows = np.concatenate([cap_rows[keep], fair_rows, t_rows])
    cols = np.concatenate([cap_cols[keep], np.arange(len(users)), np.full(N, nvar - 1)])
    vals = np.concatenate([cap_vals[keep], fair_vals, np.ones(N)])
    a_ub = sp.csr_matrix((vals, (rows, cols)), shape=(K * M + N, nvar))
    b_ub = np.concatenate([C.ravel(), np.zeros(N)])
    c = np.zeros(nvar)
    c[-1] = -1.0
    return DrfhProgram(c, a_ub, b_ub)


# ---------------------------------------------------------------------------------------------
# timing in a child process with a cap


def _child(task: Callable[[], float], conn: Connection) -> None:
    try:
        t0 = time.process_time()
        task()
        conn.send(("ok", time.process_time() - t0))
    except Exception as err:  # reported in the table, not raised: one bad cell must not end the run
        conn.send(("error", f"{type(err).__name__}: {err}".splitlines()[0][:120]))
    finally:
        conn.close()


def timed_in_child(task: Callable[[], float], cap: float) -> tuple[str, float | str]:
    """Run ``task`` once in a forked child: ("ok", seconds), ("cap", cap) or ("error", text)."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(task, child))
    proc.start()
    child.close()
    try:
        if parent.poll(cap):
            status, value = parent.recv()
            return str(status), value
        return "cap", cap
    except EOFError:
        return "error", f"child died (exit code {proc.exitcode})"
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        parent.close()


@dataclass
class Cell:
    """Median of the timed runs of one task, or why there is none."""

    seconds: float | None
    note: str = ""
    runs: int = 0

    def text(self) -> str:
        if self.seconds is None:
            return self.note
        once = " (1 run)" if self.runs == 1 else ""
        return _fmt_seconds(self.seconds) + once


REPEAT_LIMIT = 60.0  # seconds: a run longer than this is not repeated (the cell says so)


def measure(task: Callable[[], float], runs: int, cap: float) -> Cell:
    times: list[float] = []
    for _ in range(runs):
        status, value = timed_in_child(task, cap)
        if status == "cap":
            return Cell(None, f"> {cap:g} s", len(times))
        if status == "error":
            return Cell(None, f"failed ({value})", len(times))
        assert isinstance(value, float)
        times.append(value)
        if value > REPEAT_LIMIT:
            break
    return Cell(statistics.median(times), runs=len(times))


def _fmt_seconds(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1.0:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _ratio(a: Cell, b: Cell) -> str:
    if a.seconds is not None and b.seconds is not None and b.seconds > 0:
        return f"{a.seconds / b.seconds:.3g}"
    if a.seconds is None and a.note.startswith(">") and b.seconds is not None:
        return f"> {float(a.note[2:].split()[0]) / b.seconds:.3g}"
    return "-"


# ---------------------------------------------------------------------------------------------
# 1. server procedure


def server_procedure_inputs(num_users: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    M = 4
    capacity = rng.uniform(0.5, 1.0, size=M)
    consumption = rng.uniform(0.001, 0.01, size=(num_users, M))
    consumption[rng.random((num_users, M)) < 0.2] = 0.0
    consumption[consumption.sum(axis=1) == 0, 0] = 0.005
    gamma = (capacity[None, :] / np.where(consumption > 0, consumption, np.nan))
    gamma = np.nanmin(gamma, axis=1)
    gamma[rng.random(num_users) < 0.1] = 0.0  # some users not eligible here
    column = rng.uniform(0, 1, size=num_users) * (gamma > 0) / num_users
    return {
        "capacity": capacity,
        "consumption": consumption,
        "gamma": gamma,
        "weight": rng.choice([1.0, 2.0, 4.0], size=num_users),
        "totals": column + rng.uniform(0, 50, size=num_users),
        "column": column,
        "max_tasks": np.where(rng.random(num_users) < 0.2, 30.0, np.inf),
    }


def per_call_seconds(call: Callable[[], object], budget: float = 1.0, batches: int = 15) -> float:
    """Median over ``batches`` batches of the mean time per call (batch sized to the budget)."""
    t0 = time.process_time()
    call()
    once = max(time.process_time() - t0, 1e-7)
    per_batch = max(1, int(budget / batches / once))
    samples = []
    for _ in range(batches):
        t0 = time.process_time()
        for _ in range(per_batch):
            call()
        samples.append((time.process_time() - t0) / per_batch)
    return statistics.median(samples)


def bench_server_procedure(sizes: list[int]) -> list[dict[str, Any]]:
    rows = []
    for N in sizes:
        inp = server_procedure_inputs(N, SEED + N)
        order_keys = np.random.default_rng(N).random(N)

        def call(inp: dict[str, Any] = inp) -> FloatArray:
            return server_procedure(**inp, mode="rdm")

        def floor(
            keys: FloatArray = order_keys, inp: dict[str, Any] = inp
        ) -> FloatArray:
            np.argsort(keys)
            return np.asarray(inp["consumption"].T @ inp["column"])

        t = per_call_seconds(call)
        f = per_call_seconds(floor)
        rows.append({"N": N, "M": 4, "seconds": t, "floor_seconds": f, "ratio": t / f})
        print(f"server_procedure N={N}: {_fmt_seconds(t)} per call", flush=True)
    return rows


# ---------------------------------------------------------------------------------------------
# 2./3. solve vs one LP


def bench_solve(
    sizes_k: list[int], sizes_n: list[int], variants: list[str], runs: int, cap: float
) -> list[dict[str, Any]]:
    rows = []
    for variant in variants:
        for N in sizes_n:
            capped: dict[str, bool] = {key: False for key in (*MODES, "lp")}
            for K in sizes_k:
                scenario = cluster_scenario(K, N, variant, SEED + 7 * K + N)
                classes = len({tuple(c) for c in scenario.capacity.tolist()})
                cells: dict[str, Cell] = {}
                for key in (*MODES, "lp"):
                    if capped[key]:
                        cells[key] = Cell(None, "skipped (smaller K hit the cap)")
                        continue
                    task = (
                        drfh_program(scenario).run
                        if key == "lp"
                        else functools.partial(_solve_once, scenario, scenario.check_mode(key))
                    )
                    cells[key] = measure(task, runs, cap)
                    capped[key] = cells[key].seconds is None and cells[key].note.startswith(">")
                rows.append(_solve_row(variant, K, N, classes, cells))
                print(f"solve {variant} K={K} N={N}: rdm {cells['rdm'].text()}, "
                      f"tdm {cells['tdm'].text()}, LP {cells['lp'].text()}", flush=True)
    return rows


def _solve_once(scenario: Scenario, mode: Mode) -> float:
    solution = solve(scenario, mode)
    if not solution.certificate.holds:  # solve never returns an uncertified allocation
        raise RuntimeError("uncertified")
    return solution.seconds


def _solve_row(
    variant: str, K: int, N: int, classes: int, cells: dict[str, Cell]
) -> dict[str, Any]:
    row: dict[str, Any] = {"variant": variant, "K": K, "N": N, "classes": classes}
    for key, cell in cells.items():
        row[key] = cell.text()
        row[f"{key}_seconds"] = cell.seconds
        row[f"{key}_runs"] = cell.runs
    for mode in MODES:
        row[f"{mode}_ratio"] = _ratio(cells[mode], cells["lp"])
    return row


def bench_paper(runs: int, cap: float) -> dict[str, Any]:
    scenario = load_scenario(PAPER_CLUSTER)
    cells: dict[str, Cell] = {
        mode: measure(functools.partial(_solve_once, scenario, mode), max(runs, 7), cap)
        for mode in MODES
    }
    cells["lp"] = measure(drfh_program(scenario).run, max(runs, 7), cap)
    print(f"paper cluster: rdm {cells['rdm'].text()}, tdm {cells['tdm'].text()}, "
          f"LP {cells['lp'].text()}", flush=True)
    return _solve_row("paper (ORACLES 3)", 120, 4, 4, cells)


# ---------------------------------------------------------------------------------------------
# output


def write_results(
    sp_rows: list[dict[str, Any]],
    paper: dict[str, Any],
    solve_rows: list[dict[str, Any]],
    args: argparse.Namespace,
    seconds: float,
) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    with (RESULTS / "core.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["table", "variant", "K", "N", "M", "classes", "seconds", "baseline",
                    "baseline_seconds", "ratio", "note"])
        for r in sp_rows:
            w.writerow(["server_procedure", "", "", r["N"], r["M"], "", f"{r['seconds']:.6g}",
                        "argsort+matvec", f"{r['floor_seconds']:.6g}", f"{r['ratio']:.4g}", ""])
        for r in [paper, *solve_rows]:
            for mode in MODES:
                done = r[f"{mode}_seconds"] is not None and r["lp_seconds"] is not None
                note = "" if done else f"solve: {r[mode]}; lp: {r['lp']}"
                w.writerow([f"solve_{mode}", r["variant"], r["K"], r["N"], 2, r["classes"],
                            _csv_num(r[f"{mode}_seconds"]), "drfh_lp",
                            _csv_num(r["lp_seconds"]), r[f"{mode}_ratio"], note])

    call_1000 = next((r["seconds"] for r in sp_rows if r["N"] == 1000), math.nan)
    big = next((r for r in solve_rows if r["K"] == 10000 and r["N"] == 100
                and r["variant"] == "google"), None)
    big_h = next((r for r in solve_rows if r["K"] == 10000 and r["N"] == 100
                  and r["variant"] == "hetero"), None)
    lines = [
        "# Core benchmark: server procedure, exact solver, DRFH LP",
        "",
        f"Regenerate with `{COMMAND}` (from the repository root; see the script's docstring "
        "for what is measured and how).",
        "",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}; "
        f"commit {args.commit}; {args.runs} timed runs per cell (median; a run over "
        f"{REPEAT_LIMIT:g} s is not repeated, marked \"1 run\"), cap {args.cap:g} s per "
        f"run; the whole run took {seconds / 60:.1f} min.  Load average (1 min) at the start "
        f"{args.load_start:.1f}, at the end {os.getloadavg()[0]:.1f}: other work on the machine "
        "would inflate wall-clock times, so every time here is CPU time of the timed process.",
        "",
        "## server_procedure, time per call (M = 4)",
        "",
        "Reference in the same run: one `argsort` of N numbers plus one N x M matrix-vector "
        "product (a floor any exact water-fill pays).",
        "",
        "| N users | per call | argsort + matvec | ratio |",
        "|---:|---:|---:|---:|",
    ]
    for r in sp_rows:
        lines.append(f"| {r['N']:,} | {_fmt_seconds(r['seconds'])} | "
                     f"{_fmt_seconds(r['floor_seconds'])} | {r['ratio']:.1f} |")
    lines += [
        "",
        f"Target N = 1,000 under 1 ms: **{_verdict(call_1000 < TARGET_CALL_SECONDS)}** "
        f"({_fmt_seconds(call_1000) if math.isfinite(call_1000) else 'not measured'}).",
        "",
        "## solve (RDM and TDM) against one DRFH `linprog(method=\"highs\")` on the same "
        "instance",
        "",
        "`google`: machines drawn with the 2011 trace's proportions (M = 2, cpu and memory); "
        "`hetero`: the same with every capacity perturbed by its own factor in [0.9, 1.1]. "
        "`classes` = distinct server configurations. One LP per instance, beside both modes. "
        "Ratio = solve / LP (below 1: the solve is faster).",
        "",
        "| cluster | K servers | N users | classes | solve RDM | solve TDM | one DRFH LP "
        "| RDM / LP | TDM / LP |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in [paper, *solve_rows]:
        lines.append(f"| {r['variant']} | {r['K']:,} | {r['N']:,} | {r['classes']:,} | "
                     f"{r['rdm']} | {r['tdm']} | {r['lp']} | {r['rdm_ratio']} | "
                     f"{r['tdm_ratio']} |")
    lines += ["", "Targets:", ""]
    for mode in MODES:
        ps = paper[f"{mode}_seconds"]
        paper_ok = ps is not None and ps < TARGET_PAPER_SECONDS
        lines.append(f"- 120-server paper example under 50 ms ({mode.upper()}): "
                     f"**{_verdict(paper_ok)}** ({paper[mode]}).")
    for label, row in (("google", big), ("hetero", big_h)):
        for mode in MODES:
            what = f"K = 10,000, N = 100 ({label}, {mode.upper()}) no slower than one LP"
            if row is None:
                lines.append(f"- {what}: not measured.")
                continue
            solved = row[f"{mode}_seconds"]
            lp_capped = row["lp_seconds"] is None and str(row["lp"]).startswith(">")
            if solved is None and lp_capped:  # both over the cap: the race is not decided
                lines.append(f"- {what}: **not shown** (solve {row[mode]} and LP {row['lp']}: "
                             "both over the cap).")
                continue
            ok = solved is not None and (
                (row["lp_seconds"] is not None and solved <= row["lp_seconds"])
                or (lp_capped and solved < args.cap)
            )
            lines.append(f"- {what}: **{_verdict(ok)}** (solve {row[mode]}, LP {row['lp']}).")
    (RESULTS / "core.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _csv_num(v: float | None) -> str:
    return "" if v is None else f"{v:.6g}"


def _verdict(ok: bool) -> str:
    return "met" if ok else "not met"


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cap", type=float, default=300.0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    args.load_start = os.getloadavg()[0]
    args.commit = _commit()  # the code measured is the code loaded now
    t0 = time.perf_counter()
    if args.quick:
        sp_sizes, ks, ns = [10, 100, 1000], [10, 100], [10]
    else:
        sp_sizes, ks, ns = [10, 100, 1000, 10000], [10, 100, 1000, 10000], [10, 100]
    sp_rows = bench_server_procedure(sp_sizes)
    paper = bench_paper(args.runs, args.cap)
    solve_rows = bench_solve(ks, ns, ["google", "hetero"], args.runs, args.cap)
    write_results(sp_rows, paper, solve_rows, args, time.perf_counter() - t0)
    print(f"wrote {RESULTS / 'core.md'} and {RESULTS / 'core.csv'}")
    return 0
