"""The client's delegated slots without Ray: a task only into a free, valid slot; slots go
back when idle, revoked or expired; every launch and end reported once."""

from __future__ import annotations

from psdsf_dist.admission.direct_slots import (
    EXCHANGE_TIMEOUT_INTERVALS,
    EXCHANGE_TIMEOUT_MIN_S,
    RETURN_IDLE_INTERVALS,
    DirectOutcome,
    DirectReply,
    DirectSlots,
    SlotGrant,
    exchange_timeout,
)

INTERVAL = 0.25


def holding(*grants: SlotGrant, now: float = 0.0) -> DirectSlots:
    d = DirectSlots(INTERVAL)
    d.granted(DirectReply(grants, (), None), now)
    return d


def test_a_task_goes_only_into_a_free_unexpired_unrevoked_slot() -> None:
    d = holding(SlotGrant(1, "a", "n-a", 10.0), SlotGrant(2, "b", "n-b", 5.0))
    assert d.take(6.0) == SlotGrant(1, "a", "n-a", 10.0)  # 2 has expired
    assert d.take(6.0) is None  # 1 is busy
    d.ended(1, DirectOutcome.COMPLETED, 6.5)
    d.granted(DirectReply((), (1,), None), 6.6)
    assert d.take(6.7) is None  # revoked
    d.granted(DirectReply((SlotGrant(3, "a", "n-a", 10.0),), (), "gone"), 6.8)
    assert d.take(6.9) is None  # the queue is gone


def test_slots_go_back_when_idle_revoked_or_expired_never_while_busy() -> None:
    d = holding(SlotGrant(1, "a", "n-a", 10.0), SlotGrant(2, "a", "n-a", 10.0),
                SlotGrant(3, "b", "n-b", 0.15))
    assert d.take(0.0) is not None  # slot 1 busy
    d.granted(DirectReply((), (1,), None), 0.0)  # revoked while busy: kept until free
    report = d.report(0.1)
    assert report.returned == ()
    assert report.launched == ((1, 0.0),) and report.ages == ((1, 0.1),)
    assert report.wanted == 2  # the slots it holds and may use (1 is revoked)
    assert d.report(0.15).returned == (3,)  # expired
    idle = RETURN_IDLE_INTERVALS * INTERVAL
    assert d.report(idle + 0.01).returned == (2,)  # idle
    d.ended(1, DirectOutcome.CANCELLED, 3.1)
    report = d.report(3.2)
    assert report.returned == (1,) and report.ended == ((1, DirectOutcome.CANCELLED, 3.1),)
    assert d.slots == {} and d.idle()
    assert d.report(3.3).ended == ()  # reported once


def test_demand_counts_waiting_running_and_turned_away_tasks() -> None:
    d = holding(SlotGrant(1, "a", "n-a", 10.0))
    d.queued = 5
    assert d.take(0.0) is not None
    d.turned_away = 2
    assert d.wanted() == 5 + 1 + 2
    report = d.report(0.0)
    assert report.wanted == 8 and report.queued == 5
    assert d.turned_away == 0  # counted once
    d.withdrawn(5)
    d.queued = 0
    assert d.report(0.1).withdrawn == 5


def test_a_late_reply_does_not_give_back_a_slot_returned_since() -> None:
    d = holding(SlotGrant(1, "a", "n-a", 10.0))
    late = DirectReply((SlotGrant(1, "a", "n-a", 10.0),), (), None)  # sent before the return
    assert d.report(1.0).returned == (1,)  # idle
    d.granted(late, 1.1)
    assert d.slots == {} and d.take(1.2) is None


def test_a_chunk_counts_as_one_task_per_call_that_ran() -> None:
    d = holding(SlotGrant(1, "a", "n-a", 10.0))
    assert d.take(1.0, 0.5) is not None
    assert d.take(1.0) is None  # one Ray task in the slot
    assert d.report(1.1).launched == ((1, 0.5),)  # its first call: launched
    d.ended(1, DirectOutcome.COMPLETED, 1.3, more=[0.2, 0.1])  # two more calls ran in it
    report = d.report(1.4)
    assert report.launched == ((1, 0.2), (1, 0.1))
    assert len(report.ended) == 3
    assert all(slot == 1 and outcome is DirectOutcome.COMPLETED and abs(seconds - 0.1) < 1e-9
               for slot, outcome, seconds in report.ended)  # a third of the chunk's time each
    assert d.take(1.5) is not None  # one call again
    d.ended(1, DirectOutcome.FAILED, 1.6)
    assert len(d.report(1.7).ended) == 1


def test_an_exchange_gets_forty_intervals_but_never_less_than_the_floor() -> None:
    """Long lease intervals give 40 of them; short ones (the tests' T = 0.5 s: 0.125 s) give
    the floor, so a queue silent for a few seconds on a loaded machine is not given up."""
    assert exchange_timeout(2.0) == 80.0
    assert exchange_timeout(0.125) == EXCHANGE_TIMEOUT_MIN_S == 30.0


def test_a_returned_slot_is_never_taken_again_and_forgotten_once_no_reply_can_name_it() -> None:
    d = holding(SlotGrant(1, "a", "n-a", 10.0))
    assert d.report(RETURN_IDLE_INTERVALS * INTERVAL + 0.01).returned == (1,)  # idle
    d.granted(DirectReply((SlotGrant(1, "a", "n-a", 10.0),), (), None), 1.0)  # a late reply
    assert d.slots == {}
    late = exchange_timeout(INTERVAL) + 1.0
    assert exchange_timeout(INTERVAL) >= EXCHANGE_TIMEOUT_INTERVALS * INTERVAL
    d.report(late)
    assert d.given_back == {}  # no exchange is answered that late: nothing to remember
