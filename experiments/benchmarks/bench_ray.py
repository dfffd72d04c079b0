"""Benchmark of the allocator on Ray: start-up time and memory per server actor, gossip
traffic per round, and re-convergence of the paper's 120-server cluster with its churn.

Regenerate the tables (writes ``experiments/results/ray.md`` and ``ray.csv``)::

    .venv/bin/python -m experiments run bench_ray            # --runs 3 --sizes 8,32,120

What is measured, in one run so that the ratios compare like with like:

1. Start-up and memory for K = 8, 32 and 120 server actors (one per server, the default), on
   a fresh local Ray (``num_cpus=2``) per run.  Start-up is the wall-clock time of
   :func:`launch` (coordinator plus every server actor created, started and gossiping).
   Memory is the proportional set size (PSS, ``/proc/<pid>/smaps_rollup``) of each server
   actor's worker process, after 10 rounds, median over the actors.  The baseline in the same
   run is K *bare* Ray actors (an empty async class, also ``num_cpus=0``): their creation time
   and PSS are what any actor-per-server design pays on Ray; the ratio says what PS-DSF adds.
   Scenarios: the paper cluster's four server classes and four users, K servers in the paper's
   proportions (8 : 68 : 33 : 11).
2. Gossip traffic: messages and bytes (the protocol's documented encoding,
   :mod:`psdsf_dist.protocol.gossip`) each server sends per period, mean over the last 10 rounds of
   the same runs.
3. The paper cluster (ORACLES 3, 120 servers, user 4 away during (100, 250) s) run on Ray
   paced (``psdsf-dist run --paced``: real actors and gossip calls, time moved on by one gossip
   round as soon as every server has done its part, so the rounds do not depend on how loaded
   the machine is), events at rounds 30 and 75 (``--time-scale 0.3``), 40 servers per actor
   (3 processes instead of 120, which on this shared 2-core machine run a round in ~1 s
   instead of several), as ``scripts/quickstart.sh`` runs it.  Reported: rounds until the
   certificate held for good (rtol 1e-3) after the start and after each event, beside the
   in-process simulator with the same gossip settings and the same event rounds.
   ``--paper-json FILE`` takes the Ray side from the JSON of such a ``psdsf-dist run`` (e.g.
   the quickstart's with ``--json``) instead of running it again; the simulator then runs with
   the protocol settings that JSON reports.

Median of ``--runs`` runs per size; sizes of 100 servers or more are run once (each start of
120 actors loads the machine for minutes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import ray
import yaml

from experiments.common.paths import EXAMPLES, RESULTS
from experiments.common.sim_common import write_csv
from psdsf_dist.model.document import read_document
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.runtime.launcher import launch
from psdsf_dist.runtime.settings import RunConfig
from psdsf_dist.simulator.simulation import SimConfig, simulate

PAPER = EXAMPLES / "paper_cluster.yaml"
PAPER_COUNTS = {"A": 8, "B": 68, "C": 33, "D": 11}
DEFAULTS = ProtocolConfig()  # the protocol's defaults, the same in simulate and run
WARM_ROUNDS = 10


def pss_kib(pid: int) -> float:
    """Proportional set size of a process, KiB (shared pages split among their users)."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return float(line.split()[1])
    raise RuntimeError(f"no Pss line for pid {pid}")


def sized_paper(K: int) -> Scenario:
    """The paper cluster with K servers in the paper's class proportions, no events."""
    doc: dict[str, Any] = yaml.safe_load(PAPER.read_text())
    doc.pop("events", None)
    total = sum(PAPER_COUNTS.values())
    counts = {c: max(1, round(K * n / total)) for c, n in PAPER_COUNTS.items()}
    counts["B"] += K - sum(counts.values())
    for srv in doc["servers"]:
        srv["count"] = counts[srv["name"]]
    return Scenario.from_dict(doc)


class Bare:
    async def pid(self) -> int:
        return os.getpid()


def fresh_ray() -> None:
    ray.shutdown()
    ray.init(num_cpus=2, namespace="psdsf", include_dashboard=False, log_to_driver=False,
             configure_logging=False)


def bare_actors(K: int) -> tuple[float, float]:
    """Seconds to create K empty actors (until each answered), median PSS (KiB)."""
    remote: Any = ray.remote(Bare)
    t0 = time.perf_counter()
    actors = [remote.options(num_cpus=0).remote() for _ in range(K)]
    pids = ray.get([a.pid.remote() for a in actors])
    seconds = time.perf_counter() - t0
    mem = statistics.median(pss_kib(p) for p in pids)
    for a in actors:
        ray.kill(a)
    return seconds, mem


def allocator_actors(K: int, seed: int) -> dict[str, float]:
    cfg = RunConfig(ProtocolConfig(seed=seed), clock="manual")
    t0 = time.perf_counter()
    run = launch(sized_paper(K), cfg, run_id=f"bench-{K}-{seed}")
    seconds = time.perf_counter() - t0
    try:
        seen = run.advance(WARM_ROUNDS)
        pids = {ray.get(h.status.remote())["pid"] for h in run.handles().values()}
        mem = statistics.median(pss_kib(p) for p in pids)
        tail = seen[-10:]
        return {"seconds": seconds, "pss_kib": mem,
                "messages": statistics.mean(o["messages"] for o in tail),
                "bytes": statistics.mean(o["bytes"] for o in tail)}
    finally:
        run.stop()


# the paper run: Ray's and the simulator's events per round, a note, the protocol settings
PaperResult = tuple[list[dict[str, Any]], list[dict[str, Any]], str, ProtocolConfig]
TIME_SCALE = 0.3  # paper events at rounds 30 and 75
PAPER_ROUNDS = 120
PAPER_SERVERS_PER_ACTOR = 40  # as scripts/quickstart.sh


def reported_protocol(run: dict[str, Any]) -> ProtocolConfig:
    """The protocol settings in the ``run`` object of ``psdsf-dist run --json`` (a setting it
    does not name keeps its default)."""
    names = {f.name for f in dataclasses.fields(ProtocolConfig)}
    given = {k: v for k, v in run.items() if k in names}
    if "rule_params" in given:
        given["rule_params"] = tuple(dict(given["rule_params"]).items())
    return ProtocolConfig(**given)


def paper_convergence(seed: int, paper_json: Path | None) -> PaperResult:
    protocol = ProtocolConfig(seed=seed)
    if paper_json is not None:
        doc = json.loads(paper_json.read_text())
        if doc["run"].get("time_scale") != TIME_SCALE:
            raise SystemExit(f"{paper_json}: time scale {doc['run'].get('time_scale')}, "
                             f"expected {TIME_SCALE} (the events would not line up)")
        protocol = reported_protocol(doc["run"])
        ray_events = doc["events"]
        note = (f"Ray side from {paper_json.name}: {doc['run']['rounds']} rounds in "
                f"{doc['run']['seconds']:.0f} s of wall-clock time, "
                f"{doc['run'].get('servers_per_actor', 1)} servers per actor")
    else:
        cfg = RunConfig(protocol, clock="manual", time_scale=TIME_SCALE,
                        servers_per_actor=PAPER_SERVERS_PER_ACTOR)
        t0 = time.perf_counter()
        run = launch(PAPER, cfg, run_id=f"bench-paper-{seed}")
        try:
            run.advance(PAPER_ROUNDS)
            ray_events = [e.to_json() for e in run.result().events]
        finally:
            run.stop()
        note = (f"Ray side: {PAPER_ROUNDS} rounds in {time.perf_counter() - t0:.0f} s of "
                f"wall-clock time, start-up included, {PAPER_SERVERS_PER_ACTOR} servers per "
                "actor")
    doc = dict(read_document(PAPER))
    doc["events"] = [{**e, "at": e["at"] * TIME_SCALE} for e in doc["events"]]
    # the same protocol settings, so the same definition of converged
    sim = simulate(Scenario.from_dict(doc), SimConfig(protocol, rounds=PAPER_ROUNDS))
    sim_events = [e.to_json() for e in sim.events]
    return ray_events, sim_events, note, protocol


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sizes", default="8,32,120")
    ap.add_argument("--no-paper", action="store_true", help="skip the paper-cluster run")
    ap.add_argument("--paper-json", type=Path, help="Ray side of the paper run from this "
                    f"`psdsf-dist run --paced --time-scale {TIME_SCALE} --json` output")
    args = ap.parse_args(argv)
    sizes = [int(k) for k in args.sizes.split(",")]
    load_start = os.getloadavg()[0]
    rows: list[dict[str, Any]] = []
    for K in sizes:
        ours: list[dict[str, float]] = []
        bare: list[tuple[float, float]] = []
        for r in range(args.runs if K < 100 else 1):
            fresh_ray()
            bare.append(bare_actors(K))
            fresh_ray()
            ours.append(allocator_actors(K, seed=r))
            print(f"K={K} run {r}: start {ours[-1]['seconds']:.1f} s "
                  f"(bare {bare[-1][0]:.1f} s)", file=sys.stderr, flush=True)
        row = {
            "servers": K,
            "startup_s": statistics.median(o["seconds"] for o in ours),
            "bare_startup_s": statistics.median(b[0] for b in bare),
            "pss_mib": statistics.median(o["pss_kib"] for o in ours) / 1024,
            "bare_pss_mib": statistics.median(b[1] for b in bare) / 1024,
            "messages_per_round": statistics.median(o["messages"] for o in ours),
            "bytes_per_round": statistics.median(o["bytes"] for o in ours),
        }
        row["startup_ratio"] = row["startup_s"] / row["bare_startup_s"]
        row["pss_ratio"] = row["pss_mib"] / row["bare_pss_mib"]
        row["total_pss_gib"] = row["pss_mib"] * K / 1024
        rows.append(row)
    # written now and again with the paper run: minutes of measurements are never lost
    write(rows, None, args.runs, load_start, os.getloadavg()[0])
    if not args.no_paper:
        fresh_ray()
        paper = paper_convergence(0, args.paper_json)
        write(rows, paper, args.runs, load_start, os.getloadavg()[0])
    ray.shutdown()
    return 0


def write(rows: list[dict[str, Any]], paper: PaperResult | None, runs: int, load_start: float,
          load_end: float) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_csv(RESULTS / "ray.csv", rows)
    lines = [
        "# The allocator on Ray: start-up, memory, traffic, convergence",
        "",
        f"Generated by `python -m experiments run bench_ray` on {platform.node()} "
        f"({os.cpu_count()} CPUs, Python {platform.python_version()}, Ray {ray.__version__}); "
        f"median of {runs} runs per size (1 from 100 servers); load average "
        f"{load_start:.1f} at start, {load_end:.1f} at the end (the machine is shared).",
        "",
        "One actor per server.  Baseline: the same number of empty Ray actors, created in the "
        "same run.  PSS: proportional set size of one actor's worker process (median over "
        f"actors) after {WARM_ROUNDS} rounds.  Traffic: per server per period, gossip rate "
        f"{DEFAULTS.gossip_rate}, fanout {DEFAULTS.fanout}.",
        "",
        "| servers | start-up (s) | bare actors (s) | ratio | PSS / actor (MiB) | bare (MiB) "
        "| ratio | all actors (GiB) | messages / round | bytes / round |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['servers']} | {r['startup_s']:.1f} | {r['bare_startup_s']:.1f} | "
            f"{r['startup_ratio']:.2f} | {r['pss_mib']:.1f} | {r['bare_pss_mib']:.1f} | "
            f"{r['pss_ratio']:.2f} | {r['total_pss_gib']:.2f} | "
            f"{r['messages_per_round']:.1f} | {r['bytes_per_round']:.0f} |")
    if paper is not None:
        ray_events, sim_events, note, p = paper
        settings = ("the defaults of both" if p == ProtocolConfig(seed=p.seed)
                    else "those of the Ray run")
        timing = "lock-step" if p.lockstep else f"random phases, jitter {p.jitter:g} T"
        lines += [
            "",
            "## Paper cluster (120 servers) with its churn, paced",
            "",
            f"User u4 leaves at round {100 * TIME_SCALE:.0f} and rejoins at round "
            f"{250 * TIME_SCALE:.0f}.  {note}.  Rounds until the "
            f"certificate held for good (rtol {p.rtol:g}, {p.hold} rounds in a row or until "
            "the next event); `psdsf-dist simulate` with the same protocol settings "
            f"({settings}: {timing}, fanout {p.fanout}, gossip "
            f"rate {p.gossip_rate}, rule {p.rule}, seed {p.seed}) beside it.",
            "",
            "| event | Ray run: rounds | simulator: rounds |",
            "|---|---|---|",
        ]
        for a, b in zip(ray_events, sim_events, strict=False):
            lines.append(f"| {a['event']} | {_r(a['rounds_to_converge'])} | "
                         f"{_r(b['rounds_to_converge'])} |")
        lines += ["", "Per-round messages and bytes are per server and period (table above)."]
    (RESULTS / "ray.md").write_text("\n".join(lines) + "\n")


def _r(value: Any) -> str:
    return "not within the run" if value is None else str(value)
