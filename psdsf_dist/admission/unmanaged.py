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
leases it a worker, a little before its body marks it; longer while a worker starts).  So the
unmanaged usage lies between ``used - reported`` (certain) and ``used - marked``
(:func:`unmanaged_sample` of each).

Hysteresis.  The certain part counts once it has persisted :data:`UNMANAGED_WINDOW` samples
(one per period: a queue's count lags its tasks by less than a period); the rest — an
intruder holding the node while the tenants' tasks wait for it, or the tenants' own workers
starting — only once it has persisted :data:`UNMANAGED_SLOW_WINDOW` samples, longer than
a worker takes to start.  Each is the element-wise minimum over its window, so usage is
released as soon as one sample shows it gone (:class:`UnmanagedEstimate`).  Amounts, and
changes, smaller than :data:`UNMANAGED_TOLERANCE` of a resource's capacity do not reach the
table (each change is an event that restarts the protocol's convergence).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

UNMANAGED_PREFIX = "unmanaged@"
"""Names of the users standing for unmanaged work (tenants may not take them)."""
UNMANAGED_WINDOW = 2
"""Samples (one per period) the certain part of unmanaged usage must persist to count."""
UNMANAGED_SLOW_WINDOW = 6
"""Samples the uncertain part must persist (module docstring: two bounds)."""
UNMANAGED_TOLERANCE = 0.05
"""Fraction of a resource's capacity below which unmanaged usage, or a change of it, is
ignored."""
UNMANAGED_WEIGHT = 1e6
"""The weight of an unmanaged user: its one task is allocated before any tenant's."""


def unmanaged_user(server: str) -> str:
    return f"{UNMANAGED_PREFIX}{server}"


def is_unmanaged_user(user: str) -> bool:
    return user.startswith(UNMANAGED_PREFIX)


def unmanaged_sample(capacity: FloatArray, available: FloatArray,
                     own: FloatArray) -> FloatArray:
    """The capacity neither available nor held by the server's own admitted tasks."""
    return np.maximum(np.asarray(capacity) - np.asarray(available) - np.asarray(own), 0.0)


@dataclass
class UnmanagedEstimate:
    """One server's unmanaged usage, with hysteresis (module docstring)."""

    capacity: FloatArray
    window: int = UNMANAGED_WINDOW
    slow_window: int = UNMANAGED_SLOW_WINDOW
    samples: deque[tuple[FloatArray, FloatArray]] = field(default_factory=deque)

    def observe(self, certain: FloatArray, possible: FloatArray | None = None) -> FloatArray:
        """Add one sample — ``certain``: usage beyond every task the queues report running;
        ``possible``: beyond the tasks marked running (default: ``certain``) — and return the
        usage that persisted: the certain part over :attr:`window` samples, the possible over
        :attr:`slow_window` (zero until a window is full), amounts below the tolerance as
        zero."""
        low = np.asarray(certain, dtype=float)
        high = np.maximum(low, low if possible is None else np.asarray(possible, dtype=float))
        self.samples.append((low, high))
        while len(self.samples) > max(self.window, self.slow_window):
            self.samples.popleft()
        out = np.zeros_like(self.capacity, dtype=float)
        recent = list(self.samples)
        if len(recent) >= self.window:
            out = np.min(np.stack([c for c, _ in recent[-self.window:]]), axis=0)
        if len(recent) >= self.slow_window:
            out = np.maximum(out, np.min(np.stack([p for _, p in recent[-self.slow_window:]]),
                                         axis=0))
        return np.where(out >= UNMANAGED_TOLERANCE * self.capacity, out, 0.0)


def unmanaged_events(server: str, usage: Mapping[str, float], *, known: bool, present: bool,
                     demand: Mapping[str, float] | None) -> list[dict[str, Any]]:
    """The events that make the table's ``unmanaged@server`` user match ``usage`` (per
    resource; all zero: no unmanaged work), given what the table says of that user now."""
    user = unmanaged_user(server)
    if not any(v > 0 for v in usage.values()):
        return [{"user_leaves": user}] if present else []
    spec = {r: float(v) for r, v in usage.items() if v > 0}
    if not known:
        return [{"user_joins": {"name": user, "demand": spec, "servers": [server],
                                "weight": UNMANAGED_WEIGHT, "max_tasks": 1}}]
    out: list[dict[str, Any]] = []
    if demand is None or _moved(usage, demand):
        out.append({"set_demand": {"user": user, "demand": spec}})
    if not present:
        out.append({"user_joins": user})
    return out


def _moved(usage: Mapping[str, float], demand: Mapping[str, float]) -> bool:
    """Whether usage differs from the table's demand by more than the tolerance (relative to
    the larger of the two, so a small amount is not chased)."""
    for r in set(usage) | set(demand):
        a, b = usage.get(r, 0.0), demand.get(r, 0.0)
        if abs(a - b) > UNMANAGED_TOLERANCE * max(a, b):
            return True
    return False
