"""``psdsf-dist solve``: the centralised exact PS-DSF allocation of a scenario."""

from __future__ import annotations

import argparse

from psdsf_dist.cli.common import EXIT_FAILURE, CommandError, dumps, emit, load
from psdsf_dist.errors import PsdsfError
from psdsf_dist.report import allocation_json, allocation_table
from psdsf_dist.solver import solve


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("solve", help="compute the PS-DSF allocation of a scenario (certified)")
    p.add_argument("scenario", help="scenario file (YAML or JSON)")
    p.add_argument("--mode", choices=["rdm", "tdm"], default="rdm",
                   help="rdm: divisible resources (Theorem 1); tdm: time-shared servers (Theorem 2)")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    scenario = load(args.scenario)
    try:
        solution = solve(scenario, args.mode)
    except PsdsfError as err:
        raise CommandError(f"{args.scenario}: {err}", EXIT_FAILURE) from None
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
