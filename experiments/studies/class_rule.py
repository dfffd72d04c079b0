"""The class rule against today's default: rounds until every user stays within 1 % of fair.

Identical servers act as one server (``rule="class"``, :class:`psdsf_dist.protocol.update_rule.
ClassRule`); with few classes they act in ordered slots of the period.  Measured with
``distance_to_fair.py``'s harness and distance (rounds to 5 % / 1 % / 0.1 % of the nearest known
PS-DSF totals, counted from the round after which the distance stays below; the runtime setting
reads the distance online at every period).  Settings, each from an empty allocation:

* ``runtime class``: the simulator with ``ProtocolConfig(rule="class")`` defaults otherwise
  (message-level gossip, jitter 0.2; slotted classes);
* ``snapshot class``: the simulator's snapshot model with the class rule (the classes in
  their slots on the columns as they stand; the model of the runtime at cluster scale, and
  cheap enough for K = 1,000 and the random suite);
* ``lock-step split``: :mod:`psdsf_dist.simulator.lockstep`, every server at once on totals
  one round stale.  The class rule without slots *is* ``split`` (step for step), so this is
  also the class rule where the classes cannot act in turn;
* ``sequential sweeps``: exact best responses server after server on fresh totals (a sweep is
  a round); ``merged sequential``: the same on the merged cluster (one server per class): what
  ideal slots with instant gossip would do.

Cases: Google 2011 mix (N = 100) at K = 100 and 1,000; Google K = 100 with user churn (u1 leaves
at t = 40, a new user joins at t = 80); the paper cluster with its churn (runtime only); the
random suite of ``rule_study.py`` in lock-step, in the snapshot model and (``--sim-suite``) in
the runtime setting (certificate within the cap, and rounds to 1 %).  The runtime setting
costs ~0.3-1 s per round at K = N = 100 and ~20-30 s at K = 1,000 on the shared machine, so by
default it runs on the K = 100 clusters and the paper cluster only; the committed csv also
holds the rows of ``--google "" --sim-google 1000:5 --snap-google "" --churn 0 --paper 0
--suite 0`` (K = 1,000 in the runtime setting, two workers, ~80 min), made alone.

``.venv/bin/python -m experiments run class_rule [--google 100:5,1000:2] [--sim-google 100:5]
[--snap-google 100:5,1000:5] [--suite 200] [--sim-suite 0] [--cap 300] [--sim-cap 100]
[--workers 2]`` puts
each finished job's rows in
``results/class_rule.csv`` (so a long run can be read while it goes), replacing earlier rows
of the same case, seed, phase and setting and keeping the others, and writes
``results/class_rule.md``; ``--report`` only re-renders the markdown from the csv.  The
committed csv also holds the rows of ``--google 12583:1 --snap-google 12583:1 --sim-google ""
--churn 0 --paper 0 --suite 0`` (the full Google cluster; ``simulate`` itself runs the
snapshot model above 2,000 servers, so ``--sim-google`` would measure the same), made alone.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import time
from multiprocessing import Pool
from typing import Any

import numpy as np

from experiments.common.paths import RESULTS
from experiments.common.sim_common import HOLD, table, write_atomic
from experiments.studies.distance_to_fair import RTOL, lockstep_row, sim_rows
from experiments.studies.rule_study import PAPER, suite_scenario
from psdsf_dist.model.random_scenarios import google_cluster_doc
from psdsf_dist.model.scenario import Scenario, load_scenario
from psdsf_dist.policies.class_merge import merge_classes
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.distance import forget
from psdsf_dist.protocol.update_rule import make_rule
from psdsf_dist.simulator.lockstep import run, sequential
from psdsf_dist.simulator.simulation import SimConfig, simulate

NAME = "class_rule"
CSV = RESULTS / f"{NAME}.csv"
FIELDS = ["case", "seed", "phase", "setting", "K", "N", "cap", "rounds", "within_0.05",
          "within_0.01", "within_0.001", "certificate", "final_distance", "seconds"]
SETTINGS = ("runtime class", "snapshot class", "lock-step split", "sequential sweeps",
            "merged sequential")
CHURN = ({"at": 40, "user_leaves": "u1"},
         {"at": 80, "user_joins": {"name": "u101", "demand": {"cpu": 0.02, "mem": 0.01}}})
Row = dict[str, Any]
PROVENANCE = (
    "Provenance: the class rule's rows were measured with the swap exit at its step of 0.006 "
    "of a user's total (`SWAP_STEP`); the lock-step, sequential and merged rows do not use "
    "the class rule's slots.  The *runtime class* rows (message-level gossip) were made with "
    "every other class counted at its latest slot's column (`slot_knowledge`) and the pull "
    "from the previous slot's class before each slot (`ServerNode.pull`): K=100, churn "
    "and paper with `--sim-google 100:5 --churn 1 --paper 1` (two workers, 2 min), K=1000 "
    "with `--sim-google 1000:5` (two workers, 80 min, 21-30 s a round on the loaded "
    "machine), K=12583 with `--snap-google 12583:1` (the simulator's snapshot model: what "
    "`simulate` picks above 2,000 servers), the suite with `--sim-suite 200` (two workers, "
    "27 min), each alone (`--google \"\"` and the other options at 0 or empty).")


def google(K: int, seed: int, churn: bool = False) -> Scenario:
    doc = google_cluster_doc(np.random.default_rng(seed), K=K, N=100)
    if churn:
        doc["events"] = list(CHURN)
    return Scenario.from_dict(doc, "google")


def sim_job(case: str, seed: int | None, K: int, cap: int, snapshot: bool = False) -> list[Row]:
    if case == "paper":
        sc, name = load_scenario(PAPER), "paper"
    elif case == "suite":
        sc, name = suite_scenario(int(seed or 0)), "suite"
    else:
        sc = google(K, int(seed or 0), churn=case == "churn")
        name = f"google K={K}" + (" churn" if case == "churn" else "")
    protocol = ProtocolConfig(seed=0 if seed is None else seed, hold=HOLD, rule="class")
    began = time.perf_counter()
    res = simulate(sc, SimConfig(protocol=protocol, rounds=cap, stop_after_hold=HOLD,
                                 gossip="snapshot" if snapshot else "auto"))
    return sim_rows(name, seed, sc, res, cap, SETTINGS[1 if res.gossip == "snapshot" else 0],
                    time.perf_counter() - began)


def lockstep_job(case: str, seed: int, K: int, cap: int, seq_cap: int) -> list[Row]:
    sc = suite_scenario(seed) if case == "suite" else google(K, seed)
    name = "suite" if case == "suite" else f"google K={K}"
    began = time.perf_counter()
    r = run(sc, make_rule("split"), rounds=cap, rtol=RTOL, hold=HOLD)
    row = lockstep_row(name, seed, "from zero", "lock-step split", sc, r, cap)
    row["seconds"] = round(time.perf_counter() - began, 1)
    rows = [row]
    if case != "suite":
        merged, _ = merge_classes(sc)
        for label, target in (("sequential sweeps", sc), ("merged sequential", merged)):
            began = time.perf_counter()
            r = sequential(target, rounds=seq_cap, rtol=RTOL, hold=HOLD)
            row = lockstep_row(name, seed, "from zero", label, target, r, seq_cap)
            row["seconds"] = round(time.perf_counter() - began, 1)
            rows.append(row)
    return rows


def dispatch(job: tuple[str, str, int | None, int, int, int]) -> list[Row]:
    kind, case, seed, K, cap, seq_cap = job
    forget()
    rows = (sim_job(case, seed, K, cap, snapshot=kind == "snap") if kind in ("sim", "snap")
            else lockstep_job(case, int(seed or 0), K, cap, seq_cap))
    return [{k: r.get(k, "") for k in FIELDS} for r in rows]


def row_key(row: Row) -> tuple[str, str, str, str]:
    """What a row measures: its case, seed, phase and setting (a rerun of it replaces it)."""
    return (str(row["case"]), str(row["seed"]), str(row["phase"]), str(row["setting"]))


def merge(rows: list[Row]) -> None:
    """Put a finished job's rows in the csv, in place of the rows of the same case, seed,
    phase and setting; rows of other runs (e.g. the full Google cluster's, made alone) stay."""
    fresh = [{k: "" if r[k] is None else str(r[k]) for k in FIELDS} for r in rows]
    replaced = {row_key(r) for r in fresh}
    kept = [r for r in read() if row_key(r) not in replaced]
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=FIELDS)
    w.writeheader()
    w.writerows([*kept, *fresh])
    write_atomic(CSV, out.getvalue())


def read() -> list[Row]:
    if not CSV.exists():
        return []
    with CSV.open() as f:
        return list(csv.DictReader(f))


def num(v: str) -> float:
    return math.inf if v in ("", "None") else float(v)


def report(rows: list[Row], seconds: float | None) -> str:
    groups: dict[tuple[str, str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r["case"], r["phase"], r["setting"]), []).append(r)
    body = []
    first = {k: j for j, k in enumerate(groups)}  # phases in the order of the events
    for key in sorted(groups, key=lambda k: (k[0], k[1] != "from zero", first[k],
                                             SETTINGS.index(k[2]))):
        g = sorted(groups[key], key=lambda r: num(r["seed"]) if r["seed"] else 0)
        cap = g[0]["cap"]

        def cell(measure: str, g: list[Row] = g, cap: str = cap) -> str:
            vals = [num(r[measure]) for r in g]
            done = sum(math.isfinite(v) for v in vals)
            each = ", ".join(f"{v:g}" if math.isfinite(v) else f">{cap}" for v in vals)
            if len(vals) > 6:
                q = float(np.quantile(vals, 0.95, method="higher"))
                each = (f"median {float(np.median(vals)):g}, p95 "
                        f"{q:g}" if math.isfinite(q) else f"median {float(np.median(vals)):g}, "
                        f"p95 >{cap}")
            return f"{done}/{len(vals)}: {each}"

        body.append([*key, cell("within_0.01"), cell("within_0.001"), cell("certificate")])
    return "\n".join([
        "## Class rule: identical servers move as one class",
        "",
        "Regenerate with `.venv/bin/python -m experiments run class_rule` (see its "
        "docstring).  Each cell: runs that got there / rounds per run in seed order (or "
        "median and p95 over many), "
        "`>cap` when not within the cap.  *1 %*, *0.1 %*: rounds until every user's total "
        "stays within that relative distance of the nearest known PS-DSF totals "
        "(`distance_to_fair.py`'s measure; the runtime setting reads it at every period). "
        "*certificate*: rtol 1e-3 held 20 rounds in a row.  Churn rows: rounds after the "
        "event.  The machine is shared (2 cores, other jobs running): seconds are not "
        "comparable across rows.",
        "",
        table(["case", "phase", "setting", "within 1 %", "within 0.1 %", "certificate"], body),
        "",
        PROVENANCE,
        "",
        "" if seconds is None else f"Whole study: {seconds:.0f} s on the workers given.",
    ])


def message_bytes(K: int, seed: int, rounds: int) -> str:
    """Mean and largest bytes per gossip message, ``split`` and the class rule, same cluster
    and seed (the message-level simulator's counts: ``Syn``, ``Ack`` and ``Ack2`` sizes)."""
    sc = google(K, seed)
    body = []
    for rule in ("split", "class"):
        res = simulate(sc, SimConfig(ProtocolConfig(seed=seed, rule=rule), rounds=rounds,
                                     gossip="scuttlebutt"))
        msgs = sum(o.messages for o in res.trace)  # per server per round, summed
        total = sum(o.bytes for o in res.trace)
        body.append([rule, f"{msgs / rounds:.1f}", f"{total / max(msgs, 1):.0f}",
                     f"{total / rounds:.0f}"])
    return "\n".join([
        f"Bytes per gossip message, Google mix K = {K}, N = 100, seed {seed}, first {rounds} "
        "rounds of the runtime setting (`.venv/bin/python -m experiments run class_rule --bytes`):",
        "",
        table(["rule", "messages per server per round", "bytes per message",
               "bytes per server per round"], body),
    ])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--google", default="100:5,1000:2")
    ap.add_argument("--sim-google", default="100:5")
    ap.add_argument("--snap-google", default="100:5,1000:5")
    ap.add_argument("--churn", type=int, default=1, help="Google churn clusters (runtime)")
    ap.add_argument("--paper", type=int, default=1, help="paper cluster in the runtime (0/1)")
    ap.add_argument("--suite", type=int, default=200)
    ap.add_argument("--sim-suite", type=int, default=0,
                    help="suite scenarios in the runtime setting (message-level gossip)")
    ap.add_argument("--cap", type=int, default=300)
    ap.add_argument("--sim-cap", type=int, default=100)
    ap.add_argument("--seq-cap", type=int, default=30)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--report", action="store_true", help="only re-render the markdown")
    ap.add_argument("--bytes", action="store_true",
                    help="only measure bytes per gossip message (results/class_rule_bytes.md)")
    args = ap.parse_args(argv)
    if args.bytes:
        write_atomic(RESULTS / f"{NAME}_bytes.md", message_bytes(40, 0, 20) + "\n")
        return
    if args.report:
        write_atomic(RESULTS / f"{NAME}.md", report(read(), None) + "\n")
        return
    jobs: list[tuple[str, str, int | None, int, int, int]] = []
    if args.paper:
        jobs.append(("sim", "paper", None, 120, 400, 0))
    for s in range(args.churn):
        jobs.append(("sim", "churn", s, 100, 120, 0))
    for spec in (x for x in args.sim_google.split(",") if x):
        k, n = (int(v) for v in spec.split(":"))
        jobs.extend(("sim", "google", s, k, args.sim_cap, 0) for s in range(n))
    for spec in (x for x in args.snap_google.split(",") if x):
        k, n = (int(v) for v in spec.split(":"))
        jobs.extend(("snap", "google", s, k, args.sim_cap, 0) for s in range(n))
    for spec in (x for x in args.google.split(",") if x):
        k, n = (int(v) for v in spec.split(":"))
        jobs.extend(("lockstep", "google", s, k, args.cap, args.seq_cap) for s in range(n))
    jobs.extend(("lockstep", "suite", s, 0, args.cap, 0) for s in range(args.suite))
    jobs.extend(("snap", "suite", s, 0, args.cap, 0) for s in range(args.suite))
    jobs.extend(("sim", "suite", s, 0, args.cap, 0) for s in range(args.sim_suite))
    began = time.perf_counter()
    with Pool(args.workers) as pool:
        for rows in pool.imap_unordered(dispatch, jobs):
            merge(rows)
    md = report(read(), time.perf_counter() - began)
    write_atomic(RESULTS / f"{NAME}.md", md + "\n")
    print(md)
