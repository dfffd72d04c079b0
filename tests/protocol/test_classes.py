"""Tests of class detection, slots and per-class counts."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.model.scenario import Scenario
from psdsf_dist.protocol.classes import (
    MAX_SLOTS,
    previous_class,
    server_classes,
    slot_knowledge,
    slot_of,
)

FloatArray = npt.NDArray[np.float64]


def cluster(servers: list[dict[str, object]], users: list[dict[str, object]]) -> Scenario:
    return Scenario.from_dict({"resources": ["cpu", "mem"], "servers": servers,
                               "users": users})


USERS: list[dict[str, object]] = [
    {"name": "a", "demand": {"cpu": 0.1, "mem": 0.1}},
    {"name": "b", "demand": {"cpu": 0.2, "mem": 0.05}, "requires": {"big": True}},
]


def test_identical_servers_form_a_class_and_any_difference_splits_it() -> None:
    sc = cluster([
        {"name": "s", "count": 3, "capacity": {"cpu": 1, "mem": 1}, "labels": {"big": True}},
        # same capacity, but user b is not eligible here: another class
        {"name": "t", "count": 2, "capacity": {"cpu": 1, "mem": 1}, "labels": {"big": False}},
        # another capacity: another class
        {"name": "u", "capacity": {"cpu": 2, "mem": 1}, "labels": {"big": True}},
    ], USERS)
    cm = server_classes(sc)
    assert cm.member_class.tolist() == [0, 0, 0, 1, 1, 2]
    assert cm.count.tolist() == [3, 2, 1]
    assert cm.num_classes == 3
    assert cm.members(1).tolist() == [0, 1, 2]


def test_an_absent_server_is_alone_and_leaves_its_class_one_member_short() -> None:
    sc = cluster([{"name": "s", "count": 4, "capacity": {"cpu": 1, "mem": 1}}], USERS[:1])
    up = np.array([True, False, True, True])
    cm = server_classes(sc, up)
    assert cm.member_class[1] != cm.member_class[0]
    assert cm.count[cm.member_class[0]] == 3
    assert cm.count[cm.member_class[1]] == 0
    assert cm.num_classes == 1
    assert cm.members(0).tolist() == [0, 2, 3]


def test_classes_take_ordered_slots_of_the_period_and_many_classes_take_none() -> None:
    sc = cluster([{"name": "s", "count": 2, "capacity": {"cpu": 1, "mem": 1}},
                  {"name": "t", "capacity": {"cpu": 2, "mem": 1}},
                  {"name": "u", "count": 2, "capacity": {"cpu": 3, "mem": 1}}], USERS[:1])
    cm = server_classes(sc)
    assert [slot_of(cm, i) for i in range(5)] == [0.0, 0.0, 1 / 3, 2 / 3, 2 / 3]
    assert slot_of(cm, 0, max_slots=2) is None
    many = cluster([{"name": f"s{j}", "capacity": {"cpu": 1 + j, "mem": 1}}
                    for j in range(MAX_SLOTS + 1)], USERS[:1])
    assert slot_of(server_classes(many), 0) is None


def test_a_member_pulls_from_the_class_whose_slot_comes_just_before_its_own() -> None:
    sc = cluster([{"name": "s", "count": 2, "capacity": {"cpu": 1, "mem": 1}},
                  {"name": "t", "capacity": {"cpu": 2, "mem": 1}},
                  {"name": "u", "count": 2, "capacity": {"cpu": 3, "mem": 1}}], USERS[:1])
    cm = server_classes(sc)
    prev = [previous_class(cm, i) for i in range(5)]
    assert prev == [cm.member_class[3], cm.member_class[3], cm.member_class[0],
                    cm.member_class[2], cm.member_class[2]]  # the first: the period's last
    down = server_classes(sc, np.array([True, True, False, True, True]))
    assert previous_class(down, 3) == down.member_class[0]  # an absent class has no slot
    assert previous_class(down, 2) is None
    alone = cluster([{"name": "s", "count": 3, "capacity": {"cpu": 1, "mem": 1}}], USERS[:1])
    assert previous_class(server_classes(alone), 0) is None  # one class: nobody to pull from


THREE = cluster([{"name": "s", "count": 3, "capacity": {"cpu": 1, "mem": 1}},
                 {"name": "t", "count": 4, "capacity": {"cpu": 2, "mem": 1}},
                 {"name": "u", "capacity": {"cpu": 3, "mem": 1}}],
                [USERS[0], {"name": "c", "demand": {"cpu": 0.3, "mem": 0.1}}])
"""Classes s (servers 0-2, slot 0), t (3-6, slot 1/3) and u (7, slot 2/3); two users."""


def heard_in_slots(columns: FloatArray, heard: list[float]) -> list[tuple[int, FloatArray, float]]:
    return [(j, columns[:, j], heard[j]) for j in range(columns.shape[1])]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 5), min_size=6, max_size=6), st.integers(0, 7),
       st.integers(0, 20))
def test_classes_that_hold_one_column_per_class_are_counted_as_they_are(
    values: list[float], server: int, period: int,
) -> None:
    """A class-constant allocation (every resting PS-DSF allocation the slotted rule reaches),
    heard at the classes' own slots: the totals and the class's sum are the plain sums, so
    the rule's fixed points are unchanged."""
    cm = server_classes(THREE)
    per_class = np.array(values).reshape(2, 3)
    X = per_class[:, cm.member_class]
    phase = [slot_of(cm, j) or 0.0 for j in range(8)]
    now = period + phase[server]
    heard = [period + p - (1.0 if p >= phase[server] else 0.0) for p in phase]
    known = slot_knowledge(cm, server, X[:, server], heard_in_slots(X, heard), X.sum(axis=1),
                           now, 1.0)
    assert known is not None
    klass, totals = known
    np.testing.assert_allclose(totals, X.sum(axis=1), rtol=1e-12, atol=1e-12)
    assert klass.size == cm.count[cm.member_class[server]]
    np.testing.assert_allclose(klass.column_sum, X[:, cm.members(server)].sum(axis=1),
                               rtol=1e-12, atol=1e-12)


def test_a_class_heard_from_one_member_of_its_latest_slot_counts_at_that_column() -> None:
    """Gossip has carried class t's new column (slot 1/3 of period 5) from one member only:
    the totals count all four members at it, and the members of t still heard at their old
    column (slot 1/3 of period 4) or not at all do not drag it back."""
    cm = server_classes(THREE)
    X = np.zeros((2, 8))
    X[:, 0:3] = [[1.0], [0.0]]  # class s, the one acting at 6.0
    X[:, 3] = [4.0, 1.0]  # t: the fresh member
    X[:, 4:6] = [[2.0], [3.0]]  # t: heard at the previous slot
    X[:, 6] = 0.0  # t: never heard
    X[:, 7] = [0.5, 0.5]  # u
    heard = [5.0, 5.0, 5.0, 5.34, 4.34, 4.34, math.nan, 5.67]
    known = slot_knowledge(cm, 0, X[:, 0], heard_in_slots(X, heard), X.sum(axis=1), 6.0, 1.0)
    assert known is not None
    klass, totals = known
    np.testing.assert_allclose(totals, [3 * 1.0 + 4 * 4.0 + 0.5, 4 * 1.0 + 0.5])
    assert klass.size == 3
    np.testing.assert_allclose(klass.column_sum, [3.0, 0.0])
    # the mean of the members heard in the latest slot, when several were
    heard[4] = 5.34
    known = slot_knowledge(cm, 0, X[:, 0], heard_in_slots(X, heard), X.sum(axis=1), 6.0, 1.0)
    assert known is not None
    np.testing.assert_allclose(known[1], [3.0 + 4 * 3.0 + 0.5, 4 * 2.0 + 0.5])


def test_a_class_acting_at_the_same_phase_means_the_classes_are_not_taking_turns() -> None:
    """Class u heard at phase 0.05 while class s acts at phase 0 (within half a slot, 1/6):
    no class knowledge (the rule then takes its step without a slot).  Nothing heard of the
    others yet: their plain sums (zero columns) stand."""
    cm = server_classes(THREE)
    X = np.ones((2, 8))
    heard = [5.0, 5.0, 5.0, 5.34, 5.34, 5.34, 5.34, 5.05]
    assert slot_knowledge(cm, 0, X[:, 0], heard_in_slots(X, heard), X.sum(axis=1),
                          6.0, 1.0) is None
    heard[7] = 5.2  # beyond half a slot: in turn
    assert slot_knowledge(cm, 0, X[:, 0], heard_in_slots(X, heard), X.sum(axis=1),
                          6.0, 1.0) is not None
    unheard = [math.nan] * 8
    known = slot_knowledge(cm, 0, X[:, 0], heard_in_slots(X, unheard), X.sum(axis=1), 0.0, 1.0)
    assert known is not None
    np.testing.assert_allclose(known[1], X.sum(axis=1))
