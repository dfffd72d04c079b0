"""The clocks a server actor runs on: the manual one wakes sleepers one at a time, in time order,
and lets each settle before the next; the wall clock moves by itself."""

from __future__ import annotations

import asyncio
import time

import pytest

from psdsf_dist.runtime.clock import ManualClock, WallClock


def test_sleepers_wake_in_time_order_each_at_its_own_time() -> None:
    async def scenario() -> list[tuple[str, float]]:
        clock = ManualClock()
        woke: list[tuple[str, float]] = []

        async def sleeper(name: str, seconds: float) -> None:
            await clock.sleep(seconds)
            woke.append((name, clock.now()))

        tasks = [clock.spawn(sleeper("late", 2.0)), clock.spawn(sleeper("early", 1.0)),
                 clock.spawn(sleeper("tie", 1.0))]
        await asyncio.sleep(0)
        assert clock.pending() == 3 and woke == []
        assert await clock.advance_to(1.5)
        # each at its wake-up time, not at the target; ties in the order they went to sleep
        assert woke == [("early", 1.0), ("tie", 1.0)] and clock.now() == 1.5
        assert await clock.advance_to(2.0)  # strictly before the target only
        assert len(woke) == 2 and clock.pending() == 1
        assert await clock.advance_to(2.5)
        await asyncio.gather(*tasks)
        return woke

    assert asyncio.run(scenario()) == [("early", 1.0), ("tie", 1.0), ("late", 2.0)]


def test_a_woken_task_and_what_it_spawns_settle_before_the_next_wakes() -> None:
    async def scenario() -> list[str]:
        clock = ManualClock()
        log: list[str] = []

        async def child(name: str) -> None:
            await asyncio.sleep(0)  # a few scheduling steps: still before the next sleeper
            await asyncio.sleep(0)
            log.append(f"{name} child at {clock.now():g}")

        async def parent(name: str, seconds: float) -> None:
            await clock.sleep(seconds)
            log.append(f"{name} at {clock.now():g}")
            clock.spawn(child(name))
            await clock.sleep(10.0)

        clock.spawn(parent("a", 1.0))
        clock.spawn(parent("b", 1.5))
        await asyncio.sleep(0)
        assert await clock.advance_to(2.0)
        return log

    assert asyncio.run(scenario()) == ["a at 1", "a child at 1", "b at 1.5", "b child at 1.5"]


def test_time_never_runs_backwards() -> None:
    async def scenario() -> float:
        clock = ManualClock(start=5.0)
        assert await clock.advance_to(3.0)
        return clock.now()

    assert asyncio.run(scenario()) == 5.0


def test_a_woken_task_that_never_settles_times_out() -> None:
    async def scenario() -> bool:
        clock = ManualClock()

        async def busy() -> None:
            await clock.sleep(1.0)
            await asyncio.sleep(5.0)  # not on the clock: the clock cannot move past it

        task = clock.spawn(busy())
        await asyncio.sleep(0)
        settled = await clock.advance_to(2.0, timeout=0.05)
        task.cancel()
        return settled

    assert asyncio.run(scenario()) is False


def test_wall_clock_moves() -> None:
    clock = WallClock(time.time())

    async def nap() -> None:
        await clock.sleep(0.01)

    t0 = clock.now()
    asyncio.run(nap())
    assert clock.now() >= t0 + 0.009


def test_a_clock_nobody_sleeps_on_is_moved_forward_only() -> None:
    """The coordinator's manual clock: ``move_to`` sets the time, never back, and refuses a
    clock with sleepers (those must be woken in order by ``advance_to``)."""
    async def scenario() -> None:
        clock = ManualClock()
        clock.move_to(2.5)
        clock.move_to(1.0)
        assert clock.now() == 2.5
        task = clock.spawn(clock.sleep(1.0))
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="advance_to"):
            clock.move_to(9.0)
        assert await clock.advance_to(4.0)
        await task

    asyncio.run(scenario())


def test_a_wall_clock_reads_seconds_since_its_start() -> None:
    began = time.time() - 5.0
    clock = WallClock(began)
    assert clock.started_at == began and 5.0 <= clock.now() < 6.0
