"""Coroutines that each await something go on in the order they arrived.

A tenant's queue actor runs each ``submit`` call as a coroutine, started in the order the
caller made the calls; each awaits its remote function (an ObjectRef) before it queues its
task.  Awaits end in any order, so without a gate a later call whose fetch ended first would
queue its task first — a task submitted after seven others could start before them, and a
``ray.cancel`` meant for a queued task would find it already run.  :class:`ArrivalOrder`
hands each call a ticket when it arrives and lets it past :meth:`ArrivalOrder.resolve` only
when every earlier ticket is past (or was abandoned by a cancelled or failed call).

Why it is right: tickets are taken with no await before them, so ticket order is arrival
order.  A call leaves :meth:`resolve` only when ``turn`` is its ticket, and moves ``turn`` on
as it leaves; the next call is woken with ``Future.set_result``, whose callback runs only
after the leaving call yields — so whatever a call does synchronously after :meth:`resolve`
(queueing its task) happens before the next call's.  A call cancelled or failing inside
:meth:`resolve` is marked done in its ``finally`` and skipped when the turn reaches it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


class ArrivalOrder:
    """Tickets in arrival order; :meth:`resolve` lets calls past in ticket order."""

    def __init__(self) -> None:
        self._next = 0
        """The ticket the next arrival gets."""
        self._turn = 0
        """The earliest ticket not yet past."""
        self._past: set[int] = set()
        """Tickets past (or abandoned) before their turn came."""
        self._waiting: dict[int, asyncio.Future[None]] = {}
        """Tickets whose value is in, waiting for their turn."""

    @property
    def idle(self) -> bool:
        """No call is inside :meth:`resolve`: a call with nothing to await may go at once."""
        return self._turn == self._next

    async def resolve(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` and return its value once every earlier arrival is past."""
        ticket = self._next
        self._next += 1
        try:
            value = await awaitable
            if ticket != self._turn:
                turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._waiting[ticket] = turn
                await turn
            return value
        finally:
            self._waiting.pop(ticket, None)
            self._past.add(ticket)
            while self._turn in self._past:
                self._past.discard(self._turn)
                self._turn += 1
            woken = self._waiting.get(self._turn)
            if woken is not None and not woken.done():
                woken.set_result(None)


__all__ = ["ArrivalOrder"]
