"""When a user's preemptible tasks on a server are stopped to make room (pure).

Leases only stop new admissions: a user over its share keeps its running tasks until they end,
so with long tasks a newcomer's share arrives only as they finish.  Tasks declared
``preemptible=True`` (per function, as Kueue and YARN's fair scheduler make preemption opt-in)
may be stopped instead: when a user runs more tasks on a server than its whole-task target
there (:mod:`.rounding`) while another user waits for room there — it has tasks queued and
its lease gave it fewer slots than its target — for :data:`PREEMPT_GRACE_INTERVALS` lease
intervals in a row, the server's answer to the over-share user's ask names how many of its
tasks to stop (:func:`preemption`).  The user's queue interrupts that many of its youngest
preemptible tasks there (:meth:`~psdsf_dist.admission.tenant_queue_state.TenantQueueState.preempt`)
and queues them again at the head: a preempted task is run again from the start, never lost
and never counted as failed.  Tasks not declared preemptible are never stopped; their user's
surplus goes back only as they end.

The grace keeps a newcomer's first asks, and lent slots that are about to be given back as
short tasks end, from costing anyone work: only a shortfall that lasts is preempted.  The
count is the whole surplus over the target (the target is what the allocation gives the user;
the waiting users' targets need at least that much room together, as the targets fit the
capacity)."""

from __future__ import annotations

PREEMPT_GRACE_INTERVALS = 8
"""Lease intervals (two periods) a surplus must last beside a waiting user before it is
preempted."""


def preemption(surplus: int, others_wait: bool, since: float | None, now: float,
               grace: float) -> tuple[int, float | None]:
    """How many of a user's tasks to stop on one server now, and the new start of its
    surplus: ``surplus`` tasks over its target there, ``others_wait``: another user waits for
    room there, ``since``: when this surplus beside a waiting user was first seen (None: not
    before), ``grace`` in seconds."""
    if surplus <= 0 or not others_wait:
        return 0, None
    start = now if since is None else since
    return (surplus if now - start >= grace - 1e-9 else 0), start
