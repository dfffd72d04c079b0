"""Convergence study of the update rules in lock-step (``psdsf_dist/simulator/lockstep.py``).

All servers update at once on the same snapshot of totals (one round stale; ``delay`` extra
rounds for the other servers' columns).  A run counts the rounds until the PS-DSF certificate
(rtol 1e-3) holds and keeps holding (20 rounds in a row; runs are capped).  Cases:

* the paper's 120-server cluster (``psdsf_dist/examples/paper_cluster.yaml``): from zero, after
  user u4 leaves, after it rejoins; from zero all servers of a class start alike, and from
  seeded random feasible starts they do not;
* a seeded random suite (K 2..200, N 2..50, M 1..4, placement, weights, caps);
* Google 2011 machine mix, N = 100, K = 100 / 1,000 / 10,000.

Writes ``experiments/results/rule_study.md``, ``.csv`` and ``rule_study_residuals.png``, and the
section ``rule_study`` of ``experiments/README.md`` (a short write-up of the rule with the tables).
Usage: ``.venv/bin/python -m experiments run rule_study [--suite 200] [--cap 300] [--workers 2]``;
for iteration ``--suite 60 --cap 150 --seeds 3 --google 100,1000`` takes a minute or two.  The
variants of ``split`` measured and dropped are in ``experiments/notes/rule_variants.md``.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Iterable
from multiprocessing import Pool
from typing import Any

import numpy as np
import numpy.typing as npt

from experiments.common.paths import EXAMPLES, RESULTS
from experiments.common.sim_common import HOLD, update_readme, write_csv
from psdsf_dist.model.random_scenarios import google_cluster, random_scenario
from psdsf_dist.model.scenario import Scenario, load_scenario
from psdsf_dist.protocol.update_rule import (
    UpdateRule,
    feasible_column,
    make_rule,
    server_view,
)
from psdsf_dist.simulator.lockstep import Run, run, sequential

FloatArray = npt.NDArray[np.float64]

PAPER = EXAMPLES / "paper_cluster.yaml"
RTOL = 1e-3
LONG_RTOLS = (RTOL, 3e-3, 1e-2)  # tolerances of the long runs (the first is the target's)

# (label, rule name, parameters)
RULE_SET: tuple[tuple[str, str, dict[str, float]], ...] = (
    ("best-response", "best-response", {}),
    ("damped a=0.5", "damped", {"a": 0.5}),
    ("damped a=0.1", "damped", {"a": 0.1}),
    ("split", "split", {}),
)
DEFAULT = "split"
# Not a rule: exact best responses one server after another on fresh totals (reference row).
SEQUENTIAL = "sequential sweeps (no concurrency)"

Row = dict[str, Any]


def rule_of(label: str) -> UpdateRule:
    for lab, name, params in RULE_SET:
        if lab == label:
            return make_rule(name, **params)
    raise KeyError(label)


def churn_runs(
    scenario: Scenario, rule: UpdateRule, cap: int, delay: int, start: FloatArray | None
) -> list[Run]:
    """From the start, then u4 leaves, then u4 rejoins; each phase until certified or cap."""
    leaving = np.array([name != "u4" for name in scenario.user_names])
    first = run(scenario, rule, rounds=cap, delay=delay, rtol=RTOL, hold=HOLD, start=start)
    gone = run(
        scenario, rule, rounds=cap, delay=delay, rtol=RTOL, hold=HOLD, active=leaving,
        start=first.allocation, states=first.states, lineage=first.lineage,
    )
    back = run(
        scenario, rule, rounds=cap, delay=delay, rtol=RTOL, hold=HOLD,
        start=gone.allocation, states=gone.states, lineage=gone.lineage,
    )
    return [first, gone, back]


def random_start(scenario: Scenario, seed: int) -> FloatArray:
    """A seeded random feasible allocation (every server different)."""
    rng = np.random.default_rng(seed)
    X = rng.exponential(size=(scenario.num_users, scenario.num_servers)) * 10.0
    for i in range(scenario.num_servers):
        X[:, i] = feasible_column(server_view(scenario, i, "rdm"), X[:, i])
    return X


def paper_case(args: tuple[str, int, int, int | None]) -> list[Row]:
    label, cap, delay, seed = args
    scenario = load_scenario(PAPER)
    start = None if seed is None else random_start(scenario, seed)
    runs = churn_runs(scenario, rule_of(label), cap, delay, start)
    rows = []
    for phase, r in zip(("from start", "u4 leaves", "u4 rejoins"), runs, strict=True):
        rows.append(_row("paper", label, delay, seed, scenario, phase, r, cap))
    return rows


def from_zero(scenario: Scenario, label: str, cap: int, rtol: float = RTOL) -> Run:
    """One run from zero, lock-step with delay 0 (a rule of ``RULE_SET``) or sequential."""
    if label == SEQUENTIAL:
        return sequential(scenario, rounds=cap, rtol=rtol, hold=HOLD)
    return run(scenario, rule_of(label), rounds=cap, rtol=rtol, hold=HOLD)


def suite_case(args: tuple[str, int, int, float]) -> Row:
    label, cap, seed, rtol = args
    scenario = suite_scenario(seed)
    r = from_zero(scenario, label, cap, rtol)
    return _row("random", label, 0, seed, scenario, "from zero", r, cap, rtol)


def suite_scenario(seed: int) -> Scenario:
    rng = np.random.default_rng(seed)
    K = int(rng.integers(2, 201))
    N = int(rng.integers(2, 51))
    M = int(rng.integers(1, 5))
    return random_scenario(rng, K=K, N=N, M=M)


def google_case(args: tuple[str, int, int, int, float]) -> Row:
    label, cap, K, seed, rtol = args
    scenario = google_cluster(np.random.default_rng(seed), K=K, N=100)
    t0 = time.perf_counter()
    r = from_zero(scenario, label, cap, rtol)
    row = _row("google", label, 0, seed, scenario, "from zero", r, cap, rtol)
    row["seconds"] = round(time.perf_counter() - t0, 2)
    return row


def _row(
    case: str, label: str, delay: int, seed: int | None, scenario: Scenario, phase: str,
    r: Run, cap: int, rtol: float = RTOL,
) -> Row:
    return {
        "case": case,
        "rule": label,
        "delay": delay,
        "seed": "" if seed is None else seed,
        "K": scenario.num_servers,
        "N": scenario.num_users,
        "M": scenario.num_resources,
        "phase": phase,
        "rounds": "" if r.converged_round is None else r.converged_round,
        "cap": cap,
        "rtol": rtol,
        "final_residual": f"{r.residuals[-1]:.3g}",
        "trace": r.residuals,
    }


def _without_traces(rows: list[Row]) -> list[Row]:
    """The rows for the CSV: the per-round residual traces are for the plot only."""
    return [{k: v for k, v in r.items() if k != "trace"} for r in rows]


def _rounds(row: Row) -> float:
    return math.inf if row["rounds"] == "" else float(row["rounds"])


def _fmt(value: float, cap: int) -> str:
    return f">{cap}" if not math.isfinite(value) else f"{value:g}"


def _stats(values: Iterable[float], cap: int) -> tuple[str, str, str, str, str]:
    v = np.array(sorted(values))
    ok = np.isfinite(v)
    conv = f"{ok.sum()}/{len(v)}"

    def pct(q: float) -> str:
        # a percentile over all runs, not-converged ones counting as infinite
        idx = min(len(v) - 1, math.ceil(q / 100 * len(v)) - 1)
        return _fmt(float(v[max(idx, 0)]), cap)

    return conv, pct(50), pct(90), pct(95), _fmt(float(v.max()), cap)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", type=int, default=200, help="random scenarios (default 200)")
    ap.add_argument("--cap", type=int, default=300, help="round cap per run (default 300)")
    ap.add_argument("--seeds", type=int, default=5, help="random starts on the paper cluster")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--google", default="100,1000,10000", help="Google-mix cluster sizes")
    ap.add_argument("--google-seeds", type=int, default=5,
                    help="Google-mix clusters drawn per size (seeds 0..)")
    ap.add_argument("--sequential-up-to", type=int, default=1000,
                    help="largest Google-mix size for the sequential reference (one sweep "
                    "costs K best responses)")
    ap.add_argument("--long-cap", type=int, default=3000,
                    help="round cap of the long runs (the default rule and sequential sweeps "
                    "on the suite and the Google mix: do the runs cut at --cap converge later?)")
    args = ap.parse_args(argv)
    cap = args.cap
    labels = [lab for lab, _, _ in RULE_SET]
    t0 = time.perf_counter()
    with Pool(args.workers) as pool:
        paper_jobs: list[tuple[str, int, int, int | None]] = [
            (lab, cap, d, None) for lab in labels for d in (0, 1)
        ]
        # random starts: the default rule only (the baselines take hundreds of rounds per
        # phase, the bulk of the study's time)
        paper_jobs += [(DEFAULT, cap, d, s) for d in (0, 1) for s in range(args.seeds)]
        paper = [r for rows in pool.map(paper_case, paper_jobs) for r in rows]
        print(f"paper cluster done ({time.perf_counter() - t0:.0f} s)", flush=True)
        suite = pool.map(
            suite_case,
            [(lab, cap, s, RTOL) for lab in [*labels, SEQUENTIAL] for s in range(args.suite)],
            chunksize=4,
        )
        print(f"random suite done ({time.perf_counter() - t0:.0f} s)", flush=True)
        sizes = [int(k) for k in args.google.split(",") if k]
        google_jobs = [
            (lab, cap, k, seed, RTOL)
            for lab in [*labels, SEQUENTIAL]
            for k in sizes
            for seed in range(args.google_seeds)
            if lab != SEQUENTIAL or k <= args.sequential_up_to
        ]
        google = pool.map(google_case, google_jobs)
        print(f"google mix done ({time.perf_counter() - t0:.0f} s)", flush=True)
        # the default rule and the reference again: a long cap, and looser tolerances
        long_labels = (DEFAULT, SEQUENTIAL)
        long_suite = pool.map(
            suite_case, [(lab, args.long_cap, s, tol) for tol in LONG_RTOLS
                         for lab in long_labels for s in range(args.suite)], chunksize=4)
        long_google = pool.map(google_case, [
            (lab, args.long_cap, k, seed, tol) for tol in LONG_RTOLS for lab in long_labels
            for k in sizes for seed in range(args.google_seeds)
            if lab != SEQUENTIAL or (k <= args.sequential_up_to and tol == RTOL)])
        print(f"long runs done ({time.perf_counter() - t0:.0f} s)", flush=True)
    rows = paper + suite + google + long_suite + long_google
    write_csv(RESULTS / "rule_study.csv", _without_traces(rows))
    text = report(paper, suite, google, labels, cap, args, time.perf_counter() - t0)
    text += "\n".join(long_runs(long_suite, long_google, args)) + "\n"
    (RESULTS / "rule_study.md").write_text(text)
    update_readme("rule_study", readme_section(text), before="<!-- begin sim_overview -->")
    plot(paper, cap)
    print(f"wrote {RESULTS / 'rule_study.md'} ({time.perf_counter() - t0:.0f} s)")


def report(
    paper: list[Row], suite: list[Row], google: list[Row], labels: list[str], cap: int,
    args: argparse.Namespace, seconds: float,
) -> str:
    out = [
        "# Update rules in lock-step: rounds until the PS-DSF certificate holds",
        "",
        "Generated by `python -m experiments run rule_study` "
        f"(suite {args.suite}, cap {cap} rounds, {args.seeds} random starts; {seconds:.0f} s).",
        "All servers update at once on the same snapshot of totals, one round stale "
        "(delay d: the other servers' columns d rounds older still).  A run counts the rounds "
        f"until the certificate (rtol {RTOL:g}) holds and keeps holding ({HOLD} rounds in a "
        f"row); `>{cap}` = not within the cap.",
        "",
        "## Paper cluster (120 servers), churn: from zero, u4 leaves, u4 rejoins",
        "",
        "| rule | delay | from zero | u4 leaves | u4 rejoins |",
        "|---|---|---|---|---|",
    ]
    for lab in labels:
        for d in (0, 1):
            rs = [r for r in paper if r["rule"] == lab and r["delay"] == d and r["seed"] == ""]
            out.append(
                f"| {lab} | {d} | " + " | ".join(_fmt(_rounds(r), cap) for r in rs) + " |"
            )
    out += [
        "",
        f"Random feasible starts (seeds 0..{args.seeds - 1}, every server different): "
        "median / max rounds.",
        "",
        "| rule | delay | from start | u4 leaves | u4 rejoins |",
        "|---|---|---|---|---|",
    ]
    for lab in (DEFAULT,):
        for d in (0, 1):
            if not any(r["rule"] == lab and r["seed"] != "" and r["delay"] == d for r in paper):
                continue
            cells = []
            for phase in ("from start", "u4 leaves", "u4 rejoins"):
                v = [_rounds(r) for r in paper if r["rule"] == lab and r["seed"] != ""
                     and r["phase"] == phase and r["delay"] == d]
                cells.append(f"{_fmt(float(np.median(v)), cap)} / {_fmt(max(v), cap)}")
            out.append(f"| {lab} | {d} | " + " | ".join(cells) + " |")
    out += [
        "",
        f"## Random suite: {args.suite} scenarios (K 2..200, N 2..50, M 1..4), from zero, "
        "delay 0",
        "",
        "| rule | converged | median | p90 | p95 | max |",
        "|---|---|---|---|---|---|",
    ]
    for lab in [*labels, SEQUENTIAL]:
        conv, p50, p90, p95, mx = _stats((_rounds(r) for r in suite if r["rule"] == lab), cap)
        out.append(f"| {lab} | {conv} | {p50} | {p90} | {p95} | {mx} |")
    out += ["", *tail_comparison(suite, cap), "", *by_resources(suite, cap)]
    sizes = sorted({r["K"] for r in google})
    seeds = sorted({r["seed"] for r in google})
    out += [
        "",
        "## Google 2011 machine mix, N = 100, from zero, delay 0",
        "",
        f"Clusters drawn with seeds {seeds[0]}..{seeds[-1]} per size; cells: converged, "
        "median / max rounds (not converged counting as infinite; `-`: not run).",
        "",
        "| rule | " + " | ".join(f"K = {k}" for k in sizes) + " |",
        "|---|" + "---|" * len(sizes),
    ]
    for lab in [*labels, SEQUENTIAL]:
        out.append(f"| {lab} | " + " | ".join(google_cells(google, lab, sizes, cap)) + " |")
    out += [
        "",
        "Servers of one machine configuration start alike and stay alike in lock-step, so the "
        "harness computes one representative per configuration: rounds, not seconds, are the "
        "measure here (seconds per simulated round are the simulator's business).",
        "",
    ]
    return "\n".join(out)


WRITEUP = """\
## Update rules: the default rule and the convergence study

The rules (`best-response`, `damped`, and the default `split`, predictive water-filling) and why
`split` converges are explained in `docs/design.md` ("The asynchronous update rule"); the
derivation in full and the ~40 variants measured and dropped, with their numbers, are in
`experiments/notes/rule_variants.md`.  This section holds the study's figures.

Against the targets (tables below): the paper cluster with churn and one round of extra
delay is met (within 20 rounds of each event).  Convergence itself is met on every instance
tried, given time: with a cap of 3,000 rounds `split` certifies all 200 random instances (the
slowest after 936 rounds) and all 15 Google-mix clusters (at most 265, 1,154 and 503 rounds at
K = 100, 1,000 and 10,000).  Speed is **not** met: the suite's p95 is 205 rounds (target 50), and
on the Google mix the medians are 172, 301 and 173 rounds (no steady growth with K, but slow; the
cluster drawn with seed 2011 happens to be a fast one).  The tail is not a lock-step
artefact: exact sequential sweeps (no concurrency, fresh totals) share it (p95 148).  There a
user drains out of a group of servers at the rate of a level gap of a few tenths of a percent;
the residual stays constant for hundreds of rounds, then drops to round-off at once when the
entry reaches zero.  It comes with several resources per server: with one (gamma of rank one)
no instance needs more than 50 rounds.  In lock-step, `split` pays for concurrency on top
(instances where sequential sweeps are fast and it is not).  On the slowest Google-mix cluster
(K = 1,000, seed 3) the residual swings between 3.9e-4 and 2.4e-3 with period 4 from round
~200 to round ~1,150, the totals moving by ~1e-5 of themselves and the gains steady at the holder
counts; the mean of a period has residual 3.3e-4, so the swing is around an allocation that is
not PS-DSF yet either.  A looser tolerance helps the sequential reference more than the
lock-step rule: at rtol 1e-2 sequential sweeps have a p95 of 45 rounds, `split` 115 (Google mix:
medians 144-169) — section "Without the cap" below.  Beating the shared tail needs something
other than best-response dynamics.
"""


def long_runs(suite: list[Row], google: list[Row], args: argparse.Namespace) -> list[str]:
    """The default rule and sequential sweeps again, with a cap ten times longer and at
    looser tolerances."""
    cap = args.long_cap
    sizes = sorted({r["K"] for r in google})
    out = [
        "",
        f"## Without the cap, and at looser tolerances: cap {cap} rounds",
        "",
        f"The default rule and sequential sweeps again, with a cap of {cap} rounds: do the "
        "runs cut at the short cap converge later?  And how many rounds at a certificate "
        f"tolerance of {', '.join(f'{t:g}' for t in LONG_RTOLS[1:])} instead of {RTOL:g}?  "
        "Random suite (converged, median, p90, p95, max) and Google mix (converged, median / "
        "max per size; `-`: not run).",
        "",
        "| rule | rtol | converged | median | p90 | p95 | max | "
        + " | ".join(f"Google K = {k}" for k in sizes) + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(sizes),
    ]
    for tol in LONG_RTOLS:
        at = [r for r in suite if r["rtol"] == tol]
        google_at = [r for r in google if r["rtol"] == tol]
        for lab in (DEFAULT, SEQUENTIAL):
            conv, p50, p90, p95, mx = _stats((_rounds(r) for r in at if r["rule"] == lab), cap)
            cells = google_cells(google_at, lab, sizes, cap)
            out.append(f"| {lab} | {tol:g} | {conv} | {p50} | {p90} | {p95} | {mx} | "
                       + " | ".join(cells) + " |")
    return out


def google_cells(google: list[Row], label: str, sizes: list[int], cap: int) -> list[str]:
    """Per cluster size: converged, median / max rounds (`-`: not run)."""
    cells = []
    for k in sizes:
        v = [_rounds(r) for r in google if r["rule"] == label and r["K"] == k]
        if not v:
            cells.append("-")
            continue
        conv, p50, _, _, mx = _stats(v, cap)
        cells.append(f"{conv}, {p50} / {mx}")
    return cells


def readme_section(report_text: str) -> str:
    """The write-up followed by the report's tables, one heading level down."""
    lines = report_text.splitlines()[1:]  # the report's own title
    body = "\n".join("#" + line if line.startswith("## ") else line for line in lines)
    return WRITEUP + body


def by_resources(suite: list[Row], cap: int, over: int = 50) -> list[str]:
    """The default rule and sequential sweeps split by the number of resources M."""
    ms = sorted({int(r["M"]) for r in suite})
    out = [
        f"By resources per server (cells: instances, median rounds, instances over {over}):",
        "",
        "| rule | " + " | ".join(f"M = {m}" for m in ms) + " |",
        "|---|" + "---|" * len(ms),
    ]
    for lab in (DEFAULT, SEQUENTIAL):
        cells = []
        for m in ms:
            v = [_rounds(r) for r in suite if r["rule"] == lab and int(r["M"]) == m]
            _, p50, _, _, _ = _stats(v, cap)
            cells.append(f"{len(v)}, {p50}, {sum(x > over for x in v)}")
        out.append(f"| {lab} | " + " | ".join(cells) + " |")
    out += [
        "",
        "With one resource, gamma[n, i] = C[i] / D[n] has rank one (every user ranks the servers "
        "alike); with several, users specialise, and finding which user leaves which servers is "
        "the slow part.",
    ]
    return out


def tail_comparison(
    suite: list[Row], cap: int, over: int = 50, shown: int = 15
) -> list[str]:
    """How the default rule's slow instances fare under sequential sweeps."""
    by_seed = {r["seed"]: _rounds(r) for r in suite if r["rule"] == SEQUENTIAL}
    slow = sorted(
        ((_rounds(r), r["seed"]) for r in suite if r["rule"] == DEFAULT and _rounds(r) > over),
        reverse=True,
    )
    both = sum(by_seed[s] > over for _, s in slow)
    cells = ", ".join(
        f"{s}: {_fmt(v, cap)} / {_fmt(by_seed[s], cap)}" for v, s in slow[:shown]
    )
    return [
        f"`{SEQUENTIAL}`: every server in turn takes its exact best response on the true, "
        "current totals (Gauss-Seidel; one sweep = one round) — no concurrency and no "
        "staleness, the setting the best response is designed for.  "
        f"`{DEFAULT}` needs more than {over} rounds on {len(slow)} instances; sequential "
        f"sweeps need more than {over} on {both} of them: the rest is the cost of concurrency, "
        f"the shared part is not.  The {min(shown, len(slow))} slowest, instance: {DEFAULT} / "
        f"sequential rounds — {cells}.",
    ]


def plot(paper: list[Row], cap: int) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # plots are optional
        return
    fig, ax = plt.subplots(figsize=(8, 4))
    for lab in ("best-response", "damped a=0.5", "damped a=0.1", "split"):
        rs = [r for r in paper if r["rule"] == lab and r["delay"] == 0 and r["seed"] == ""]
        trace: list[float] = []
        for r in rs:
            trace += list(r["trace"] if not trace else r["trace"][1:])
        ax.semilogy(np.maximum(np.array(trace), 1e-16), label=lab, lw=1)
    ax.axhline(RTOL, color="black", lw=0.5)
    ax.set_xlabel("round (from zero, then u4 leaves, then u4 rejoins, each once certified)")
    ax.set_ylabel("certificate residual")
    ax.set_title("Paper cluster, lock-step, totals one round stale")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "rule_study_residuals.png", dpi=120)
    plt.close(fig)
