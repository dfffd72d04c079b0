"""A minimal lock-step harness for update rules (no gossip, no clock).

Every round, all K servers update at once on the same snapshot: server i sees its own current
column and the other servers' columns as they were ``1 + delay`` rounds before the new columns
take effect (``delay = 0``: the totals of the previous round, the usual Jacobi iteration; the
views carry ``staleness = delay`` and the holder counts of that snapshot).  This
is the worst case for concurrency and it is fast: servers that start alike (same class, same
column, same state) stay alike under a deterministic rule, so one representative per *lineage*
is computed and copied (every rule is deterministic).  The certificate (rtol 1e-3 by default)
is checked every round on the true totals.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.certificate import certify_columns
from psdsf_dist.core.solver import ServerClasses
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.protocol.classes import ClassKnowledge, class_counts, server_classes
from psdsf_dist.protocol.update_rule import (
    RuleState,
    ServerView,
    UpdateRule,
    best_response,
    server_view,
    uses_classes,
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

HELD = 1e-12  # an entry above this counts its server as a holder of the user


@dataclass
class Run:
    """Outcome of one lock-step run."""

    residuals: list[float]
    """Certificate residual after each round (index 0 = the start)."""
    converged_round: int | None
    """First round from which the certificate held through the end of the run, at least
    ``hold`` rounds in a row; None if it did not within the cap."""
    allocation: FloatArray
    states: list[RuleState]
    """Rule state of each lineage (see ``lineage``)."""
    lineage: IntArray
    """Servers with equal lineage have equal columns, states and histories."""
    totals: list[FloatArray] = field(default_factory=list)
    """The users' true totals after each round (index 0 = the start), as ``residuals``."""


def active_scenario(scenario: Scenario, active: BoolArray) -> Scenario:
    """The scenario in which absent users are eligible nowhere (for the certificate)."""
    return scenario.replace_users(placement=scenario.placement & active[:, None])


def run(
    scenario: Scenario,
    rule: UpdateRule,
    *,
    mode: Mode = "rdm",
    rounds: int = 200,
    delay: int = 0,
    rtol: float = 1e-3,
    hold: int = 20,
    active: BoolArray | None = None,
    start: FloatArray | None = None,
    states: list[RuleState] | None = None,
    lineage: IntArray | None = None,
) -> Run:
    """Run ``rule`` in lock-step until the certificate has held ``hold`` rounds in a row.

    ``start``/``states``/``lineage`` continue a previous run (e.g. after a churn event);
    by default every server starts empty with the rule's initial state, one lineage per class.
    """
    N, K = scenario.num_users, scenario.num_servers
    act = np.ones(N, dtype=bool) if active is None else np.asarray(active, dtype=bool)
    cert_scenario = active_scenario(scenario, act)
    if lineage is None:
        if start is None:
            lineage = ServerClasses.of(scenario).member_class.copy()
        else:
            lineage = np.arange(K, dtype=np.int64)
    _, reps, lineage = np.unique(lineage, return_index=True, return_inverse=True)
    lineage = np.asarray(lineage, dtype=np.int64).ravel()
    if states is None:
        states = [rule.initial_state(N) for _ in reps]
    elif len(states) != len(reps):
        raise ValueError("states must hold one state per lineage")
    X = np.zeros((N, K)) if start is None else np.array(start, dtype=float)
    views: list[ServerView] = [
        server_view(cert_scenario, int(i), mode, act, K) for i in reps
    ]
    history: deque[FloatArray] = deque([X[:, reps].copy()] * (delay + 2), maxlen=delay + 2)
    counts = np.bincount(lineage, minlength=len(reps)).astype(float)
    residuals = [_residual(cert_scenario, X[:, reps], counts, reps, mode, rtol)]
    totals_trace = [X[:, reps] @ counts]
    streak = 1 if residuals[0] <= rtol else 0
    member = np.eye(K)[:, :0]
    if uses_classes(rule):  # (K, C): which servers are in which class
        member_class = server_classes(cert_scenario).member_class
        member = (member_class[:, None] == np.arange(member_class.max() + 1)[None, :]).astype(
            float)
        sizes = member.sum(axis=0)
    for _ in range(rounds):
        if streak >= hold:
            break
        cur = X[:, reps]
        old = history[1]
        moved = history[1] - history[0]  # the changes the snapshot shows
        raising = (moved > HELD).astype(float) @ counts
        lowering = (moved < -HELD).astype(float) @ counts
        others = (old @ counts)[:, None] - old
        held_old = (old > HELD).astype(float)
        holders = (held_old @ counts)[:, None] - held_old + (cur > HELD)
        new = np.empty_like(cur)
        if member.shape[1]:  # the classes each member hears of: the others one round stale
            old_full, moved_full = old[:, lineage], moved[:, lineage]
            c_sum = old_full @ member
            C = member.shape[1]
            _, c_up, c_down = class_counts(old_full > HELD, moved_full > HELD,
                                           moved_full < -HELD, member_class, C)
        for j in range(len(reps)):
            totals = others[:, j] + cur[:, j]
            klass = None
            if member.shape[1]:
                c = int(member_class[reps[j]])
                mine = old_full.copy()
                mine[:, member_class == c] = cur[:, j][:, None]  # its class: its own column
                c_held, _, _ = class_counts(mine > HELD, None, None, member_class, C)
                klass = ClassKnowledge(int(sizes[c]), c_sum[:, c] - old[:, j] + cur[:, j],
                                       c_held, c_up, c_down, C)
            view = replace(
                views[j],
                holders=holders[:, j],
                raising=raising,
                lowering=lowering,
                staleness=float(delay),
                klass=klass,
            )
            new[:, j], states[j] = rule.update(states[j], view, totals, cur[:, j])
        X = new[:, lineage]
        history.append(new.copy())
        res = _residual(cert_scenario, new, counts, reps, mode, rtol)
        residuals.append(res)
        totals_trace.append(new @ counts)
        streak = streak + 1 if res <= rtol else 0
    # a run that reaches its cap before the certificate has held ``hold`` rounds has not shown
    # that it holds for good
    converged = len(residuals) - streak if streak >= hold else None
    return Run(residuals, converged, X, states, lineage, totals_trace)


def _residual(
    scenario: Scenario,
    columns: FloatArray,
    counts: FloatArray,
    reps: IntArray,
    mode: Mode,
    rtol: float,
) -> float:
    totals = columns @ counts
    cert = certify_columns(
        scenario, columns, totals, reps.astype(np.int64), mode=mode, rtol=rtol, explain=True
    )
    return cert.residual


def sequential(
    scenario: Scenario,
    *,
    mode: Mode = "rdm",
    rounds: int = 200,
    rtol: float = 1e-3,
    hold: int = 20,
    start: FloatArray | None = None,
) -> Run:
    """Exact sequential sweeps (Gauss-Seidel): servers take the plain best response one after
    another on the true, fresh totals.  No concurrency and no staleness: the setting the
    best response is designed for, and the reference the lock-step rules are measured against
    (one sweep counts as one round).  ``start``: continue from this allocation (default
    empty)."""
    N, K = scenario.num_users, scenario.num_servers
    servers = np.arange(K, dtype=np.int64)
    views = [server_view(scenario, i, mode, None, K) for i in range(K)]
    X = np.zeros((N, K)) if start is None else np.array(start, dtype=float)
    totals = X.sum(axis=1)
    ones = np.ones(K)
    residuals = [_residual(scenario, X, ones, servers, mode, rtol)]
    totals_trace = [totals.copy()]
    streak = 1 if residuals[0] <= rtol else 0
    for _ in range(rounds):
        if streak >= hold:
            break
        for i in range(K):
            new = best_response(views[i], totals, X[:, i])
            totals = totals + (new - X[:, i])
            X[:, i] = new
        totals = X.sum(axis=1)  # drop the round-off the running sum collects
        res = _residual(scenario, X, ones, servers, mode, rtol)
        residuals.append(res)
        totals_trace.append(totals.copy())
        streak = streak + 1 if res <= rtol else 0
    converged = len(residuals) - streak if streak >= hold else None
    return Run(residuals, converged, X, [], servers, totals_trace)
