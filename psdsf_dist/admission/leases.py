"""Leases of task slots on one server's node, never claiming more than its capacity (pure).

A tenant's queue asks each server, every lease interval, how many of its tasks may run on that
server's node; the answer is a :class:`Lease`: ``slots`` concurrent tasks until ``expires_at``.
Between asks the queue starts a task whenever fewer than ``slots`` of its tasks run there — the
data path is queue -> node, with no round trip per task.  While its ask is in flight it only
replaces tasks that finish, never running more than it reported with the ask, so it never runs
more than the newest lease it holds allows, plus the tasks it already ran before that lease
shrank.

The :class:`LeaseBook` keeps, per user, the newest lease and the running count reported with
the ask.  A user's **claim** is ``max(slots, running)`` tasks of its demand (a shrunk lease
frees capacity only as the user's tasks finish, unless they are preemptible:
:mod:`.preemption`).  An ask is answered with
``min(target, fit)`` slots, ``target`` the user's whole-task target (:mod:`.rounding`) and
``fit`` the most of its tasks that fit in the capacity the other users' unexpired claims leave.
So the claims never sum past the capacity: each grant fits beside the claims standing when it is
made, and a claim only grows through a grant.  A user that stops asking (its driver exited) loses
its claim when its lease expires, ``LEASE_TTL_INTERVALS`` intervals later.  (A queue cut off
from a server for that long starts nothing more there, but tasks it started earlier run on; if
the book has given their room away meanwhile, Ray's own resource accounting queues the newcomers
at the node — the node is still never over-committed, only the book's ledger is.)

**Pipelining.**  Between a task's end and the next one's start on the same slot the queue
notices the end, submits, and the node's raylet grants a worker: a few per cent of a 100 ms
task on a loaded machine (``experiments/notes/design_measurements.md``).  Where that gap
cannot be given to anyone else, the lease lets the queue keep
``PIPELINE_PER_SLOT`` tasks per slot waiting at the node beyond its slots
(:attr:`Lease.pipeline`), so that Ray starts one the moment one of the user's tasks ends.
Only where it is safe: no other user claims or is allocated anything on this server, and the
user's slots already fill it (one more task does not fit the capacity), so a waiting task can
only start in place of one of the user's own — the user never runs more than its slots there.
The queue uses it only while its tasks there are short
(:meth:`~psdsf_dist.admission.tenant_queue_state.ServerSlots.short_tasks`): behind a long task
the waiting one would idle while a slot frees elsewhere.  The waiting task
is not claimed: the queue reports only what runs, and if the allocation moves on (pipelining
off, the claim shrinking), the waiting task still only starts in a slot one of the user's
tasks frees.

**Lending.**  Capacity the allocation leaves idle is lent, so that it is not left idle while
the allocation catches up (a user just arrived, a backlog that grew, a user gone): besides its
``min(target, fit)`` slots, a user that has more tasks waiting gets up to the most of its tasks
that fit beside every other user's claim *or* reservation, whichever is larger — a user's
reservation being its share of the column rounded up, ``ceil(x[n])`` tasks.  Lending thus never
takes what the allocation gives anyone else (rounded up), only capacity nobody is allocated.
In a converged allocation there is none to lend to a user that is not capped: PS-DSF fills
every eligible user on the server until a resource it uses is full, so the room beside the
others' reservations holds at most ``floor(x[n])`` of its tasks.  Lent slots are not charged
to the user's credit (:meth:`LeaseBook.granted` counts the allocation's part only).  A lent
slot goes back like any other: when the user's next lease is smaller, as its tasks finish.

A book rebuilt after its server actor restarted knows no claims, so it first listens for
``LEASE_TTL_INTERVALS`` intervals — answering every ask with zero slots while recording the
running counts — before it grants again: by then every live queue has asked once and the claims
are known (``quarantine_until``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from psdsf_dist.admission.rounding import most_that_fit

FloatArray = npt.NDArray[np.float64]

LEASE_INTERVALS_PER_PERIOD = 4
"""Asks per period: a queue asks every server this often (T/4 between asks)."""
LEASE_TTL_INTERVALS = 8
"""A lease lasts this many intervals (two periods): a queue whose asks are late or lost for
up to seven intervals in a row — a machine busy starting workers or taking a burst of
submissions — keeps running its slots (shorter leases ran out under such bursts:
``experiments/notes/design_measurements.md``).  It is also how long a gone driver's share
stays claimed."""
PIPELINE_PER_SLOT = 1
"""Tasks a sole user whose slots fill the node keeps waiting there beyond its slots, per
slot: one behind each, so that a slot whose task ends starts the next at once however short
the tasks (``experiments/notes/design_measurements.md``: one per node is enough for tasks of
50-200 ms, not for tasks of a millisecond)."""


@dataclass(frozen=True)
class Lease:
    """How many of its tasks a user may run concurrently on one server's node, until when."""

    server: str
    user: str
    slots: int
    ttl: float
    """Seconds the lease lasts from the ask (the queue counts them on its own clock, from when
    it sent the ask, so a lease never outlives the book's record of it)."""
    target: int
    """The whole-task target the slots were capped by (``slots < target``: waiting for room)."""
    pipeline: int = 0
    """Tasks the queue may keep waiting at the node beyond ``slots`` (see Pipelining)."""
    preempt: int = 0
    """Of the user's tasks running here, how many to stop now, its preemptible ones
    (:mod:`psdsf_dist.admission.preemption`)."""


@dataclass
class _Held:
    slots: int
    running: int
    expires_at: float
    lent: int = 0
    """Of ``slots``, those lent beyond the allocation's target."""
    queued: int = 0
    """Tasks the user had waiting for any slot (as the ask said)."""


@dataclass
class LeaseBook:
    """One server's leases (see the module docstring)."""

    server: str
    capacity: FloatArray
    held: dict[str, _Held] = field(default_factory=dict)
    quarantine_until: float = -math.inf
    jobs: dict[str, str] = field(default_factory=dict)
    """Per user, the Ray job its tasks run in (from its asks; kept after its lease expires:
    its tasks may still run)."""

    def claims(self, now: float, demand_of: dict[str, FloatArray],
               except_user: str | None = None) -> FloatArray:
        """Capacity held by unexpired claims (every user but ``except_user``)."""
        total = np.zeros_like(self.capacity)
        for user, h in self.held.items():
            if user == except_user or h.expires_at <= now or user not in demand_of:
                continue
            total = total + max(h.slots, h.running) * demand_of[user]
        return total

    def ask(self, user: str, running: int, target: int, now: float, ttl: float,
            demand_of: dict[str, FloatArray], *, queued: int = 0,
            reserved: dict[str, int] | None = None, job: str | None = None) -> Lease:
        """Answer one ask of ``user``, which runs ``running`` tasks here now and has ``queued``
        more waiting; ``reserved``: each user's ``ceil(x[n])`` here (for lending); ``job``: the
        Ray job the user's tasks run in (recorded for :mod:`~psdsf_dist.admission.unmanaged`)."""
        self._expire(now)
        lent = 0
        if now < self.quarantine_until or user not in demand_of:
            slots = 0
        else:
            room = self.capacity - self.claims(now, demand_of, except_user=user)
            slots = min(max(target, 0), most_that_fit(demand_of[user], room, self.capacity))
            wish = max(running, 0) + max(queued, 0)
            if queued > 0 and wish > slots:
                free = self.capacity - self._held_back(now, demand_of, reserved or {}, user)
                lent = max(min(wish, most_that_fit(demand_of[user], free, self.capacity))
                           - slots, 0)
        self.held[user] = _Held(slots + lent, max(running, 0), now + ttl, lent, max(queued, 0))
        if job is not None:
            self.jobs[user] = job
        pipeline = PIPELINE_PER_SLOT * (slots + lent) if self._alone(
            user, slots + lent, now, demand_of, reserved or {}) else 0
        return Lease(self.server, user, slots + lent, ttl, max(target, 0), pipeline)

    def _alone(self, user: str, slots: int, now: float, demand_of: dict[str, FloatArray],
               reserved: dict[str, int]) -> bool:
        """``user`` is the only one here (no other claim or allocation) and ``slots`` of its
        tasks fill the node: a task waiting at the node can only start in place of its own."""
        if slots <= 0 or any(u != user and h.expires_at > now and max(h.slots, h.running) > 0
                             for u, h in self.held.items()):
            return False
        if any(u != user and r > 0 for u, r in reserved.items()):
            return False
        return most_that_fit(demand_of[user], self.capacity, self.capacity) <= slots

    def _held_back(self, now: float, demand_of: dict[str, FloatArray],
                   reserved: dict[str, int], user: str) -> FloatArray:
        """What every other user claims or is allocated (rounded up), whichever is more."""
        total = np.zeros_like(self.capacity)
        for other, d in demand_of.items():
            if other == user:
                continue
            h = self.held.get(other)
            claim = 0 if h is None or h.expires_at <= now else max(h.slots, h.running)
            total = total + max(claim, reserved.get(other, 0)) * d
        return total

    def release(self, user: str) -> None:
        """The user's queue said goodbye: its claim goes at once."""
        self.held.pop(user, None)

    def granted(self, user: str) -> int:
        """The slots of ``user``'s newest lease that the allocation gave (not those lent; 0
        without a lease)."""
        h = self.held.get(user)
        return 0 if h is None else h.slots - h.lent

    def running(self) -> dict[str, int]:
        """Running tasks per user as last reported (unexpired leases only)."""
        return {u: h.running for u, h in self.held.items()}

    def waiting(self, now: float, targets: dict[str, int], except_user: str) -> bool:
        """Whether a user other than ``except_user`` waits for room here: it has tasks
        queued and its unexpired lease gave it fewer slots than its target."""
        return any(u != except_user and h.expires_at > now and h.queued > 0
                   and h.slots < targets.get(u, 0) for u, h in self.held.items())

    def admitted(self) -> dict[str, int]:
        """Per user with an unexpired lease, the most tasks its queue may run here: its claim
        (``max(slots, running)``)."""
        return {u: max(h.slots, h.running) for u, h in self.held.items()}

    def _expire(self, now: float) -> None:
        for user in [u for u, h in self.held.items() if h.expires_at <= now]:
            del self.held[user]

