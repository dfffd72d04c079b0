"""Typed entries and growing a scenario by them: a server or user appended to a scenario gives
the arrays of the document with its entry appended, and is checked as a declared one is."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest

from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.entries import (
    NEW_SERVER_KEYS,
    PlacementRule,
    ServerSpec,
    UserSpec,
    server_spec,
    user_spec,
)
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.model.universe import universe
from psdsf_dist.protocol.membership import ChurnState

RESOURCES = ["cpu", "mem"]


def base() -> dict[str, Any]:
    return {
        "resources": RESOURCES,
        "external": {"bw": 10},
        "servers": [{"name": "A", "count": 2, "capacity": {"cpu": 4, "mem": 8},
                     "labels": {"gpu": True}},
                    {"name": "B", "capacity": {"cpu": 8, "mem": 4}}],
        "users": [{"name": "u1", "demand": {"cpu": 1, "mem": 2}},
                  {"name": "u2", "demand": {"cpu": 2}, "requires": {"gpu": True}, "weight": 2},
                  {"name": "u3", "demand": {"mem": 1}, "servers": ["A"], "gamma": {"A-2": 3},
                   "server_tasks": {"A-1": 2}},
                  {"name": "u4", "demand": {"cpu": 1}, "external_demand": {"bw": 1},
                   "max_tasks": 5}],
    }


NEW_SERVERS = [{"name": "C", "capacity": {"cpu": 2, "mem": 2}, "labels": {"gpu": True}},
               {"name": "D", "capacity": {"cpu": 1, "mem": 1}}]
NEW_USERS = [{"name": "n1", "demand": {"cpu": 1}, "servers": ["C", "A"], "gamma": {"C": 4},
              "task_groups": [{"servers": ["A", "C"], "tasks": 3}]},
             {"name": "n2", "demand": {"mem": 2}, "requires": {"gpu": True}, "weight": 3,
              "external_demand": {"bw": 2}}]


def same(a: Scenario, b: Scenario) -> None:
    assert (a.user_names, a.server_names, a.server_class) == (b.user_names, b.server_names,
                                                               b.server_class)
    assert [dict(x) for x in a.server_labels] == [dict(x) for x in b.server_labels]
    assert a.placement_rules == b.placement_rules
    for name in ("capacity", "demand", "weight", "placement", "gamma", "demand_gamma",
                 "max_tasks", "gamma_given", "external_demand"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    ga, gb = a.task_groups, b.task_groups
    assert (ga is None) == (gb is None)
    if ga is not None and gb is not None:
        for name in ("user", "tasks", "ptr", "server", "bound"):
            np.testing.assert_array_equal(getattr(ga, name), getattr(gb, name), err_msg=name)


def test_growing_by_typed_entries_is_building_the_document_with_them_appended() -> None:
    doc = base()
    grown = Scenario.from_dict(doc)
    grown = grown.with_servers([server_spec(s, "x", RESOURCES, NEW_SERVER_KEYS)
                                for s in NEW_SERVERS])
    grown = grown.with_users([user_spec(u, "x", RESOURCES, ["bw"]) for u in NEW_USERS])
    appended = copy.deepcopy(doc)
    appended["servers"] += NEW_SERVERS
    appended["users"] += NEW_USERS
    same(grown, Scenario.from_dict(appended))
    # the new server is open to the users without a `servers` list that its labels meet
    assert grown.placement[:4, grown.server_index["C"]].tolist() == [True, True, False, True]
    assert grown.placement[:4, grown.server_index["D"]].tolist() == [True, False, False, True]


def test_the_universe_of_a_file_holds_its_joiners_as_the_appended_document_does() -> None:
    doc = base()
    doc["events"] = [{"at": 1, "user_joins": NEW_USERS[0]},
                     {"at": 2, "server_joins": NEW_SERVERS[0]},
                     {"at": 3, "user_joins": NEW_USERS[1]},
                     {"at": 4, "server_joins": NEW_SERVERS[1]}]
    u = universe(Scenario.from_dict(doc))
    appended = copy.deepcopy(base())
    appended["servers"] += NEW_SERVERS
    appended["users"] += NEW_USERS
    same(u.scenario, Scenario.from_dict(appended))
    assert u.users_present.tolist() == [True] * 4 + [False] * 2
    assert u.servers_present.tolist() == [True] * 3 + [False] * 2


@pytest.mark.parametrize(("entry", "field", "words"), [
    ({"name": "n", "demand": {"cpu": 1}, "servers": ["nope"]}, "events[0].user_joins.servers[0]",
     "unknown server or class 'nope'"),
    ({"name": "n", "demand": {"cpu": 1}, "servers": ["B"], "gamma": {"A": 2}},
     "events[0].user_joins.gamma.A", "excluded by the user's placement"),
    ({"name": "n", "demand": {"cpu": 1}, "task_groups": [{"servers": ["B", "B"], "tasks": 1}]},
     "events[0].user_joins.task_groups[0].servers[1]", "listed twice"),
    ({"name": "n", "demand": {"cpu": 1}, "external_demand": {"net": 1}},
     "events[0].user_joins.external_demand.net", "unknown resource"),
])
def test_a_joining_user_is_checked_against_the_servers(entry: dict[str, Any], field: str,
                                                        words: str) -> None:
    doc = base()
    doc["events"] = [{"at": 1, "user_joins": entry}]
    with pytest.raises(ScenarioError) as info:
        Scenario.from_dict(doc, "c.yaml")
    assert info.value.field == field and words in info.value.message


def test_a_joining_server_named_as_a_class_is_refused() -> None:
    doc = base()
    doc["events"] = [{"at": 1, "server_joins": {"name": "A", "capacity": {"cpu": 1}}}]
    with pytest.raises(ScenarioError) as info:
        Scenario.from_dict(doc)
    assert info.value.field == "events[0].server_joins.name"
    assert "duplicate server name 'A'" in info.value.message


def test_a_user_joining_while_a_run_goes_names_the_event_field() -> None:
    state, _ = ChurnState.start(Scenario.from_dict(base()))
    with pytest.raises(ScenarioError) as info:
        state.apply(state.parse({"user_joins": {"name": "n", "demand": {"cpu": 1},
                                                "servers": ["nope"]}}), 1.0)
    assert info.value.field == "event.user_joins.servers[0]"
    with pytest.raises(ScenarioError, match=r"^event\.user_joins: users: .* span"):
        state.apply(state.parse({"user_joins": {"name": "n", "demand": {"cpu": 1e-12}}}), 1.0)
    assert state.epoch == 0 and state.full.num_users == 4  # refused joins leave no trace


def test_entries_are_typed_values() -> None:
    user = user_spec({"name": "n", "demand": {"cpu": 2}, "servers": ["A"],
                      "requires": {"gpu": True}}, "users[0]", RESOURCES)
    assert user == UserSpec("n", {"cpu": 2.0, "mem": 0.0},
                            placement=PlacementRule(("A",), {"gpu": "true"}))
    assert user.max_tasks == math.inf and user.weight == 1.0
    server = server_spec({"name": "S", "count": 2, "capacity": {"mem": 1}}, "servers[0]",
                         RESOURCES)
    assert server == ServerSpec("S", {"cpu": 0.0, "mem": 1.0}, {}, 2)
    assert server.members == ("S-1", "S-2")
    with pytest.raises(ScenarioError, match=r"^x\.count: unknown key"):
        server_spec({"name": "S", "count": 2, "capacity": {"mem": 1}}, "x", RESOURCES,
                    NEW_SERVER_KEYS)


def test_the_scenario_keeps_its_typed_events_and_flags() -> None:
    doc = base()
    doc["events"] = [{"at": 5, "user_leaves": "u2"}, {"at": 1, "set_weight": {"user": "u1",
                                                                             "weight": 2}}]
    s = Scenario.from_dict(doc)
    assert [e.describe() for e in s.events] == ["user u1 weight set to 2", "user u2 leaves"]
    assert not s.tenants
    assert Scenario.from_dict({**base(), "tenants": True}).tenants


def test_only_users_is_the_document_with_only_those_users() -> None:
    s = Scenario.from_dict(base())
    doc = base()
    doc["users"] = [doc["users"][3], doc["users"][2]]
    same(s.only_users([3, 2]), Scenario.from_dict(doc))
    assert s.only_users([0, 1]).task_groups is None
