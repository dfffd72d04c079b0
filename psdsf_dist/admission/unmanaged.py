"""Work the allocator did not admit, counted out of a server's capacity (pure).

A node's resources are not all the allocator's: plain-Ray drivers, other jobs and system
actors take some.  Each server compares what Ray reports available on its node with what the
tenants' tasks Ray runs there hold (their marks, :mod:`psdsf_dist.runtime.running_marks`: a
queue's own count includes tasks waiting at the node for room); the rest is *unmanaged*
(:func:`unmanaged_sample`).  The allocation must leave it out, so the
coordinator makes it a user of the run pinned to that server — ``unmanaged@<server>``, one task
whose demand is the unmanaged usage, with a weight no tenant reaches (:data:`UNMANAGED_WEIGHT`),
so PS-DSF gives it its whole task first and the tenants share what is left, certified like any
allocation (:func:`unmanaged_events`).

Two bounds.  The server knows two counts of the tenants' tasks on its node: those its queues
report running (an upper bound: it includes tasks handed to Ray that wait at the node for
room) and those marked running (a lower bound: a task holds its resources from when Ray
leases it a worker, a little before its body marks it; seconds before, while a worker starts).
So the unmanaged usage lies between ``used - reported`` (certain) and ``used - marked``
(:func:`unmanaged_sample` of each).

Which bound.  The gap between them is the tenants' own tasks in flight — ones Ray is starting,
ones whose mark is gone while Ray's view of the node still holds their resources (it lags the
node) — unless something else holds the node and the tenants' tasks wait there for it.  Only
age tells the two apart: a task Ray starts at a node with room is marked within a worker's
start, so a task unmarked for longer waits for room.  Each queue reports, per server, how many
of its tasks there were launched more than :data:`UNMANAGED_START_GRACE` seconds ago (beyond
the one it may keep waiting for its own slot: pipelining); when a user has more such tasks
than are marked, some wait at the node (:func:`node_blocked`), and only then does the upper
bound count.  Short tasks at a node others took escape that test: they cycle through the room
left, each waiting a fraction of a second, none for the grace.  So the node also counts as
blocked when some user has had at least :data:`CONGESTED_TASKS` more tasks reported running
there than marked, at every sample for :data:`UNMANAGED_START_GRACE` seconds
(:meth:`UnmanagedEstimate.congested`): a burst of new workers starting ends well within it,
tasks queueing for room do not.  Without such evidence (an earlier form counted the upper
bound once it persisted six periods) a user with many short tasks always had one in flight at
every sample, and its own tasks were taken for an intruder: a phantom that shrank the tenants'
allocation.

Hysteresis.  Usage counts once it has persisted :data:`UNMANAGED_WINDOW` samples (one per
period: a queue's count lags its tasks by less than a period), the element-wise minimum over
the window, so it is released as soon as one sample shows it gone
(:class:`UnmanagedEstimate`).  Amounts, and changes, smaller than
:data:`UNMANAGED_TOLERANCE` of a resource's capacity do not reach the table (each change is an
event that restarts the protocol's convergence).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from psdsf_dist.model.events import Event, UserJoins, UserLeaves, new_user_joins, set_demand

FloatArray = npt.NDArray[np.float64]

UNMANAGED_PREFIX = "unmanaged@"
"""Names of the users standing for unmanaged work (tenants may not take them)."""
UNMANAGED_WINDOW = 2
"""Samples (one per period) unmanaged usage must persist to count."""
UNMANAGED_START_GRACE = 10.0
"""Seconds within which Ray starts a task it leased at a node with room (a worker's start on
a loaded machine; 3 s was exceeded under load): a tenant's task unmarked for longer waits for
room at the node (module docstring: which bound)."""
CONGESTED_TASKS = 2
"""A user with at least this many more tasks reported running at a node than marked running
there has tasks that have not started: queued at the node for room, or their workers still
starting (:meth:`UnmanagedEstimate.congested` tells the two apart by how long it lasts)."""
UNMANAGED_TOLERANCE = 0.05
"""Fraction of a resource's capacity below which unmanaged usage, or a change of it, is
ignored."""
UNMANAGED_WEIGHT = 1e4
"""The weight of an unmanaged user: its one task is allocated before the tenants' (to within a
share of about 1/UNMANAGED_WEIGHT of it, far inside :data:`UNMANAGED_TOLERANCE`).  Not larger:
where unmanaged work fills its node and a tenant allowed only there gets nothing, the solver's
certificate cannot resolve a weight ratio of 1e6 (its relative residual stalls near 1e-6, the
ratio's inverse), so the coordinator's distance-to-fair solve failed after seconds on every
such scenario."""


def unmanaged_user(server: str) -> str:
    return f"{UNMANAGED_PREFIX}{server}"


def is_unmanaged_user(user: str) -> bool:
    return user.startswith(UNMANAGED_PREFIX)


def unmanaged_sample(capacity: FloatArray, available: FloatArray,
                     own: FloatArray) -> FloatArray:
    """The capacity neither available nor held by the server's own admitted tasks."""
    return np.maximum(np.asarray(capacity) - np.asarray(available) - np.asarray(own), 0.0)


def node_blocked(overdue: Mapping[str, int], marked: Mapping[str, int]) -> bool:
    """Whether some tenant's task waits at the node for room held by others: a user has more
    tasks there launched over :data:`UNMANAGED_START_GRACE` ago (``overdue``, as its queue
    reports them) than are marked running (a started task of theirs, young or old, is
    marked, so at least the difference has not started)."""
    return any(k > marked.get(user, 0) for user, k in overdue.items())


def node_congested(reported: Mapping[str, int], marked: Mapping[str, int]) -> bool:
    """Whether some user has :data:`CONGESTED_TASKS` or more tasks reported running at the
    node beyond those marked running (its tasks that have not started, for now)."""
    return any(k - marked.get(user, 0) >= CONGESTED_TASKS for user, k in reported.items())


def held_by_tenants(counts: Mapping[str, int], user_index: Mapping[str, int],
                    demand: FloatArray, capacity: FloatArray) -> FloatArray:
    """What ``counts`` tasks per user hold on a node (users not in the table hold nothing)."""
    own = np.zeros_like(np.asarray(capacity, dtype=float))
    for user, running in counts.items():
        if user in user_index:
            own += running * np.asarray(demand[user_index[user]], dtype=float)
    return own


def node_sample(capacity: FloatArray, available: FloatArray, user_index: Mapping[str, int],
                demand: FloatArray, reported: Mapping[str, int], marked: Mapping[str, int],
                overdue: Mapping[str, int], congested: bool = False) -> FloatArray:
    """One sample of a node's unmanaged usage: its capacity less what Ray reports
    ``available`` there and less what the tenants' tasks hold — the more of what their queues
    report running (``reported``, including tasks that wait at the node for room) and what
    is marked running (bodies started), except while a task waits at the node for room held
    by others (:func:`node_blocked`, or ``congested`` long enough:
    :meth:`UnmanagedEstimate.congested`): then only the marked ones, the upper bound."""
    marked_own = held_by_tenants(marked, user_index, demand, capacity)
    if congested or node_blocked(overdue, marked):
        return unmanaged_sample(capacity, available, marked_own)
    reported_own = held_by_tenants(reported, user_index, demand, capacity)
    return unmanaged_sample(capacity, available, np.maximum(reported_own, marked_own))


@dataclass
class UnmanagedEstimate:
    """One server's unmanaged usage, with hysteresis (module docstring)."""

    capacity: FloatArray
    window: int = UNMANAGED_WINDOW
    samples: deque[FloatArray] = field(default_factory=deque)
    congested_since: float | None = None
    """Since when every sample has found the node congested (:func:`node_congested`)."""

    def congested(self, now: float, reported: Mapping[str, int],
                  marked: Mapping[str, int]) -> bool:
        """Whether the node has been congested (:func:`node_congested`) at every sample for
        :data:`UNMANAGED_START_GRACE` seconds up to ``now``: longer than workers take to
        start, so some user's tasks queue there for room others hold."""
        if not node_congested(reported, marked):
            self.congested_since = None
            return False
        if self.congested_since is None:
            self.congested_since = now
        return now - self.congested_since >= UNMANAGED_START_GRACE

    def measure(self, now: float, capacity: FloatArray, available: FloatArray,
                user_index: Mapping[str, int], demand: FloatArray, reported: Mapping[str, int],
                marked: Mapping[str, int], overdue: Mapping[str, int]) -> FloatArray:
        """One period's sample of the node (:func:`node_sample`, by the bound that applies:
        :meth:`congested` at ``now``) added, and the usage that persisted (:meth:`observe`)."""
        return self.observe(node_sample(capacity, available, user_index, demand, reported,
                                        marked, overdue, self.congested(now, reported, marked)))

    def observe(self, sample: FloatArray) -> FloatArray:
        """Add one sample — the unmanaged usage, by the bound that applies — and return the
        usage that persisted over :attr:`window` samples (zero until the window is full),
        amounts below the tolerance as zero."""
        self.samples.append(np.asarray(sample, dtype=float))
        while len(self.samples) > self.window:
            self.samples.popleft()
        if len(self.samples) < self.window:
            return np.zeros_like(self.capacity, dtype=float)
        out = np.min(np.stack(list(self.samples)), axis=0)
        return np.where(out >= UNMANAGED_TOLERANCE * self.capacity, out, 0.0)


def unmanaged_events(server: str, usage: Mapping[str, float], *, known: bool, present: bool,
                     demand: Mapping[str, float] | None,
                     resources: Sequence[str]) -> list[Event]:
    """The events that make the table's ``unmanaged@server`` user match ``usage`` (per
    resource; all zero: no unmanaged work), given what the table says of that user now."""
    user = unmanaged_user(server)
    if not any(v > 0 for v in usage.values()):
        return [UserLeaves(0.0, -1, user)] if present else []
    spec = {r: float(v) for r, v in usage.items() if v > 0}
    if not known:
        return [new_user_joins({"name": user, "demand": spec, "servers": [server],
                                "weight": UNMANAGED_WEIGHT, "max_tasks": 1}, resources)]
    out: list[Event] = []
    if demand is None or _moved(usage, demand):
        out.append(set_demand(user, spec, resources))
    if not present:
        out.append(UserJoins(0.0, -1, user, None))
    return out


def _moved(usage: Mapping[str, float], demand: Mapping[str, float]) -> bool:
    """Whether usage differs from the table's demand by more than the tolerance (relative to
    the larger of the two, so a small amount is not chased)."""
    for r in set(usage) | set(demand):
        a, b = usage.get(r, 0.0), demand.get(r, 0.0)
        if abs(a - b) > UNMANAGED_TOLERANCE * max(a, b):
            return True
    return False
