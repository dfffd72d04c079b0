"""The manual clock: sleepers wake only when time is moved past their target."""

from __future__ import annotations

import asyncio

from psdsf_dist.runtime.clock import ManualClock, RealClock


def test_sleepers_wake_in_order_when_time_passes() -> None:
    async def scenario() -> list[tuple[str, float]]:
        clock = ManualClock()
        woke: list[tuple[str, float]] = []

        async def sleeper(name: str, seconds: float) -> None:
            await clock.sleep(seconds)
            woke.append((name, clock.now()))

        tasks = [asyncio.create_task(sleeper("late", 2.0)),
                 asyncio.create_task(sleeper("early", 1.0))]
        assert await clock.idle_after(2, timeout=5.0)
        assert woke == []
        await clock.advance_to(1.5)
        assert await clock.idle_after(1, timeout=5.0)
        assert woke == [("early", 1.5)]
        await clock.advance_to(2.0)
        await asyncio.gather(*tasks)
        return woke

    assert asyncio.run(scenario()) == [("early", 1.5), ("late", 2.0)]


def test_idle_after_times_out_when_nobody_sleeps() -> None:
    async def scenario() -> bool:
        return await ManualClock().idle_after(1, timeout=0.05)

    assert asyncio.run(scenario()) is False


def test_real_clock_moves() -> None:
    clock = RealClock()

    async def nap() -> None:
        await clock.sleep(0.01)

    t0 = clock.now()
    asyncio.run(nap())
    assert clock.now() >= t0 + 0.009
