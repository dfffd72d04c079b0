"""Churn state: presence, tables, growth with new users and servers, resuming from a table."""

from __future__ import annotations

import numpy as np
import pytest

from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.events import ServerFails
from psdsf_dist.model.scenario import Scenario, load_scenario
from psdsf_dist.protocol.membership import ChurnState
from tests.conftest import EXAMPLES


def paper() -> Scenario:
    return load_scenario(EXAMPLES / "paper_cluster.yaml")


def test_start_gives_presence_and_typed_events() -> None:
    state, events = ChurnState.start(paper())
    assert state.epoch == 0
    assert state.users_present.all() and state.servers_present.all()
    assert [e.describe() for e in events] == ["user u4 leaves", "user u4 joins"]
    assert len(state.present_servers()) == 120


def test_leave_masks_the_user_everywhere_and_join_restores_it() -> None:
    state, events = ChurnState.start(paper())
    before = state.current().gamma.copy()
    state.apply(events[0], 100.0, from_scenario=True)
    t = state.table()
    assert t.epoch == 1 and t.scenario_events_applied == 1
    assert not t.scenario.eligible[3].any()
    assert np.array_equal(t.scenario.gamma[:3], before[:3])
    state.apply(events[1], 250.0, from_scenario=True)
    assert np.array_equal(state.current().gamma, before)
    assert [h[0] for h in state.history] == ["user u4 leaves", "user u4 joins"]


def test_events_applied_together_say_which_servers_stop_and_start() -> None:
    state, _ = ChurnState.start(paper())
    a, b = state.present_servers()[:2]
    new = {"name": "N-1", "capacity": {"cpu": 4, "mem": 8}}
    events = [state.parse(e) for e in (
        {"server_fails": a}, {"user_leaves": "u4"}, {"server_fails": b},
        {"server_joins": b})]
    change = state.apply_together(events, 5.0, from_scenario=False)
    assert change.failed == (a, b) and change.joined == (b,)  # b fails, then is back
    assert state.epoch == 4 and state.scenario_events_applied == 0
    grow = state.parse({"server_joins": new})
    change = state.apply_together([grow, ServerFails(6.0, -1, "N-1")], 6.0,
                                  from_scenario=True)
    assert change.joined == () and change.failed == ("N-1",)  # joined and failed: not started
    assert state.scenario_events_applied == 2


def test_changes_that_do_not_fit_the_state_are_errors() -> None:
    state, _ = ChurnState.start(paper())
    with pytest.raises(ScenarioError, match="is present"):
        state.apply(state.parse({"user_joins": "u1"}), 1.0)
    with pytest.raises(ScenarioError, match="unknown user"):
        state.parse({"set_weight": {"user": "nobody", "weight": 2}})
    state.apply(state.parse({"user_leaves": "u2"}), 1.0)
    with pytest.raises(ScenarioError, match="absent"):
        state.apply(state.parse({"user_leaves": "u2"}), 2.0)
    assert state.epoch == 1  # refused changes leave no trace


@pytest.mark.parametrize(("change", "fld"), [
    ({"set_weight": {"user": "u2", "weight": 1e-12}}, "set_weight"),
    ({"set_demand": {"user": "u1", "demand": {"cpu": 1e-12, "mem": 1e-12}}}, "set_demand"),
    ({"set_max_tasks": {"user": "u1", "max_tasks": 1e-9}}, "set_max_tasks"),
])
def test_a_change_the_solvers_cannot_hold_is_refused_and_leaves_no_trace(
        change: dict[str, object], fld: str) -> None:
    state, _ = ChurnState.start(paper())
    before = state.table().scenario
    with pytest.raises(ScenarioError, match=r"span .* more than the 1e\+08") as err:
        state.apply(state.parse(change), 1.0)
    assert err.value.field == f"event.{fld}"
    after = state.table().scenario
    assert state.epoch == 0
    for a, b in ((before.demand, after.demand), (before.weight, after.weight),
                 (before.max_tasks, after.max_tasks)):
        assert np.array_equal(a, b)
    state.apply(state.parse({"set_weight": {"user": "u2", "weight": 1e-7}}), 2.0)  # within


def test_demand_and_weight_changes_reach_the_table() -> None:
    state, _ = ChurnState.start(paper())
    state.apply(state.parse({"set_demand": {"user": "u1", "demand": {"cpu": 0.2, "mem": 0.1}}}),
                5.0)
    state.apply(state.parse({"set_weight": {"user": "u2", "weight": 5}}), 6.0)
    cur = state.table().scenario
    assert list(cur.demand[0]) == [0.2, 0.1]
    assert cur.weight[1] == 5
    assert cur.gamma[0, 0] == pytest.approx(5.0)  # class A: min(1/0.2, 1/0.1)


def test_max_tasks_changes_reach_the_table_and_survive_growth_and_resume() -> None:
    state, _ = ChurnState.start(paper())
    state.apply(state.parse({"set_max_tasks": {"user": "u2", "max_tasks": 7}}), 1.0)
    state.apply(state.parse({"user_joins": {"name": "u9", "demand": {"cpu": 0.1},
                                            "max_tasks": 3}}), 2.0)
    assert state.table().scenario.max_tasks.tolist() == [np.inf, 7.0, np.inf, np.inf, 3.0]
    back = ChurnState.resume(state.table())
    assert back.current().max_tasks.tolist() == [np.inf, 7.0, np.inf, np.inf, 3.0]
    back.apply(back.parse({"set_max_tasks": {"user": "u9", "max_tasks": float("inf")}}), 3.0)
    assert back.current().max_tasks[4] == np.inf
    assert back.history[-1][0] == "user u9 max_tasks set to inf"


def test_new_users_and_servers_are_appended() -> None:
    state, _ = ChurnState.start(paper())
    state.apply(state.parse({"user_joins": {"name": "u9", "demand": {"cpu": 0.1}}}), 1.0)
    state.apply(state.parse({"server_joins": {"name": "E", "capacity": {"cpu": 2, "mem": 2}}}),
                2.0)
    cur = state.current()
    assert cur.user_names[-1] == "u9" and cur.server_names[-1] == "E"
    assert cur.num_users == 5 and cur.num_servers == 121
    assert cur.eligible[4].all()  # the new user may run anywhere, the new server included
    state.apply(state.parse({"server_fails": "E"}), 3.0)
    assert not state.current().eligible[:, -1].any()
    state.apply(state.parse({"server_joins": {"name": "E"}}), 4.0)  # comes back
    assert state.current().eligible[:, -1].any()


def test_a_bad_new_server_names_the_field() -> None:
    state, _ = ChurnState.start(paper())
    with pytest.raises(ScenarioError) as err:
        state.apply(state.parse({"server_joins": {"name": "E", "capacity": {"gpu": 1}}}), 1.0)
    assert "server_joins" in str(err.value) and "\n" not in str(err.value)


def test_resume_from_a_table_gives_the_same_state() -> None:
    state, events = ChurnState.start(paper())
    state.apply(events[0], 100.0, from_scenario=True)
    state.apply(state.parse({"user_joins": {"name": "u9", "demand": {"cpu": 0.1}}}), 101.0)
    back = ChurnState.resume(state.table())
    assert back.epoch == state.epoch and back.history == state.history
    assert back.scenario_events_applied == 1
    a, b = back.current(), state.current()
    assert a.user_names == b.user_names
    assert np.array_equal(a.gamma, b.gamma) and np.array_equal(a.weight, b.weight)
    back.apply(events[1], 250.0, from_scenario=True)  # and it carries on
    assert back.current().eligible[3].any()


def test_due_gives_the_events_not_applied_whose_scaled_time_has_come() -> None:
    state, events = ChurnState.start(paper())
    assert len(events) >= 2
    first, second = events[0].at, events[1].at
    assert state.due(events, first - 1e-3, 1.0) == ()
    assert state.due(events, first, 1.0)[0] is events[0]
    assert state.due(events, 2 * first, 0.5)[0] is events[0]  # event times scaled
    for e in state.due(events, second, 1.0):
        state.apply(e, e.at, from_scenario=True)
    assert state.due(events, second, 1.0) == ()  # applied: not due again
