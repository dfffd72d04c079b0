"""Work the allocator did not admit, counted out of a server's capacity (pure).

A node's resources are not all the allocator's: plain-Ray drivers, other jobs and system
actors take some.  Each server measures, once per period, what such work holds on its node;
the allocation must leave it out, so the coordinator makes it a user of the run pinned to that
server — ``unmanaged@<server>``, one task whose demand is the unmanaged usage, with a weight no
tenant reaches (:data:`UNMANAGED_WEIGHT`), so PS-DSF gives it its whole task first and the
tenants share what is left, certified like any allocation (:func:`unmanaged_events`).

Two lower bounds, both certain (:func:`node_sample` takes the larger):

- **By job.**  Ray reports, for every worker process on the node, the job it works for and
  the resources it holds (:class:`WorkerUsage`).  Each tenant's queue says with its asks which
  job is the tenant's, so a worker of any other job holding resources is work the allocator
  did not admit, counted the moment Ray places it — whether the tenants' own tasks wait at the
  node or not (a task waiting for room holds nothing and has no worker).  A tenant's own job
  holding more than the tasks its queue reports running there runs work outside its leases
  (plain Ray tasks from the tenant's driver): the excess counts too.
- **By the node's books.**  Ray's available resources on the node, less the capacity, less
  what the tenants' queues report running there (an upper bound on what their tasks hold: it
  includes tasks that wait at the node), is held by others.  This one sees what has no worker
  yet: a placement group's reserved bundles, workers still starting.

Neither bound counts the tenants' own tasks as an intruder: a tenant's starting worker belongs
to its job, and its reported tasks are all subtracted from the books.

Hysteresis.  Usage counts once it has persisted :data:`UNMANAGED_WINDOW` samples
(:data:`UNMANAGED_SAMPLES_PER_PERIOD` a period), the element-wise minimum over the window,
so it is released as soon as one sample shows it gone (:class:`UnmanagedEstimate`).
Amounts, and changes, smaller than :data:`UNMANAGED_TOLERANCE` of a resource's capacity do
not reach the table (each change is an event that restarts the protocol's convergence).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from psdsf_dist.model.events import (
    Event,
    UserJoins,
    UserLeaves,
    new_user_joins,
    set_demand,
    set_weight,
)

FloatArray = npt.NDArray[np.float64]

UNMANAGED_PREFIX = "unmanaged@"
"""Names of the users standing for unmanaged work (tenants may not take them)."""
UNMANAGED_WINDOW = 2
"""Samples unmanaged usage must persist to count."""
UNMANAGED_SAMPLES_PER_PERIOD = 2
"""Samples of each node's unmanaged usage per period: usage counts once two samples half a
period apart found it — work Ray placed is left out of the allocation about a period later,
while a burst shorter than half a period is not counted."""
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


@dataclass(frozen=True)
class WorkerUsage:
    """One worker process on a node, as Ray reports it: the job it works for (hex id) and the
    resources it holds (in the scenario's units)."""

    job: str
    held: FloatArray


def unmanaged_sample(capacity: FloatArray, available: FloatArray,
                     own: FloatArray) -> FloatArray:
    """The capacity neither available nor held by the server's own admitted tasks."""
    return np.maximum(np.asarray(capacity) - np.asarray(available) - np.asarray(own), 0.0)


def held_by_tenants(counts: Mapping[str, int], user_index: Mapping[str, int],
                    demand: FloatArray, capacity: FloatArray) -> FloatArray:
    """What ``counts`` tasks per user hold on a node (users not in the table hold nothing)."""
    own = np.zeros_like(np.asarray(capacity, dtype=float))
    for user, running in counts.items():
        if user in user_index:
            own += running * np.asarray(demand[user_index[user]], dtype=float)
    return own


def held_outside(workers: Sequence[WorkerUsage], jobs: Mapping[str, str],
                 admitted: Mapping[str, int], user_index: Mapping[str, int],
                 demand: FloatArray, capacity: FloatArray) -> FloatArray:
    """What workers hold beyond the tenants' admitted tasks: every worker of a job that is no
    tenant's (``jobs``: user -> its job; one driver may connect several tenants, so a job may
    be several users'), and of a tenant's job what exceeds the tasks its users' leases admit
    here (``admitted``: users with a live lease; a queue runs at most that many here, so more
    is work outside its leases).  A job one of whose users has no live lease is not judged:
    its tasks were admitted by a lease since expired."""
    out = np.zeros_like(np.asarray(capacity, dtype=float))
    users_of: dict[str, list[str]] = {}
    for user, job in jobs.items():
        users_of.setdefault(job, []).append(user)
    by_job: dict[str, FloatArray] = {}
    for w in workers:
        if w.job in users_of:
            by_job[w.job] = by_job.get(w.job, np.zeros_like(out)) + w.held
        else:
            out += w.held
    for job, held in by_job.items():
        if all(u in admitted for u in users_of[job]):
            allowed = held_by_tenants({u: admitted[u] for u in users_of[job]}, user_index,
                                      demand, capacity)
            out += np.maximum(held - allowed, 0.0)
    return out


def node_sample(capacity: FloatArray, available: FloatArray, workers: Sequence[WorkerUsage],
                jobs: Mapping[str, str], reported: Mapping[str, int],
                admitted: Mapping[str, int], user_index: Mapping[str, int],
                demand: FloatArray) -> FloatArray:
    """One sample of a node's unmanaged usage: the larger of the two certain bounds (module
    docstring) — what workers of other jobs, or of a tenant's job beyond its admitted tasks,
    hold (:func:`held_outside`), and what the node's books leave unexplained once every task
    the tenants report running there (``reported``) is taken as holding its demand."""
    books = unmanaged_sample(capacity, available,
                             held_by_tenants(reported, user_index, demand, capacity))
    return np.maximum(books, held_outside(workers, jobs, admitted, user_index, demand,
                                          capacity))


@dataclass
class UnmanagedEstimate:
    """One server's unmanaged usage, with hysteresis (module docstring)."""

    capacity: FloatArray
    window: int = UNMANAGED_WINDOW
    samples: deque[FloatArray] = field(default_factory=deque)

    def observe(self, sample: FloatArray) -> FloatArray:
        """Add one sample (:func:`node_sample`) and return the usage that persisted over
        :attr:`window` samples (zero until the window is full), amounts below the tolerance as
        zero."""
        self.samples.append(np.asarray(sample, dtype=float))
        while len(self.samples) > self.window:
            self.samples.popleft()
        if len(self.samples) < self.window:
            return np.zeros_like(self.capacity, dtype=float)
        out = np.min(np.stack(list(self.samples)), axis=0)
        return np.where(out >= UNMANAGED_TOLERANCE * self.capacity, out, 0.0)


def unmanaged_events(server: str, usage: Mapping[str, float], *, known: bool, present: bool,
                     demand: Mapping[str, float] | None, resources: Sequence[str],
                     weight: float = UNMANAGED_WEIGHT,
                     known_weight: float | None = None) -> list[Event]:
    """The events that make the table's ``unmanaged@server`` user match ``usage`` (per
    resource; all zero: no unmanaged work) and ``weight`` (the policy's
    ``unmanaged_weight``, else :data:`UNMANAGED_WEIGHT`), given what the table says of that
    user now (``known_weight``: its weight there)."""
    user = unmanaged_user(server)
    if not any(v > 0 for v in usage.values()):
        return [UserLeaves(0.0, -1, user)] if present else []
    spec = {r: float(v) for r, v in usage.items() if v > 0}
    if not known:
        return [new_user_joins({"name": user, "demand": spec, "servers": [server],
                                "weight": weight, "max_tasks": 1}, resources)]
    out: list[Event] = []
    if demand is None or _moved(usage, demand):
        out.append(set_demand(user, spec, resources))
    if known_weight is not None and known_weight != weight:
        out.append(set_weight(user, weight))
    if not present:
        out.append(UserJoins(0.0, -1, user, None))
    return out


def left_out_first(x: float) -> bool:
    """Whether an unmanaged user allocated ``x`` of its one task is being left out first (all
    of it but the sliver a weight of :data:`UNMANAGED_WEIGHT` leaves): its task is then whole
    when a server rounds its column (the room is really taken).  With the policy's
    ``unmanaged_weight`` it gets a share like any user, rounded like any."""
    return x >= 1.0 - 10.0 / UNMANAGED_WEIGHT


def _moved(usage: Mapping[str, float], demand: Mapping[str, float]) -> bool:
    """Whether usage differs from the table's demand by more than the tolerance (relative to
    the larger of the two, so a small amount is not chased)."""
    for r in set(usage) | set(demand):
        a, b = usage.get(r, 0.0), demand.get(r, 0.0)
        if abs(a - b) > UNMANAGED_TOLERANCE * max(a, b):
            return True
    return False
