"""Rounds to converge under real gossip: vs message delay, fanout, gossip rate and timing.

The paper's 120-server cluster (ORACLES.md example 3, without its churn), the default update
rule, T = 1 s, the Scuttlebutt protocol simulated message by message.  One parameter varies at a
time around a base setting (lock-step, delay 0.1 round, fanout 2, 4 exchange rounds per period,
no loss); for each, several seeds from zero, counting rounds until the certificate (rtol 1e-3)
held for good (runs stop after it held 20 rounds in a row, or at the cap), with the traffic per
server per round.  The snapshot model (every server on the same totals, d rounds older than
the usual one) is shown beside it as the reference.

Writes ``results/sim_gossip.csv``, ``results/sim_gossip.md``, ``results/sim_gossip.png`` and
the ``sim_gossip`` section of ``experiments/README.md``.

    .venv/bin/python experiments/sim_gossip.py [--seeds 2] [--cap 60]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from typing import Any

import numpy as np
from sim_common import (
    EXAMPLES,
    RESULTS,
    rounds_stat,
    table,
    update_overview,
    update_readme,
    write_atomic,
    write_csv,
)

from psdsf_dist.scenario import Scenario, load_scenario
from psdsf_dist.simulator import SimConfig, simulate

BASE = SimConfig(rounds=100, delay=0.1, fanout=2, gossip_rate=4, gossip="scuttlebutt",
                 stop_after_hold=20)


def sweeps(quick: bool = False) -> list[tuple[str, str, SimConfig]]:
    """(parameter, value label, config) around the base setting."""
    out: list[tuple[str, str, SimConfig]] = []
    if quick:
        return [
            ("delay (rounds)", "0.1", BASE), ("delay (rounds)", "1", replace(BASE, delay=1.0)),
            ("fanout", "1", replace(BASE, fanout=1)), ("fanout", "4", replace(BASE, fanout=4)),
            ("gossip rate (per period)", "1", replace(BASE, gossip_rate=1)),
            ("timing", "phases + jitter 0.5 T", replace(BASE, lockstep=False, jitter=0.5)),
            ("snapshot model (reference)", "d=0", replace(BASE, gossip="snapshot", delay=0.0)),
        ]
    for d in (0.0, 0.1, 0.5, 1.0):
        out.append(("delay (rounds)", f"{d:g}", replace(BASE, delay=d)))
    for f in (1, 2, 4):
        out.append(("fanout", str(f), replace(BASE, fanout=f)))
    for g in (1, 2, 4):
        out.append(("gossip rate (per period)", str(g), replace(BASE, gossip_rate=g)))
    out.append(("timing", "lock-step", BASE))
    out.append(("timing", "random phases", replace(BASE, lockstep=False)))
    out.append(("timing", "phases + jitter 0.5 T", replace(BASE, lockstep=False, jitter=0.5)))
    for p in (0.1,):
        out.append(("loss", f"{p:g}", replace(BASE, loss=p)))
    for d in (0.0, 1.0):
        out.append(("snapshot model (reference)", f"d={d:g}",
                    replace(BASE, gossip="snapshot", delay=d)))
    return out


def run_all(scenario: Scenario, seeds: int, cap: int, quick: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for param, value, cfg0 in sweeps(quick):
        n_seeds = 1 if cfg0.gossip == "snapshot" and cfg0.lockstep else seeds
        for seed in range(n_seeds):
            cfg = replace(cfg0, rounds=cap, seed=seed)
            t0 = time.perf_counter()
            res = simulate(scenario, cfg)
            seconds = time.perf_counter() - t0
            rtc = res.events[0].rounds_to_converge
            rows.append({
                "parameter": param, "value": value, "seed": seed, "rounds_to_converge": rtc,
                "final_residual": res.trace[-1].residual,
                "bytes_per_server_round": float(np.mean([r.bytes for r in res.trace])),
                "messages_per_server_round": float(np.mean([r.messages for r in res.trace])),
                "seconds_per_round": res.seconds_per_round,
            })
            print(f"{param:28s} {value:22s} seed {seed}: {rtc} ({seconds:.1f} s)", flush=True)
    return rows


def plot(rows: list[dict[str, Any]], cap: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    params = list(dict.fromkeys(r["parameter"] for r in rows))
    fig, axes = plt.subplots(1, len(params), figsize=(3.2 * len(params), 3.4), sharey=True)
    for ax, param in zip(np.atleast_1d(axes), params, strict=True):
        values = list(dict.fromkeys(r["value"] for r in rows if r["parameter"] == param))
        data = []
        for v in values:
            sel = [r["rounds_to_converge"] for r in rows
                   if r["parameter"] == param and r["value"] == v]
            data.append([cap * 1.1 if x is None else x for x in sel])
        for j, d in enumerate(data):
            ax.scatter([j] * len(d), d, s=14)
            ax.plot([j - 0.2, j + 0.2], [np.median(d)] * 2, color="k")
        ax.set_xticks(range(len(values)))
        ax.set_xticklabels(values, rotation=35, fontsize=7, ha="right")
        ax.axhline(cap, color="k", ls=":", lw=0.8)
        ax.set_title(param, fontsize=8)
    np.atleast_1d(axes)[0].set_ylabel(f"rounds to certificate (>{cap}: never)")
    fig.tight_layout()
    fig.savefig(RESULTS / "sim_gossip.png", dpi=110)
    plt.close(fig)


def report(rows: list[dict[str, Any]], seeds: int, cap: int, seconds: float) -> str:
    body = []
    for param in dict.fromkeys(r["parameter"] for r in rows):
        for value in dict.fromkeys(r["value"] for r in rows if r["parameter"] == param):
            sel = [r for r in rows if r["parameter"] == param and r["value"] == value]
            st = rounds_stat([r["rounds_to_converge"] for r in sel], cap)
            body.append([param, value, st["converged"], st["median"], st["max"],
                         f"{np.median([r['messages_per_server_round'] for r in sel]):.1f}",
                         f"{np.median([r['bytes_per_server_round'] for r in sel]):.0f}",
                         f"{np.median([r['seconds_per_round'] for r in sel]):.3f}"])
    lines = [
        "## Simulator: convergence under real gossip (paper cluster, 120 servers)",
        "",
        f"Generated by `experiments/sim_gossip.py` ({seeds} seeds, cap {cap} rounds, "
        f"{seconds:.0f} s).  Default rule, from zero, T = 1 s; one parameter varies around the "
        f"base setting (lock-step, delay {BASE.delay:g} round, fanout {BASE.fanout}, "
        f"{BASE.gossip_rate} exchange rounds per period, no loss).  Rounds until the "
        "certificate (rtol 1e-3) held for good: converged runs, median, max.  Traffic: "
        "messages and bytes sent per server per round (mean over the run; the snapshot rows "
        "estimate it from the encoding); simulator seconds per round.",
        "",
        table(["parameter", "value", "converged", "median", "max", "msgs/server/round",
               "bytes/server/round", "sim s/round"], body),
        "",
        "![rounds vs gossip parameters](results/sim_gossip.png)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--cap", type=int, default=60)
    ap.add_argument("--quick", action="store_true", help="one value either side of the base")
    args = ap.parse_args(argv)
    # from zero only: the churn is studied by sim_churn.py
    scenario = load_scenario(EXAMPLES / "paper_cluster.yaml")
    doc = dict(scenario.raw)
    doc.pop("events", None)
    scenario = Scenario.from_dict(doc, "paper_cluster.yaml")
    t0 = time.perf_counter()
    rows = run_all(scenario, args.seeds, args.cap, args.quick)
    seconds = time.perf_counter() - t0
    write_csv(RESULTS / "sim_gossip.csv", rows)
    plot(rows, args.cap)
    md = report(rows, args.seeds, args.cap, seconds)
    write_atomic(RESULTS / "sim_gossip.md", md + "\n")
    update_readme("sim_gossip", md)
    update_overview()
    print(md)


if __name__ == "__main__":
    main()
