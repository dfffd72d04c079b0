"""How long users wait for a fair share: rounds until every user's total stays within 5 % / 1 %
/ 0.1 % of a PS-DSF allocation, beside rounds until the certificate (rtol 1e-3) holds.

The distance is :mod:`psdsf_dist.protocol.distance`'s: the largest relative gap of a user's total
to the nearest known certified PS-DSF totals.  "Rounds to X" is the first round from which the
distance stays below X through the end of the phase (the next event, or the end of the run);
"certificate" the first round from which the certificate held ``HOLD`` (20) rounds in a row.
Settings, in the same run:

* lock-step (``psdsf_dist/simulator/lockstep.py``): every server at once on the totals one round
  stale, the default rule ``split``; the set of known PS-DSF totals is the cold solve's, a warm
  solve from the run's last allocation and, for a run that certified, the allocation the same
  dynamics reach from there at the solver's tolerance 1e-9 (``EXACT_ROUNDS`` more at most): the
  allocation the run settles on, exactly;
* sequential: exact sweeps, one server at a time on fresh totals (one sweep = one round), the
  same measure (the continuation is skipped from K = 1,000, for time);
* runtime setting: the simulator with ``ProtocolConfig()`` defaults (message-level Scuttlebutt
  gossip, random phases, jitter 0.2) and the distance computed online by ``observe``, as
  ``simulate`` and ``run`` report it.  The message-level simulator costs ~1 s per round at
  K = N = 100, so it runs on the suite's scenarios with K <= ``--sim-max-k`` servers, the paper
  cluster with its churn and ``--sim-google`` Google-mix clusters (``100:5``: five at K = 100).

Cases: the random suite (``rule_study.suite_scenario``; the published run used its first 60
of 200 scenarios to stay within ~10 minutes on two loaded cores), the Google 2011 mix (N = 100)
at K = 100 (five clusters), 1,000 (two) and 10,000 (one, lock-step only: a sequential sweep
costs 10,000 best responses), and the paper's 120-server cluster (from zero, u4 leaves, u4
rejoins).  Writes ``experiments/results/distance_to_fair.{md,csv,png}``.
Usage: ``.venv/bin/python -m experiments run distance_to_fair --suite 60 --sim-google 100:5
--seq-cap 300`` (1,410 s on 2 workers).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from multiprocessing import Pool
from typing import Any

import numpy as np
import numpy.typing as npt

from experiments.common.paths import RESULTS
from experiments.common.sim_common import HOLD, table, write_atomic, write_csv
from experiments.studies.rule_study import PAPER, churn_runs, suite_scenario
from psdsf_dist.core.certificate import DEFAULT_RTOL, certificate
from psdsf_dist.model.random_scenarios import google_cluster
from psdsf_dist.model.scenario import Scenario, load_scenario
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.convergence import final_run_of_holds
from psdsf_dist.protocol.distance import (
    THRESHOLDS,
    distance_to_fair,
    forget,
    known_totals,
    relative_gap,
)
from psdsf_dist.protocol.update_rule import DEFAULT_RULE, UpdateRule, make_rule
from psdsf_dist.simulator.lockstep import Run, active_scenario, run, sequential
from psdsf_dist.simulator.simulation import SimConfig, SimulationResult, simulate

FloatArray = npt.NDArray[np.float64]
NAME = "distance_to_fair"
RTOL = 1e-3
SETTINGS = ("lock-step split", "sequential sweeps", "runtime (simulate defaults)")
COLORS = dict(zip(SETTINGS, ("tab:orange", "tab:green", "tab:blue"), strict=True))
"""One colour per setting in every panel of the plot."""
Row = dict[str, Any]


def settle(flags: Sequence[bool]) -> int | None:
    """Index from which every flag is true through the end (None: the last is false)."""
    return final_run_of_holds(list(flags), 1, open_ended=False)


EXACT_ROUNDS = 1000
"""Rounds a run that certified (rtol 1e-3) is continued, by the same dynamics, towards the
solver's own tolerance (1e-9): the PS-DSF allocation it settles on then joins the known set
exactly, instead of through a warm solve that may land on another one (``distance.py``)."""


def lockstep_row(case: str, seed: int | None, phase: str, setting: str, scenario: Scenario,
                 r: Run, cap: int, exact: Run | None = None) -> Row:
    """Rounds to each threshold of a lock-step or sequential run (trace index = round);
    ``exact``: the run continued towards rtol 1e-9 (see ``EXACT_ROUNDS``)."""
    final = r.allocation
    residual = certificate(scenario, final, rtol=RTOL).residual
    distance_to_fair(scenario, final, "rdm", residual)  # adds the run's own PS-DSF allocation
    if exact is not None:
        distance_to_fair(scenario, exact.allocation, "rdm", exact.residuals[-1])
    known = known_totals(scenario, "rdm")
    dist = [min((relative_gap(x, c) for c in known), default=math.inf) for x in r.totals]
    row: Row = {"case": case, "seed": "" if seed is None else seed, "phase": phase,
                "setting": setting, "K": scenario.num_servers, "N": scenario.num_users,
                "cap": cap, "rounds": len(r.totals) - 1}
    for t in THRESHOLDS:
        row[f"within_{t:g}"] = settle([d < t for d in dist])
    row["certificate"] = r.converged_round
    row["final_distance"] = f"{dist[-1]:.3g}"
    row["trace"] = dist
    return row


SEQ_CAP = {"small": 100, "large": 30}
"""Sweep caps of the sequential reference (one sweep costs K best responses: 4 s at K = 1,000
on the loaded 2-core machine); set from the command line."""


def lockstep_job(job: tuple[str, int | None, int, int]) -> list[Row]:
    case, seed, K, cap = job
    seq_cap = SEQ_CAP["large" if K >= 1000 else "small"]
    rule = make_rule(DEFAULT_RULE)
    if case == "paper":
        sc = load_scenario(PAPER)
        runs = churn_runs(sc, rule, cap, 0, None)
        leaving = np.array([n != "u4" for n in sc.user_names])
        scs = [sc, active_scenario(sc, leaving), sc]
        rows = [lockstep_row(case, None, ph, SETTINGS[0], s, r, cap, exactly(s, r, rule))
                for ph, s, r in zip(("from zero", "u4 leaves", "u4 rejoins"), scs, runs,
                                    strict=True)]
        seq = sequential(sc, rounds=seq_cap, rtol=RTOL, hold=HOLD)
        return [*rows, lockstep_row(case, None, "from zero", SETTINGS[1], sc, seq, seq_cap,
                                    exactly(sc, seq, None))]
    sc = suite_scenario(int(seed or 0)) if case == "suite" else google_cluster(
        np.random.default_rng(seed), K=K, N=100)
    name = case if case == "suite" else f"google K={K}"
    r = run(sc, rule, rounds=cap, rtol=RTOL, hold=HOLD)
    rows = [lockstep_row(name, seed, "from zero", SETTINGS[0], sc, r, cap,
                         exactly(sc, r, rule))]
    if K <= 1000:
        seq = sequential(sc, rounds=seq_cap, rtol=RTOL, hold=HOLD)
        rows.append(lockstep_row(name, seed, "from zero", SETTINGS[1], sc, seq, seq_cap,
                                 exactly(sc, seq, None) if K < 1000 else None))
    return rows


def exactly(scenario: Scenario, r: Run, rule: UpdateRule | None) -> Run | None:
    """``r`` continued by the same dynamics (``rule`` in lock-step, or sequential sweeps for
    None) until the certificate holds to 1e-9, at most ``EXACT_ROUNDS`` rounds; None if ``r``
    did not certify (rtol 1e-3)."""
    if r.converged_round is None:
        return None
    if rule is None:
        return sequential(scenario, rounds=EXACT_ROUNDS, rtol=DEFAULT_RTOL, hold=1,
                          start=r.allocation)
    return run(scenario, rule, rounds=EXACT_ROUNDS, rtol=DEFAULT_RTOL, hold=1,
               start=r.allocation, states=r.states, lineage=r.lineage)


def sim_job(job: tuple[str, int | None, int, int]) -> list[Row]:
    case, seed, K, cap = job
    if case == "paper":
        sc, name = load_scenario(PAPER), "paper"
    elif case == "suite":
        sc, name = suite_scenario(int(seed or 0)), "suite"
    else:
        sc, name = google_cluster(np.random.default_rng(seed), K=K, N=100), f"google K={K}"
    protocol = ProtocolConfig(seed=0 if seed is None else seed, hold=HOLD)
    began = time.perf_counter()
    res = simulate(sc, SimConfig(protocol=protocol, rounds=cap, stop_after_hold=HOLD))
    return sim_rows(name, seed, sc, res, cap, SETTINGS[2], time.perf_counter() - began)


def sim_rows(name: str, seed: int | None, sc: Scenario, res: SimulationResult, cap: int,
             setting: str, seconds: float) -> list[Row]:
    """Rounds to each threshold of a simulation, per event (the distance observed online)."""
    T = res.config.protocol.period
    rows = []
    marks = [ev.at for ev in res.events]
    for j, ev in enumerate(res.events):
        end = marks[j + 1] if j + 1 < len(marks) else math.inf
        window = [o for o in res.trace if ev.at <= o.time < end]
        row: Row = {"case": name, "seed": "" if seed is None else seed,
                    "phase": "from zero" if ev.description == "start" else ev.description,
                    "setting": setting, "K": sc.num_servers, "N": sc.num_users, "cap": cap,
                    "rounds": len(window)}
        for t in THRESHOLDS:
            at = settle([o.distance is not None and o.distance < t for o in window])
            row[f"within_{t:g}"] = None if at is None else max(
                math.ceil((window[at].time - ev.at) / T - 1e-9), 0)
        row["certificate"] = ev.rounds
        last = window[-1].distance if window else None
        row["final_distance"] = "" if last is None else f"{last:.3g}"
        row["seconds"] = round(seconds, 1)
        row["trace"] = [math.inf if o.distance is None else o.distance for o in window]
        rows.append(row)
    return rows


def dispatch(job: tuple[str, str, int | None, int, int, dict[str, int]]) -> list[Row]:
    kind, case, seed, K, cap, seq_cap = job
    SEQ_CAP.update(seq_cap)
    forget()  # each run's distance from what that run found alone
    return sim_job((case, seed, K, cap)) if kind == "sim" else lockstep_job((case, seed, K, cap))


def stat(values: Sequence[int | None], q: float) -> float:
    arr = np.array([math.inf if v is None else float(v) for v in values])
    return float(np.quantile(arr, q, method="higher")) if len(arr) else math.nan


def show(x: float, cap: int) -> str:
    return f">{cap}" if math.isinf(x) else ("-" if math.isnan(x) else f"{x:g}")


def report(rows: list[Row], cap: int, seconds: float, sim_max_k: int, suite: int,
           caps: dict[str, int]) -> str:
    groups: dict[tuple[str, str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r["case"], r["phase"], r["setting"]), []).append(r)
    order = ["suite", "google K=100", "google K=1000", "google K=10000", "paper"]
    keys = sorted(groups, key=lambda k: (order.index(k[0]) if k[0] in order else 9,
                                         k[1] != "from zero", k[1], SETTINGS.index(k[2])))
    measures = [*(f"within_{t:g}" for t in THRESHOLDS), "certificate"]
    body = []
    for key in keys:
        g = groups[key]
        cells = []
        for m in measures:
            vals = [r[m] for r in g]
            done = sum(v is not None for v in vals)
            c = int(g[0]["cap"])
            cells.append(f"{done}/{len(g)}: {show(stat(vals, 0.5), c)} / "
                         f"{show(stat(vals, 0.95), c)}")
        body.append([key[0], key[1], key[2], *cells])
    head = ["case", "phase", "setting", "within 5 %", "within 1 %", "within 0.1 %",
            "certificate 1e-3"]
    ratio_lines = []
    for case in ("suite", "google K=100", "google K=1000", "paper"):
        seq = [r["within_0.01"] for r in groups.get((case, "from zero", SETTINGS[1]), [])]
        for setting in (SETTINGS[0], SETTINGS[2]):
            got = groups.get((case, "from zero", setting), [])
            if not got or not seq:
                continue
            seeds = {r["seed"] for r in got}
            ref = [r["within_0.01"] for r in groups[(case, "from zero", SETTINGS[1])]
                   if r["seed"] in seeds]
            p_rule, p_seq = stat([r["within_0.01"] for r in got], 0.95), stat(ref, 0.95)
            verdict = ("met" if p_rule <= 2 * p_seq else "not met") if math.isfinite(
                p_seq) else "not shown (sequential capped)"
            c_seq = int(groups[(case, "from zero", SETTINGS[1])][0]["cap"])
            ratio_lines.append(f"- {case}, {setting}: p95 rounds to 1 % {show(p_rule, cap)} "
                               f"against sequential sweeps' {show(p_seq, c_seq)} on the same "
                               f"{len(got)} scenarios: **{verdict}** (target: at most 2x)")
    return "\n".join([
        "## Distance to fair: rounds until users are within 5 % / 1 % / 0.1 % of fair",
        "",
        "Regenerate with `.venv/bin/python -m experiments run distance_to_fair` (see its "
        "docstring).  Each cell: runs that got there / median / p95 rounds (a run that did "
        "not counts as above "
        f"the cap: {cap} rounds; sequential sweeps {caps['small']} sweeps, "
        f"{caps['large']} from K = 1,000, for time).  Distance: the largest relative gap of a "
        "user's total to the "
        "nearest known certified PS-DSF totals (`psdsf_dist/protocol/distance.py`); a "
        "threshold counts from the round after which the distance stays below it until the "
        "next event or the end.  Certificate: rtol 1e-3 held 20 rounds in a row.  Lock-step: "
        "the default rule `split`, totals one round stale.  Sequential: exact sweeps on fresh "
        "totals (a sweep is a round).  Runtime: the simulator with `ProtocolConfig()` defaults, "
        "distance computed online; run on the suite's scenarios with K <= "
        f"{sim_max_k} only, the paper cluster with its churn and the Google-mix clusters "
        "with a runtime row (message-level simulation costs ~1 s per round at K = N = 100, "
        "too slow for the larger ones here).  Google mix: clusters per size as in the table; "
        "K = 10,000 lock-step only.  Suite: the first "
        f"{suite} seeded scenarios of `rule_study.py`'s.",
        "",
        table(head, body),
        "",
        "Issue 16's target (p95 rounds to 1 % at most twice sequential sweeps' in the same run):",
        "",
        *ratio_lines,
        "",
        f"Whole study: {seconds:.0f} s on the workers given.",
    ])


def plot(rows: list[Row]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharey=True)
    for ax, case in zip(axes, ("google K=100", "google K=1000", "paper"), strict=True):
        for r in rows:
            if r["case"] != case or r["phase"] != "from zero" or r["seed"] not in ("", 0):
                continue
            tr = np.maximum(np.array(r["trace"], dtype=float), 1e-7)
            ax.semilogy(np.arange(len(tr)), tr, label=r["setting"], color=COLORS[r["setting"]])
        for t in THRESHOLDS:
            ax.axhline(t, color="grey", lw=0.6, ls=":")
        ax.set_title(f"{case}, from zero" + (" (seed 0)" if case != "paper" else ""))
        ax.set_xlabel("round")
    axes[0].set_ylabel("distance to fair (max relative gap of a total)")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / f"{NAME}.png", dpi=110)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", type=int, default=200)
    ap.add_argument("--cap", type=int, default=300)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--google", default="100:5,1000:2,10000:1",
                    help="Google-mix sizes and clusters per size (seeds 0..)")
    ap.add_argument("--seq-cap", type=int, default=100,
                    help="sweep cap of the sequential reference below K = 1,000")
    ap.add_argument("--seq-cap-large", type=int, default=30,
                    help="sweep cap of the sequential reference from K = 1,000")
    ap.add_argument("--sim-max-k", type=int, default=60,
                    help="largest suite scenario run in the message-level simulator")
    ap.add_argument("--sim-google", default="",
                    help="Google-mix sizes and clusters per size run in the simulator too "
                         "(as --google; empty: none)")
    args = ap.parse_args(argv)
    began = time.perf_counter()
    caps = {"small": args.seq_cap, "large": args.seq_cap_large}
    jobs: list[tuple[str, str, int | None, int, int, dict[str, int]]] = []
    for spec in (x for x in args.sim_google.split(",") if x):
        k, n = (int(v) for v in spec.split(":"))
        jobs.extend(("sim", "google", s, k, args.cap, caps) for s in range(n))
    jobs.append(("sim", "paper", None, 120, 400, caps))
    for spec in (x for x in args.google.split(",") if x):
        k, n = (int(v) for v in spec.split(":"))
        for s in range(n):
            jobs.append(("lockstep", "google", s, k, args.cap, caps))
    jobs.append(("lockstep", "paper", None, 120, args.cap, caps))
    for s in range(args.suite):
        jobs.append(("lockstep", "suite", s, 0, args.cap, caps))
        if suite_scenario(s).num_servers <= args.sim_max_k:
            jobs.append(("sim", "suite", s, 0, args.cap, caps))
    with Pool(args.workers) as pool:
        rows = [r for rs in pool.imap_unordered(dispatch, jobs) for r in rs]
    seconds = time.perf_counter() - began
    write_csv(RESULTS / f"{NAME}.csv", [{k: v for k, v in r.items() if k != "trace"}
                                        for r in sorted(rows, key=lambda r: (
                                            r["case"], str(r["seed"]), r["phase"],
                                            r["setting"]))])
    plot(rows)
    md = report(rows, args.cap, seconds, args.sim_max_k, args.suite, caps)
    write_atomic(RESULTS / f"{NAME}.md", md + "\n")
    print(md)
