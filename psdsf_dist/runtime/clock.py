"""Clocks the actors run on: the wall clock, and a manual one that paced runs and tests move
by hand.

The server actors, the coordinator and the tenants' queues (these on the wall clock) read
``now()``, wait with ``await sleep(seconds)`` and start background work (a server's exchanges)
with ``spawn``; they do not touch time otherwise.

The manual clock is a discrete-event clock for asyncio tasks: :meth:`ManualClock.advance_to`
wakes the sleepers due before the target one at a time, in order of their wake-up time (ties in
the order they went to sleep), sets the time to each one's wake-up time, and lets it — and
whatever it spawned — run until all are asleep, done, or waiting on another actor
(:meth:`ManualClock.away`) before waking the next; before it returns, the answers from other
actors are in and handled too.  Within one actor (no call leaves it) a paced run is thereby the
simulator's event order exactly (``tests/runtime/test_equivalence.py`` holds the two together);
across actors only the calls between them are unordered, and a wake-up does not wait for the
round trips its exchanges started (waiting for them one wake-up after another made paced runs
of many servers several times slower: ``experiments/notes/design_measurements.md``).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable, Coroutine
from typing import Protocol, TypeVar

T = TypeVar("T")

Work = Coroutine[object, None, None]
"""Background work an actor starts (``spawn``): a coroutine, driven by the event loop."""


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...

    def spawn(self, work: Work) -> asyncio.Task[None]: ...

    async def away(self, awaitable: Awaitable[T]) -> T: ...


class WallClock:
    """Seconds since the run started, by the wall clock: comparable across processes and
    nodes (gossip ages compare one server's clock with another's)."""

    def __init__(self, started_at: float) -> None:
        self._origin = started_at

    @property
    def started_at(self) -> float:
        """The wall-clock time (``time.time()``) at which this clock reads 0."""
        return self._origin

    def now(self) -> float:
        return time.time() - self._origin

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))

    def spawn(self, work: Work) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(work)

    async def away(self, awaitable: Awaitable[T]) -> T:
        """Wait for another process (a call to another actor)."""
        return await awaitable


class ManualClock:
    """Time moves only through :meth:`advance_to` (see the module docstring)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None], asyncio.Task[object]]] = []
        self._seq = itertools.count()
        self._busy: set[asyncio.Task[object]] = set()
        """Tasks woken or spawned that have not gone (back) to sleep or finished."""
        self._quiet: asyncio.Event | None = None
        self._away = 0
        """Tasks waiting on another actor (not busy, but ``advance_to`` waits for them)."""

    def _event(self) -> asyncio.Event:
        if self._quiet is None:  # made lazily: it must belong to the running event loop
            self._quiet = asyncio.Event()
        return self._quiet

    def now(self) -> float:
        return self._now

    def pending(self) -> int:
        """Tasks asleep on this clock."""
        return len(self._sleepers)

    async def sleep(self, seconds: float) -> None:
        task = asyncio.current_task()
        assert task is not None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers,
                       (self._now + max(seconds, 0.0), next(self._seq), future, task))
        self._settle(task)
        try:
            await future
        finally:
            if not future.done():
                future.cancel()

    def spawn(self, work: Work) -> asyncio.Task[None]:
        """Start ``work`` as a task the clock waits for (busy until it sleeps or ends)."""
        task = asyncio.get_running_loop().create_task(work)
        self._busy.add(task)
        task.add_done_callback(self._settle)
        return task

    async def away(self, awaitable: Awaitable[T]) -> T:
        """Wait for another actor: the waiting task does not hold up the next wake-up, but
        :meth:`advance_to` returns only after it has resumed and settled."""
        task = asyncio.current_task()
        assert task is not None
        tracked = task in self._busy  # an actor call's own task is not: it only counts away
        self._away += 1
        if tracked:
            self._settle(task)
        try:
            return await awaitable
        finally:
            self._away -= 1
            if tracked:
                self._busy.add(task)

    def _settle(self, task: asyncio.Task[object]) -> None:
        self._busy.discard(task)
        if not self._busy:
            self._event().set()

    def move_to(self, t: float) -> None:
        """Set the time to ``t`` (never back) without waking anyone: for a clock nobody sleeps
        on, such as the coordinator's, which moves the run's time and reads it."""
        if self._sleepers:
            raise RuntimeError("move_to on a clock with sleepers: use advance_to")
        self._now = max(self._now, t)

    async def advance_to(self, t: float, timeout: float = 60.0) -> bool:
        """Wake every sleeper due strictly before ``t`` in order (each at its own time), then
        set the time to ``t``.  False if the woken work did not settle within ``timeout``."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            while self._sleepers and self._sleepers[0][0] < t:
                due, _, future, task = heapq.heappop(self._sleepers)
                if future.done() or task.done():
                    continue  # cancelled meanwhile
                self._now = max(self._now, due)
                self._busy.add(task)
                if not await self._until_quiet(future, deadline):
                    return False
            if not (self._away or self._busy):
                break
            # the answers from other actors, and what they set off (maybe new sleepers)
            if self._busy:
                if not await self._until_quiet(None, deadline):
                    return False
            elif asyncio.get_running_loop().time() > deadline:
                return False
            else:
                await asyncio.sleep(0.001)  # only away: their return does not signal
        self._now = max(self._now, t)
        return True

    async def _until_quiet(self, wake: asyncio.Future[None] | None, deadline: float) -> bool:
        quiet = self._event()
        quiet.clear()
        if wake is not None:
            wake.set_result(None)
        try:
            await asyncio.wait_for(quiet.wait(), deadline - asyncio.get_running_loop().time())
        except TimeoutError:
            return False
        return True
