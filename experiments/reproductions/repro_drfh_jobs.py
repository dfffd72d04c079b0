"""DRFH paper (Wang, Li, Liang), section VI: Table II and Figs. 5-7, Slots against DRFH.

The paper replays 24 h of the Google cluster trace's jobs on 2,000 servers drawn from the
trace's machine mix (Table I).  The trace's jobs are not in ``../shared/data`` (only the machine
mix is), so the job stream here is synthetic, shaped by what the paper publishes and stated on
every figure: servers in Table I's proportions; job sizes in Fig. 6b's five classes (1-50,
51-100, 101-500, 501-1,000, > 1,000 tasks; capped at 2,000); an overloaded cluster (the paper's
Fig. 7 has users with unfinished tasks at the end), offered ``LOAD`` times the pooled CPU.  The
rest are this project's assumptions, not the paper's: per-job demands lognormal with medians
of 3 % CPU and 1.5 % memory of the largest server (sigma 0.8, clipped to [0.5 %, 50 %]), task
durations exponential (mean 300 s), Poisson arrivals, users uniform.  The cluster and horizon
are scaled down (``SERVERS``, ``HORIZON``) to keep the run to minutes on two shared cores.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from experiments.common.repro_common import Section, figure, pct, save, save_csv, section_main
from experiments.common.sim_common import table
from experiments.reproductions.repro_drfh import paper_draw
from psdsf_dist.jobs.slots import (
    JOB_CLASSES,
    SCHEDULERS,
    TASK_SLOTS,
    MultiRun,
    MultiWorkload,
    google_servers,
    simulate_multi,
    slot_count,
    synthetic_jobs,
)

SLOT_SIZES = (10, 12, 14, 16, 20)
TABLE_II_SEEDS = (1, 2, 3, 4, 5)
"""Table II alone runs on more seeds than the rest (each Slots run takes about a second)."""
PAPER_TABLE_II = {10: (0.351, 0.234), 12: (0.422, 0.274), 14: (0.439, 0.280),
                  16: (0.454, 0.242), 20: (0.406, 0.200)}
"""Table II: CPU and memory utilisation of Slots per slots per maximum server."""
BEST_K = 14
USERS = 20
LOAD = 1.5
CLASS_WEIGHTS = (0.6, 0.15, 0.15, 0.06, 0.04)
WARMUP_FRACTION = 0.1
"""Utilisation is averaged after the first tenth of the horizon (the cluster filling up)."""
LABEL = {"slots": f"Slots ({BEST_K} per max server)", "drfh-ff": "First-Fit DRFH",
         "drfh-bf": "Best-Fit DRFH"}
CAPTION = ("synthetic stream: Table I server mix, Fig. 6b job-size classes, offered load "
           f"{LOAD:g}x CPU; lognormal demands (medians 3 % CPU, 1.5 % mem), exp. 300 s tasks")


def sizes(quick: bool) -> tuple[int, float, tuple[int, ...]]:
    """Servers, horizon (s) and seeds."""
    return (80, 3600.0, (1,)) if quick else (120, 7200.0, (1, 2))


def stream(seed: int, servers: int, horizon: float) -> MultiWorkload:
    rng = np.random.default_rng(seed)
    return synthetic_jobs(rng, google_servers(rng, servers), horizon=horizon, users=USERS,
                          load=LOAD, class_weights=CLASS_WEIGHTS, cpu_median=0.03,
                          mem_median=0.015, sigma=0.8, mean_duration=300.0)


def job_class(tasks: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.searchsorted([hi for _, hi in JOB_CLASSES], tasks)


FIG4_USERS = ((0.0, 3570, 0.2, 0.3), (200.0, 6000, 0.5, 0.1), (500.0, 6000, 0.1, 0.3))
"""Fig. 4's users (submit s, tasks, CPU, memory); u1's task count makes it run out near the
paper's 1,080 s with 20 s tasks."""
FIG4_PAPER = (("u1 alone", 100.0, 200.0, "u1 62% (40% CPU, 62% mem)"),
              ("u1 + u2", 300.0, 500.0, "44% each"), ("u1 + u2 + u3", 700.0, 1000.0, "26% each"),
              ("u2 + u3", 1150.0, 1400.0, "equal shares (no number)"))
FIG4_TASK_S = 20.0


def fig4_dynamic() -> tuple[str, str]:
    """Fig. 4 with whole tasks that come and go: Best-Fit DRFH on the paper's 100-server draw
    (``repro_drfh.paper_draw``), tasks exponential of mean 20 s (the paper gives none)."""
    from psdsf_dist.model.random_scenarios import GOOGLE_2011_MACHINES

    rng = np.random.default_rng(0)
    cap = np.repeat(np.array([[c, m] for _, c, m in GOOGLE_2011_MACHINES]), paper_draw(),
                    axis=0)
    cap = cap[rng.permutation(len(cap))].astype(float)
    tasks = np.array([u[1] for u in FIG4_USERS], dtype=np.int64)
    w = MultiWorkload(cap, np.array([u[0] for u in FIG4_USERS]), np.arange(3, dtype=np.int64),
                      tasks, np.array([[u[2], u[3]] for u in FIG4_USERS]),
                      rng.exponential(FIG4_TASK_S, int(tasks.sum())) + 1e-3)
    horizon = 1400.0
    r = simulate_multi(w, SCHEDULERS[1], horizon)
    user = np.repeat(np.arange(3), tasks)
    dom = (w.demand / cap.sum(axis=0)).max(axis=1)[user]
    ts = np.arange(0.0, horizon, 5.0)
    share = np.array([[dom[(user == u) & (r.task_start <= t) & ~(r.task_end <= t)].sum()
                       for u in range(3)] for t in ts])
    rows = []
    for name, a, b, paper in FIG4_PAPER:
        keep = (ts >= a) & (ts < b)
        m = share[keep].mean(axis=0)
        rows.append([name, paper, "; ".join(f"u{u + 1} {pct(float(m[u]))}" for u in range(3)
                                            if m[u] > 0.01)])
    fig, ax = figure(1, 1)
    for u in range(3):
        ax[0][0].plot(ts, 100 * share[:, u], label=f"u{u + 1}")
    for _, a, b, _ in FIG4_PAPER:
        ax[0][0].axvspan(a, b, color="grey", alpha=0.1)
    ax[0][0].set_xlabel("time (s)")
    ax[0][0].set_ylabel("global dominant share (%)")
    ax[0][0].set_title("Fig. 4c, Best-Fit DRFH with 20 s tasks (paper's 100-server totals); "
                       "shaded: averaged", fontsize=8)
    ax[0][0].legend()
    path = save(fig, "drfh_fig4_dynamic.png")
    md = "\n".join([
        "**Fig. 4, phases 2-4 with tasks that come and go** (section 2 computes each phase's "
        "allocation at once; here Best-Fit DRFH schedules whole tasks of exponential 20 s "
        f"durations as they end, on the same 100-server draw; u1 runs out at "
        f"{float(r.finish[0]):.0f} s, the paper's user 1 leaves at 1,080 s):",
        "",
        table(["phase (averaged over)", "paper", "ours: global dominant share"],
              [[f"{n} ({a:g}-{b:g} s)", p, o] for (n, a, b, _), (_, p, o)
               in zip(FIG4_PAPER, rows, strict=True)]),
        "",
        f"![Fig. 4 with task churn]({path})",
        "",
        "The churn run lands where section 2's whole-task Best-Fit rows do, so scheduling "
        "over time is not what separates us from the paper: phase 1 agrees (62.5 % against "
        "62 %), phase 2 is 2 points above (46 % against 44 %), and in phase 3 the three users "
        "stop at about 30 % (paper 26 %), and in phase 4 users 2 and 3 are equal, as in the "
        "paper, which gives no number.  In phase 3 they stop while neither resource is full "
        "(at 30 % each their tasks take 59 % of the CPU and 66 % of the memory).  What "
        "stops them is fragmentation of whole tasks: user 2's 0.5-CPU task needs a server "
        "with half a CPU free, and 0.3-memory tasks leave 0.2 of a 0.5-memory server that "
        "only user 2 can use.  "
        "That level depends on which machines make up the pool; the paper publishes only its "
        "draw's totals (ours is the most likely composition with those totals), so the likely "
        "cause of its lower 26 % is a composition that packs worse.  Other compositions with "
        "the same totals were not tried here.",
    ])
    return md, path


def table_ii(quick: bool) -> tuple[str, list[dict[str, Any]]]:
    """Table II under both readings of a task bigger than a slot (:data:`TASK_SLOTS`), medians
    over :data:`TABLE_II_SEEDS` (two in quick mode): the table, the best slot size per seed,
    and the rows for the CSV."""
    servers, horizon, _ = sizes(quick)
    seeds = TABLE_II_SEEDS[:2] if quick else TABLE_II_SEEDS
    util: dict[tuple[str, int], list[np.ndarray[Any, Any]]] = {}
    cover: list[float] = []
    demand: np.ndarray[Any, Any] | None = None
    for seed in seeds:
        w = stream(seed, servers, horizon)
        if demand is None:
            demand = w.demand  # the first seed's, for the level's explanation below
        for reading in TASK_SLOTS:
            for k in SLOT_SIZES:
                r = simulate_multi(w, "slots", horizon, slots_per_max=k, task_slots=reading)
                util.setdefault((reading, k), []).append(r.utilisation(WARMUP_FRACTION * horizon))
        cover.append(float((slot_count(w.capacity, BEST_K) / BEST_K).sum()
                           / w.capacity[:, 0].sum()))
    rows = [{"seed": seed, "scheduler": f"slots-{k}", "task_slots": reading,
             "cpu_utilisation": u[0], "mem_utilisation": u[1]}
            for (reading, k), us in util.items() for seed, u in zip(seeds, us, strict=True)]

    def med(reading: str, k: int, i: int) -> float:
        return float(np.median([u[i] for u in util[(reading, k)]]))

    body = [[f"{k} per maximum server",
             *(f"{pct(PAPER_TABLE_II[k][i])} / {pct(med('cover', k, i))} / "
               f"{pct(med('one', k, i))}" for i in (0, 1))] for k in SLOT_SIZES]
    best = {reading: [max(SLOT_SIZES, key=lambda k: float(sum(util[(reading, k)][n])))
                      for n in range(len(seeds))] for reading in TASK_SLOTS}
    assert demand is not None
    in_one = demand[demand.max(axis=1) <= 1 / BEST_K, 0]  # CPU of jobs whose tasks fit a slot
    fill = float(in_one.mean()) * BEST_K  # the share of a slot's CPU such a task uses
    covered = float(np.median(cover))
    md = "\n".join([
        f"**Table II** — Slots utilisation by slot size, seeds {', '.join(map(str, seeds))} "
        "(medians); cell: paper / ours, a task takes as many slots as cover it (`cover`) / "
        "ours, one slot a task, a task bigger than a slot never starts (`one`):",
        "",
        table(["slots", "CPU utilisation", "memory utilisation"], body),
        "",
        "Best slot size by CPU + memory, per seed: "
        + "; ".join(f"`{r}` {', '.join(map(str, best[r]))}" for r in TASK_SLOTS)
        + " (paper: 14).",
        "",
        "**Why the band differs.**  The paper does not say what its Slots scheduler does with "
        "a task bigger than a slot, and the two readings part exactly there.  Under `cover` "
        "finer slots waste less of each slot, so utilisation keeps growing with k.  Under "
        "`one` (a Hadoop slot runs one task) finer slots leave more tasks too big for any slot; "
        "each blocks its user's queue for good, so utilisation peaks and then falls, as Table "
        "II's does: its peak is at 12-14 here against the paper's 14-16, and its fall is "
        "steeper because our demand law puts more tasks above a small slot.  The level at the "
        f"best size ({pct(med('one', BEST_K, 0))} / {pct(med('cover', BEST_K, 0))} CPU at "
        f"k = {BEST_K} against the paper's {pct(PAPER_TABLE_II[BEST_K][0])}) is set by the "
        f"demands against the slot: a slot of 1/{BEST_K} is {pct(1 / BEST_K)} of the largest "
        f"server; the {pct(len(in_one) / len(demand))} of our jobs whose tasks fit in one use "
        f"{pct(fill)} of its CPU on average (seed {seeds[0]}), and "
        "the slots cover "
        f"{pct(covered)} of the pooled CPU (servers' memory-short remainders "
        "make no slot): with every slot busy that is at most "
        f"{pct(fill * covered)} CPU, about what both "
        f"readings measure, while the paper's {pct(PAPER_TABLE_II[BEST_K][0])} needs tasks that "
        f"use at least {pct(PAPER_TABLE_II[BEST_K][0] / covered)} of a slot's "
        "CPU on average.  The trace's task demands are not in `../shared/data` (only its "
        "machine mix is), so the paper's levels cannot be matched without fitting the "
        "synthetic law to the table itself, which this report does not do.",
    ])
    return md, rows


def run(quick: bool) -> Section:
    t0 = time.perf_counter()
    fig4_md, _ = fig4_dynamic()
    servers, horizon, seeds = sizes(quick)
    warm = WARMUP_FRACTION * horizon
    rows: list[dict[str, Any]] = []
    util: dict[str, list[np.ndarray[Any, Any]]] = {}
    median_jct: dict[str, list[float]] = {}
    reduction: dict[int, list[float]] = {}
    done_ratio: dict[str, list[float]] = {}
    first: dict[str, MultiRun] = {}
    w0 = stream(seeds[0], servers, horizon)
    for seed in seeds:
        w = stream(seed, servers, horizon)
        runs: dict[str, MultiRun] = {}
        for s in ("slots", "drfh-ff", "drfh-bf"):
            runs[s] = simulate_multi(w, s, horizon, slots_per_max=BEST_K)
            util.setdefault(s, []).append(runs[s].utilisation(warm))
        both = np.isfinite(runs["slots"].finish) & np.isfinite(runs["drfh-bf"].finish)
        cls = job_class(w.tasks)
        jct = {s: r.finish - w.submit for s, r in runs.items()}
        for s, r in runs.items():
            median_jct.setdefault(s, []).append(float(np.median(jct[s][both])))
            done = np.isfinite(r.task_end)
            done_ratio.setdefault(s, []).append(float(done.mean()))
            u = r.utilisation(warm)
            rows.append({"seed": seed, "scheduler": s, "cpu_utilisation": u[0],
                         "mem_utilisation": u[1], "median_jct_s": median_jct[s][-1],
                         "jobs_finished": int(np.isfinite(r.finish).sum()),
                         "jobs": len(w.submit), "tasks_done_fraction": done_ratio[s][-1]})
        for c in range(len(JOB_CLASSES)):
            sel = both & (cls == c)
            if sel.any():
                a, b = jct["slots"][sel].mean(), jct["drfh-bf"][sel].mean()
                reduction.setdefault(c, []).append(float(1 - b / a))
        if seed == seeds[0]:
            first = runs
        print(f"  seed {seed}: {len(w.submit)} jobs, {len(w.durations)} tasks "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    t2_md, t2_rows = table_ii(quick)
    csv = save_csv("drfh_jobs.csv", rows)
    t2_csv = save_csv("drfh_table_ii.csv", t2_rows)

    def med(v: list[Any], i: int) -> float:
        return float(np.median([x[i] for x in v]))

    summary = [[LABEL[s], pct(med(util[s], 0)), pct(med(util[s], 1)),
                f"{np.median(median_jct[s]):.0f} s", pct(float(np.median(done_ratio[s])))]
               for s in ("slots", "drfh-ff", "drfh-bf")]
    red = [[f"{lo}-{hi}", pct(float(np.median(reduction[c]))) if c in reduction else "-"]
           for c, (lo, hi) in enumerate(JOB_CLASSES)]
    figs = [_fig5(first, horizon, servers), _fig6(first, w0), _fig7(first, w0)]
    bf, sl = np.median([u[0] for u in util["drfh-bf"]]), med(util["slots"], 0)
    ff = float(np.median([u[0] for u in util["drfh-ff"]]))
    bfm, slm = np.median([u[1] for u in util["drfh-bf"]]), med(util["slots"], 1)
    md = "\n".join([
        f"{servers} servers in Table I's proportions, {horizon / 3600:g} h, seeds "
        f"{', '.join(map(str, seeds))} (medians over seeds); the {CAPTION}.  Utilisation is the "
        f"mean after the first {WARMUP_FRACTION:.0%} of the run; the figures show seed "
        f"{seeds[0]}; Slots is read as `cover` below (Table II's readings).  Data: `{csv}`, "
        f"`{t2_csv}`.",
        "",
        t2_md,
        "",
        "**Figs. 5-7** — the three schedulers (paper: both DRFH above Slots, Best-Fit above "
        "First-Fit; larger jobs gain more):",
        "",
        table(["scheduler", "CPU util.", "memory util.",
               "median completion (jobs done under Slots and Best-Fit)",
               "tasks completed"], summary),
        "",
        "Fig. 6b — mean completion-time reduction of Best-Fit DRFH over Slots by job size:",
        "",
        table(["tasks per job", "reduction"], red),
        "",
        *[f"![{c}]({p})" for c, p in figs],
        "",
        f"**Against the paper.** Best-Fit DRFH uses {pct(float(bf))} CPU and "
        f"{pct(float(bfm))} memory against Slots' {pct(sl)} / {pct(slm)}: Fig. 5's ordering "
        "of DRFH above Slots holds.  Best-Fit against First-Fit: "
        f"{pct(float(bf))} / {pct(ff)} CPU (the paper has Best-Fit uniformly above); with "
        "demands this small against the servers (medians 3 % and 1.5 % of the largest), both "
        "fill CPU and leave little for the choice of server to win back, so the paper's gap "
        "between them is not reproduced on this stream.",
        "",
        fig4_md,
    ])
    return Section("DRFH paper, section VI: Slots against DRFH on a Google-shaped job stream",
                   md, time.perf_counter() - t0)


def _fig5(runs: dict[str, MultiRun], horizon: float, servers: int) -> tuple[str, str]:
    fig, ax = figure(1, 2)
    for j, res in enumerate(("CPU", "memory")):
        a = ax[0][j]
        for s, r in runs.items():
            a.plot(r.sample_times / 60, 100 * r.sample_used[:, j], label=LABEL[s])
        a.set_xlabel("time (min)")
        a.set_ylabel(f"{res} utilisation (%)")
        a.set_ylim(0, 100)
        a.set_title(f"Fig. 5: {res}, {servers} servers")
    ax[0][0].legend(loc="lower right")
    fig.suptitle(CAPTION, fontsize=7)
    return "Fig. 5: utilisation over time", save(fig, "drfh_fig5_utilisation.png")


def _fig6(runs: dict[str, MultiRun], w: MultiWorkload) -> tuple[str, str]:
    fig, ax = figure(1, 2)
    both = np.isfinite(runs["slots"].finish) & np.isfinite(runs["drfh-bf"].finish)
    for s in ("slots", "drfh-bf"):
        x = np.sort((runs[s].finish - w.submit)[both])
        ax[0][0].plot(x / 60, np.arange(1, len(x) + 1) / max(len(x), 1), label=LABEL[s])
    ax[0][0].set_xlabel("job completion time (min)")
    ax[0][0].set_ylabel("CDF (jobs finished under both)")
    ax[0][0].legend(loc="lower right")
    ax[0][0].set_title("Fig. 6a: completion times")
    cls = job_class(w.tasks)
    red = []
    for c in range(len(JOB_CLASSES)):
        sel = both & (cls == c)
        a = (runs["slots"].finish - w.submit)[sel]
        b = (runs["drfh-bf"].finish - w.submit)[sel]
        red.append(100 * (1 - b.mean() / a.mean()) if sel.any() else 0.0)
    ax[0][1].bar([f"{lo}-{hi}" for lo, hi in JOB_CLASSES], red)
    ax[0][1].set_xlabel("tasks per job")
    ax[0][1].set_ylabel("mean completion time reduction (%)")
    ax[0][1].set_title("Fig. 6b: Best-Fit DRFH over Slots")
    fig.suptitle(CAPTION, fontsize=7)
    return "Fig. 6: completion times", save(fig, "drfh_fig6_completion.png")


def _fig7(runs: dict[str, MultiRun], w: MultiWorkload) -> tuple[str, str]:
    fig, ax = figure(1, 1)
    a = ax[0][0]
    user_task = np.repeat(w.user, w.tasks)
    U = w.num_users
    submitted = np.bincount(user_task, minlength=U)
    ratio = {s: np.bincount(user_task, weights=np.isfinite(runs[s].task_end), minlength=U)
             / np.maximum(submitted, 1) for s in ("slots", "drfh-bf")}
    a.scatter(100 * ratio["slots"], 100 * ratio["drfh-bf"], s=10 * np.log1p(submitted),
              alpha=0.6)
    a.plot([0, 100], [0, 100], "k--", lw=0.8)
    a.set_xlabel("task completion ratio under Slots (%)")
    a.set_ylabel("task completion ratio under Best-Fit DRFH (%)")
    a.set_title("Fig. 7: per user (bubble ~ log tasks submitted)")
    fig.suptitle(CAPTION, fontsize=7)
    return "Fig. 7: task completion ratio per user", save(fig, "drfh_fig7_users.png")


def main(argv: list[str] | None = None) -> None:
    section_main(__doc__, run, argv)
