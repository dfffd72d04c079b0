"""Chaos benchmark: the allocator on Ray under process kills and user churn, for minutes.

Regenerate (writes ``experiments/results/chaos.md``, ``chaos.csv``, ``chaos_trace.csv`` and
``chaos.png``)::

    PYTHONPATH=$PWD .venv/bin/python -m experiments run bench_chaos            # --minutes 5
    PYTHONPATH=$PWD .venv/bin/python -m experiments run bench_chaos --quick    # about a minute

What runs: a Google 2011 mix cluster (:func:`~psdsf_dist.model.random_scenarios.google_cluster`,
``--servers`` machines in the trace's proportions, ``--users`` users, some with a finite
``max_tasks``) on a local Ray of its own (``num_cpus=2``), real clock, the protocol's defaults,
servers packed ``--servers-per-actor`` to an actor process (a few processes, as a small machine
runs it).  While it runs, the driver (all choices from ``--seed``):

* kills a random server actor's process with SIGKILL every 10-20 s (Ray restarts it; the
  coordinator starts its servers again as new incarnations);
* kills the coordinator's process once, near the middle of the run (Ray restarts it; it rebuilds
  its state from the servers);
* applies user churn through the :class:`~psdsf_dist.runtime.launcher.Run` API every 10-20 s: a
  present user leaves, an absent one rejoins, or a present user's weight changes.

The driver reads the coordinator's observations (one per period: the certificate residual,
feasibility of every column, the cap excess) as they are made and keeps them itself, so that a
coordinator restart loses none of the driver's record.  Reported:

* per fault, the time from the kill to the first observation from which the certificate
  (Theorem 1, rtol of the protocol) held ``HOLD`` observations in a row — "certified again" —
  in seconds and in periods, and the churn that happened in between (it resets convergence);
* over the run, the fraction of time within 1 % of fair (certificate residual <= 1e-2; the
  residual is the largest relative bottleneck deficit or infeasibility, docs/design.md "The
  certificate") and certified (residual <= rtol), time-weighted, a gap in the observations (the
  coordinator down) counting as neither;
* capacity never exceeded (every observation's ``feasible``: each column within its server's
  capacities), the largest cap excess (``Observation.cap_excess``), no user lost (at every poll
  and at the end the coordinator's present users are exactly the driver's, and at the end each
  present user holds tasks), no server lost (every observation reads all K columns once settled);
* the coordinator's own account of the run (``RunResult``: restarts and per-event convergence)
  beside the driver's.

At the end churn and faults stop and the run is given ``--settle`` seconds to certify.

Size: the defaults (120 servers in 3 actors, 20 users, period 2 s) start in 2-5 s on an idle
2-core machine (one start call per actor), but their gossip then takes more CPU than two cores
have, and the coordinator's observations fall behind; 48 servers at period 2 s keep up
(``--servers 48 --servers-per-actor 16 --users 10 --period 2 --minutes 3 --settle 60 --name
chaos_small``, the figures in docs/results.md).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import platform
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import ray

from experiments.common.paths import RESULTS
from psdsf_dist.model.random_scenarios import google_cluster
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.convergence import ObservationJson
from psdsf_dist.runtime.launcher import ChurnError, Run, launch
from psdsf_dist.runtime.names import NAMESPACE
from psdsf_dist.runtime.run_status import RunStatus
from psdsf_dist.runtime.settings import RunConfig

FAIR_RTOL = 1e-2  # "within 1 % of fair": certificate residual at most this
HOLD = 3  # observations in a row for "certified again"
POLL = 0.5  # seconds between the driver's reads of the run
RUN_ID = "chaos"
GROUP_SECONDS = 5.0  # one actor's servers restarted within this are one row of the report


@dataclass
class Incident:
    """Something the driver did to the run, at run time ``at``."""

    kind: str
    """``kill-server-actor``, ``kill-coordinator`` or ``churn``."""
    at: float
    what: str


@dataclass
class Record:
    observations: list[ObservationJson] = field(default_factory=list)
    incidents: list[Incident] = field(default_factory=list)
    user_checks: int = 0
    user_mismatches: list[str] = field(default_factory=list)
    cursor: int = 0
    """Observations read from the current coordinator incarnation."""
    failures: list[tuple[float, str]] = field(default_factory=list)
    """The coordinator's ``failure`` (status) whenever it changed: (run time, text)."""
    restarts: list[tuple[float, int]] = field(default_factory=list)
    """The coordinator's restart count whenever it changed."""
    chaos_from: float = 0.0
    """Run time at which the chaos began (the run's clock starts before its servers do)."""


def scenario_for(seed: int, K: int, N: int) -> Scenario:
    return google_cluster(np.random.default_rng(seed), K=K, N=N, cap_prob=0.25)


def offset_of(run: Run) -> float:
    """Wall-clock time of the run's time 0 (run time = ``time.time() - offset``)."""
    before = time.time()
    now = float(run.status()["time"])
    return (before + time.time()) / 2 - now


def actor_table(actor_id: str) -> dict[str, Any]:
    """One actor's entry in Ray's GCS actor table (state, pid; needs no dashboard, and does
    not wait for a busy actor to answer)."""
    state: Any = ray._private.state
    info: dict[str, Any] = state.actors(actor_id=actor_id)
    return info


def actor_pids(run: Run) -> dict[int, list[str]]:
    """Process id of each alive server actor -> the servers it hosts."""
    by_actor: dict[str, list[str]] = {}
    for server, handle in run.handles().items():
        by_actor.setdefault(handle._actor_id.hex(), []).append(server)
    out: dict[int, list[str]] = {}
    for actor_id, servers in by_actor.items():
        info = actor_table(actor_id)
        if info.get("State") == "ALIVE" and int(info.get("Pid", 0)) > 0:
            out[int(info["Pid"])] = sorted(servers)
    return out


def coordinator_pid(run: Run) -> int:
    """The coordinator's worker process."""
    return int(actor_table(run.coordinator._actor_id.hex())["Pid"])


def poll(run: Run, rec: Record, expected_users: set[str] | None) -> None:
    """Read the observations made since the last poll (a restarted coordinator numbers its
    observations from 0 again: read it from 0, keep only ones newer than the last kept)."""
    st = run.status()
    if st["round"] is None or st["round"] + 1 < rec.cursor:
        rec.cursor = 0
    new = run.observations(rec.cursor)
    rec.cursor += len(new)
    last = rec.observations[-1]["time"] if rec.observations else -math.inf
    rec.observations += [o for o in new if o["time"] > last + 1e-9]
    failure = st.get("failure")
    if failure and (not rec.failures or rec.failures[-1][1] != failure):
        rec.failures.append((float(st["time"]), str(failure)))
    if not rec.restarts or rec.restarts[-1][1] != st["restarts"]:
        rec.restarts.append((float(st["time"]), int(st["restarts"])))
    if expected_users is not None:
        rec.user_checks += 1
        present = set(st["present_users"])
        if present != expected_users:
            rec.user_mismatches.append(
                f"t={st['time']:.1f}: missing {sorted(expected_users - present)}, "
                f"extra {sorted(present - expected_users)}")


def churn_step(run: Run, rng: np.random.Generator, users: list[str], present: set[str],
               min_present: int) -> str:
    """One churn change through the Run API; updates ``present``."""
    absent = [u for u in users if u not in present]
    choice = rng.random()
    if absent and (choice < 0.35 or len(present) <= min_present):
        user = str(rng.choice(absent))
        run.user_joins(user)
        present.add(user)
        return f"user {user} rejoins"
    if choice < 0.7 and len(present) > min_present:
        user = str(rng.choice(sorted(present)))
        run.user_leaves(user)
        present.discard(user)
        return f"user {user} leaves"
    user = str(rng.choice(sorted(present)))
    weight = float(rng.choice([0.5, 1.0, 2.0, 4.0]))
    run.set_weight(user, weight)
    return f"user {user} weight {weight:g}"


def chaos(run: Run, args: argparse.Namespace, scenario: Scenario, rec: Record) -> float:
    """Kill and churn for ``args.minutes``; returns the run time at which chaos stopped."""
    rng = np.random.default_rng(args.seed + 1)
    offset = offset_of(run)

    def now() -> float:
        return time.time() - offset

    users = list(scenario.user_names)
    present = set(users)
    t0 = rec.chaos_from = now()
    end = t0 + 60 * args.minutes
    next_kill = t0 + rng.uniform(10, 20)
    next_churn = t0 + rng.uniform(5, 15)
    coordinator_at = t0 + rng.uniform(0.4, 0.6) * (end - t0)
    coordinator_killed = False
    while now() < end:
        t = now()
        if not coordinator_killed and t >= coordinator_at:
            pid = coordinator_pid(run)
            os.kill(pid, signal.SIGKILL)
            rec.incidents.append(Incident("kill-coordinator", now(), f"coordinator pid {pid}"))
            coordinator_killed = True
            print(f"[{t:6.1f}] killed the coordinator (pid {pid})", file=sys.stderr, flush=True)
            time.sleep(1.0)
            offset = offset_of(run)  # the restarted coordinator keeps the run's time 0
        elif t >= next_kill:
            pids = actor_pids(run)
            if pids:
                pid = int(rng.choice(sorted(pids)))
                os.kill(pid, signal.SIGKILL)
                hosted = pids[pid]
                rec.incidents.append(Incident(
                    "kill-server-actor", now(),
                    f"pid {pid}: {len(hosted)} servers {hosted[0]}..{hosted[-1]}"))
                print(f"[{t:6.1f}] killed a server actor (pid {pid}, {len(hosted)} servers)",
                      file=sys.stderr, flush=True)
            next_kill = now() + rng.uniform(10, 20)
        elif t >= next_churn:
            at = now()  # the change applies during the call (which can take seconds)
            try:
                what = churn_step(run, rng, users, present, max(2, len(users) // 2))
            except ChurnError as err:  # refused: report it, do not count it
                what = f"refused: {err}"
            rec.incidents.append(Incident("churn", at, what))
            print(f"[{t:6.1f}] {what}", file=sys.stderr, flush=True)
            next_churn = now() + rng.uniform(10, 20)
        t_poll = time.monotonic()
        poll(run, rec, present)
        if time.monotonic() - t_poll > 5:
            print(f"[{now():6.1f}] a poll took {time.monotonic() - t_poll:.1f} s",
                  file=sys.stderr, flush=True)
        time.sleep(POLL)
    stopped = now()
    settle_end = time.monotonic() + args.settle
    while time.monotonic() < settle_end:
        poll(run, rec, present)
        tail = rec.observations[-HOLD * 2:]
        if len(tail) >= HOLD * 2 and all(o["holds"] for o in tail) and tail[0]["time"] > stopped:
            break
        time.sleep(POLL)
    poll(run, rec, present)
    return stopped


@dataclass(frozen=True)
class Recovery:
    incident: Incident
    first_hold: float | None
    """Seconds from the fault to the first holding observation after it."""
    certified: float | None
    """Seconds to the first observation of ``HOLD`` holding in a row."""
    periods: int | None
    worst_residual: float
    churn_between: int


def recoveries(rec: Record, period: float) -> list[Recovery]:
    obs = rec.observations
    out: list[Recovery] = []
    churn = [i.at for i in rec.incidents if i.kind == "churn"]
    for inc in rec.incidents:
        if inc.kind == "churn":
            continue
        after = [o for o in obs if o["time"] > inc.at]
        first = next((o["time"] - inc.at for o in after if o["holds"]), None)
        certified = None
        for j in range(len(after) - HOLD + 1):
            if all(o["holds"] for o in after[j:j + HOLD]):
                certified = after[j]["time"] - inc.at
                break
        span = [o for o in after if certified is None or o["time"] <= inc.at + certified]
        worst = max((o["residual"] for o in span), default=math.nan)
        between = sum(1 for t in churn
                      if inc.at < t < inc.at + (certified if certified is not None else math.inf))
        out.append(Recovery(inc, first, certified,
                            None if certified is None else math.ceil(certified / period - 1e-9),
                            worst, between))
    return out


def fractions(obs: list[ObservationJson], start: float, end: float,
              period: float) -> tuple[float, float, float]:
    """Time-weighted fractions of [start, end] within 1 % of fair and certified; seconds not
    covered by an observation (each covers at most 1.5 periods after it)."""
    inside = [o for o in obs if start <= o["time"] <= end]
    fair = cert = covered = 0.0
    for j, o in enumerate(inside):
        nxt = inside[j + 1]["time"] if j + 1 < len(inside) else end
        span = max(min(nxt - o["time"], 1.5 * period), 0.0)
        covered += span
        if o["residual"] <= FAIR_RTOL:
            fair += span
        if o["holds"]:
            cert += span
    total = max(end - start, 1e-9)
    return fair / total, cert / total, total - covered


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=5.0, help="length of the chaos (5)")
    ap.add_argument("--quick", action="store_true",
                    help="1 minute, 48 servers in 3 actors, 10 users, period 1 s")
    ap.add_argument("--servers", type=int, default=120)
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--servers-per-actor", type=int, default=40)
    ap.add_argument("--period", type=float, default=2.0)
    ap.add_argument("--settle", type=float, default=90.0,
                    help="seconds given to certify after the chaos (90)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="chaos", help="stem of the output files (chaos)")
    args = ap.parse_args(argv)
    if args.quick:
        args.minutes, args.servers, args.users, args.servers_per_actor = 1.0, 48, 10, 16
        args.period, args.settle = 1.0, 45.0
    scenario = scenario_for(args.seed, args.servers, args.users)
    protocol = ProtocolConfig(period=args.period, seed=args.seed)
    cfg = RunConfig(protocol, servers_per_actor=args.servers_per_actor, max_restarts=-1)
    load_start = os.getloadavg()[0]
    ray.init(num_cpus=2, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    wall = time.perf_counter()
    run = launch(scenario, cfg, run_id=RUN_ID)
    startup = time.perf_counter() - wall
    print(f"started {scenario.num_servers} servers in {startup:.1f} s", file=sys.stderr,
          flush=True)
    rec = Record()
    try:
        stopped = chaos(run, args, scenario, rec)
        result = run.result()
        final = run.status()
    finally:
        run.stop()
        ray.shutdown()
    report(args, scenario, cfg, rec, stopped, result, final, startup, load_start,
           os.getloadavg()[0], time.perf_counter() - wall)
    return 0


def report(args: argparse.Namespace, scenario: Scenario, cfg: RunConfig, rec: Record,
           stopped: float, result: Any, final: RunStatus, startup: float,
           load_start: float, load_end: float, seconds: float) -> None:
    period = cfg.period
    obs = rec.observations
    recs = recoveries(rec, period)
    fair, cert, gap = fractions(obs, rec.chaos_from, stopped, period)
    feasible = all(o["feasible"] for o in obs)
    excess = max((o["cap_excess"] for o in obs), default=0.0)
    present = final["present_users"]
    names = list(result.scenario.user_names)
    idle = [u for u in present if float(result.allocation[names.index(u)].sum()) <= 0]
    settled = [o for o in obs if o["time"] > stopped]
    kills = [r for r in recs if r.incident.kind == "kill-server-actor"]
    churn = [i for i in rec.incidents if i.kind == "churn"]
    K = scenario.num_servers
    during = sum(1 for o in obs if rec.chaos_from <= o["time"] <= stopped)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / args.name
    with open(stem.with_suffix(".csv"), "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["fault", "at_s", "target", "first_hold_s", "certified_s",
                    "certified_periods", "worst_residual", "churn_between"])
        for r in recs:
            w.writerow([r.incident.kind, f"{r.incident.at:.2f}", r.incident.what,
                        _num(r.first_hold), _num(r.certified), r.periods,
                        f"{r.worst_residual:.3e}", r.churn_between])
    with open(RESULTS / f"{args.name}_trace.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        keys = ["round", "time", "residual", "holds", "feasible", "cap_excess", "servers",
                "utilization", "messages"]
        w.writerow(keys)
        for o in obs:
            row: Mapping[str, object] = o
            w.writerow([row[k] for k in keys])
        w.writerow([])
        w.writerow(["incident", "at", "what"])
        for i in rec.incidents:
            w.writerow([i.kind, f"{i.at:.2f}", i.what])
    plot(obs, rec.incidents, stopped, stem.with_suffix(".png"), cfg.protocol.rtol)

    def fmt(v: float | None) -> str:
        return "not within the run" if v is None else f"{v:.1f}"

    certified = [r.certified for r in kills if r.certified is not None]
    lines = [
        "# Chaos: the allocator on Ray under process kills and user churn",
        "",
        f"Generated by `{' '.join(['experiments/benchmarks/bench_chaos.py', *sys.argv[1:]])}` on "
        f"{platform.node()} ({os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"Ray {ray.__version__}); seed {args.seed}; load average {load_start:.1f} at the start, "
        f"{load_end:.1f} at the end (the machine is shared); {seconds:.0f} s in all.",
        "",
        f"Google 2011 mix, K = {K} servers ({len(scenario.server_names)} names, "
        f"{len(set(s.rsplit('-', 1)[0] for s in scenario.server_names))} configurations), "
        f"N = {scenario.num_users} users "
        f"({int(np.isfinite(scenario.max_tasks).sum())} with a finite max_tasks), "
        f"{math.ceil(K / args.servers_per_actor)} server actor processes "
        f"({args.servers_per_actor} servers each) and the coordinator, one local Ray "
        f"(`num_cpus=2`), real clock, period {period:g} s, the protocol's defaults otherwise "
        f"(rtol {cfg.protocol.rtol:g}).  Start-up {startup:.1f} s.  Chaos for "
        f"{args.minutes:g} min: a random server actor's process SIGKILLed every 10-20 s, the "
        "coordinator's process SIGKILLed once near the middle, user churn through the Run "
        "API every 10-20 s; then churn and faults stop and the run is given "
        f"{args.settle:g} s to certify.",
        "",
        "## Over the run",
        "",
        "| measure | value |",
        "|---|---|",
        f"| chaos (run time) | {rec.chaos_from:.0f}-{stopped:.0f} s, {during} observations |",
        f"| server actor processes killed | {len(kills)} |",
        f"| coordinator processes killed | "
        f"{sum(1 for r in recs if r.incident.kind == 'kill-coordinator')} |",
        f"| churn changes | {len(churn)} "
        f"({sum(1 for c in churn if 'refused' in c.what)} refused) |",
        f"| time within 1 % of fair (residual <= {FAIR_RTOL:g}) | {100 * fair:.1f} % |",
        f"| time certified (residual <= {cfg.protocol.rtol:g}, every column current) | "
        f"{100 * cert:.1f} % |",
        f"| time without an observation (coordinator down, late rounds) | {gap:.1f} s |",
        f"| capacity exceeded (an observation not feasible) | "
        f"{'never' if feasible else 'YES'} ({len(obs)} observations) |",
        f"| largest cap excess (`cap_excess`) | {100 * excess:.2f} % |",
        f"| users lost (present-user checks at every poll) | "
        f"{len(rec.user_mismatches)} mismatches in {rec.user_checks} checks |",
        f"| present users at the end holding no task | {len(idle)} of {len(present)} |",
        f"| servers at the end | {final['servers']} of {K} |",
        f"| certified after the chaos stopped (s) | {fmt(_settle(settled, stopped))} |",
        f"| server-actor kills: certified again (s), median / max | "
        f"{_stat(certified, np.median)} / {_stat(certified, max)} "
        f"({len(certified)} of {len(kills)} within the run) |",
        "",
        "## Per fault",
        "",
        f"Certified again: the first observation after the kill from which the certificate "
        f"held {HOLD} observations in a row (periods: that time over the period, rounded up).  "
        "Churn in between moves the fair allocation too, so it lengthens the time.",
        "",
        "| fault | at (s) | target | first certificate (s) | certified again (s) | periods | "
        "worst residual | churn in between |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in recs:
        lines.append(f"| {r.incident.kind} | {r.incident.at:.1f} | {r.incident.what} | "
                     f"{fmt(r.first_hold)} | {fmt(r.certified)} | "
                     f"{'-' if r.periods is None else r.periods} | {r.worst_residual:.2e} | "
                     f"{r.churn_between} |")
    lines += ["", "## The coordinator's own account (`RunResult`)", "",
              f"Restarts (server incarnations started after a crash): {result.restarts} "
              f"(the driver's kills took down {sum(_hosted(r.incident.what) for r in kills)} "
              "server incarnations).  Events it reports, with its per-event convergence "
              f"(hold {cfg.protocol.hold}; faults of one actor come as one event per server, "
              "grouped here):", "",
              "| event | at (s) | count | rounds to converge |", "|---|---|---|---|"]
    for desc, at, count, rounds in _grouped(result.events):
        lines.append(f"| {desc} | {at:.1f} | {count} | {rounds} |")
    if rec.failures:
        lines += ["", "Failures the coordinator reported (`status()['failure']`, each change):",
                  "", *(f"- t={t:.1f} s: {text}" for t, text in rec.failures)]
    lines += ["", "Restart count over time (run time: count): "
              + ", ".join(f"{t:.0f}: {n}" for t, n in rec.restarts)]
    if rec.user_mismatches:
        lines += ["", "User mismatches:", "", *(f"- {m}" for m in rec.user_mismatches)]
    lines += ["", f"![residual over time]({args.name}.png)", ""]
    (stem.with_suffix(".md")).write_text("\n".join(lines))
    print("\n".join(lines))


def _hosted(what: str) -> int:
    return int(what.split(": ")[1].split()[0])


def _grouped(events: Any) -> list[tuple[str, float, int, str]]:
    """Consecutive events of one kind within ``GROUP_SECONDS`` of the first (one actor's
    servers, started again one after another) as one row, at the first one's time."""
    out: list[tuple[str, float, int, str]] = []
    for e in events:
        desc = e.description
        if desc.startswith("server ") and " restarted" in desc:
            desc = "server restarted" + desc.split(" restarted", 1)[1]
        rounds = "-" if e.rounds is None else str(e.rounds)
        if out and out[-1][0] == desc and abs(out[-1][1] - e.at) < GROUP_SECONDS:
            d, at, n, r = out[-1]
            out[-1] = (d, at, n + 1, r if r == rounds else f"{r}/{rounds}")
        else:
            out.append((desc, float(e.at), 1, rounds))
    return out


def _settle(settled: list[ObservationJson], stopped: float) -> float | None:
    for j in range(len(settled) - HOLD + 1):
        if all(o["holds"] for o in settled[j:j + HOLD]):
            return float(settled[j]["time"]) - stopped
    return None


def _stat(values: list[float], fn: Any) -> str:
    return "-" if not values else f"{float(fn(values)):.1f}"


def _num(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}"


def plot(obs: list[ObservationJson], incidents: list[Incident], stopped: float, path: Path,
         rtol: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.2))
    t = [o["time"] for o in obs]
    res = [max(o["residual"], 1e-12) for o in obs]
    ax.semilogy(t, res, lw=0.9, marker=".", ms=3, color="tab:blue",
                label="certificate residual (one dot per observation)")
    ax.axhline(FAIR_RTOL, color="tab:green", ls="--", lw=0.8, label="1 % of fair")
    ax.axhline(rtol, color="tab:olive", ls=":", lw=0.8, label=f"certified (rtol {rtol:g})")
    seen: set[str] = set()
    style = {"kill-server-actor": ("tab:red", "-", "server actor killed"),
             "kill-coordinator": ("black", "-", "coordinator killed"),
             "churn": ("0.6", ":", "user churn")}
    for inc in incidents:
        color, ls, label = style[inc.kind]
        ax.axvline(inc.at, color=color, ls=ls, lw=1.2 if inc.kind != "churn" else 0.8,
                   label=None if label in seen else label)
        seen.add(label)
    ax.axvspan(stopped, max(t[-1] if t else stopped, stopped), color="0.92",
               label="no more faults or churn")
    ax.set_xlabel("run time (s)")
    ax.set_ylabel("residual")
    ax.set_title("Chaos run: certificate residual per period, faults and churn marked")
    ax.legend(loc="lower left", fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
