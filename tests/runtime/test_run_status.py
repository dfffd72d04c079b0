"""The run's status mapping, without Ray."""

from __future__ import annotations

import json

import numpy as np

from psdsf_dist.model.scenario import load_scenario
from psdsf_dist.protocol.convergence import Observation
from psdsf_dist.protocol.membership import ChurnState
from psdsf_dist.runtime.run_status import run_status, user_allocation, user_totals
from tests.conftest import SMALL_CLUSTER


def test_status_reports_the_latest_observation_and_the_time_since_the_last_change() -> None:
    churn, events = ChurnState.start(load_scenario(SMALL_CLUSTER))
    leaver = churn.full.user_names[0]
    churn.apply(churn.parse({"user_leaves": leaver}), 4.0, from_scenario=False)
    obs = [Observation(k, float(k), 0.1 / (k + 1), k == 2, k != 1, 0.5, 0.0, 1.0, 1.0, 1.0, 6)
           for k in range(3)]
    st = run_status(churn, 10.0, obs, events, ["B-1", "B-2"], 3, 1, False, 0, None, None, [],
                    {"B-1": {"CPU": 0.0}, "B-2": {"CPU": 1.5}})
    assert (st["round"], st["holds"], st["feasible"]) == (2, True, False)  # one was not
    assert st["since_last_event"] == 6.0 and st["last_event_at"] == 4.0
    assert leaver not in st["present_users"] and st["users"] == len(st["present_users"])
    assert st["unmanaged"] == {"B-2": {"CPU": 1.5}}  # nodes with none are left out
    assert st["servers"] == 2 and st["tables_pushed"] == 3
    json.dumps(st)  # the CLI prints it as JSON


def test_status_before_the_first_observation() -> None:
    churn, events = ChurnState.start(load_scenario(SMALL_CLUSTER))
    st = run_status(churn, 0.5, [], events, [], 1, 0, False, 0, None, None, [], {})
    assert st["round"] is None and st["holds"] is None and st["feasible"] is True
    assert st["last_event_at"] == 0.0


def test_user_totals_are_the_present_users_rows() -> None:
    churn, _ = ChurnState.start(load_scenario(SMALL_CLUSTER))
    assert user_totals(churn, None) == {}
    names = churn.full.user_names
    X = np.arange(len(names) * churn.full.num_servers, dtype=float).reshape(len(names), -1)
    churn.apply(churn.parse({"user_leaves": names[0]}), 1.0, from_scenario=False)
    got = user_totals(churn, X)
    assert names[0] not in got and got[names[1]] == X[1].sum()
    X[1, 0] = 0.0
    per_server = user_allocation(churn, X)
    assert user_allocation(churn, None) == {} and set(per_server) == set(got)
    servers = churn.full.server_names
    # the servers a user has nothing on are left out
    assert per_server[names[1]] == {servers[i]: X[1, i] for i in range(1, len(servers))}
