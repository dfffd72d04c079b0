"""Per-server task counts and task groups in scenario files: arrays, classes, and bad input."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.scenario import Scenario, load_scenario


def base() -> dict[str, Any]:
    return {
        "resources": ["slots"],
        "servers": [
            {"name": "a", "capacity": {"slots": 4}},
            {"name": "rack", "count": 3, "capacity": {"slots": 2}},
        ],
        "users": [
            {"name": "j1", "demand": {"slots": 1}, "server_tasks": {"a": 2, "rack-2": 5}},
            {"name": "j2", "demand": {"slots": 1},
             "task_groups": [{"servers": ["a", "rack-1"], "tasks": 7},
                             {"servers": ["rack"], "tasks": 3}]},
            {"name": "free", "demand": {"slots": 1}},
        ],
    }


def test_counts_and_groups_become_groups_of_bound_users() -> None:
    s = Scenario.from_dict(base())
    g = s.task_groups
    assert g is not None
    assert g.bound.tolist() == [True, True, False]
    assert g.user.tolist() == [0, 0, 1, 1]
    assert g.tasks.tolist() == [2, 5, 7, 3]
    names = [[s.server_names[i] for i in g.servers_of(k)] for k in range(g.num_groups)]
    assert names == [["a"], ["rack-2"], ["a", "rack-1"], ["rack-1", "rack-2", "rack-3"]]
    np.testing.assert_array_equal(g.per_server_tasks(s.num_servers)[0], [2, 0, 5, 0])
    assert not g.single_server()
    first = g.first_server_only()
    assert first.single_server() and first.server.tolist() == [0, 2, 0, 1]


def test_a_class_gives_each_member_its_count_and_a_member_overrides_it() -> None:
    doc = base()
    doc["users"][0]["server_tasks"] = {"rack-3": 1, "rack": 4}
    g = Scenario.from_dict(doc).task_groups
    assert g is not None
    np.testing.assert_array_equal(g.per_server_tasks(4)[0], [0, 4, 4, 1])


def test_scenarios_without_the_fields_have_no_groups(fig1: Scenario) -> None:
    assert fig1.task_groups is None
    doc = base()
    for u in doc["users"]:
        u.pop("server_tasks", None)
        u.pop("task_groups", None)
    assert Scenario.from_dict(doc).task_groups is None


def test_empty_declarations_bind_a_user_to_no_task() -> None:
    doc = base()
    doc["users"][2]["task_groups"] = []
    g = Scenario.from_dict(doc).task_groups
    assert g is not None and g.bound[2] and not len(g.of_user(2))


def test_groups_survive_replace_users() -> None:
    s = Scenario.from_dict(base())
    liar = s.replace_users(demand=s.demand * 2)
    assert liar.task_groups is s.task_groups


def test_a_joining_user_may_declare_tasks() -> None:
    doc = base()
    doc["events"] = [{"at": 5, "user_joins": {"name": "late", "demand": {"slots": 1},
                                              "server_tasks": {"nowhere": 1}}}]
    with pytest.raises(ScenarioError, match=r"events\[0\]\.user_joins\.server_tasks\.nowhere: "
                                            "unknown server or class 'nowhere'"):
        Scenario.from_dict(doc)


BAD = [
    (lambda d: d["users"][0].update(server_tasks=[1, 2]), "users[0].server_tasks",
     "must be a mapping, got a list"),
    (lambda d: d["users"][0].update(server_tasks={"b": 1}), "users[0].server_tasks.b",
     "unknown server or class 'b'"),
    (lambda d: d["users"][0].update(server_tasks={"a": -1}), "users[0].server_tasks.a",
     "must be >= 0, got -1"),
    (lambda d: d["users"][0].update(server_tasks={"a": float("inf")}), "users[0].server_tasks.a",
     "must be finite"),
    (lambda d: d["users"][0].update(server_tasks={"a": "3"}), "users[0].server_tasks.a",
     "must be a number"),
    (lambda d: d["users"][0].update(servers=["rack"]), "users[0].server_tasks.a",
     "server is excluded by the user's placement"),
    (lambda d: d["users"][1].update(task_groups={"servers": ["a"], "tasks": 1}),
     "users[1].task_groups", "must be a list, got a mapping"),
    (lambda d: d["users"][1]["task_groups"].append({"servers": ["a"]}),
     "users[1].task_groups[2].tasks", "missing"),
    (lambda d: d["users"][1]["task_groups"].append({"tasks": 1}),
     "users[1].task_groups[2].servers", "missing"),
    (lambda d: d["users"][1]["task_groups"].append({"servers": ["a"], "tasks": 1, "site": 2}),
     "users[1].task_groups[2].site", "unknown key (allowed: servers, tasks)"),
    (lambda d: d["users"][1]["task_groups"].append({"servers": [], "tasks": 1}),
     "users[1].task_groups[2].servers", "empty"),
    (lambda d: d["users"][1]["task_groups"].append({"servers": ["a", "x"], "tasks": 1}),
     "users[1].task_groups[2].servers[1]", "unknown server or class 'x'"),
    (lambda d: d["users"][1]["task_groups"].append({"servers": ["rack", "rack-2"], "tasks": 1}),
     "users[1].task_groups[2].servers[1]", "server 'rack-2' is listed twice in the group"),
    (lambda d: d["users"][1]["task_groups"].append({"servers": ["a"], "tasks": True}),
     "users[1].task_groups[2].tasks", "must be a number"),
    (lambda d: d["users"][1]["task_groups"].append("a"), "users[1].task_groups[2]",
     "must be a mapping, got a string"),
    (lambda d: d["users"][1].update(requires={"zone": "x"}), "users[1].task_groups[0].servers[0]",
     "server is excluded by the user's placement"),
]


@pytest.mark.parametrize(("mutate", "fld", "words"), BAD)
def test_bad_task_fields_name_the_field(mutate: Any, fld: str, words: str) -> None:
    doc = copy.deepcopy(base())
    mutate(doc)
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict(doc)
    assert err.value.field == fld
    assert words in err.value.message


def test_file_error_is_one_line_naming_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "resources: [slots]\nservers: [{name: s, capacity: {slots: 1}}]\n"
        "users:\n  - {name: j, demand: {slots: 1}, task_groups: [{servers: [t], tasks: 1}]}\n",
        encoding="utf-8",
    )
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value) == (f"{path}: users[0].task_groups[0].servers[0]: unknown server or "
                              "class 't'")
    assert "\n" not in str(err.value)


def test_memberships_count_against_the_cell_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSDSF_LIMITS", "cells=100")
    doc = {"resources": ["slots"], "servers": [{"name": "r", "count": 60,
                                                "capacity": {"slots": 1}}],
           "users": [{"name": "j", "demand": {"slots": 1},
                      "task_groups": [{"servers": ["r"], "tasks": 1},
                                      {"servers": ["r"], "tasks": 1}]}]}
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict(doc)
    assert err.value.field == "users[0].task_groups[1].servers"
