"""Clocks a server's loop runs on: the real one, and a manual one that tests move by hand.

A server reads ``now()`` and waits with ``await sleep(seconds)``; nothing else in the runtime
touches time, so a test can run many periods without waiting for them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    """Monotonic seconds since the clock was made (wall-clock waits)."""

    def __init__(self) -> None:
        self._origin = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self._origin

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))


class ManualClock:
    """Time moves only through :meth:`advance_to`; sleepers wake when it passes their target.

    :meth:`idle_after` lets the driver wait until every sleeper has gone back to sleep past the
    current time, i.e. until the work due by now is done.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._changed: asyncio.Condition | None = None
        self._sleeping: dict[int, float] = {}
        self._next_id = 0

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:  # made lazily: it must belong to the running event loop
            self._changed = asyncio.Condition()
        return self._changed

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        target = self._now + max(seconds, 0.0)
        cond = self._condition()
        me = self._next_id
        self._next_id += 1
        async with cond:
            self._sleeping[me] = target
            cond.notify_all()
            try:
                await cond.wait_for(lambda: self._now >= target)
            finally:
                del self._sleeping[me]
                cond.notify_all()

    async def advance_to(self, t: float) -> None:
        cond = self._condition()
        async with cond:
            self._now = max(self._now, t)
            cond.notify_all()

    async def idle_after(self, sleepers: int, timeout: float) -> bool:
        """Wait until ``sleepers`` tasks sleep, all with targets beyond now: everything due by
        now has run (False on timeout)."""
        cond = self._condition()

        def idle() -> bool:
            targets = list(self._sleeping.values())
            return len(targets) >= sleepers and all(t > self._now for t in targets)

        async with cond:
            try:
                await asyncio.wait_for(cond.wait_for(idle), timeout)
            except TimeoutError:
                return False
        return True
