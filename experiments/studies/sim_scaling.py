"""Rounds to converge vs cluster size (Google 2011 machine mix), per rule, and simulator cost.

Clusters of K = 100, 1,000 and 10,000 machines sampled from the Google 2011 trace mix
(``google_cluster``, N = 100 users, 2 resources, some placement constraints), all servers in
lock-step on the true totals of the round before (the ``snapshot`` model; the Scuttlebutt
model's memory and time grow like K^2).  From zero, rounds until the certificate (rtol 1e-3)
held for good; runs stop after it has held 20 rounds in a row, or at the cap.  Also the
simulator's seconds per simulated round at K = 12,583 (the full trace), with and without
computing the rule once per class of identical servers.

Writes ``results/sim_scaling.csv``, ``results/sim_scaling.md``, ``results/sim_scaling.png``
and the ``sim_scaling`` section of ``experiments/README.md``.

    .venv/bin/python -m experiments run sim_scaling [--seeds 3] [--cap 150] [--sizes 100 1000 10000]
        [--all-rules-up-to K] [--naive-up-to K]
"""

from __future__ import annotations

import argparse
import math
import resource
import time
from typing import Any

import numpy as np

from experiments.common.paths import RESULTS
from experiments.common.sim_common import HOLD, RULES, publish, rounds_stat, table, write_csv
from psdsf_dist.model.random_scenarios import GOOGLE_2011_TOTAL, google_cluster
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.update_rule import DEFAULT_RULE
from psdsf_dist.simulator.simulation import SimConfig, simulate

USERS = 100
TIMING_ROUNDS = 3


def run_sizes(sizes: list[int], seeds: int, cap: int, all_rules_up_to: int,
              naive_up_to: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for K in sizes:
        for seed in range(seeds):
            sc = google_cluster(np.random.default_rng(seed), K=K, N=USERS)
            for label, rule, params in RULES:
                if K > all_rules_up_to and rule not in (DEFAULT_RULE, "best-response"):
                    continue  # at the largest sizes: the default and the naive rule only
                if K > naive_up_to and rule != DEFAULT_RULE:
                    continue
                protocol = ProtocolConfig(jitter=0.0, rule=rule, rule_params=params, seed=seed,
                                          hold=HOLD)
                cfg = SimConfig(protocol, rounds=cap, gossip="snapshot", stop_after_hold=HOLD)
                t0 = time.perf_counter()
                res = simulate(sc, cfg)
                seconds = time.perf_counter() - t0
                rows.append({"K": K, "seed": seed, "rule": label,
                             "rounds_to_converge": res.events[0].rounds,
                             "final_residual": res.trace[-1].residual,
                             "rounds_run": len(res.trace),
                             "seconds_per_round": res.seconds_per_round})
                print(f"K={K:6d} seed {seed} {label:22s} "
                      f"{res.events[0].rounds} ({seconds:.1f} s)", flush=True)
    return rows


def timing(repeats: int) -> list[dict[str, Any]]:
    """Seconds per simulated round at the full trace size (median of ``repeats`` runs)."""
    sc = google_cluster(np.random.default_rng(0), K=GOOGLE_2011_TOTAL, N=USERS)
    out = []
    for memo in (True, False):
        per_round = []
        for r in range(repeats):
            cfg = SimConfig(ProtocolConfig(jitter=0.0, seed=r), rounds=TIMING_ROUNDS,
                            gossip="snapshot", memoize=memo)
            res = simulate(sc, cfg)
            per_round.append(res.seconds_per_round)
        out.append({"K": GOOGLE_2011_TOTAL, "N": USERS, "memoize": memo,
                    "seconds_per_round_median": float(np.median(per_round)),
                    "seconds_per_round_max": float(np.max(per_round)),
                    "runs": repeats, "rounds_per_run": TIMING_ROUNDS})
        print(f"K={GOOGLE_2011_TOTAL} memoize={memo}: {np.median(per_round):.2f} s/round",
              flush=True)
    return out


def plot(rows: list[dict[str, Any]], cap: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # every run, not medians: with most runs cut at the cap a median line says nothing
    fig, (ax, axr) = plt.subplots(1, 2, figsize=(10, 4))
    for j, (label, _, _) in enumerate(RULES):
        sel = [r for r in rows if r["rule"] == label]
        if not sel:
            continue
        shift = 1.0 + 0.08 * (j - 1)  # side by side on the log axis
        ks = np.array([r["K"] * shift for r in sel])
        done = np.array([r["rounds_to_converge"] is not None for r in sel])
        rounds = np.array([r["rounds_to_converge"] if r["rounds_to_converge"] is not None
                           else cap * 1.05 for r in sel], dtype=float)
        color = f"C{j}"
        ax.scatter(ks[done], rounds[done], color=color, marker="o",
                   label=f"{label}: certified")
        ax.scatter(ks[~done], rounds[~done], facecolors="none", edgecolors=color, marker="o",
                   label=f"{label}: not within {cap}")
        axr.scatter(ks, [max(r["final_residual"], 1e-16) for r in sel], color=color,
                    label=label)
    ax.axhline(cap, color="k", ls=":", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("servers K (Google 2011 mix)")
    ax.set_ylabel(f"rounds to certificate (open: not within {cap})")
    ax.set_title("each run (seeds side by side)")
    ax.legend(fontsize=6)
    axr.axhline(1e-3, color="k", ls=":", lw=0.8)
    axr.set_xscale("log")
    axr.set_yscale("log")
    axr.set_xlabel("servers K (Google 2011 mix)")
    axr.set_ylabel("certificate residual at the last round")
    axr.set_title("where each run ended (dotted: rtol 1e-3)")
    axr.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(RESULTS / "sim_scaling.png", dpi=110)
    plt.close(fig)


def report(rows: list[dict[str, Any]], timings: list[dict[str, Any]], seeds: int, cap: int,
           seconds: float) -> str:
    sizes = sorted({r["K"] for r in rows})
    body = []
    for label, _, _ in RULES:
        for K in sizes:
            sel = [r for r in rows if r["K"] == K and r["rule"] == label]
            if not sel:
                continue
            st = rounds_stat([r["rounds_to_converge"] for r in sel], cap)
            res = float(np.median([r["final_residual"] for r in sel]))
            body.append([label, K, f"{math.log(K):.1f}", st["converged"], st["median"],
                         st["max"], f"{res:.1e}"])
    tbody = [[t["K"], t["N"], "yes" if t["memoize"] else "no",
              f"{t['seconds_per_round_median']:.2f}", f"{t['seconds_per_round_max']:.2f}",
              t["runs"]] for t in timings]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lines = [
        "## Simulator: rounds to converge vs K (Google 2011 mix)",
        "",
        f"Generated by `python -m experiments run sim_scaling` ({seeds} seeds, cap {cap} rounds, "
        f"{seconds:.0f} s; peak memory {rss:.0f} MB).  N = {USERS} users, cpu and memory, "
        "lock-step, every server on the true totals of the round before (snapshot model, "
        "delay 0).  From zero; a run counts as converged when the certificate (rtol 1e-3) "
        f"held for good ({HOLD} rounds in a row at least, within the cap).  `ln K` is given to "
        "judge the growth.  A rule missing at a size was not run there (`--all-rules-up-to`, "
        "`--naive-up-to`: the naive rule never converges and is the costliest to run).",
        "",
        table(["rule", "K", "ln K", "converged", "median", "max", "final residual (median)"],
              body),
        "",
        f"Seconds per simulated round at the full trace (K = {GOOGLE_2011_TOTAL}), median of "
        f"runs of {TIMING_ROUNDS} rounds on this machine.  `memoize`: the rule is computed "
        "once per class of identical servers in identical states (a pure function: the result "
        "is bit-identical); without it every server runs the rule.",
        "",
        table(["K", "N", "memoize", "s/round (median)", "s/round (max)", "runs"], tbody),
        "",
        "![rounds vs K](results/sim_scaling.png)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--cap", type=int, default=150)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    ap.add_argument("--timing-runs", type=int, default=3)
    ap.add_argument("--all-rules-up-to", type=int, default=10**9,
                    help="above this K run only the default and the naive rule")
    ap.add_argument("--naive-up-to", type=int, default=10**9,
                    help="above this K run only the default rule (the naive one never "
                    "converges and costs the most rounds)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = run_sizes(args.sizes, args.seeds, args.cap, args.all_rules_up_to, args.naive_up_to)
    timings = timing(args.timing_runs) if args.timing_runs > 0 else []
    seconds = time.perf_counter() - t0
    write_csv(RESULTS / "sim_scaling.csv", rows + timings)
    plot(rows, args.cap)
    md = report(rows, timings, args.seeds, args.cap, seconds)
    publish("sim_scaling", md)
