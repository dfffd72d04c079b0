"""Slots a tenant's queue hands its client, so that the client launches tasks itself (pure).

A task submitted through the queue actor costs two actor hops more than a plain Ray task (the
call to the queue, the value back from it) and the queue's own ``.remote`` for it; a burst
keeps the queue busy launching.  So the queue *delegates* slots of its leases to the client
that opened it (:meth:`~psdsf_dist.admission.tenant_queue_state.TenantQueueState.grant`): a
delegated slot is, for the queue, one task running on the slot's server — it counts in the
claims the queue sends and in its backlog — and the client runs its own tasks in it, one at a
time, each an ordinary Ray task with the tenant's shape on the slot's node, whose ``ObjectRef``
is the caller's (as in plain Ray: the value never passes through the queue; ``ray.cancel``,
``num_returns`` and errors are Ray's own).  This is Ray's own design — the raylet leases a
worker to the task's owner, which then pushes tasks to it — with the allocator's lease in
place of the raylet's.

:class:`DirectSlots` is the client's bookkeeping of its delegated slots; the client's
launcher (:mod:`psdsf_dist.runtime.direct_launcher`) asks it for a slot before each launch and
tells it when each task ended; every exchange with the queue carries :meth:`DirectSlots.report`
and brings back :meth:`DirectSlots.granted`.  The rules that keep the allocation what the
servers decided:

* a task is launched only into a slot that is free, not revoked and not expired (the lease's
  expiry as the queue last renewed it, by the wall clock of this machine: the queue runs
  beside its client), so the client never runs more than the queue's leases allow;
* a slot the queue revokes (its lease shrank below what the user holds there) or whose lease
  expired takes no new task and goes back at the next exchange once its task ends, as do
  slots idle for :data:`RETURN_IDLE_INTERVALS` lease intervals (an idle slot held is capacity
  claimed and unused);
* every task the client launched is reported once when it ends (its outcome and duration),
  so that the queue's counters — admitted, completed, failed, cancelled — count it as one of
  its own.

Demand: the client asks (``wanted``) for as many slots as it has tasks waiting for one (a
bulk submission's, :attr:`DirectSlots.queued`) plus the slots it holds, plus the single calls
that found no free slot since the last exchange (they went through the queue: the next ones
may find a slot).  Holding one slot more than a caller's calls keep busy matters: a caller
that waits for each task before the next call can make that call before the end of the last
one has freed its slot here (``ray.get`` returns before the task's future calls back).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

RETURN_IDLE_INTERVALS = 1.0
"""A delegated slot free for this many lease intervals goes back to the queue."""
EXCHANGE_TIMEOUT_INTERVALS = 40.0
"""An exchange unanswered for this many lease intervals is given up (the queue is stuck or
gone): the client launches nothing more and its waiting tasks fail..."""
EXCHANGE_TIMEOUT_MIN_S = 30.0
"""...but not before this many seconds: a queue on a loaded machine (its worker starved of
CPU, a garbage collection) can be silent for seconds without being stuck, and a queue that
died is reported by Ray at once, not by the timeout.  At short periods (T = 0.5 s: 40
intervals are 5 s) the floor is what applies."""


def exchange_timeout(interval: float) -> float:
    """Seconds an exchange may go unanswered, ``interval`` the lease interval: no reply comes
    later than that (it is given up)."""
    return max(EXCHANGE_TIMEOUT_INTERVALS * interval, EXCHANGE_TIMEOUT_MIN_S)


class DirectOutcome(enum.Enum):
    """How a task the client launched ended."""

    COMPLETED = "completed"
    """Its value, or its own code's error."""
    CANCELLED = "cancelled"
    FAILED = "failed"
    """Lost to the system after Ray's retries (or Ray refused the launch)."""


@dataclass(frozen=True)
class SlotGrant:
    """A delegated slot: its id (the queue's task id for it), where, and until when."""

    slot: int
    server: str
    node: str
    expires: float
    """Wall-clock time (``time.time()``) the slot's lease runs out."""


@dataclass(frozen=True)
class DirectReport:
    """What the client tells the queue at an exchange."""

    wanted: int
    """Slots it could use now (tasks waiting for one, running, recently turned away)."""
    queued: int
    """Tasks waiting in the client for a slot (the queue reports them as backlog and asks
    for them)."""
    returned: tuple[int, ...]
    """Slots given back (free; idle, revoked or expired)."""
    launched: tuple[tuple[int, float], ...]
    """Tasks launched since the last report: (slot, seconds from the submission to the
    launch); a chunk's calls one entry each."""
    ended: tuple[tuple[int, DirectOutcome, float], ...]
    """Tasks that ended since the last report: (slot, outcome, seconds from the launch to
    the end); a chunk's calls one entry each, with an equal share of its time."""
    ages: tuple[tuple[int, float], ...]
    """For each busy slot: seconds since its task was launched."""
    withdrawn: int = 0
    """Tasks of bulk submissions withdrawn before they were launched."""


@dataclass(frozen=True)
class DirectReply:
    """What the queue answers an exchange with."""

    granted: tuple[SlotGrant, ...]
    """New slots, and the held ones whose expiry the queue renewed."""
    revoked: tuple[int, ...]
    """Held slots to give back once free."""
    gone: str | None
    """Set when the allocator is gone or the queue closed: launch nothing more."""


@dataclass
class Slot:
    grant: SlotGrant
    busy: bool = False
    revoked: bool = False
    free_since: float = 0.0
    launched_at: float = 0.0


@dataclass
class DirectSlots:
    """The client's delegated slots (module docstring).  ``interval`` is the lease interval
    (seconds); times are wall-clock seconds of this machine."""

    interval: float
    slots: dict[int, Slot] = field(default_factory=dict)
    queued: int = 0
    """Tasks of bulk submissions waiting in the client for a slot."""
    turned_away: int = 0
    """Single calls that found no slot since the last report (they went through the queue)."""
    gone: str | None = None
    given_back: dict[int, float] = field(default_factory=dict)
    """Slots returned, and when: a reply to an earlier exchange, answered before the queue had
    them back, may still list them (several exchanges can be in flight: :meth:`granted`).
    Kept for :func:`exchange_timeout`: no reply comes later than that."""
    _launched: list[tuple[int, float]] = field(default_factory=list)
    _ended: list[tuple[int, DirectOutcome, float]] = field(default_factory=list)
    _withdrawn: int = 0

    def take(self, now: float, waited: float = 0.0) -> SlotGrant | None:
        """A slot to launch one task into now (marked busy; ``waited``: seconds the task
        waited in the client), or None: the task goes through the queue (a single call) or
        waits (a bulk one)."""
        if self.gone is None:
            for slot in self.slots.values():
                if not slot.busy and not slot.revoked and now < slot.grant.expires:
                    slot.busy = True
                    slot.launched_at = now
                    self._launched.append((slot.grant.slot, waited))
                    return slot.grant
        return None

    def ended(self, slot_id: int, outcome: DirectOutcome, now: float,
              more: Sequence[float] = ()) -> None:
        """The task in ``slot_id`` ended; the slot is free again.  A Ray task that ran a
        chunk of a bulk submission's calls (:mod:`~psdsf_dist.admission.chunks`) was one task
        when taken, its first call; ``more`` are the seconds its further calls waited in the
        client, and each is one more task, launched and ended with ``outcome`` (calls are
        counted when known to have run: a chunk may stop early and give the rest back to
        wait).  Each call gets an equal share of the time."""
        slot = self.slots.get(slot_id)
        if slot is None or not slot.busy:
            return
        slot.busy = False
        slot.free_since = now
        self._launched.extend((slot_id, w) for w in more)
        seconds = (now - slot.launched_at) / (1 + len(more))
        self._ended.extend((slot_id, outcome, seconds) for _ in range(1 + len(more)))

    def withdrawn(self, count: int) -> None:
        """``count`` tasks waiting in the client were withdrawn (their caller closed them)."""
        self._withdrawn += count

    def held(self) -> int:
        """Slots held and not revoked."""
        return sum(1 for s in self.slots.values() if not s.revoked)

    def wanted(self) -> int:
        """Slots the client could use now (module docstring, "Demand")."""
        return 0 if self.gone is not None else self.queued + self.held() + self.turned_away

    def report(self, now: float) -> DirectReport:
        """The report for the next exchange; the slots it returns are dropped here, and what
        it reports is not reported again."""
        back = tuple(i for i, s in self.slots.items() if not s.busy and (
            s.revoked or now >= s.grant.expires or self.gone is not None
            or (now - s.free_since >= RETURN_IDLE_INTERVALS * self.interval
            and self.queued == 0)))
        for i in back:
            del self.slots[i]
        self.given_back = {i: t for i, t in self.given_back.items()
                           if now - t <= exchange_timeout(self.interval)}
        self.given_back.update((i, now) for i in back)
        out = DirectReport(self.wanted(), self.queued if self.gone is None else 0, back,
                           tuple(self._launched), tuple(self._ended),
                           tuple((i, now - s.launched_at) for i, s in self.slots.items()
                                 if s.busy), self._withdrawn)
        self._launched.clear()
        self._ended.clear()
        self._withdrawn = 0
        self.turned_away = 0
        return out

    def granted(self, reply: DirectReply, now: float) -> None:
        """Take the queue's answer: new and renewed slots, revocations, gone.  A slot given
        back is never taken again (the queue never grants one id twice)."""
        for grant in reply.granted:
            slot = self.slots.get(grant.slot)
            if grant.slot in self.given_back:
                continue
            if slot is None:
                self.slots[grant.slot] = Slot(grant, free_since=now)
            else:
                slot.grant = grant
        for i in reply.revoked:
            if i in self.slots:
                self.slots[i].revoked = True
        if reply.gone is not None:
            self.gone = reply.gone

    def idle(self) -> bool:
        """Nothing to tell the queue and nothing held: the exchanges may pause."""
        return not (self.slots or self.queued or self.turned_away or self._launched
                    or self._ended or self._withdrawn)


__all__ = ["EXCHANGE_TIMEOUT_INTERVALS", "EXCHANGE_TIMEOUT_MIN_S", "RETURN_IDLE_INTERVALS",
           "DirectOutcome", "DirectReply", "DirectReport", "DirectSlots", "Slot", "SlotGrant",
           "exchange_timeout"]
