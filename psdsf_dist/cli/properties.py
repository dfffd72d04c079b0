"""``psdsf-dist properties``: the fairness properties of a policy's allocation, with witnesses."""

from __future__ import annotations

import argparse

from psdsf_dist.cli.common import (
    MAX_TRIALS,
    add_mode_option,
    add_policy_option,
    add_seed_option,
    dumps,
    emit,
    failed,
    int_in,
    load_within_work,
    policies_epilog,
)
from psdsf_dist.errors import PsdsfError
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.policies.properties import DEFAULT_TRIALS, PropertyReport, check_properties


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "properties",
        help="check sharing incentive, envy-freeness, Pareto optimality, bottleneck and "
             "single-resource fairness, and probe strategy-proofness",
        epilog=policies_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", help="scenario file (YAML or JSON)")
    add_policy_option(p)
    add_mode_option(p)
    add_probe_arguments(p)
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.set_defaults(run=run)


def add_probe_arguments(p: argparse.ArgumentParser) -> None:
    """``--trials`` and ``--seed`` of the strategy-proofness probe (properties, compare)."""
    p.add_argument("--trials", type=int_in(0, MAX_TRIALS), default=DEFAULT_TRIALS, metavar="N",
                   help="random misreports probing strategy-proofness "
                        f"(default {DEFAULT_TRIALS}; 0 skips)")
    add_seed_option(p)


def run(args: argparse.Namespace) -> int:
    scenario = load_within_work(args.scenario, args.trials + 1, "--trials", "allocations")
    try:
        report = check_properties(scenario, args.policy, args.mode, trials=args.trials,
                                  seed=args.seed)
    except PsdsfError as err:
        raise failed(args.scenario, err) from None
    if args.json:
        doc = report.to_json()
        doc["tasks"] = {u: float(report.totals[n]) for n, u in enumerate(scenario.user_names)}
        text = dumps(doc)
    else:
        text = render(scenario, report)
    emit(text, args.output)
    return 0


def verdict(holds: bool | None) -> str:
    return {True: "yes", False: "NO", None: "n/a"}[holds]


def render(scenario: Scenario, report: PropertyReport) -> str:
    tasks = ", ".join(f"{u} {report.totals[n]:.6g}" for n, u in enumerate(scenario.user_names))
    lines = [f"policy {report.policy} ({report.mode.upper()}): tasks {tasks}", ""]
    width = max(len(c.name) for c in report.checks)
    for c in report.checks:
        lines.append(f"  {c.name.ljust(width)}  {verdict(c.holds).ljust(3)}  {c.detail}")
    return "\n".join(lines)
