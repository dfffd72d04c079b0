"""ArrivalOrder: calls whose awaits end in any order go on in the order they arrived."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.runtime.arrival_order import ArrivalOrder


async def _run(delays: list[int], cancelled: set[int], failing: set[int]) -> list[int]:
    """Start one call per delay (in index order); each awaits ``delay`` loop turns, then
    notes its index synchronously.  Calls in ``cancelled`` are cancelled midway, those in
    ``failing`` raise from their await."""
    order = ArrivalOrder()
    went: list[int] = []

    async def fetch(i: int, delay: int) -> int:
        for _ in range(delay):
            await asyncio.sleep(0)
        if i in failing:
            raise ValueError(i)
        return i

    async def call(i: int, delay: int) -> None:
        value = await order.resolve(fetch(i, delay))
        went.append(value)

    tasks = [asyncio.ensure_future(call(i, d)) for i, d in enumerate(delays)]
    for _ in range(max(delays, default=0) // 2):
        await asyncio.sleep(0)
    for i in cancelled:
        tasks[i].cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert order.idle
    return went


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=12), st.data())
def test_calls_go_on_in_arrival_order_whatever_order_their_awaits_end(
        delays: list[int], data: st.DataObject) -> None:
    calls = set(range(len(delays)))
    cancelled = data.draw(st.sets(st.integers(0, 11), max_size=3)) & calls
    failing = data.draw(st.sets(st.integers(0, 11), max_size=3)) & calls
    went = asyncio.run(_run(delays, cancelled, failing))
    assert went == sorted(went)
    # every call neither failing nor cancelled went on (a cancel can land after it went)
    assert calls - failing - cancelled <= set(went)


def test_a_late_fast_call_waits_for_an_earlier_slow_one() -> None:
    went = asyncio.run(_run([10, 0, 0], set(), set()))
    assert went == [0, 1, 2]  # without the gate: [1, 2, 0]


def test_a_cancelled_call_does_not_hold_later_ones() -> None:
    went = asyncio.run(_run([100, 0, 0], {0}, set()))
    assert went == [1, 2]
