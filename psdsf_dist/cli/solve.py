"""``psdsf-dist solve``: the allocation of a scenario under PS-DSF (default) or a baseline.

``--policy psdsf`` runs the certified exact solver.  Any other policy prints the same report
with ``policy`` set; its ``certificate`` is the PS-DSF certificate (Theorem 1/2) *of that
allocation* - it says how far the baseline is from PS-DSF, and usually fails - except for the
pooled ``drf``, whose per-server numbers are task equivalents, where it is null.

``--whole-tasks`` rounds the PS-DSF allocation to whole tasks (:mod:`psdsf_rounding`: floor,
then fill by the PS-DSF criterion; each user loses less than one task per server its fractional
allocation was split over); the report adds each user's fractional total and that bound.  The
whole-task policies (``drfh-first-fit`` ... ``bf-drf``) give whole tasks by themselves;
``--seed`` seeds ``rrr-psdsf``.
"""

from __future__ import annotations

import argparse

from psdsf_dist.cli.common import (
    CommandError,
    add_mode_option,
    add_policy_option,
    add_seed_option,
    dumps,
    emit,
    failed,
    load,
    policies_epilog,
)
from psdsf_dist.core.certificate import Certificate, certificate
from psdsf_dist.core.report import allocation_json, allocation_table
from psdsf_dist.core.solver import solve
from psdsf_dist.errors import PsdsfError
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.policies import Allocation, allocate
from psdsf_dist.policies.psdsf_rounding import RoundedAllocation, round_psdsf


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("solve", help="compute the allocation of a scenario (PS-DSF: certified)",
                       epilog=policies_epilog(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", help="scenario file (YAML or JSON)")
    add_mode_option(p)
    add_policy_option(p)
    p.add_argument("--whole-tasks", action="store_true",
                   help="round the PS-DSF allocation to whole tasks (a stated loss bound per "
                        "user); only with --policy psdsf")
    add_seed_option(p)
    p.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.whole_tasks:
        if args.policy != "psdsf":
            raise CommandError(f"--whole-tasks rounds the PS-DSF allocation; policy "
                               f"{args.policy} does not take it (the whole-task policies "
                               "give whole tasks by themselves)")
        return run_whole(args)
    if args.policy == "psdsf":
        return run_psdsf(args)
    scenario = load(args.scenario)
    try:
        outcome = allocate(scenario, args.policy, args.mode, seed=args.seed)
        cert = psdsf_certificate(scenario, outcome)
    except PsdsfError as err:
        raise failed(args.scenario, err) from None
    if args.json:
        text = dumps(
            allocation_json(
                scenario,
                outcome.allocation,
                policy=args.policy,
                mode=args.mode,
                certificate=cert,
                extra={"solver": solver_json(outcome)},
            )
        )
    else:
        text = allocation_table(
            scenario, outcome.allocation, policy=args.policy, mode=args.mode, certificate=cert,
        )
        text += f"\nsolved in {1000 * outcome.seconds:.1f} ms ({solver_note(outcome)})"
    emit(text, args.output)
    return 0


def run_psdsf(args: argparse.Namespace) -> int:
    scenario = load(args.scenario)
    try:
        solution = solve(scenario, args.mode)
    except PsdsfError as err:
        raise failed(args.scenario, err) from None
    if args.json:
        text = dumps(
            allocation_json(
                scenario,
                solution.allocation,
                policy="psdsf",
                mode=args.mode,
                certificate=solution.certificate,
                extra={"solver": {"sweeps": solution.sweeps, "exact_solves": solution.exact_solves,
                                  "seconds": solution.seconds}},
            )
        )
    else:
        text = allocation_table(
            scenario, solution.allocation, policy="psdsf", mode=args.mode,
            certificate=solution.certificate,
        )
        text += f"\nsolved in {1000 * solution.seconds:.1f} ms ({solution.sweeps} sweeps, " \
                f"{solution.exact_solves} exact solves)"
    emit(text, args.output)
    return 0


def run_whole(args: argparse.Namespace) -> int:
    scenario = load(args.scenario)
    try:
        solution = solve(scenario, args.mode)
        rounded = round_psdsf(scenario, args.mode, solution.allocation)
        cert = certificate(scenario, rounded.allocation.astype(float), mode=args.mode)
    except PsdsfError as err:
        raise failed(args.scenario, err) from None
    X = rounded.allocation.astype(float)
    if args.json:
        text = dumps(allocation_json(
            scenario, X, policy="psdsf", mode=args.mode, certificate=cert,
            extra={"whole_tasks": whole_json(scenario, rounded),
                   "solver": {"sweeps": solution.sweeps, "exact_solves": solution.exact_solves,
                              "seconds": solution.seconds + rounded.seconds}}))
    else:
        text = allocation_table(scenario, X, policy="psdsf", mode=args.mode, certificate=cert)
        text += "\n\nwhole tasks: the certified PS-DSF allocation floored, then filled by the " \
                "PS-DSF criterion;\nloss bound: each user runs more than its fractional total " \
                "minus the servers it was split over\n"
        width = max(len(u) for u in scenario.user_names)
        frac = rounded.fractional.sum(axis=1)
        for n, u in enumerate(scenario.user_names):
            text += (f"  {u.ljust(width)}  {int(rounded.totals[n])} tasks, fractional "
                     f"{frac[n]:.6g}, bound {'>' if rounded.split[n] else '>='} "
                     f"{frac[n] - rounded.split[n]:.6g} "
                     f"(split over {int(rounded.split[n])})\n")
        text += f"solved in {1000 * (solution.seconds + rounded.seconds):.1f} ms " \
                f"(rounding {1000 * rounded.seconds:.1f} ms); the certificate above is of the " \
                "whole-task allocation"
    emit(text, args.output)
    return 0


def whole_json(scenario: Scenario, rounded: RoundedAllocation) -> dict[str, object]:
    frac = rounded.fractional.sum(axis=1)
    return {
        "fractional_tasks": {u: float(frac[n]) for n, u in enumerate(scenario.user_names)},
        "split_servers": {u: int(rounded.split[n]) for n, u in enumerate(scenario.user_names)},
        "lower_bound": {u: float(frac[n] - rounded.split[n])
                        for n, u in enumerate(scenario.user_names)},
    }


def psdsf_certificate(scenario: Scenario, outcome: Allocation) -> Certificate | None:
    """The PS-DSF certificate of the outcome (its own for psdsf; None for pooled DRF)."""
    if outcome.certificate is not None:
        return outcome.certificate
    if outcome.pooled:
        return None
    return certificate(scenario, outcome.allocation, mode=outcome.mode)


def solver_json(outcome: Allocation) -> dict[str, object]:
    return {"seconds": outcome.seconds, "lp_solves": outcome.lp_solves, "pooled": outcome.pooled}


def solver_note(outcome: Allocation) -> str:
    if outcome.policy == "psdsf":
        return "certified exact solve"
    if outcome.pooled:
        return (f"{outcome.lp_solves} LP solve(s); servers pooled, per-server numbers are "
                "task equivalents")
    if outcome.policy == "per-server-drf":
        return "each server alone"
    if outcome.whole:
        return "whole tasks, one at a time"
    if outcome.policy == "mnw":
        return "one conic program"
    return f"{outcome.lp_solves} LP solve(s)"
