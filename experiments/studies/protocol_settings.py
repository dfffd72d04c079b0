"""Does ``simulate`` with no protocol options predict ``run``?  One table over seeded random
scenarios: the simulator's defaults, the snapshot model, and paced runs on Ray.

Scenarios: like the ones a new user would try — K = 10..58 servers, N = 2..9 users, M = 1..4
resources, with placement constraints, weights and caps (``random_scenario``), one per seed.
Settings (every run from an empty allocation, at most ``--cap`` rounds, stopped once the
certificate (rtol 1e-3) has held ``hold`` rounds in a row):

* ``simulate`` defaults: ``ProtocolConfig()`` — the protocol message by message, random phases
  with jitter 0.2, fanout 4, four gossip rounds per period, no injected delay;
* snapshot model (``gossip="snapshot"``, jitter 0): a server alone in its class, or whose
  class has no slot, acts with every other at the same instants on the true totals one round
  stale — the hard case the per-server rule was designed on; a class with a slot acts at its
  slot instant on the columns as they stand there (what slots assume of gossip);
* ``run`` on Ray: the same defaults, paced (manual clock), servers spread over three actors so
  that messages between actors go through Ray (``--ray N``: the first N scenarios; off with 0).

``.venv/bin/python -m experiments run protocol_settings [--seeds 50] [--cap 200] [--ray 50]
[--workers 2]`` writes ``results/protocol_settings.{csv,md}`` and its section of
``experiments/README.md``.
"""

from __future__ import annotations

import argparse
import time
from multiprocessing import Pool
from typing import Any

import numpy as np

from experiments.common.paths import RESULTS
from experiments.common.sim_common import publish, rounds_stat, table, write_csv
from psdsf_dist.model.random_scenarios import random_scenario
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.simulator.simulation import SimConfig, simulate

NAME = "protocol_settings"
ACTORS = 3


def scenario(seed: int) -> Scenario:
    rng = np.random.default_rng([seed, 12])
    K = int(rng.integers(10, 59))
    N = int(rng.integers(2, 10))
    M = int(rng.integers(1, 5))
    return random_scenario(rng, K=K, N=N, M=M)


def first_certified(holds: list[bool], hold: int) -> int | None:
    """Rounds until the certificate held for ``hold`` rounds in a row (None: never)."""
    run = 0
    for r, h in enumerate(holds):
        run = run + 1 if h else 0
        if run >= hold:
            return r - hold + 2
    return None


def simulated(job: tuple[int, str, int]) -> dict[str, Any]:
    seed, setting, cap = job
    sc = scenario(seed)
    protocol = ProtocolConfig(seed=seed) if setting == "defaults" else ProtocolConfig(
        seed=seed, jitter=0.0)
    cfg = SimConfig(protocol=protocol, rounds=cap,
                    gossip="snapshot" if setting == "snapshot" else "scuttlebutt",
                    stop_after_hold=protocol.hold)
    began = time.perf_counter()
    res = simulate(sc, cfg)
    rounds = first_certified([o.holds for o in res.trace], protocol.hold)
    return {"seed": seed, "setting": setting, "K": sc.num_servers, "N": sc.num_users,
            "M": sc.num_resources, "rounds": rounds,
            "seconds": round(time.perf_counter() - began, 2)}


def on_ray(seed: int, cap: int) -> dict[str, Any]:
    from psdsf_dist.runtime.launcher import launch
    from psdsf_dist.runtime.settings import RunConfig

    sc = scenario(seed)
    protocol = ProtocolConfig(seed=seed)
    per_actor = -(-sc.num_servers // ACTORS)
    cfg = RunConfig(protocol=protocol, clock="manual", servers_per_actor=per_actor)
    began = time.perf_counter()
    run = launch(sc, cfg, run_id=f"settings-{seed}")
    holds: list[bool] = []
    try:
        while len(holds) < cap:
            holds += [bool(o["holds"]) for o in run.advance(5)]
            if first_certified(holds, protocol.hold) is not None:
                break
    finally:
        run.stop()
    return {"seed": seed, "setting": "ray", "K": sc.num_servers, "N": sc.num_users,
            "M": sc.num_resources, "rounds": first_certified(holds, protocol.hold),
            "seconds": round(time.perf_counter() - began, 2)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--cap", type=int, default=200)
    ap.add_argument("--ray", type=int, default=50, help="scenarios also run on Ray (0: none)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    jobs = [(s, setting, args.cap) for s in range(args.seeds)
            for setting in ("defaults", "snapshot")]
    began = time.perf_counter()
    with Pool(args.workers) as pool:
        rows = list(pool.imap_unordered(simulated, jobs))
    if args.ray:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
        try:
            rows += [on_ray(s, args.cap) for s in range(min(args.ray, args.seeds))]
        finally:
            ray.shutdown()
    rows.sort(key=lambda r: (r["setting"], r["seed"]))
    write_csv(RESULTS / f"{NAME}.csv", rows)
    label = {"defaults": "`simulate` defaults (message-level, random phases)",
             "snapshot": "snapshot model (lock-step; classes in their slots)",
             "ray": f"`run` on Ray, paced, {ACTORS} actors (defaults)"}
    body = []
    for setting in ("defaults", "snapshot", "ray"):
        mine = [r for r in rows if r["setting"] == setting]
        if not mine:
            continue
        st = rounds_stat([r["rounds"] for r in mine], args.cap)
        secs = float(np.median([r["seconds"] for r in mine]))
        body.append([label[setting], st["converged"], st["median"], st["p95"], st["max"],
                     f"{secs:.1f}"])
    d = ProtocolConfig()
    both = {r["seed"]: r["rounds"] for r in rows if r["setting"] == "defaults"}
    agree = [r for r in rows if r["setting"] == "ray"]
    same = sum((both[r["seed"]] is None) == (r["rounds"] is None) for r in agree)
    md = "\n".join([
        "## Protocol settings: does `simulate` predict `run`?",
        "",
        f"{args.seeds} seeded random scenarios (K = 10..58, N = 2..9, M = 1..4, placement, "
        f"weights, caps; `protocol_settings`), each from an empty allocation, "
        f"at most {args.cap} rounds; *rounds* until the certificate (rtol {d.rtol:g}) first "
        f"held {d.hold} rounds in a row.  Defaults: jitter {d.jitter:g}, fanout {d.fanout}, "
        f"{d.gossip_rate} gossip rounds per period, no injected delay.",
        "",
        table(["setting", "certified", "median rounds", "p95", "max", "median s per run"],
              body),
        "",
        (f"On Ray the same {len(agree)} scenarios certify or not as in `simulate` with its "
         f"defaults in {same} of {len(agree)} cases." if agree else ""),
        f"Whole study: {time.perf_counter() - began:.0f} s on {args.workers} workers.",
    ])
    publish(NAME, md)
