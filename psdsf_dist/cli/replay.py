"""``psdsf-dist replay``: run a job trace through the job simulator under one or more schedulers
(Guan's chapter 3) or allocation policies (chapters 4-5: the slots shared by a policy
recomputed at arrivals and sub-job completions,
:func:`psdsf_dist.jobs.allocated.simulate_allocated`).

The trace is a SWIM ``.tsv`` (the Facebook 2010 trace) or the project's ``.csv``
(``docs/jobs.md``).  Tasks without sites are placed as in section 3.3 of Guan's thesis (Zipf
over a random permutation of ``--sites`` sites, ``--available`` consecutive sites per task) and
take Pareto durations unless the CSV gives ``duration_s``; ``--utilisation`` rescales the submit
times to that offered load.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from psdsf_dist.cli.common import (
    MAX_SECONDS,
    CommandError,
    add_job_protocol_options,
    add_seed_option,
    dumps,
    emit,
    float_in,
    int_in,
    parse_delay,
    protocol_config,
)
from psdsf_dist.errors import PsdsfError
from psdsf_dist.jobs.allocated import JOB_POLICIES, PROTOCOL, RECOMPUTE, simulate_allocated
from psdsf_dist.jobs.metrics import PERCENTILES, summary
from psdsf_dist.jobs.schedulers import FIXED, ORDERS, SCHEDULERS, PlanLimitError, PlanWork
from psdsf_dist.jobs.simulator import simulate_jobs
from psdsf_dist.jobs.workload import (
    DEFAULT_AVAILABLE,
    DEFAULT_SITES,
    DEFAULT_SLOTS,
    DEFAULT_ZIPF,
    PARETO_MEAN_S,
    PARETO_PER,
    PARETO_SHAPE,
    Workload,
    build_workload,
    load_trace,
)
from psdsf_dist.model.limits import LIMITS_ENV, current_limits
from psdsf_dist.policies.amf import AMF_POLICIES
from psdsf_dist.protocol.config import ProtocolConfig

DEFAULTS = ProtocolConfig()
MAX_SITES = 1_000
"""Sites (and available sites): the placement draws a jobs x sites matrix."""
MAX_SLOTS = 1_000_000
MAX_ZIPF = 100.0
MAX_UTILISATION = 100.0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("replay", help="replay a job trace under job schedulers (Guan ch. 3) "
                                      "or allocation policies (ch. 4-5)")
    p.add_argument("trace", help="trace file: SWIM .tsv or .csv (docs/jobs.md)")
    p.add_argument("--scheduler", nargs="+", choices=SCHEDULERS, default=None,
                   metavar="S", help=f"schedulers to run (default ata-greedy unless --job-policies "
                                     f"is given; any of {' '.join(SCHEDULERS)})")
    p.add_argument("--job-policies", nargs="+", choices=JOB_POLICIES, default=[], metavar="P",
                   help="allocation policies to run instead (or as well, with --scheduler): "
                        "imf, protocol (the per-server protocol itself, every site a server "
                        "updating once per --period) or any registered policy, e.g. amf gamf")
    p.add_argument("--recompute", choices=RECOMPUTE, default=RECOMPUTE[0],
                   help="with --job-policies: recompute the allocation at arrivals and sub-job "
                        "completions (default subjob) or also at every task end (task)")
    p.add_argument("--optimized", action="store_true",
                   help="with --job-policies: refine the AMF family's allocations by Algorithms 6 "
                        "and 8 (same job totals, each job's completion minimised in turn)")
    p.add_argument("--order", choices=ORDERS, default="swag",
                   help="job order of swag, btawj, btaaj: SWAG's (default) or arrival order")
    p.add_argument("--sites", type=int_in(1, MAX_SITES), default=DEFAULT_SITES, metavar="M",
                   help=f"sites, when the trace names none (default {DEFAULT_SITES})")
    p.add_argument("--slots", type=int_in(1, MAX_SLOTS), default=DEFAULT_SLOTS, metavar="U",
                   help=f"slots per site (default {DEFAULT_SLOTS})")
    p.add_argument("--available", type=int_in(1, MAX_SITES), default=DEFAULT_AVAILABLE, metavar="K",
                   help=f"sites that may run each task (default {DEFAULT_AVAILABLE})")
    p.add_argument("--zipf", type=float_in(0.0, MAX_ZIPF), default=DEFAULT_ZIPF, metavar="A",
                   help=f"Zipf skew of the tasks' sites (default {DEFAULT_ZIPF:g})")
    p.add_argument("--utilisation", type=float_in(0.0, MAX_UTILISATION, low_open=True),
                   default=None, metavar="F",
                   help="rescale submit times to this offered load, e.g. 0.6 (default: as is)")
    p.add_argument("--pareto", type=float_in(0.0, MAX_SECONDS, low_open=True), nargs=2,
                   default=[PARETO_SHAPE, PARETO_MEAN_S],
                   metavar=("SHAPE", "MEAN"),
                   help=f"task durations' Pareto shape and mean in seconds (default "
                        f"{PARETO_SHAPE:g} {PARETO_MEAN_S:g})")
    p.add_argument("--pareto-per", choices=PARETO_PER, default=PARETO_PER[0],
                   help="draw one duration per task (default) or one per job, shared by its "
                        "tasks (durations the trace gives are kept)")
    add_seed_option(p)
    add_job_protocol_options(p)
    p.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.set_defaults(run=run)


def _check(args: argparse.Namespace) -> None:
    """What the ranged option types cannot say alone (each option's range is its type)."""
    if args.available > args.sites:
        raise CommandError(f"--available: must be between 1 and --sites ({args.sites}), "
                           f"got {args.available}")
    shape, mean = args.pareto
    if not shape > 1:
        raise CommandError(f"--pareto: need SHAPE > 1 (a finite mean), got {shape:g} {mean:g}")
    if args.order == "fifo" and any(s not in FIXED for s in args.scheduler or ()):
        raise CommandError(f"--order fifo: only for {', '.join(FIXED)} (the others order the "
                           "jobs themselves)")
    if not args.job_policies and (args.optimized or args.recompute != RECOMPUTE[0]):
        raise CommandError(f"--{'optimized' if args.optimized else 'recompute'}: only with "
                           "--job-policies")
    given = [o for o, v in (("period", args.period), ("rule", args.rule), ("rtol", args.rtol),
                            ("delay", parse_delay(args.delay, args.period)))
             if v != getattr(DEFAULTS, o)]
    if given and PROTOCOL not in args.job_policies:
        raise CommandError(f"--{given[0]}: only with --job-policies {PROTOCOL}")
    plain = [p for p in args.job_policies if p not in AMF_POLICIES]
    if args.optimized and plain:
        raise CommandError(f"--optimized: only the AMF family ({', '.join(AMF_POLICIES)}) is "
                           f"optimized, not {', '.join(plain)}")


def run(args: argparse.Namespace) -> int:
    _check(args)
    try:
        trace = load_trace(args.trace)
        w = build_workload(trace, sites=args.sites, slots=args.slots, zipf=args.zipf,
                           available=args.available, utilisation=args.utilisation,
                           shape=args.pareto[0], mean=args.pareto[1], seed=args.seed,
                           pareto_per=args.pareto_per)
    except PsdsfError as err:
        raise CommandError(str(err)) from None
    except ValueError as err:  # a trace that cannot be rescaled
        raise CommandError(f"{args.trace}: {err}") from None
    limits = current_limits()
    schedulers = args.scheduler or ([] if args.job_policies else ["ata-greedy"])
    if args.job_policies and w.num_jobs > limits.policy_jobs:
        raise CommandError(f"{args.trace}: {w.num_jobs:,} jobs, more than the limit of "
                           f"{limits.policy_jobs:,} for --job-policies (each arrival and sub-job "
                           "completion solves the policy over the active jobs; raise it with "
                           f"{LIMITS_ENV}=\"policy_jobs=N\")")
    if PROTOCOL in args.job_policies:
        present = w.least_present_seconds()
        updates = math.ceil(present / args.period) * w.num_sites
        if updates > limits.protocol_updates:
            raise CommandError(
                f"{args.trace}: protocol: at least {updates:,} server updates (its "
                f"{w.num_sites} servers update every {args.period:g} s while any of the "
                f"{w.num_jobs:,} jobs is present, at least {present:,.0f} s), more than the "
                f"limit of {limits.protocol_updates:,} (a longer --period, or raise it with "
                f"{LIMITS_ENV}=\"protocol_updates=N\")")
    waiting, at = w.least_waiting()
    if schedulers and waiting > limits.waiting_jobs:
        raise CommandError(f"{args.trace}: at least {waiting:,} jobs wait at once (t = {at:g} s) "
                           f"under any scheduler, more than the limit of {limits.waiting_jobs:,} "
                           f"(jobs arrive faster than {int(w.slots.sum()):,} slots can start "
                           f"them, and {_replan_hint('waiting_jobs')})")
    results = []
    for s in dict.fromkeys(schedulers):
        try:
            run_ = simulate_jobs(w, s, order=args.order,
                                 work=PlanWork(limits.estimates, limits.waiting_jobs))
        except PlanLimitError as err:
            raise CommandError(f"{args.trace}: {s}: {err} ({_replan_hint(err.limit)})") from None
        results.append(summary(run_, w))
        print(f"psdsf-dist: replay: {s}: {w.num_tasks} tasks in {run_.wall_seconds:.2f} s "
              f"({run_.events_per_second:,.0f} events/s)", file=sys.stderr)
    protocol = protocol_config(args) if PROTOCOL in args.job_policies else None
    for p in dict.fromkeys(args.job_policies):
        try:
            shared = simulate_allocated(w, p, recompute=args.recompute,
                                        optimized=args.optimized,
                                        protocol=protocol if p == PROTOCOL else None)
        except PsdsfError as err:
            raise CommandError(f"{args.trace}: {p}: {err}") from None
        label = f"{p} (optimized)" if args.optimized else p
        row = {**summary(shared.run, w), "scheduler": label, "solves": shared.solves}
        done = f"{shared.solves} solves"
        if protocol is not None and p == PROTOCOL:
            row.update(rounds=shared.rounds, certified_rounds=shared.certified_rounds)
            done = (f"{shared.rounds} rounds ({shared.certified_rounds} certified PS-DSF at "
                    f"rtol {protocol.rtol:g})")
        results.append(row)
        print(f"psdsf-dist: replay: {label}: {w.num_tasks} tasks, {done} in "
              f"{shared.run.wall_seconds:.2f} s", file=sys.stderr)
    if args.json:
        text = dumps({"trace": args.trace, "seed": args.seed, "zipf": args.zipf,
                      "available": args.available, "results": results})
    else:
        text = render(w, results)
    emit(text, args.output)
    return 0


def _replan_hint(limit: str) -> str:
    """Why a replay limit exists, and how to raise it: the tail of its refusals."""
    return (f"each arrival and completion re-plans every waiting job; raise it with "
            f"{LIMITS_ENV}=\"{limit}=N\"")


def render(w: Workload, results: list[dict[str, Any]]) -> str:
    head = (f"{w.num_jobs} jobs, {w.num_tasks} tasks on {w.num_sites} sites x "
            f"{int(w.slots[0]) if (w.slots == w.slots[0]).all() else 'mixed'} slots; "
            + (f"offered load {100 * w.utilisation():.1f}% of the slots"
               if math.isfinite(w.utilisation())
               else "offered load undefined (every job submitted at one instant)"))
    cols = ["scheduler", "mean resp s", *[f"p{p} resp s" for p in PERCENTILES],
            "mean wait s", "util %", "events/s"]
    rows = [[r["scheduler"], f"{r['mean_response_s']:.3f}",
             *[f"{r[f'p{p}_response_s']:.3f}" for p in PERCENTILES],
             f"{r['mean_wait_s']:.3f}", f"{100 * r['utilisation']:.1f}",
             "-" if r["events_per_second"] is None else f"{r['events_per_second']:,.0f}"]
            for r in results]
    widths = [max(len(c), *(len(row[k]) for row in rows)) for k, c in enumerate(cols)]
    lines = [head, "  ".join(c.ljust(n) for c, n in zip(cols, widths, strict=True))]
    lines += ["  ".join(v.ljust(n) for v, n in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)
