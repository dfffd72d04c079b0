"""Paper-cluster churn in the simulator: rounds until certified after each event, per rule.

The 120-server cluster of the PS-DSF paper (ORACLES.md example 3) with its churn (user u4 away
during (100, 250) s), T = 1 s, all servers in lock-step — the worst case: every server acts on
the same stale totals.  Two settings:

* ``snapshot d=0``: every server acts on the true totals of the round before;
* ``snapshot d=1``: the totals of two rounds before (a message delay of one round).

The real Scuttlebutt protocol, message by message, is ``sim_gossip.py``'s subject.

Each rule runs from zero; per event the rounds until the certificate (rtol 1e-3) held for good
are recorded (the snapshot settings are deterministic: one run each).  Writes
``results/sim_churn.csv``, ``results/sim_churn_trace.csv``, ``results/sim_churn.md``,
``results/sim_churn.png`` and the ``sim_churn`` section of ``experiments/README.md``.

    .venv/bin/python -m experiments run sim_churn
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from experiments.common.paths import EXAMPLES, RESULTS
from experiments.common.sim_common import HOLD, RULES, publish, rounds_stat, table, write_csv
from psdsf_dist.model.scenario import load_scenario
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.simulator.simulation import GossipModel, SimConfig, SimulationResult, simulate

SETTINGS: tuple[tuple[str, GossipModel, float, int, int], ...] = (
    # label, gossip model, delay in rounds, fanout, exchange rounds per period
    ("snapshot d=0", "snapshot", 0.0, 1, 1),
    ("snapshot d=1", "snapshot", 1.0, 1, 1),
)
EVENTS = ("start", "user u4 leaves", "user u4 joins")


def run_all(rounds: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    scenario = load_scenario(EXAMPLES / "paper_cluster.yaml")
    rows: list[dict[str, Any]] = []
    trace_rows: list[dict[str, Any]] = []
    for label, model, delay, fanout, rate in SETTINGS:
        for rule_label, rule, params in RULES:
            # lock-step snapshot runs are deterministic: one seed says it all
            for seed in range(1):
                protocol = ProtocolConfig(jitter=0.0, delay=delay, fanout=fanout,
                                          gossip_rate=rate, seed=seed, rule=rule,
                                          rule_params=params, hold=HOLD)
                cfg = SimConfig(protocol, rounds=rounds, gossip=model, stop_after_hold=30)
                t0 = time.perf_counter()
                res = simulate(scenario, cfg)
                seconds = time.perf_counter() - t0
                outcome = {e.description: e.rounds for e in res.events}
                rows.append({
                    "setting": label, "rule": rule_label, "seed": seed,
                    **{ev: outcome.get(ev) for ev in EVENTS},
                    "bytes_per_server_round": float(np.mean([r.bytes for r in res.trace])),
                    "messages_per_server_round": float(np.mean([r.messages for r in res.trace])),
                    "seconds_per_round": res.seconds_per_round, "seconds": seconds,
                })
                if seed == 0:
                    trace_rows += _trace(label, rule_label, res)
                print(f"{label:16s} {rule_label:22s} seed {seed}: "
                      f"{[outcome.get(ev) for ev in EVENTS]} ({seconds:.1f} s)", flush=True)
    return rows, trace_rows


def _trace(label: str, rule: str, res: SimulationResult) -> list[dict[str, Any]]:
    return [{"setting": label, "rule": rule, "round": r.round, "time": r.time,
             "residual": r.residual, "utilization": r.utilization, "bytes": r.bytes}
            for r in res.trace]


def plot(trace_rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [s[0] for s in SETTINGS if any(r["setting"] == s[0] for r in trace_rows)]
    fig, axes = plt.subplots(1, len(labels), figsize=(5 * len(labels), 3.8), sharey=True)
    for ax, label in zip(np.atleast_1d(axes), labels, strict=True):
        for rule_label, _, _ in RULES:
            pts = [r for r in trace_rows if r["setting"] == label and r["rule"] == rule_label]
            if pts:
                # observed at t = (round + 1) T, after the events due then
                ax.semilogy([p["time"] for p in pts],
                            [max(p["residual"], 1e-12) for p in pts], label=rule_label, lw=1)
        ax.axhline(1e-3, color="k", ls=":", lw=0.8)
        for x in (100, 250):
            ax.axvline(x, color="grey", ls="--", lw=0.6)
        ax.set_title(f"paper cluster, lock-step, {label}")
        ax.set_xlabel("time (s; one round per T = 1 s)")
    np.atleast_1d(axes)[0].set_ylabel("certificate residual")
    np.atleast_1d(axes)[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "sim_churn.png", dpi=110)
    plt.close(fig)


def report(rows: list[dict[str, Any]], rounds: int, seconds: float) -> str:
    body = []
    for label, *_ in SETTINGS:
        for rule_label, _, _ in RULES:
            sel = [r for r in rows if r["setting"] == label and r["rule"] == rule_label]
            if not sel:
                continue
            cells = []
            for ev in EVENTS:
                st = rounds_stat([r[ev] for r in sel], rounds)
                cells.append(f"{st['median']} / {st['max']}")
            body.append([label, rule_label, len(sel), *cells,
                         f"{np.median([r['bytes_per_server_round'] for r in sel]):.0f}"])
    lines = [
        "## Simulator: paper-cluster churn (lock-step)",
        "",
        f"Generated by `python -m experiments run sim_churn` ({rounds} rounds, {seconds:.0f} s).  "
        "ORACLES example 3, user u4 away during (100, 250) s, T = 1 s, every server updating "
        "at the same instants.  Cells: rounds after the event until the certificate (rtol "
        f"1e-3) held for good — {HOLD} rounds in a row, or until the next event (one "
        "deterministic run: median / max are that run; "
        f"`>{rounds}` = never within the run; 1 = held after the first round of "
        "updates).  `snapshot d`: every server on the true totals of 1 + d rounds before "
        "(message-level gossip: `sim_gossip.py`).  Bytes: sent per server per round, "
        "estimated from the encoding.",
        "",
        table(["setting", "rule", "runs", "from zero", "u4 leaves", "u4 rejoins",
               "bytes/server/round"], body),
        "",
        "![residual per round](results/sim_churn.png)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=300)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows, trace_rows = run_all(args.rounds)
    seconds = time.perf_counter() - t0
    write_csv(RESULTS / "sim_churn.csv", rows)
    write_csv(RESULTS / "sim_churn_trace.csv", trace_rows)
    plot(trace_rows)
    md = report(rows, args.rounds, seconds)
    publish("sim_churn", md)
