"""The Google 2011 machine mix at scale: K = 1,000 and the full K = 12,583 with N = 100 users.

Cluster: :func:`psdsf_dist.model.random_scenarios.google_cluster_doc` (the trace's 10 machine
configurations in their published proportions; at K = 12,583 the exact counts), seed 2011.
Users: per-task CPU and memory each uniform in 0.2-5 % of the largest machine, weights in
{1, 1, 2, 4} — the trace's published summary (Reiss et al., 2012) is that task requests are
small fractions of a machine, spread over two orders of magnitude; the per-task request
distribution itself is not in this repository, so these ranges are a modelling choice, not a
fit.  Exactly half the users (u1, u3, ...) are placement-constrained: each to a random subset
of configurations (each kept with probability 1/2), as ``google_cluster_doc`` draws them;
the trace's constraints are attribute-based and rarer — half is the issue's choice, to make
placement matter.

What is measured:

1. every registered policy: cluster CPU and memory utilisation, Jain's index of the weighted
   global dominant shares ``x[n] max_r D[n, r] / sum_i C[i, r] / phi[n]``, tasks per user, the
   properties that hold, solve time.  Class-invariant policies are solved on the merged
   cluster (:mod:`psdsf_dist.policies.class_merge`, exact; properties are checked there too);
   the others run on every server in a child process with a cap per policy; the direct
   per-server solve is timed for ``psdsf``, ``per-server-drf`` and ``drfh`` (the LP
   baselines share its LP size) with a cap;
2. the distributed protocol in the simulator (lock-step snapshot model, the only one affordable
   at K = 12,583), from zero: rounds until the certificate held, and the gap to the exact
   allocation, ``sum_n |x[n] - x*[n]| / sum_n x*[n]``, over time;
3. churn: users leave and come back as a Poisson process; the fraction of time the gap to the
   exact allocation of the moment is within 1 % and 5 %.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import queue
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from experiments.common.repro_common import (
    Section,
    figure,
    pct,
    save,
    save_csv,
    seconds_text,
    section_main,
)
from experiments.common.sim_common import table
from psdsf_dist.model.random_scenarios import google_cluster_doc
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.policies import POLICIES, allocate
from psdsf_dist.policies.class_merge import CLASS_INVARIANT, allocate_by_class, merge_classes
from psdsf_dist.policies.drfh import global_dominant_share
from psdsf_dist.policies.fairness_metrics import jain_index
from psdsf_dist.policies.properties import PROPERTY_NAMES, check_properties
from psdsf_dist.policies.timeline import at_times, policy_timeline
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.simulator.simulation import SimConfig, Simulator

N = 100
SEED = 2011
SIZES = (1000, 12583)
DIRECT = ("psdsf", "per-server-drf", "drfh")


def google_doc(K: int, seed: int = SEED) -> dict[str, Any]:
    doc = google_cluster_doc(np.random.default_rng(seed), K=K, N=N, placement_prob=1.0)
    for n, user in enumerate(doc["users"]):
        if n % 2 == 1:
            user.pop("servers", None)  # exactly half constrained
    return doc


def google(K: int) -> Scenario:
    return Scenario.from_dict(google_doc(K), f"google K={K}")


def _child(fn: Callable[[], Any], q: Any) -> None:
    q.put(fn())


def capped_call(fn: Callable[[], Any], cap: float) -> Any | None:
    """``fn()``'s value, computed in a child process, or None if it ran past ``cap`` seconds
    (then killed) or died."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(fn, q))
    p.start()
    deadline = time.monotonic() + cap
    try:
        # read before join (a large value would block the child's exit); a child that died
        # without a value is not waited for until the cap
        while True:
            try:
                return q.get(timeout=min(1.0, max(deadline - time.monotonic(), 0.0)))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    return None
                if not p.is_alive():
                    try:
                        return q.get(timeout=0.1)  # put just before it exited
                    except queue.Empty:
                        return None
    finally:
        if p.is_alive():
            p.terminate()
        p.join()


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def capped_seconds(fn: Callable[[], Any], cap: float) -> float | None:
    """Seconds ``fn`` took in a child process, or None if it ran past ``cap`` (then killed)."""
    got = capped_call(functools.partial(_timed, fn), cap)
    return None if got is None else float(got)


def _measures(sc: Scenario, mu: Any, x: Any, seconds: float, rep: Any | None) -> dict[str, Any]:
    """Utilisation, Jain's index of the weighted global dominant shares (``mu``: each user's
    global dominant share per task), tasks per user and the properties of one allocation with
    totals ``x``."""
    used = x @ sc.demand  # tasks times per-task demand (the mix has no gamma overrides)
    util = used / sc.capacity.sum(axis=0)
    row: dict[str, Any] = {
        "seconds": seconds, "cpu": float(util[0]), "mem": float(util[1]),
        "jain_gds": jain_index(x * mu / sc.weight), "tasks_total": float(x.sum()),
        "tasks_min": float(x.min()), "tasks_median": float(np.median(x)),
        "tasks_max": float(x.max()), "properties": "", "fails": ""}
    if rep is not None:
        row["properties"] = ", ".join(PROPERTY_NAMES[c.key].split(" (")[0] for c in rep.checks
                                      if c.holds and c.key != "feasible")
        row["fails"] = ", ".join(PROPERTY_NAMES[c.key].split(" (")[0] for c in rep.checks
                                 if c.holds is False)
    return row


def _direct(sc: Scenario, mu: Any, policy: str, trials: int,
            properties: bool) -> dict[str, Any]:
    """A policy run on every server (no merging), measured; in a child process."""
    try:
        a = allocate(sc, policy)
        rep = (check_properties(sc, policy, "rdm", trials=trials, seed=0, allocation=a)
               if properties else None)
    except Exception as err:  # the report says what failed instead of stopping
        return {"note": f"failed: {type(err).__name__}: {str(err).splitlines()[0]}"}
    return _measures(sc, mu, a.totals, a.seconds, rep)


def compare(sc: Scenario, trials: int, direct_cap: float, direct_trials: int,
            direct_properties: bool) -> list[dict[str, Any]]:
    """Every registered policy: class-invariant ones on the merged cluster (exact, fast), the
    others on every server with a time cap (properties at ``direct_trials`` probes of
    strategy-proofness, when ``direct_properties``)."""
    merged, _ = merge_classes(sc)
    mu = global_dominant_share(sc, respect_placement=False)
    out = []
    for policy in POLICIES:
        row: dict[str, Any] = {"policy": policy, "merged": policy in CLASS_INVARIANT}
        if policy in CLASS_INVARIANT:
            a = allocate_by_class(sc, policy)
            rep = check_properties(merged, policy, "rdm", trials=trials, seed=0)
            row.update(_measures(sc, mu, a.totals, a.seconds, rep))
        else:
            got = capped_call(functools.partial(_direct, sc, mu, policy, direct_trials,
                                                direct_properties), direct_cap)
            row.update(got if got is not None else
                       {"note": f"not done within the cap ({direct_cap:.0f} s)"})
        out.append(row)
    return out


def gap(x: Any, ref: Any) -> float:
    return float(np.abs(x - ref).sum() / max(float(ref.sum()), 1e-12))


def from_zero(sc: Scenario, rounds: int) -> dict[str, Any]:
    exact = allocate_by_class(sc, "psdsf").totals
    sim = Simulator(sc, SimConfig(ProtocolConfig(jitter=0.0), rounds=rounds, gossip="snapshot",
                                  stop_after_hold=20))
    gaps: list[float] = []
    res_: list[float] = []

    def keep(obs: Any) -> None:
        gaps.append(gap(sim.allocation().sum(axis=1), exact))
        res_.append(float(obs.residual))

    sim.progress = keep
    t0 = time.perf_counter()
    res = sim.run()
    return {"rounds_to_certificate": res.events[0].rounds, "gaps": gaps, "residuals": res_,
            "seconds": time.perf_counter() - t0, "cap": rounds}


def churn_doc(K: int, horizon: float, rate: float, seed: int) -> dict[str, Any]:
    """Users leave and come back as a Poisson process of rate ``rate`` per second: at each
    event a uniformly drawn user toggles (leaves if present, else rejoins); all start present."""
    doc = google_doc(K)
    rng = np.random.default_rng(seed)
    present = [True] * N
    events = []
    t = float(rng.exponential(1 / rate))
    while t < horizon:
        n = int(rng.integers(N))
        if present[n] and sum(present) > 1:
            events.append({"at": round(t, 3), "user_leaves": f"u{n + 1}"})
            present[n] = False
        elif not present[n]:
            events.append({"at": round(t, 3), "user_joins": f"u{n + 1}"})
            present[n] = True
        t += float(rng.exponential(1 / rate))
    doc["events"] = events
    return doc


def churn(K: int, horizon: int, rate: float) -> dict[str, Any]:
    sc = Scenario.from_dict(churn_doc(K, horizon, rate, SEED), f"google churn K={K}")
    tl = policy_timeline(sc, "psdsf", allocator=allocate_by_class)
    times = [float(r) for r in range(1, horizon + 1)]
    refs = [X.sum(axis=1) for X in at_times(tl, times)]
    sim = Simulator(sc, SimConfig(ProtocolConfig(jitter=0.0), rounds=horizon, gossip="snapshot"))
    gaps: list[float] = []
    sim.progress = lambda obs: gaps.append(gap(sim.allocation().sum(axis=1),
                                               refs[len(gaps)]))
    t0 = time.perf_counter()
    sim.run()
    g = np.array(gaps)
    return {"K": K, "events": len(sc.events), "gaps": gaps, "horizon": horizon,
            "within_1": float((g <= 0.01).mean()), "within_5": float((g <= 0.05).mean()),
            "median_gap": float(np.median(g)), "seconds": time.perf_counter() - t0,
            "event_times": [e.at for e in sc.events]}


def run(quick: bool) -> Section:
    t0 = time.perf_counter()
    trials = 2 if quick else 5
    rounds = {1000: 100 if quick else 400, 12583: 20 if quick else 150}
    horizon = {1000: 150 if quick else 600, 12583: 0 if quick else 200}
    cap = 60.0 if quick else 300.0
    # the policies run on every server: capped per policy, properties at K = 1,000 only
    direct_cap = {1000: 60.0 if quick else 240.0, 12583: 30.0 if quick else 90.0}
    direct_trials = 1
    rate = 1 / 15
    parts = []
    csv_rows = []
    zero: dict[int, dict[str, Any]] = {}
    churned: dict[int, dict[str, Any]] = {}
    direct_rows = []
    for K in SIZES:
        sc = google(K)
        rows = compare(sc, trials, direct_cap[K], direct_trials, direct_properties=K <= 1000)
        csv_rows += [{"K": K, **r} for r in rows]
        body = []
        for r in rows:
            if "note" in r:
                body.append([r["policy"], r["note"], "", "", "", "", ""])
                continue
            props, fails = r["properties"] or "-", r["fails"] or "-"
            if not r["merged"] and K > 1000:
                props = fails = "not checked at this size"
            body.append([r["policy"] if r["merged"] else f"{r['policy']} (every server)",
                         f"{pct(r['cpu'])} / {pct(r['mem'])}",
                         f"{r['jain_gds']:.3f}",
                         f"{r['tasks_total']:.0f} ({r['tasks_min']:.1f} / "
                         f"{r['tasks_median']:.1f} / {r['tasks_max']:.1f})",
                         props, fails, seconds_text(r["seconds"])])
        constrained = sum(1 for u in google_doc(K)["users"] if "servers" in u)
        parts += [f"**K = {K:,}** ({len(merge_classes(sc)[1].count)} machine configurations, "
                  f"N = {N}, {constrained} users placement-constrained):", "",
                  table(["policy", "CPU / memory used", "Jain (dominant shares)",
                         "tasks: total (min / median / max per user)", "properties that hold",
                         "fail", "solve"], body), ""]
        for policy in DIRECT:
            if K > 1000 and policy == "drfh":
                direct_rows.append([f"{K:,}", policy, "not run: > cap expected (see K = 1,000)"])
                continue
            s = capped_seconds(functools.partial(allocate, sc, policy), cap)
            direct_rows.append([f"{K:,}", policy,
                                seconds_text(s) if s is not None else f"> {cap:.0f} s (cap)"])
        zero[K] = from_zero(sc, rounds[K])
        if horizon[K]:
            churned[K] = churn(K, horizon[K], rate)
    save_csv("google_policies.csv", csv_rows)
    png_zero = _plot_zero(zero)
    conv_rows = []
    for K, z in zero.items():
        g = z["gaps"]
        conv_rows.append([f"{K:,}", str(z["rounds_to_certificate"] or f"> {z['cap']} (cap)"),
                          f"{g[9]:.2e}" if len(g) > 9 else "-",
                          f"{g[49]:.2e}" if len(g) > 49 else "-", f"{g[-1]:.2e} (round {len(g)})",
                          f"{z['residuals'][-1]:.1e}",
                          f"{z['seconds'] / max(len(g), 1):.2f} s"])
    churn_rows = [[f"{K:,}", f"{c['horizon']} s", str(c["events"]), pct(c["within_1"]),
                   pct(c["within_5"]), f"{100 * c['median_gap']:.2f}%",
                   seconds_text(c["seconds"])] for K, c in churned.items()]
    png_churn = _plot_churn(churned) if churned else None
    parts += [
        "Direct per-server solve (no class merging), one run each, cap "
        f"{cap:.0f} s (the LP baselines other than `drfh` build an LP of the same size):", "",
        table(["K", "policy", "solve time"], direct_rows), "",
        "Class-invariant policies are solved, and their properties checked, on the merged "
        "cluster (exact for feasibility, sharing incentive, envy-freeness, Pareto optimality "
        "and bottleneck fairness by the symmetry argument of `class_merge`; "
        f"strategy-proofness is probed with {trials} random misreports per policy, per "
        "configuration rather than per machine).  The others (whole-task policies, the AMF "
        "family, CRU: \"every server\") run on all K servers in a child process with a cap "
        f"per policy ({direct_cap[1000]:.0f} s at K = 1,000, solve and properties, "
        f"strategy-proofness probed {direct_trials} time; {direct_cap[12583]:.0f} s at "
        "K = 12,583, solve only); a policy that did not finish says so in its row.",
        "",
        "**Distributed PS-DSF in the simulator, from zero** (lock-step, every server on the "
        "true totals of the round before; gap = sum over users of |x - x*| / sum x*, x* the "
        "exact PS-DSF totals):", "",
        table(["K", "rounds to certificate (held 20 rounds)", "gap after 10 rounds",
               "after 50", "at the end", "final residual", "s per round"], conv_rows), "",
        f"![gap to the exact allocation from zero]({png_zero})", "",
        f"**With churn**: users leave and rejoin as a Poisson process, one event per "
        f"{1 / rate:.0f} s on average (a uniformly drawn user toggles), T = 1 s; the gap is to "
        "the exact PS-DSF allocation of the users present at that second:", "",
        table(["K", "horizon", "events", "time within 1 % of fair", "within 5 %",
               "median gap", "run time"], churn_rows) if churn_rows else
        "(not run in `--quick` at this size)", "",
        *([f"![gap to fair under churn]({png_churn})", ""] if png_churn else []),
    ]
    if quick:
        parts.append("`--quick`: fewer rounds, shorter churn, no churn run at K = 12,583, "
                     f"{trials} strategy-proofness probes.")
    return Section("Google 2011 mix at scale", "\n".join(parts), time.perf_counter() - t0)


def _plot_zero(zero: dict[int, dict[str, Any]]) -> str:
    fig, axes = figure(1, 1)
    ax = axes[0][0]
    for K, z in zero.items():
        g = np.maximum(np.array(z["gaps"]), 1e-9)
        ax.semilogy(np.arange(1, len(g) + 1), 100 * g, label=f"K = {K:,}: gap to exact")
        r = np.maximum(np.array(z["residuals"]), 1e-9)
        ax.semilogy(np.arange(1, len(r) + 1), 100 * r, ls=":", label=f"K = {K:,}: certificate "
                    "residual")
    ax.axhline(1, color="grey", lw=0.6, ls="--")
    ax.axhline(0.1, color="grey", lw=0.6, ls=":")
    ax.set_xlabel("round (s, T = 1 s)")
    ax.set_ylabel("gap to exact totals / residual (%)")
    ax.set_title(f"Google mix, N = {N}: distributed PS-DSF from zero (lock-step simulator)")
    ax.legend()
    ax.grid(alpha=0.3, which="both")
    return save(fig, "google_from_zero.png")


def _plot_churn(churned: dict[int, dict[str, Any]]) -> str:
    fig, axes = figure(1, 1)
    ax = axes[0][0]
    for K, c in churned.items():
        g = np.maximum(np.array(c["gaps"]), 1e-9)
        ax.semilogy(np.arange(1, len(g) + 1), 100 * g, lw=0.9, label=f"K = {K:,}")
    first = next(iter(churned.values()))
    for t in first["event_times"]:
        ax.axvline(t, color="grey", lw=0.4, ls=":")
    ax.axhline(1, color="black", lw=0.6, ls="--", label="1 %")
    ax.axhline(5, color="black", lw=0.6, ls="-.", label="5 %")
    ax.set_xlabel("time (s), T = 1 s; dotted: a user leaves or rejoins")
    ax.set_ylabel("gap to the exact allocation (%)")
    ax.set_title(f"Google mix, N = {N}, Poisson churn: distributed PS-DSF (lock-step simulator)")
    ax.legend()
    ax.grid(alpha=0.3, which="both")
    return save(fig, "google_churn.png")


def main(argv: list[str] | None = None) -> None:
    section_main(__doc__, run, argv)
