"""Preemption: a surplus over the target beside a waiting user, stopped after the grace."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from psdsf_dist.admission.preemption import PREEMPT_GRACE_INTERVALS, preemption
from psdsf_dist.admission.server_admission import ServerAdmission
from psdsf_dist.model.scenario import Scenario


def test_a_surplus_beside_a_waiting_user_is_stopped_once_it_outlasts_the_grace() -> None:
    assert preemption(3, True, None, 10.0, 2.0) == (0, 10.0)  # first seen: the grace starts
    assert preemption(3, True, 10.0, 11.0, 2.0) == (0, 10.0)
    assert preemption(3, True, 10.0, 12.0, 2.0) == (3, 10.0)  # outlasted: the whole surplus
    # nobody waits, or no surplus: nothing, and the grace starts over
    assert preemption(3, False, 10.0, 12.0, 2.0) == (0, None)
    assert preemption(0, True, 10.0, 12.0, 2.0) == (0, None)
    assert preemption(-2, True, 10.0, 12.0, 2.0) == (0, None)


@given(st.lists(st.tuples(st.integers(-3, 5), st.booleans()), min_size=1, max_size=30))
def test_never_more_than_the_surplus_and_only_after_a_grace_beside_a_waiting_user(
        steps: list[tuple[int, bool]]) -> None:
    since: float | None = None
    streak_start: float | None = None
    for k, (surplus, wait) in enumerate(steps):
        now = float(k)
        count, since = preemption(surplus, wait, since, now, 3.0)
        streak_start = (streak_start if streak_start is not None else now) \
            if surplus > 0 and wait else None
        assert 0 <= count <= max(surplus, 0)
        assert (count > 0) == (streak_start is not None and now - streak_start >= 3.0)


SCENARIO = Scenario.from_dict({
    "resources": ["CPU"],
    "servers": [{"name": "a", "capacity": {"CPU": 4}}],
    "users": [{"name": "old", "demand": {"CPU": 1}}, {"name": "new", "demand": {"CPU": 1}}],
})


def test_the_server_names_the_surplus_of_a_user_over_its_share_while_another_waits() -> None:
    adm = ServerAdmission.start("a", SCENARIO.capacity[0], 1.0, 0.0, restarted=False)
    grace = PREEMPT_GRACE_INTERVALS * adm.interval
    # old alone: 4 running, allocated all 4, nobody waits
    assert adm.ask("old", 4, 0.0, np.array([4.0, 0.0]), SCENARIO).preempt == 0
    # new arrives: the allocation moves to 2 / 2, old still runs 4, new gets no room
    column = np.array([2.0, 2.0])
    now = adm.interval
    lease = adm.ask("new", 0, now, column, SCENARIO, queued=10)
    assert lease.slots == 0
    seen = []
    while now < 3 * grace:
        now += adm.interval
        seen.append((now, adm.ask("old", 4, now, column, SCENARIO).preempt))
        adm.ask("new", 0, now, column, SCENARIO, queued=10)
    first = next(t for t, n in seen if n)
    assert grace <= first - adm.interval <= grace + 2 * adm.interval
    assert {n for _, n in seen} == {0, 2}  # the surplus over old's target of 2
    # once new has its room (its lease reaches its target), nothing more is stopped
    now += adm.interval
    assert adm.ask("old", 2, now, column, SCENARIO).preempt == 0
