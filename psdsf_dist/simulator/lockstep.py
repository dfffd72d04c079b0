"""Lock-step rounds: every server updates at once, on one snapshot of the servers' columns.

In a lock-step round no server's move reaches another before it acts: server i sees its own
current column and every other server's column as observed ``1 + delay`` rounds before the new
columns take effect (``delay = 0``: the columns of the previous round, the Jacobi iteration).
This is the worst case for concurrency, and the case the update rules were designed on.

What one server does in such a round is written once, in :func:`update_on_snapshot`: its totals
are the snapshot's with its own observed column replaced by its current one (a server knows its
own column), the counts of servers holding, raising and lowering each user are the snapshot's,
and the rule's new column must fit the server (:func:`~psdsf_dist.protocol.node.checked_update`).
For the class rule in its class's slot the class knowledge comes from the same snapshot
(:class:`ClassSums`).  Two drivers call it:

* the simulator's snapshot model (:mod:`psdsf_dist.simulator.simulation`, ``gossip="snapshot"``):
  one :class:`~psdsf_dist.protocol.node.ServerNode` per server on the simulated clock, churn
  through the membership table, the snapshot held per server (for classes acting in slots,
  the columns as they stand at the slot);
* :func:`run` here: no clock and no membership table (users away are a mask), the snapshot held
  per *lineage* — servers that start alike (same class, same column, same state) stay alike
  under a deterministic rule, so one representative per lineage is computed and stands for its
  members.  The certificate (rtol 1e-3 by default) is checked every round on the true totals.
  Every server acts in every round, so there are no slots: the class rule runs ``split``.

:func:`sequential` is the reference both are measured against: exact best responses one server
after another on fresh totals.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.certificate import certify_columns
from psdsf_dist.core.solver import ServerClasses
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.protocol.classes import ClassKnowledge, ClassMap
from psdsf_dist.protocol.gossip import MOVE_THRESHOLD
from psdsf_dist.protocol.node import checked_update, knowledge_view
from psdsf_dist.protocol.update_rule import (
    RuleState,
    ServerView,
    UpdateRule,
    best_response,
    server_view,
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

HELD = MOVE_THRESHOLD
"""A change above this counts as a move (gossip's own threshold)."""


# -- one round ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Snapshot:
    """One observation of the columns, with the per-user sums every server reads from it
    (computed once per round: once per server would cost K x N x K a round)."""

    columns: FloatArray
    """(N, S) the observed columns (one per server, or one per lineage)."""
    totals: FloatArray
    """(N,) every server's observed column summed."""
    holders: FloatArray
    """(N,) servers whose observed column holds some of the user's tasks (a positive entry,
    as gossip counts holders)."""
    moves: FloatArray | None
    """(N, S) the sign of each column's latest change (0: none above ``HELD``); None when there
    is no earlier observation to compare with."""
    raising: FloatArray | None
    """(N,) servers whose latest change raised the user (None: no earlier observation)."""
    lowering: FloatArray | None

    @classmethod
    def of(cls, columns: FloatArray, before: FloatArray | None,
           counts: FloatArray | None = None) -> Snapshot:
        """The snapshot of ``columns``, their latest changes measured against ``before`` (the
        observation one round earlier, or None).  ``counts``: servers per column, when a
        column stands for a lineage of identical servers (the sums weight it by its size);
        None: one server per column (the sums are plain row sums)."""
        weights = np.ones(columns.shape[1]) if counts is None else counts
        totals = columns.sum(axis=1) if counts is None else columns @ counts
        holders = (columns > 0).astype(float) @ weights
        if before is None:
            return cls(columns, totals, holders, None, None, None)
        moved = columns - before
        moves = np.sign(np.where(np.abs(moved) > HELD, moved, 0.0))
        return cls(columns, totals, holders, moves,
                   (moves > 0).astype(float) @ weights, (moves < 0).astype(float) @ weights)


def update_on_snapshot(
    rule: UpdateRule,
    state: RuleState,
    view: ServerView,
    column: FloatArray,
    seen: Snapshot,
    own: int,
    *,
    staleness: float,
    klass: ClassKnowledge | None = None,
    where: str,
) -> tuple[FloatArray, RuleState]:
    """One server's update in a lock-step round: ``column`` is its current column, snapshot
    column ``own`` its column as observed.  It knows its own column as it is now, so the
    totals it is given are the snapshot's with that column replaced.  The holder, raising and
    lowering counts, the rules' estimate of how many servers move a user together, are the
    snapshot's, its own observed column among them (counting its current column instead
    would differ only for a user it began or stopped holding since the snapshot).  The new
    column must fit the server (``where`` names it in the error otherwise)."""
    totals = seen.totals - seen.columns[:, own] + column
    view = knowledge_view(view, members=view.num_servers, holders=seen.holders,
                          raising=seen.raising, lowering=seen.lowering, staleness=staleness,
                          klass=klass)
    return checked_update(rule, state, view, totals, column, where)


@dataclass(frozen=True)
class ClassSums:
    """The classes as one snapshot shows them to their members (class rule, in a class's
    slot), computed once per snapshot: the observed columns summed per class."""

    classes: ClassMap
    sums: FloatArray
    """(N, C) the observed columns of the servers counted, summed per class."""

    @classmethod
    def of(cls, classes: ClassMap, columns: FloatArray, servers: IntArray) -> ClassSums:
        """``columns`` (N, S): the observed columns of servers ``servers`` (table indices)."""
        member = classes.member_class[servers]
        within = (member[:, None] == np.arange(len(classes.count))[None, :]).astype(float)
        return cls(classes, columns @ within)

    def knowledge(self, server: int, column: FloatArray, observed: FloatArray) -> ClassKnowledge:
        """What ``server`` (its column ``observed`` in the snapshot, ``column`` now) knows
        about its class: the live member count, and the class's sum with its own column as
        it is now (the protocol's :func:`~psdsf_dist.protocol.node.class_knowledge`, from
        sums made once for every member)."""
        c = self.classes.member_class[server]
        return ClassKnowledge(int(self.classes.count[c]), self.sums[:, c] - observed + column)


# -- runs without a clock -------------------------------------------------------------------------
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
    """Run ``rule`` in lock-step until the certificate has held ``hold`` rounds in a row, at
    most ``rounds`` rounds; the other servers' columns lag ``delay`` rounds more than one.

    ``active``: the users present (the others are eligible nowhere).  ``start``/``states``/
    ``lineage`` continue a previous run (e.g. after a churn event); by default every server
    starts empty with the rule's initial state, one lineage per class.  The rounds before the
    start saw no change: the snapshots of a run's first rounds are its start."""
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
    views = [server_view(cert_scenario, int(i), mode, act, K) for i in reps]
    history: deque[FloatArray] = deque([X[:, reps].copy()] * (delay + 2), maxlen=delay + 2)
    counts = np.bincount(lineage, minlength=len(reps)).astype(float)
    residuals = [_residual(cert_scenario, X[:, reps], counts, reps, mode, rtol)]
    totals_trace = [X[:, reps] @ counts]
    streak = 1 if residuals[0] <= rtol else 0
    for _ in range(rounds):
        if streak >= hold:
            break
        cur = X[:, reps]
        seen = Snapshot.of(history[1], history[0], counts)
        new = np.empty_like(cur)
        for j in range(len(reps)):
            new[:, j], states[j] = update_on_snapshot(
                rule, states[j], views[j], cur[:, j], seen, j, staleness=float(delay),
                where=f"server {scenario.server_names[reps[j]]}")
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
