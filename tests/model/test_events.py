"""Scenario events: parsing, the universe they imply, and bad input (one line, exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from psdsf_dist.cli.main import main
from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.events import (
    ServerFails,
    ServerJoins,
    SetDemand,
    SetMaxTasks,
    SetWeight,
    UserJoins,
    UserLeaves,
)
from psdsf_dist.model.scenario import Scenario, load_scenario
from psdsf_dist.model.universe import universe
from tests.conftest import EXAMPLES


def _doc(events: list[Any]) -> dict[str, Any]:
    return {
        "resources": ["cpu", "mem"],
        "servers": [{"name": "s", "count": 2, "capacity": {"cpu": 1, "mem": 1}},
                    {"name": "t1", "capacity": {"cpu": 2, "mem": 1}, "labels": {"gpu": True}}],
        "users": [{"name": "u1", "demand": {"cpu": 0.1, "mem": 0.1}},
                  {"name": "u2", "demand": {"cpu": 0.2}, "weight": 2},
                  {"name": "u3", "demand": {"mem": 0.1}, "requires": {"gpu": True}}],
        "events": events,
    }


def test_paper_cluster_churn() -> None:
    sc = load_scenario(EXAMPLES / "paper_cluster.yaml")
    u = universe(sc)
    assert u.events == (UserLeaves(100.0, 0, "u4"), UserJoins(250.0, 1, "u4", None))
    assert u.users_present.all()
    assert u.scenario is sc


def test_every_kind_parses_and_the_universe_grows() -> None:
    sc = Scenario.from_dict(_doc([
        {"at": 70, "set_weight": {"user": "u1", "weight": 3}},
        {"at": 30, "server_fails": "s-2"},
        {"at": 40, "server_joins": {"name": "s9", "capacity": {"cpu": 1, "mem": 0.5},
                                    "labels": {"gpu": True}}},
        {"at": 45, "server_joins": {"name": "s-2"}},
        {"at": 60, "set_demand": {"user": "u1", "demand": {"cpu": 0.3}}},
        {"at": 10, "user_joins": {"name": "u9", "demand": {"cpu": 0.5}, "weight": 4}},
        {"at": 20, "user_leaves": "u9"},
        {"at": 5, "user_joins": "u3"},
        {"at": 80, "set_max_tasks": {"user": "u2", "max_tasks": 12}},
        {"at": 90, "set_max_tasks": {"user": "u2", "max_tasks": float("inf")}},
    ]))
    u = universe(sc)
    kinds = [type(e) for e in u.events]
    assert kinds == [UserJoins, UserJoins, UserLeaves, ServerFails, ServerJoins, ServerJoins,
                     SetDemand, SetWeight, SetMaxTasks, SetMaxTasks]
    assert u.events[8] == SetMaxTasks(80.0, 8, "u2", 12.0)
    assert u.events[9].describe() == "user u2 max_tasks set to inf"
    assert [e.at for e in u.events] == sorted(e.at for e in u.events)
    assert u.scenario.user_names == ("u1", "u2", "u3", "u9")
    assert u.scenario.server_names == ("s-1", "s-2", "t1", "s9")
    # u3 is declared but first seen joining: absent until then; u9 is new
    assert u.users_present.tolist() == [True, True, False, False]
    assert u.servers_present.tolist() == [True, True, True, False]
    # the new server's labels open it to u3 (requires gpu); s-1 is closed to u3
    assert u.scenario.gamma[:, 3].tolist() == pytest.approx([5.0, 5.0, 5.0, 2.0])
    assert u.scenario.gamma[2, 0] == 0
    assert u.scenario.weight[3] == 4
    sd = u.events[6]
    assert isinstance(sd, SetDemand) and sd.demand == {"cpu": 0.3, "mem": 0.0}


BAD = [
    ({"at": -1, "user_leaves": "u1"}, "events[0].at", "must be >= 0"),
    ({"user_leaves": "u1"}, "events[0].at", "missing"),
    ({"at": 1}, "events[0]", "no event"),
    ({"at": 1, "user_leaves": "u1", "user_joins": "u1"}, "events[0]", "one event per entry"),
    ({"at": 1, "user_leavs": "u1"}, "events[0].user_leavs", "unknown key"),
    ({"at": 1, "user_leaves": "nobody"}, "events[0].user_leaves", "unknown user"),
    ({"at": 1, "server_fails": "s"}, "events[0].server_fails", "unknown server"),
    ({"at": 1, "server_joins": {"name": "s-1"}}, "events[0].server_joins.name", "already up"),
    ({"at": 1, "server_joins": {"name": "n", "capacity": {"gpu": 1}}},
     "events[0].server_joins.capacity.gpu", "unknown resource"),
    ({"at": 1, "server_joins": {"name": "n"}}, "events[0].server_joins.capacity", "missing"),
    ({"at": 1, "server_joins": {"name": "n", "capacity": {}, "count": 2}},
     "events[0].server_joins.count", "unknown key"),
    ({"at": 1, "set_demand": {"user": "u1", "demand": {"cpu": 0}}},
     "events[0].set_demand.demand", "all zero"),
    ({"at": 1, "set_demand": {"user": "u1", "demand": {"gpu": 1}}},
     "events[0].set_demand.demand.gpu", "unknown resource"),
    ({"at": 1, "set_weight": {"user": "u1", "weight": 0}}, "events[0].set_weight.weight",
     "must be > 0"),
    ({"at": 1, "set_weight": {"user": "zz", "weight": 1}}, "events[0].set_weight.user",
     "unknown user"),
    ({"at": 1, "set_weight": {"user": "u1", "weight": 1, "x": 1}}, "events[0].set_weight.x",
     "unknown key"),
    ({"at": 1, "user_joins": {"name": "u7", "demand": {"cpu": 1}, "weight": -2}},
     "events[0].user_joins.weight", "must be >= 0"),
    ({"at": 1, "user_joins": {"name": "u7", "demand": {"cpu": 1}, "servers": ["nope"]}},
     "events[0].user_joins.servers[0]", "unknown server"),
    ({"at": 1, "user_joins": {"name": "u1", "demand": {"cpu": 1}}},
     "events[0].user_joins.name", "already exists"),
    ("leave u1", "events[0]", "must be a mapping"),
    ({"at": 1, "set_max_tasks": {"user": "u1", "max_tasks": -1}},
     "events[0].set_max_tasks.max_tasks", "must be >= 0"),
    ({"at": 1, "set_max_tasks": {"user": "u1"}}, "events[0].set_max_tasks.max_tasks", "missing"),
    ({"at": 1, "set_max_tasks": {"user": "nobody", "max_tasks": 1}},
     "events[0].set_max_tasks.user", "unknown user"),
]


@pytest.mark.parametrize(("event", "field", "message"), BAD)
def test_bad_event_is_a_scenario_error_naming_the_field(event: Any, field: str,
                                                        message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        Scenario.from_dict(_doc([event]), "c.yaml")
    assert info.value.field == field
    assert message in info.value.message


def test_state_is_checked_in_time_order() -> None:
    # file order says join before leave, but time order is leave (t=1) then join (t=2): fine
    Scenario.from_dict(_doc([{"at": 2, "user_joins": "u1"}, {"at": 1, "user_leaves": "u1"}]))
    with pytest.raises(ScenarioError) as info:
        Scenario.from_dict(_doc([{"at": 1, "user_leaves": "u1"}, {"at": 2, "user_leaves": "u1"}]))
    assert info.value.field == "events[1].user_leaves"
    with pytest.raises(ScenarioError) as info:
        Scenario.from_dict(_doc([{"at": 1, "user_joins": "u1"}, {"at": 2, "user_joins": "u1"}]))
    assert info.value.field == "events[1].user_joins"
    assert "already present" in info.value.message


def test_events_must_be_a_list() -> None:
    doc = _doc([])
    doc["events"] = {"at": 1}
    with pytest.raises(ScenarioError) as info:
        Scenario.from_dict(doc)
    assert info.value.field == "events"


@pytest.mark.parametrize(
    ("event", "field"),
    [(e, f.replace("events[0]", "events[1]")) for e, f, _ in BAD
     if f in ("events[0].at", "events[0].user_leaves", "events[0].user_joins.weight")],
)
def test_bad_events_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    event: Any, field: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_doc([{"at": 0, "set_weight": {"user": "u1", "weight": 2}},
                                         event])))
    out_file = tmp_path / "out.json"
    status = main(["simulate", str(path), "--rounds", "2", "--json", "-o", str(out_file)])
    err = capsys.readouterr().err
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert f"{path}: {field}:" in lines[0]
    assert "Traceback" not in err
    assert not out_file.exists()


def test_a_declared_user_joining_at_0_is_refused() -> None:
    # it is present from the start: the join would be reported but change nothing
    with pytest.raises(ScenarioError, match="present from the start"):
        Scenario.from_dict(_doc([{"at": 0, "user_joins": "u1"}]))
    Scenario.from_dict(_doc([{"at": 1, "user_joins": "u1"}]))  # absent until 1: a change
