"""``psdsf-dist solve``: the allocation of a scenario under PS-DSF (default) or a baseline.

``--policy psdsf`` runs the certified exact solver.  Any other policy prints the same report
with ``policy`` set; its ``certificate`` is the PS-DSF certificate (Theorem 1/2) *of that
allocation* - it says how far the baseline is from PS-DSF, and usually fails - except for the
pooled ``drf``, whose per-server numbers are task equivalents, where it is null.
"""

from __future__ import annotations

import argparse

from psdsf_dist.cli.common import dumps, emit, failed, load
from psdsf_dist.core.certificate import Certificate, certificate
from psdsf_dist.core.report import allocation_json, allocation_table
from psdsf_dist.core.solver import solve
from psdsf_dist.errors import PsdsfError
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.policies import POLICIES, Allocation, allocate


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("solve", help="compute the allocation of a scenario (PS-DSF: certified)")
    p.add_argument("scenario", help="scenario file (YAML or JSON)")
    p.add_argument("--mode", choices=["rdm", "tdm"], default="rdm",
                   help="rdm: divisible resources (Theorem 1); "
                        "tdm: time-shared servers (Theorem 2)")
    p.add_argument("--policy", choices=POLICIES, default="psdsf",
                   help="allocation policy (default psdsf); the others are the baselines")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.policy == "psdsf":
        return run_psdsf(args)
    scenario = load(args.scenario)
    try:
        outcome = allocate(scenario, args.policy, args.mode)
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
    if outcome.policy == "mnw":
        return "one conic program"
    return f"{outcome.lp_solves} LP solve(s)"
