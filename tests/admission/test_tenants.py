"""The tenant book: which churn events a queue's backlog report calls for."""

from __future__ import annotations

import math

import pytest

from psdsf_dist.admission.tenants import TenantBook, UserInTable, cap_needs_update
from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.entries import UserSpec
from psdsf_dist.model.events import SetDemand, SetMaxTasks, SetWeight, UserJoins, UserLeaves

SHAPE = {"CPU": 1.0, "memory": 2.0}
RES = ("CPU", "memory")


def test_a_new_user_joins_with_its_shape_weight_and_backlog() -> None:
    book = TenantBook()
    assert book.report("alice", SHAPE, 2.0, 40, 0.0, UserInTable(known=False), RES) == [
        UserJoins(0.0, -1, "alice", UserSpec("alice", SHAPE, weight=2.0, max_tasks=40))]
    joins = book.report("bob", SHAPE, None, 1, 0.0, UserInTable(known=False), RES)[0]
    assert isinstance(joins, UserJoins) and joins.spec is not None
    assert joins.spec.weight == 1.0


def test_a_declared_absent_user_gets_its_shape_then_joins() -> None:
    table = UserInTable(known=True, present=False, demand={"CPU": 4.0}, weight=3.0)
    assert TenantBook().report("alice", SHAPE, None, 5, 0.0, table, RES) == [
        SetDemand(0.0, -1, "alice", SHAPE),
        SetMaxTasks(0.0, -1, "alice", 5),
        UserJoins(0.0, -1, "alice", None),
    ]


def test_a_present_user_changes_only_what_changed() -> None:
    table = UserInTable(known=True, present=True, demand=dict(SHAPE), weight=1.0,
                        max_tasks=100, allocated=10.0)
    book = TenantBook()
    assert book.report("alice", SHAPE, None, 95, 0.0, table, RES) == []  # drift above share
    assert book.report("alice", SHAPE, 2.0, 100, 0.0, table, RES) == [
        SetWeight(0.0, -1, "alice", 2.0)]
    assert book.report("alice", SHAPE, None, 15, 0.0, table, RES) == [
        SetMaxTasks(0.0, -1, "alice", 15)]  # about to bind


def test_a_report_the_scenario_cannot_take_is_refused_like_a_scenario_file() -> None:
    table = UserInTable(known=True, present=True, demand=dict(SHAPE), weight=1.0)
    with pytest.raises(ScenarioError, match="weight"):
        TenantBook().report("alice", SHAPE, math.inf, 5, 0.0, table, RES)
    with pytest.raises(ScenarioError, match="gpu"):
        TenantBook().report("alice", {"gpu": 1.0}, None, 5, 0.0, table, RES)
    with pytest.raises(ScenarioError, match="all zero"):
        TenantBook().report("alice", {"CPU": 0.0}, None, 5, 0.0, table, RES)


def test_an_empty_backlog_leaves_and_a_silent_queue_expires() -> None:
    book = TenantBook()
    present = UserInTable(known=True, present=True, demand=dict(SHAPE), weight=1.0)
    assert book.report("alice", SHAPE, None, 0, 0.0, present, RES) == [
        UserLeaves(0.0, -1, "alice")]
    assert book.report("alice", SHAPE, None, 0, 1.0,
                       UserInTable(known=True, present=False), RES) == []
    book.report("bob", SHAPE, None, 3, 1.0, present, RES)
    assert book.expired(5.5, 1.0, {"bob": True}) == []
    assert book.expired(6.5, 1.0, {"bob": True, "alice": False}) == [UserLeaves(0.0, -1, "bob")]
    assert book.tenants == {}


def test_a_silent_queue_ray_reports_alive_is_kept_longer() -> None:
    book = TenantBook()
    present = UserInTable(known=True, present=True, demand=dict(SHAPE), weight=1.0)
    book.report("bob", SHAPE, None, 3, 0.0, present, RES)
    assert book.silent(6.0, 1.0) == ["bob"]
    assert book.expired(6.0, 1.0, {"bob": True}, alive={"bob"}) == []  # slow, not gone
    assert book.expired(59.0, 1.0, {"bob": True}, alive={"bob"}) == []
    assert book.expired(61.0, 1.0, {"bob": True}, alive={"bob"}) == [UserLeaves(0.0, -1, "bob")]


def test_cap_updates() -> None:
    assert not cap_needs_update(10, 10, 3.0)
    assert cap_needs_update(10, 9, 5.0)  # binding: 9 <= 2 x 5
    assert not cap_needs_update(1000, 900, 5.0)  # far above, changed by 10 %
    assert cap_needs_update(1000, 700, 5.0)  # changed by 30 %
    assert cap_needs_update(math.inf, 700, 5.0)
