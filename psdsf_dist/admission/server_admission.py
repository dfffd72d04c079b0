"""One server's admission: its column of the allocation, rounded to whole tasks, leased out.

A server actor keeps one :class:`ServerAdmission` per hosted server.  When a tenant's queue asks
(:meth:`ServerAdmission.ask`), the server re-plans at most once per lease interval: it rounds
its current column ``X[:, i]`` (the protocol's, as gossip and the update rule left it) to whole
tasks with :func:`~psdsf_dist.admission.rounding.whole_targets` — credits charged by the slots
each user's lease really gave it, so a user whose extra task waited for room stays first in
line — and answers with a lease from its :class:`~psdsf_dist.admission.leases.LeaseBook`.  So
the tasks a user runs on the node follow the allocation with one lease interval of lag, never
over the node's capacity; a surplus of preemptible tasks beside a waiting user is named in the
lease for the user's queue to stop (:mod:`.preemption`).  Credits are keyed by user name, so
they survive the table growing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from psdsf_dist.admission.leases import (
    LEASE_INTERVALS_PER_PERIOD,
    LEASE_TTL_INTERVALS,
    Lease,
    LeaseBook,
)
from psdsf_dist.admission.preemption import PREEMPT_GRACE_INTERVALS, preemption
from psdsf_dist.admission.rounding import WHOLE_TOL, charge, whole_targets
from psdsf_dist.admission.unmanaged import is_unmanaged_user, left_out_first
from psdsf_dist.model.scenario import Scenario

FloatArray = npt.NDArray[np.float64]


@dataclass
class ServerAdmission:
    """See the module docstring."""

    server: str
    period: float
    book: LeaseBook
    credit: dict[str, float] = field(default_factory=dict)
    targets: dict[str, int] = field(default_factory=dict)
    planned_at: float | None = None
    surplus_since: dict[str, float] = field(default_factory=dict)
    """Per user, since when it has run over its target here while another waits."""

    @classmethod
    def start(cls, server: str, capacity: FloatArray, period: float, now: float, *,
              restarted: bool) -> ServerAdmission:
        """A fresh admission; after a restart it listens for one lease lifetime first."""
        book = LeaseBook(server, np.array(capacity, dtype=float))
        if restarted:
            book.quarantine_until = now + cls.ttl_of(period)
        return cls(server, period, book)

    @property
    def interval(self) -> float:
        return self.period / LEASE_INTERVALS_PER_PERIOD

    @staticmethod
    def ttl_of(period: float) -> float:
        return LEASE_TTL_INTERVALS * period / LEASE_INTERVALS_PER_PERIOD

    def ask(self, user: str, running: int, now: float, column: FloatArray,
            scenario: Scenario, queued: int = 0, job: str | None = None) -> Lease:
        """``user``'s queue runs ``running`` tasks here (in Ray job ``job``), has ``queued``
        more waiting, and asks for its lease."""
        if self.planned_at is None or now - self.planned_at >= self.interval * (1 - 1e-9):
            self.plan(now, column, scenario)
        i = scenario.server_names.index(self.server)
        eligible = [n for n in range(scenario.num_users) if scenario.eligible[n, i]]
        names = scenario.user_names
        demand_of = {names[n]: np.asarray(scenario.demand[n], dtype=float) for n in eligible}
        reserved = {names[n]: int(np.ceil(column[n] - WHOLE_TOL)) if n < len(column) else 0
                    for n in eligible}
        target = self.targets.get(user, 0)
        lease = self.book.ask(user, running, target, now, self.ttl_of(self.period), demand_of,
                              queued=queued, reserved=reserved, job=job)
        count, since = preemption(running - target, self.book.waiting(now, self.targets, user),
                                  self.surplus_since.get(user), now,
                                  PREEMPT_GRACE_INTERVALS * self.interval)
        if since is None:
            self.surplus_since.pop(user, None)
        else:
            self.surplus_since[user] = since
        return replace(lease, preempt=count) if count else lease

    def plan(self, now: float, column: FloatArray, scenario: Scenario) -> None:
        """Charge the interval that ends (each user's credit by what its lease let it run),
        then whole-task targets for the next one from the column (users not eligible here:
        none); credits are counted in task-periods."""
        i = scenario.server_names.index(self.server)
        names = scenario.user_names
        x = np.zeros(len(names))
        x[: len(column)] = np.asarray(column, dtype=float)[: len(names)]
        x = np.where(scenario.eligible[:, i], x, 0.0)
        # work outside the allocator, left out first, holds its resources for real: its task
        # is whole (PS-DSF gives it all but ~1/UNMANAGED_WEIGHT of it; an extra owed to a
        # tenant must not go into that room)
        first = np.array([is_unmanaged_user(u) and left_out_first(float(v))
                          for u, v in zip(names, x, strict=True)], dtype=bool)
        x = np.where(first, np.ceil(x - WHOLE_TOL), x)
        h = 1.0 / LEASE_INTERVALS_PER_PERIOD
        credit = np.array([self.credit.get(u, 0.0) for u in names])
        if self.planned_at is not None:
            granted = np.array([self.book.granted(u) for u in names])
            credit = charge(credit, x, granted, h)
        targets = whole_targets(x, np.asarray(scenario.demand, dtype=float),
                                np.asarray(scenario.capacity[i], dtype=float), credit, h)
        self.targets = {u: int(t) for u, t in zip(names, targets, strict=True)}
        self.credit = {u: float(c) for u, c in zip(names, credit, strict=True)}
        self.planned_at = now
