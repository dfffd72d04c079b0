"""``psdsf-dist compare``: PS-DSF beside the baselines on one scenario, one column per policy.

Rows: tasks per user; utilisation of each resource per server class (busy share of the class's
total capacity, %), and of each external resource; total tasks, weighted tasks ``sum phi*x``,
Jain's index of the weight-normalised task shares ``x / (phi * sum_i gamma)``; which properties
hold (``properties`` explains each); the policy's compute time.  Whole-task policies give integer
tasks; ``--seed`` seeds ``rrr-psdsf`` and the misreport probes alike.  Pooled ``drf`` ignores server
boundaries, so its per-class utilisation is of task equivalents and may pass 100%.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import numpy.typing as npt

from psdsf_dist.cli.common import (
    add_mode_option,
    dumps,
    emit,
    failed,
    load_within_work,
    policies_epilog,
)
from psdsf_dist.cli.properties import add_probe_arguments, verdict
from psdsf_dist.errors import PsdsfError
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies import POLICIES, allocate, models_external, policy_view
from psdsf_dist.policies.fairness_metrics import jain_index, task_shares
from psdsf_dist.policies.properties import PROPERTY_NAMES, PropertyReport, check_properties

FloatArray = npt.NDArray[np.float64]

PROPERTY_ROWS = ("si", "ef", "po", "bf", "srf", "sp")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("compare", help="compare PS-DSF with the baseline policies on a scenario",
                       epilog=policies_epilog(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", help="scenario file (YAML or JSON)")
    p.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES),
                   metavar="POLICY",
                   help=f"policies to compare (default all: {' '.join(POLICIES)})")
    add_mode_option(p)
    add_probe_arguments(p)
    p.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    policies = list(dict.fromkeys(args.policies))
    scenario = load_within_work(args.scenario, len(policies) * (args.trials + 1), "--trials",
                                "allocations")
    try:
        results = {p: evaluate(scenario, p, args.mode, args.trials, args.seed) for p in policies}
    except PsdsfError as err:
        raise failed(args.scenario, err) from None
    if args.json:
        text = dumps({"scenario": args.scenario, "mode": args.mode, "policies": results})
    else:
        text = render(scenario, args.mode, results)
    emit(text, args.output)
    return 0


def evaluate(scenario: Scenario, policy: str, mode: Mode, trials: int, seed: int) -> dict[str, Any]:
    """One column of the comparison, as plain data (also the ``--json`` format)."""
    env = policy_view(scenario, policy)
    outcome = allocate(env, policy, mode, seed=seed)
    report: PropertyReport = check_properties(env, policy, mode, trials=trials, seed=seed,
                                              allocation=outcome)
    X = outcome.allocation
    x = outcome.totals
    return {
        "tasks": {u: float(x[n]) for n, u in enumerate(scenario.user_names)},
        "total_tasks": float(x.sum()),
        "weighted_tasks": float(scenario.weight @ x),
        "jain_index": jain_index(task_shares(scenario, x)),
        "utilization": class_utilization(scenario, X),
        "external_utilization": external_utilization(scenario, x),
        "properties": {c.key: c.holds for c in report.checks},
        "seconds": outcome.seconds,
        "pooled": outcome.pooled,
        "whole_tasks": outcome.whole,
    }


def class_utilization(scenario: Scenario, X: FloatArray) -> dict[str, dict[str, float | None]]:
    """Per class and resource: used / capacity over the class's servers (None if it has none)."""
    cons = scenario.consumption_tensor("rdm")  # K x N x M
    used = np.einsum("nk,knm->km", X, cons)
    out: dict[str, dict[str, float | None]] = {}
    classes = np.array(scenario.server_class)
    for c in scenario.class_names:
        m = classes == c
        cap = scenario.capacity[m].sum(axis=0)
        use = used[m].sum(axis=0)
        out[c] = {r: (float(use[j] / cap[j]) if cap[j] > 0 else None)
                  for j, r in enumerate(scenario.resources)}
    return out


def external_utilization(scenario: Scenario, x: FloatArray) -> dict[str, float | None]:
    use = x @ scenario.external_demand
    return {r: (float(use[q] / cap) if cap > 0 else None)
            for q, (r, cap) in enumerate(zip(scenario.external_resources,
                                             scenario.external_capacity, strict=True))}


def render(scenario: Scenario, mode: str, results: dict[str, dict[str, Any]]) -> str:
    policies = list(results)
    head = ["", *[p + ("*" if results[p]["pooled"] else "") for p in policies]]
    rows: list[list[str]] = []

    def section(title: str) -> None:
        rows.append([title, *[""] * len(policies)])

    def row(label: str, cells: list[str]) -> None:
        rows.append([f"  {label}", *cells])

    section("tasks per user")
    for u in scenario.user_names:
        row(u, [_num(results[p]["tasks"][u]) for p in policies])
    section("utilisation, % of capacity")
    for c in scenario.class_names:
        for r in scenario.resources:
            if all(results[p]["utilization"][c][r] is None for p in policies):
                continue
            row(f"{r} [{c}]", [_pct(results[p]["utilization"][c][r]) for p in policies])
    for r in scenario.external_resources:
        row(f"{r} [external]", [_pct(results[p]["external_utilization"][r]) for p in policies])
    section("totals")
    row("tasks", [_num(results[p]["total_tasks"]) for p in policies])
    row("weighted tasks (sum phi*x)", [_num(results[p]["weighted_tasks"]) for p in policies])
    row("Jain index of task shares", [f"{results[p]['jain_index']:.4f}" for p in policies])
    section("properties")
    for key in PROPERTY_ROWS:
        row(PROPERTY_NAMES[key], [verdict(results[p]["properties"][key]) for p in policies])
    row("compute time, ms", [f"{1000 * results[p]['seconds']:.1f}" for p in policies])
    widths = [max(len(r[j]) for r in [head, *rows]) for j in range(len(head))]
    lines = [f"{scenario.num_servers} servers in {len(scenario.class_names)} classes, "
             f"{scenario.num_users} users, mode {mode.upper()}; tasks are (fractional) task counts",
             ""]
    for cells in [head, *rows]:
        aligned = (c.ljust(w) if j == 0 else c.rjust(w)
                   for j, (c, w) in enumerate(zip(cells, widths, strict=True)))
        lines.append("  ".join(aligned).rstrip())
    notes = []
    whole = [p for p in policies if results[p]["whole_tasks"]]
    if whole:
        notes.append(f"whole tasks ({', '.join(whole)}): properties judged among whole-task "
                     "allocations, bottleneck fairness against divisible ones (see properties)")
    if any(results[p]["pooled"] for p in policies):
        notes.append("* servers pooled into one machine: per-class use is of task equivalents")
    if scenario.external_resources and any(not models_external(p) for p in policies):
        aware = [p for p in policies if models_external(p)]
        if aware:
            who = f"only {', '.join(aware)} model{'s' if len(aware) == 1 else ''}"
        else:
            who = "none of these policies models"
        notes.append(f"{who} the external resources; the other policies ignore them")
    if scenario.task_groups is not None and any(policy_view(scenario, p).task_groups is None
                                                for p in policies):
        notes.append("only the amf family models per-server task counts and task groups; the "
                     "other policies ignore them")
    if "sp" in PROPERTY_ROWS:
        notes.append("strategy-proofness is probed with seeded random misreports, not proven; "
                     "`psdsf-dist properties` gives witnesses")
    return "\n".join([*lines, "", *notes])


def _num(v: float) -> str:
    return f"{v:.3f}" if abs(v) < 1e5 else f"{v:.4g}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"
