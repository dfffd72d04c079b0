"""A simulated clock: a time-ordered queue of actions, deterministic for equal times.

Actions at the same instant run in order of their *priority* (lower first), then in order of
scheduling, so a simulation never depends on hash order or on floating-point ties.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(order=True)
class _Item:
    time: float
    priority: int
    seq: int
    action: Callable[[], None] = field(compare=False)


@dataclass
class SimClock:
    now: float = 0.0
    _queue: list[_Item] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def at(self, time: float, priority: int, action: Callable[[], None]) -> None:
        """Run ``action`` at ``time`` (never in the past)."""
        heapq.heappush(self._queue, _Item(max(time, self.now), priority, next(self._seq), action))

    def run_until(self, time: float, *, through_priority: int | None = None) -> None:
        """Run every action scheduled strictly before ``time`` — and those at ``time`` itself
        whose priority is at most ``through_priority`` — ; the clock then reads ``time``."""
        def due(item: _Item) -> bool:
            return item.time < time or (through_priority is not None and item.time == time
                                        and item.priority <= through_priority)

        while self._queue and due(self._queue[0]):
            item = heapq.heappop(self._queue)
            self.now = item.time
            item.action()
        self.now = time

    def pending(self) -> int:
        return len(self._queue)
