"""The coordinator's book of tenant queues: backlog reports in, churn events out (pure).

Each tenant's queue reports, once per period, its user, task shape (as a per-task demand),
weight (when the connecting call gave one) and backlog (tasks queued plus running).  The
allocation must follow: a user with work is present with ``max_tasks`` = its backlog, so
capacity it cannot use goes to the others through PS-DSF itself (work conservation through
the allocation); a user without work is absent, so it holds nothing.  :meth:`TenantBook.report`
turns one report into the typed events that make the coordinator's table say so (built by
:mod:`psdsf_dist.model.events`, which checks the tenant's values as it checks a scenario
file's), and :meth:`TenantBook.expired` makes the users of
queues that stopped reporting (their driver exited) leave.

Each event changes the table every server adopts and restarts the update rule's convergence,
so a backlog that only drifts is not reported as an event every period: ``max_tasks`` is
updated when it binds or is about to (the smaller of old and new backlog within
``CAP_BINDING_FACTOR`` times the user's allocated total) or when it changed by more than
``CAP_CHANGE_FRACTION`` of itself.  A cap far above the allocation does not change it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from psdsf_dist.model.events import (
    Event,
    UserJoins,
    UserLeaves,
    new_user_joins,
    set_demand,
    set_max_tasks,
    set_weight,
)

TENANT_TIMEOUT_PERIODS = 5.0
"""A queue silent this many periods has gone (its driver exited) — unless Ray still reports
its actor alive (a loaded queue or coordinator answers late): then its user leaves only after
``LONG_SILENCE_PERIODS``."""
LONG_SILENCE_PERIODS = 60.0
IDLE_LINGER_PERIODS = 1.0
"""A queue reports an empty backlog only after being idle this long (bursty submitters do not
leave and rejoin between bursts)."""
CAP_CHANGE_FRACTION = 0.25
CAP_BINDING_FACTOR = 2.0
DEMAND_RTOL = 1e-9


@dataclass(frozen=True)
class UserInTable:
    """What the coordinator's table says about one user now."""

    known: bool
    present: bool = False
    demand: Mapping[str, float] | None = None
    weight: float | None = None
    max_tasks: float = float("inf")
    allocated: float = 0.0
    """The user's total tasks in the latest observation."""


@dataclass
class TenantRecord:
    user: str
    backlog: int
    last_seen: float


@dataclass
class TenantBook:
    """See the module docstring."""

    tenants: dict[str, TenantRecord] = field(default_factory=dict)

    def report(self, user: str, demand: Mapping[str, float], weight: float | None,
               backlog: int, now: float, table: UserInTable,
               resources: Sequence[str]) -> list[Event]:
        """The events one queue's report calls for (possibly none); ``resources``: the
        scenario's.  A value the scenario could not take (an unknown resource, a weight that
        is not a finite positive number) raises :class:`~psdsf_dist.errors.ScenarioError`."""
        self.tenants[user] = TenantRecord(user, backlog, now)
        if backlog <= 0:
            return [UserLeaves(0.0, -1, user)] if table.present else []
        if not table.known:
            return [new_user_joins({"name": user, "demand": dict(demand),
                                    "weight": 1.0 if weight is None else weight,
                                    "max_tasks": backlog}, resources)]
        out: list[Event] = []
        if table.demand is None or not _same_demand(demand, table.demand):
            out.append(set_demand(user, dict(demand), resources))
        if weight is not None and weight != table.weight:
            out.append(set_weight(user, weight))
        if not table.present:
            out.append(set_max_tasks(user, backlog))
            out.append(UserJoins(0.0, -1, user, None))
        elif cap_needs_update(table.max_tasks, backlog, table.allocated):
            out.append(set_max_tasks(user, backlog))
        return out

    def silent(self, now: float, period: float) -> list[str]:
        """Users whose queues have been silent longer than ``TENANT_TIMEOUT_PERIODS``."""
        return [u for u, r in self.tenants.items()
                if now - r.last_seen > TENANT_TIMEOUT_PERIODS * period]

    def expired(self, now: float, period: float, present: Mapping[str, bool],
                alive: Collection[str] = ()) -> list[Event]:
        """Events for the :meth:`silent` queues: their users leave (and are forgotten here) —
        but a queue in ``alive`` (Ray says its actor lives) only after
        ``LONG_SILENCE_PERIODS``."""
        out: list[Event] = []
        for user in self.silent(now, period):
            if user in alive and \
                    now - self.tenants[user].last_seen <= LONG_SILENCE_PERIODS * period:
                continue
            del self.tenants[user]
            if present.get(user, False):
                out.append(UserLeaves(0.0, -1, user))
        return out


def cap_needs_update(cap: float, backlog: int, allocated: float) -> bool:
    """Whether a new backlog must reach the table (see the module docstring)."""
    if backlog == cap:
        return False
    if math.isinf(cap):
        return True
    if min(cap, backlog) <= CAP_BINDING_FACTOR * allocated:
        return True
    return abs(backlog - cap) > CAP_CHANGE_FRACTION * cap


def _same_demand(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    keys = set(a) | set(b)
    return all(abs(a.get(k, 0.0) - b.get(k, 0.0)) <= DEMAND_RTOL * max(abs(a.get(k, 0.0)), 1.0)
               for k in keys)
