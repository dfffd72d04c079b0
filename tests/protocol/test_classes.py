"""Tests of class detection, slots and per-class counts."""

from __future__ import annotations

import numpy as np

from psdsf_dist.model.scenario import Scenario
from psdsf_dist.protocol.classes import MAX_SLOTS, server_classes, slot_of


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
