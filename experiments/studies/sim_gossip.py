"""Rounds per churn event under real gossip: vs message delay, fanout, gossip rate, loss, timing.

The paper's 120-server cluster (ORACLES.md example 3) with its churn on a shorter clock (user u4
leaves at 30 s and rejoins at 60 s; the run ends at 90 s), the default update rule, T = 1 s, the
Scuttlebutt protocol simulated message by message.  The base setting is the protocol's defaults
(``ProtocolConfig``, what ``simulate`` and ``run`` use): random phases with jitter 0.2 T, no
added message delay, 4 exchange rounds per period, fanout 4, no loss.  One parameter varies at a
time; each setting runs with one seed (the base setting with ``--seeds``), counting per event the
rounds until the certificate (rtol 1e-3) held for good (``>30``: not within the 30 rounds before
the next event), with the traffic per server per round.  The snapshot model (lock-step, every
server on the same totals, d rounds older than the usual one) is the reference.

A second table takes the base setting to Google-mix clusters (K = 100, N = 100, one per seed,
from zero) and sets it against lock-step on one stale snapshot, the worst case the rule study
measures: does asynchrony make realistic clusters easier or harder?

Writes ``results/sim_gossip.csv``, ``results/sim_gossip_google.csv``, ``results/sim_gossip.md``,
``results/sim_gossip.png`` and the ``sim_gossip`` section of ``experiments/README.md``.

    .venv/bin/python -m experiments run sim_gossip [--seeds 2] [--workers 2] [--google-seeds 5]

``--quick`` cuts every run to a few rounds (a smoke test: the numbers mean nothing).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from multiprocessing import Pool
from typing import Any

import numpy as np

from experiments.common.paths import EXAMPLES, RESULTS
from experiments.common.sim_common import HOLD, publish, rounds_stat, table, write_csv
from psdsf_dist.model.document import read_document
from psdsf_dist.model.random_scenarios import google_cluster
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.simulator.simulation import GossipModel, SimConfig, simulate

LEAVE, REJOIN, END = 30, 60, 90
PHASE = LEAVE  # rounds available to each event
EVENTS = ("start", "user u4 leaves", "user u4 joins")
# the churn phases count as converged once the certificate holds PHASE_HOLD rounds in a row (or
# until the next event): the last phase has PHASE (30) rounds, and the usual HOLD (20) would
# leave only 10 of them to converge in
PHASE_HOLD = 10
BASE = SimConfig(ProtocolConfig(hold=PHASE_HOLD), rounds=END, gossip="scuttlebutt")


def varied(cfg: SimConfig, gossip: GossipModel | None = None, **protocol: Any) -> SimConfig:
    """``cfg`` with some protocol settings (and the gossip model) changed."""
    changed = replace(cfg, protocol=replace(cfg.protocol, **protocol))
    return changed if gossip is None else replace(changed, gossip=gossip)


def sweeps(seeds: int) -> list[tuple[str, str, SimConfig, int]]:
    """(parameter, value label, config, seeds) around the base setting.  The protocol is slow
    to simulate (minutes per run on a busy 2-core machine): one seed per variation."""
    p = BASE.protocol
    out: list[tuple[str, str, SimConfig, int]] = [
        ("runtime setting", f"defaults: phases, jitter 0.2 T, F {p.fanout}, G {p.gossip_rate}",
         BASE, seeds),
    ]
    for d in (0.1, 0.5, 1.0):
        out.append(("delay (rounds)", f"{d:g}", varied(BASE, delay=d), 1))
    for f in (1, 2):
        out.append(("fanout", str(f), varied(BASE, fanout=f), 1))
    out.append(("gossip rate (per period)", "1", varied(BASE, gossip_rate=1), 1))
    out.append(("loss", "0.1", varied(BASE, loss=0.1), 1))
    out.append(("timing", "lock-step", varied(BASE, jitter=0.0), 1))
    for d in (0.0, 1.0):
        # deterministic: one run says it all
        out.append(("snapshot model (reference)", f"lock-step, d={d:g}",
                    varied(BASE, "snapshot", jitter=0.0, delay=d), 1))
    return out


def churn_scenario() -> Scenario:
    """The paper cluster with u4 away during (LEAVE, REJOIN)."""
    doc = dict(read_document(EXAMPLES / "paper_cluster.yaml"))
    doc["events"] = [{"at": LEAVE, "user_leaves": "u4"}, {"at": REJOIN, "user_joins": "u4"}]
    return Scenario.from_dict(doc, "paper_cluster.yaml")


def one_run(job: tuple[str, str, SimConfig, int]) -> dict[str, Any]:
    param, value, cfg0, seed = job
    cfg = varied(cfg0, seed=seed)
    t0 = time.perf_counter()
    res = simulate(churn_scenario(), cfg)
    seconds = time.perf_counter() - t0
    outcome = {e.description: e.rounds for e in res.events}
    row = {
        "parameter": param, "value": value, "seed": seed,
        **{ev: outcome.get(ev) for ev in EVENTS},
        "bytes_per_server_round": float(np.mean([r.bytes for r in res.trace])),
        "messages_per_server_round": float(np.mean([r.messages for r in res.trace])),
        "seconds_per_round": res.seconds_per_round,
    }
    print(f"{param:28s} {value:40s} seed {seed}: {[outcome.get(ev) for ev in EVENTS]} "
          f"({seconds:.0f} s)", flush=True)
    return row


GOOGLE_K = 100
GOOGLE_CAP = 300  # rounds (the rule study's cap)
QUICK_ROUNDS = 5  # --quick: rounds of every run
GOOGLE_SETTINGS = (
    (f"defaults (message-level, fanout {BASE.protocol.fanout})", BASE),
    ("the same, fanout 2", varied(BASE, fanout=2)),
    ("lock-step, one snapshot (d = 0)", varied(BASE, "snapshot", jitter=0.0, delay=0.0)),
)


def google_run(job: tuple[int, int, int]) -> dict[str, Any]:
    """One Google-mix cluster from zero in one setting, for at most ``cap`` rounds; converged =
    held HOLD rounds in a row."""
    setting, seed, cap = job
    label, cfg0 = GOOGLE_SETTINGS[setting]
    cfg = replace(varied(cfg0, seed=seed, hold=HOLD), rounds=cap, stop_after_hold=HOLD)
    t0 = time.perf_counter()
    res = simulate(google_cluster(np.random.default_rng(seed), K=GOOGLE_K, N=100), cfg)
    rounds = res.events[0].rounds
    print(f"google K={GOOGLE_K} seed {seed} {label}: {rounds} "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return {"setting": label, "seed": seed, "rounds_to_converge": rounds,
            "final_residual": res.trace[-1].residual, "rounds_run": len(res.trace)}


def run_all(seeds: int, workers: int, google_seeds: int, rounds: int | None = None
            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every run; ``rounds`` caps the rounds of each (a smoke test)."""
    jobs: list[tuple[str, str, SimConfig, int]] = []
    for param, value, cfg, n_seeds in sweeps(seeds):
        if rounds is not None:
            cfg = replace(cfg, rounds=min(cfg.rounds, rounds))
        jobs += [(param, value, cfg, seed) for seed in range(n_seeds)]
    cap = GOOGLE_CAP if rounds is None else min(GOOGLE_CAP, rounds)
    with Pool(workers) as pool:
        rows = pool.map(one_run, jobs, chunksize=1)
        google = pool.map(google_run, [(s, seed, cap) for s in range(len(GOOGLE_SETTINGS))
                                       for seed in range(google_seeds)], chunksize=1)
    return rows, google


def plot(rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(dict.fromkeys(f"{r['parameter']}: {r['value']}" for r in rows))
    fig, ax = plt.subplots(figsize=(10, 4.2))
    for j, ev in enumerate(EVENTS):
        for i, lab in enumerate(labels):
            vals = [PHASE * 1.1 if r[ev] is None else r[ev] for r in rows
                    if f"{r['parameter']}: {r['value']}" == lab]
            ax.scatter([i + (j - 1) * 0.22] * len(vals), vals, s=14, color=f"C{j}",
                       label=ev if i == 0 else None)
    ax.axhline(20, color="k", ls=":", lw=0.8)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=40, fontsize=6, ha="right")
    ax.set_ylabel(f"rounds to certificate (>{PHASE}: never)")
    ax.set_title("Paper cluster churn under Scuttlebutt gossip (dotted: 20 rounds)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "sim_gossip.png", dpi=110)
    plt.close(fig)


def google_table(google: list[dict[str, Any]]) -> list[str]:
    seeds = sorted({r["seed"] for r in google})
    if not seeds:
        return []
    body = []
    for label, _ in GOOGLE_SETTINGS:
        by_seed = {r["seed"]: r for r in google if r["setting"] == label}
        st = rounds_stat([by_seed[s]["rounds_to_converge"] for s in seeds], GOOGLE_CAP)
        cells = [f">{GOOGLE_CAP} ({by_seed[s]['final_residual']:.0e})"
                 if by_seed[s]["rounds_to_converge"] is None
                 else str(by_seed[s]["rounds_to_converge"]) for s in seeds]
        body.append([label, st["converged"], *cells])
    return [
        "",
        f"### Google mix (K = {GOOGLE_K}, N = 100) from zero: the defaults vs lock-step",
        "",
        f"One cluster per seed, the default rule, cap {GOOGLE_CAP} rounds; cells: rounds until "
        f"the certificate held {HOLD} rounds in a row (`>cap (r)`: not within the cap, r the "
        "residual at the end).  The lock-step row is the rule study's worst case (every server "
        "on the same snapshot of the true totals of the round before).",
        "",
        table(["setting", "converged", *[f"seed {s}" for s in seeds]], body),
    ]


def report(rows: list[dict[str, Any]], seeds: int, seconds: float,
           google: list[dict[str, Any]]) -> str:
    p = BASE.protocol
    body = []
    for param in dict.fromkeys(r["parameter"] for r in rows):
        for value in dict.fromkeys(r["value"] for r in rows if r["parameter"] == param):
            sel = [r for r in rows if r["parameter"] == param and r["value"] == value]
            cells = []
            for ev in EVENTS:
                st = rounds_stat([r[ev] for r in sel], PHASE)
                cells.append(f"{st['median']} / {st['max']}")
            body.append([param, value, len(sel), *cells,
                         f"{np.median([r['messages_per_server_round'] for r in sel]):.1f}",
                         f"{np.median([r['bytes_per_server_round'] for r in sel]):.0f}"])
    lines = [
        "## Simulator: churn under real gossip (paper cluster, 120 servers)",
        "",
        f"Generated by `python -m experiments run sim_gossip` ({seeds} seeds for the runtime "
        f"setting, one for each variation; {seconds:.0f} s).  Default "
        f"rule, T = 1 s, u4 leaves at {LEAVE} s and rejoins at {REJOIN} s.  Base: the "
        f"protocol's defaults, the same in `simulate` and `run` (random phases, jitter "
        f"{p.jitter:g} T, no added delay, fanout {p.fanout}, {p.gossip_rate} exchange rounds "
        "per period, no loss); one "
        "parameter varies at a time.  Cells: rounds after the event until the certificate "
        f"(rtol 1e-3) held for good — {PHASE_HOLD} rounds in a row, or until the next event; "
        f"median / max over seeds (`>{PHASE}`: not before the next "
        "event).  Traffic: messages and bytes sent per server per round (mean over the run; "
        "the snapshot rows estimate it from the encoding).",
        "",
        table(["parameter", "value", "runs", "from zero", "u4 leaves", "u4 rejoins",
               "msgs/server/round", "bytes/server/round"], body),
        "",
        "![rounds per event vs gossip parameters](results/sim_gossip.png)",
        *google_table(google),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--google-seeds", type=int, default=5,
                    help="Google-mix clusters (K = 100) with the defaults vs lock-step")
    ap.add_argument("--quick", action="store_true",
                    help=f"smoke test: every run only {QUICK_ROUNDS} rounds")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows, google = run_all(args.seeds, args.workers, args.google_seeds,
                           QUICK_ROUNDS if args.quick else None)
    seconds = time.perf_counter() - t0
    write_csv(RESULTS / "sim_gossip.csv", rows)
    write_csv(RESULTS / "sim_gossip_google.csv", google)
    plot(rows)
    md = report(rows, args.seeds, seconds, google)
    publish("sim_gossip", md)
