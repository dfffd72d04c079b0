"""Allocation reports: the ``solve`` JSON object and the human-readable table.

Every command that ends with an allocation (``solve``, ``compare``, ``simulate``, ``run``) prints
it through :func:`allocation_json` / :func:`allocation_table`, so the formats stay one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.certificate import DUST, Certificate
from psdsf_dist.model.scenario import Scenario

FloatArray = npt.NDArray[np.float64]


def utilization(scenario: Scenario, allocation: FloatArray) -> FloatArray:
    """K x M fraction of each server resource in use (0 where the server lacks the resource)."""
    used = _used(scenario, allocation)
    cap = scenario.capacity
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(cap > 0, used / cap, 0.0)


def _used(scenario: Scenario, allocation: FloatArray) -> FloatArray:
    # per-task consumption at each server is the demand, scaled where gamma was given
    cons = scenario.consumption_tensor("rdm") if _has_overrides(scenario) else None
    if cons is None:
        return np.asarray(allocation.T @ scenario.demand)
    return np.asarray(np.einsum("nk,knm->km", allocation, cons))


def _has_overrides(scenario: Scenario) -> bool:
    return bool((~np.isnan(scenario.gamma_given)).any())


def allocation_json(
    scenario: Scenario,
    allocation: FloatArray,
    *,
    policy: str,
    mode: str,
    certificate: Certificate | None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``solve --json`` object. ``allocation`` lists only entries above dust."""
    X = np.asarray(allocation, dtype=float)
    util = utilization(scenario, X)
    alloc: dict[str, dict[str, float]] = {}
    dust = DUST * np.maximum(scenario.gamma, 1.0)
    for n, u in enumerate(scenario.user_names):
        row = {
            scenario.server_names[i]: float(X[n, i]) for i in np.flatnonzero(X[n] > dust[n])
        }
        alloc[u] = row
    out: dict[str, Any] = {
        "policy": policy,
        "mode": mode,
        "resources": list(scenario.resources),
        "servers": list(scenario.server_names),
        "users": list(scenario.user_names),
        "allocation": alloc,
        "tasks": {u: float(X[n].sum()) for n, u in enumerate(scenario.user_names)},
        "utilization": {
            s: {r: float(util[i, j]) for j, r in enumerate(scenario.resources)}
            for i, s in enumerate(scenario.server_names)
        },
        "certificate": None if certificate is None else certificate.to_json(),
    }
    if extra:
        out.update(extra)
    return out


def allocation_table(
    scenario: Scenario,
    allocation: FloatArray,
    *,
    policy: str,
    mode: str,
    certificate: Certificate | None,
) -> str:
    """A readable summary: tasks per user and class, utilisation per class, the certificate."""
    X = np.asarray(allocation, dtype=float)
    classes = scenario.class_names
    members: dict[str, list[int]] = {c: [] for c in classes}
    for i, k in enumerate(scenario.server_class):  # one pass: K classes of one server each
        members[k].append(i)
    util = utilization(scenario, X)
    lines = [f"policy {policy} ({mode.upper()}), {scenario.num_servers} servers in "
             f"{len(classes)} classes, {scenario.num_users} users"]
    lines.append("")
    lines.append("tasks per user (by server class)")
    head = ["user", "weight", *classes, "total"]
    rows = []
    for n, u in enumerate(scenario.user_names):
        per = [X[n, members[c]].sum() for c in classes]
        rows.append([u, _num(scenario.weight[n]), *(_num(v) for v in per), _num(X[n].sum())])
    lines += _table(head, rows)
    lines.append("")
    lines.append("utilisation per server class (% of capacity, mean over members)")
    head = ["class", "servers", *scenario.resources]
    rows = []
    for c in classes:
        m = members[c]
        cells = []
        for j in range(scenario.num_resources):
            has = [i for i in m if scenario.capacity[i, j] > 0]
            cells.append(f"{100 * util[has, j].mean():.1f}" if has else "-")
        rows.append([c, str(len(m)), *cells])
    lines += _table(head, rows)
    if certificate is not None:
        lines.append("")
        verdict = "holds" if certificate.holds else "FAILS"
        lines.append(
            f"certificate (Theorem {'2' if mode == 'tdm' else '1'}): {verdict}, "
            f"residual {certificate.residual:.2e} (rtol {certificate.rtol:g})"
        )
        lines += [f"  {v}" for v in certificate.violations[:5]]
    return "\n".join(lines)


def _num(v: float) -> str:
    return f"{v:.4f}".rstrip("0").rstrip(".") if np.isfinite(v) else str(v)


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    """Left-aligned first column, right-aligned numbers."""
    widths = [max(len(r[j]) for r in [head, *rows]) for j in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  " + "  ".join(
            c.ljust(w) if j == 0 else c.rjust(w)
            for j, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return [line(head), line(["-" * w for w in widths]), *(line(r) for r in rows)]
