"""DRFH paper (Wang, Li, Liang), section VI, Fig. 4: the dynamic experiment.

100 servers drawn from the Google 2011 mix; user 1 (0.2 CPU, 0.3 memory per task) from t = 0,
user 2 (0.5, 0.1) from 200 s, user 3 (0.1, 0.3) from 500 s, user 1 leaving at 1,080 s.  The paper
reports user 1 alone at 40 % CPU / 62 % memory, then 44 % global dominant share each, then 26 %
each.  Its draw of 100 servers is not published, only its totals (52.75 CPU, 51.32 memory):
:func:`paper_draw` takes the most likely composition of the Google mix (multinomial in the
trace's proportions) with exactly those totals, so the pool is the paper's.

Runs: DRFH computed exactly per phase (the paper's centralised allocation, read every second),
PS-DSF exact per phase, PS-DSF distributed in the simulator (lock-step on one stale snapshot,
the full 1,400 s) and — full run only — with message-level gossip and on Ray (paced, one actor),
these two with time compressed 10x (events at 20 / 50 / 108 s, T = 1 s) to keep the runs short.
"""

from __future__ import annotations

import itertools
import math
import time
from typing import Any

import numpy as np

from experiments.common.repro_common import (
    Section,
    Trace,
    figure,
    paced_ray_trace,
    pct,
    resource_share,
    save_csv,
    section_main,
    simulate_trace,
)
from experiments.common.sim_common import table
from psdsf_dist.model.random_scenarios import GOOGLE_2011_MACHINES, GOOGLE_2011_TOTAL
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.policies.class_merge import allocate_by_class
from psdsf_dist.policies.properties import pareto_optimality
from psdsf_dist.policies.timeline import at_times, policy_timeline
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.simulator.simulation import SimConfig

HORIZON = 1400
EVENTS = ((200.0, "user_joins", "u2"), (500.0, "user_joins", "u3"),
          (1080.0, "user_leaves", "u1"))
PHASES = (("u1 alone", 0.0, 200.0), ("u1 + u2", 200.0, 500.0), ("u1 + u2 + u3", 500.0, 1080.0),
          ("u2 + u3", 1080.0, HORIZON + 1.0))
PAPER_TOTALS = (52.75, 51.32)
# Fig. 4 as the text states it: (cpu share, mem share) of u1 alone, then global dominant shares
PAPER = {"u1 alone": "u1: 40% CPU, 62% memory", "u1 + u2": "44% global dominant share each",
         "u1 + u2 + u3": "26% each", "u2 + u3": "equal shares (no number)"}
COMPRESS = 10.0


def paper_draw() -> list[int]:
    """Counts per Google configuration: 100 machines with the paper's CPU and memory totals,
    the most likely such composition under the trace's proportions."""
    p = np.array([c for c, _, _ in GOOGLE_2011_MACHINES], dtype=float) / GOOGLE_2011_TOTAL
    cpu = [round(100 * c) for _, c, _ in GOOGLE_2011_MACHINES]
    mem = [round(100 * m) for _, _, m in GOOGLE_2011_MACHINES]
    want = (round(100 * PAPER_TOTALS[0]), round(100 * PAPER_TOTALS[1]))
    best: tuple[float, list[int]] | None = None
    # configurations 4..9 are rare: a few machines each at most; 0..3 are solved for
    ranges = (range(6), range(8), range(4), range(4), range(4), range(4))
    for small in itertools.product(*ranges):
        if (sum(mem[4 + j] * k for j, k in enumerate(small)) - want[1]) % 25:
            continue  # the other configurations' memory is a multiple of 0.25
        for c3 in range(0, 16):
            for c2 in range(0, 30):
                rest = 100 - sum(small) - c3 - c2
                cpu_left = want[0] - cpu[3] * c3 - cpu[2] * c2 - sum(
                    cpu[4 + j] * k for j, k in enumerate(small))
                mem_left = want[1] - mem[3] * c3 - mem[2] * c2 - sum(
                    mem[4 + j] * k for j, k in enumerate(small))
                # c0 + c1 = rest; 50 c0 + 50 c1 = cpu_left; 50 c0 + 25 c1 = mem_left
                if rest < 0 or cpu_left != 50 * rest:
                    continue
                c1, r = divmod(50 * rest - mem_left, 25)
                c0 = rest - c1
                if r or c1 < 0 or c0 < 0:
                    continue
                counts = [c0, c1, c2, c3, *small]
                ll = sum(k * math.log(q) - math.lgamma(k + 1) for k, q in zip(counts, p,
                                                                               strict=True))
                if best is None or ll > best[0]:
                    best = (ll, counts)
    assert best is not None, "no composition of 100 machines has the paper's totals"
    return best[1]


def scenario(counts: list[int], compress: float = 1.0) -> Scenario:
    servers = [{"name": f"g{j}", "count": k, "capacity": {"cpu": c, "mem": m}}
               for j, (k, (_, c, m)) in enumerate(zip(counts, GOOGLE_2011_MACHINES, strict=True))
               if k]
    users = [{"name": "u1", "demand": {"cpu": 0.2, "mem": 0.3}},
             {"name": "u2", "demand": {"cpu": 0.5, "mem": 0.1}},
             {"name": "u3", "demand": {"cpu": 0.1, "mem": 0.3}}]
    events = [{"at": at / compress, kind: user} for at, kind, user in EVENTS]
    return Scenario.from_dict({"name": "DRFH Fig. 4", "resources": ["cpu", "mem"],
                               "servers": servers, "users": users, "events": events}, "drfh")


def shares(sc: Scenario, Xs: list[Any] | tuple[Any, ...]) -> np.ndarray[Any, Any]:
    """T x N x 3: CPU share, memory share, global dominant share (max of the two)."""
    out = []
    for X in Xs:
        s = resource_share(sc, X)
        out.append(np.hstack([s, s.max(axis=1, keepdims=True)]))
    return np.array(out)


def whole_tasks_alone(sc: Scenario, n: int) -> tuple[float, float]:
    """User n alone with whole tasks only (per server the floor of what fits): CPU and memory
    share — what a task-by-task scheduler like Best-Fit DRFH can reach at most."""
    tasks = float(np.floor(sc.demand_gamma[n] + 1e-9).sum())
    used = tasks * sc.demand[n]
    return float(used[0] / sc.capacity[:, 0].sum()), float(used[1] / sc.capacity[:, 1].sum())


def ray_trace(sc: Scenario) -> Trace:
    return paced_ray_trace(sc, int(HORIZON / COMPRESS), 100, "repro-drfh",
                           "PS-DSF on Ray (paced, 10x compressed)")


def run(quick: bool, ray_run: bool | None = None) -> Section:
    t0 = time.perf_counter()
    counts = paper_draw()
    sc = scenario(counts)
    times = np.arange(1, HORIZON + 1, dtype=float)
    curves: dict[str, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = {}
    exact_rows = []
    lines = {}
    for policy, label in (("drfh", "DRFH (exact per phase)"),
                          ("psdsf", "PS-DSF (exact per phase)")):
        tl = policy_timeline(sc, policy, allocator=allocate_by_class)
        curves[label] = (times, shares(sc, at_times(tl, list(times))))
        lines[policy] = tl
    for (name, _, _), d, p in zip(PHASES, lines["drfh"], lines["psdsf"], strict=True):
        cells = []
        for item in (d, p):
            X = item.allocation.allocation
            po = pareto_optimality(item.phase.scenario, X, "rdm")
            use = resource_share(sc, X).sum(axis=0)
            present = np.flatnonzero(item.phase.users_present).tolist()
            cells += [", ".join(f"{X[n].sum():.1f}" for n in present),
                      f"{pct(use[0], 0)} / {pct(use[1], 0)}", "yes" if po.holds else "**no**"]
        exact_rows.append([name, *cells])
    # the paper's own scheduler: Best-Fit DRFH, whole tasks placed one at a time
    whole = policy_timeline(sc, "drfh-best-fit")
    curves["Best-Fit DRFH, whole tasks (exact per phase)"] = (
        times, shares(sc, at_times(whole, list(times))))
    sim = simulate_trace(sc, SimConfig(ProtocolConfig(jitter=0.0), rounds=HORIZON,
                                       gossip="snapshot"), "PS-DSF simulated, lock-step snapshot")
    curves[sim.label] = (sim.times, shares(sc, sim.allocations))
    conv = [[sim.label, *[str(r) for _, r in sim.events]]]
    compressed: list[Trace] = []
    notes = []
    if not quick:
        csc = scenario(counts, COMPRESS)
        g = simulate_trace(csc, SimConfig(ProtocolConfig(), rounds=int(HORIZON / COMPRESS)),
                           "PS-DSF simulated, gossip (defaults), 10x compressed")
        compressed.append(g)
        if ray_run is not False:
            rt = ray_trace(csc)
            compressed.append(rt)
            notes.append(f"Ray run: {rt.seconds:.0f} s wall-clock for "
                         f"{int(HORIZON / COMPRESS)} paced periods"
                         + (f"; faults: {rt.faults}." if rt.faults else ", no fault."))
        for tr in compressed:
            curves[tr.label] = (tr.times * COMPRESS, shares(csc, tr.allocations))
            conv.append([tr.label, *[str(r) for _, r in tr.events]])
    rows: list[list[str]] = []
    for label, (ts, sh) in curves.items():
        for name, a, b in PHASES:
            m = (ts >= a + 0.2 * (b - a)) & (ts < b)  # after the transient
            mean = sh[m].mean(axis=0)  # N x 3
            present = [n for n in range(3) if mean[n, 2] > 1e-9]
            text = "; ".join(f"u{n + 1} {pct(mean[n, 0], 0)} / {pct(mean[n, 1], 0)} / "
                             f"{pct(mean[n, 2], 0)}" for n in present)
            rows.append([label, name, PAPER[name], text])
    cpu_w, mem_w = whole_tasks_alone(sc, 0)
    csv_rows = []
    for label, (ts, sh) in curves.items():
        for t, s in zip(ts, sh, strict=True):
            csv_rows.append({"run": label, "time": t, **{
                f"u{n + 1}_{k}": float(s[n, j]) for n in range(3)
                for j, k in enumerate(("cpu", "mem", "gds"))}})
    save_csv("drfh_fig4.csv", csv_rows)
    png = _plot(curves)
    md = "\n".join([
        f"Cluster: 100 machines of the Google 2011 mix, counts per configuration {counts} "
        f"(configurations in the order of `google2011_machines.csv`): totals "
        f"{float(np.sum(sc.capacity[:, 0])):.2f} CPU and {float(np.sum(sc.capacity[:, 1])):.2f}"
        " memory, the paper's.  Events: u2 joins at 200 s, u3 at 500 s, u1 leaves at 1,080 s.",
        "",
        "Shares after each phase's transient (mean over the last 80 % of the phase; cell per "
        "user: CPU share / memory share / global dominant share of the cluster):",
        "",
        table(["run", "phase", "paper (DRFH)", "ours"], rows),
        "",
        f"![DRFH Fig. 4: shares over time]({png})",
        "",
        "Rounds until the certificate held for good after each event (distributed PS-DSF; "
        "compressed runs: events 10x closer, so rounds after an event are directly "
        "comparable):",
        "",
        table(["run", "start", "u2 joins", "u3 joins", "u1 leaves"], conv),
        "",
        "Exact allocations per phase (tasks of the present users; cluster CPU / memory in use; "
        "whether the allocation is Pareto optimal, by the LP of `psdsf-dist properties`):",
        "",
        table(["phase", "DRFH tasks", "DRFH CPU / mem", "DRFH PO", "PS-DSF tasks",
               "PS-DSF CPU / mem", "PS-DSF PO"], exact_rows),
        "",
        "**Why ours differs from the paper's numbers.** (1) The paper schedules *whole tasks* "
        "(Best-Fit DRFH places one task at a time); our policies are divisible (RDM).  User 1 "
        "alone is then limited by fragmentation: with whole tasks per server (the floor of "
        f"what fits) it reaches at most {pct(cpu_w)} CPU / {pct(mem_w)} memory on this draw, "
        "near the paper's 40 % / 62 %; divisibly it fills memory almost everywhere.  The "
        "same fragmentation lowers every later phase (44 % and 26 % in the paper).  Whole-task "
        "Best-Fit DRFH (`drfh-best-fit`, the paper's scheduler) is run here too: see its rows. "
        "(2) **PS-DSF is not DRFH**: without placement constraints DRFH equalises the "
        "*global* dominant shares, PS-DSF equalises each server's *virtual* dominant shares "
        "(tasks relative to what the user could run alone on that server).  With users 1 and 2 "
        "the two nearly agree; once user 3 is present PS-DSF gives every user *fewer* tasks "
        "than DRFH (table above): RDM PS-DSF is not Pareto optimal, as the PS-DSF paper itself "
        "states (section III-B: Pareto optimality and strategy-proofness hold in TDM only), "
        "and this cluster is a case where it matters — two memory-heavy users and one "
        "CPU-heavy user on machines of four shapes.  DRFH, a leximin over the whole cluster, "
        "is Pareto optimal by construction.  The distributed runs follow PS-DSF, not DRFH: "
        "that is the mechanism they implement.  RDM PS-DSF need not be unique either "
        "(`../shared/spec/PSDSF.md`): after u1 leaves, the lock-step run certifies (Theorem 1 "
        "holds to 1e-3) at another PS-DSF allocation than the solver's, hence its slightly "
        "different levels in the last phase.",
        *(["", *notes] if notes else []),
    ])
    return Section("DRFH paper, Fig. 4: users joining and leaving on 100 Google machines", md,
                   time.perf_counter() - t0)


def _plot(curves: dict[str, tuple[Any, Any]]) -> str:
    fig, axes = figure(3, 1, height=8.0)
    colors = ["tab:blue", "tab:orange", "tab:green"]
    # one look (line style, width, alpha) per run, six: the last drawn wide and light so it
    # stays apart from the first
    looks: list[dict[str, Any]] = [
        *({"ls": ls, "lw": 1.1, "alpha": 1.0}
          for ls in ("-", "--", ":", "-.", (0, (3, 1, 1, 1, 1, 1)))),
        {"ls": "-", "lw": 2.6, "alpha": 0.45}]
    for k, (title, j) in enumerate((("CPU share of the cluster", 0),
                                    ("memory share of the cluster", 1),
                                    ("global dominant share", 2))):
        ax = axes[k][0]
        for s, (ts, sh) in enumerate(curves.values()):
            for n in range(3):
                ax.plot(ts, 100 * sh[:, n, j], color=colors[n], **looks[s % len(looks)])
        for x, _, _ in EVENTS:
            ax.axvline(x, color="grey", lw=0.6, ls="--")
        ax.set_ylabel(f"{title} (%)")
        ax.set_xlim(0, HORIZON)
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
    axes[2][0].set_xlabel("time (s), T = 1 s (compressed runs drawn at 10x their time)")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from experiments.common.paths import REPORT_DIR

    # colour = user, line style = run: two small legends instead of one entry per pair
    users = [Line2D([], [], color=c, lw=1.5) for c in colors]
    runs = [Line2D([], [], color="black", **looks[s % len(looks)]) for s in range(len(curves))]
    fig.legend(users, ["u1", "u2", "u3"], loc="upper left", fontsize=7.5, title="user",
               title_fontsize=7.5, bbox_to_anchor=(0.01, 1.0))
    fig.legend(runs, list(curves), loc="upper right", ncol=2, fontsize=7, title="run",
               title_fontsize=7.5, bbox_to_anchor=(0.99, 1.0))
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    fig.tight_layout(rect=(0, 0, 1, 0.88))
    fig.savefig(REPORT_DIR / "drfh_fig4.png", dpi=100)
    plt.close(fig)
    return "report/drfh_fig4.png"


def main(argv: list[str] | None = None) -> None:
    section_main(__doc__, run, argv, ray=True)
