"""One server's admission: the column rounded once per interval and leased out."""

from __future__ import annotations

import numpy as np

from psdsf_dist.admission.rounding import CREDIT_LIMIT
from psdsf_dist.admission.server_admission import ServerAdmission
from psdsf_dist.admission.unmanaged import UNMANAGED_WEIGHT, unmanaged_user
from psdsf_dist.model.scenario import Scenario

SCENARIO = Scenario.from_dict({
    "resources": ["CPU", "memory"],
    "servers": [{"name": "a", "capacity": {"CPU": 4, "memory": 8}},
                {"name": "b", "capacity": {"CPU": 2, "memory": 2}}],
    "users": [{"name": "u", "demand": {"CPU": 1, "memory": 1}},
              {"name": "v", "demand": {"CPU": 1, "memory": 2}},
              {"name": "w", "demand": {"CPU": 1}, "servers": ["b"]}],
})
T = 1.0


def admission(restarted: bool = False) -> ServerAdmission:
    return ServerAdmission.start("a", SCENARIO.capacity[0], T, 0.0, restarted=restarted)


def test_fractional_column_is_met_on_average_over_intervals() -> None:
    adm = admission()
    column = np.array([1.5, 2.5, 3.0])  # w is not eligible on a: never granted there
    got: dict[str, list[int]] = {"u": [], "v": [], "w": []}
    for k in range(40):
        now = k * adm.interval
        for user in got:  # tasks shorter than an interval: none running at an ask
            got[user].append(adm.ask(user, 0, now, column, SCENARIO).slots)
    assert got["w"] == [0] * 40
    # 4 CPU: floors 1 + 2 leave one CPU for u's or v's half task, taken in turn; a hand-over
    # waits one interval for the holder's next ask (its lease shrinks only then), and the
    # credit of the user kept waiting makes up for it: within a quarter task of x
    assert abs(np.mean(got["u"][4:]) - 1.5) <= 0.25 and abs(np.mean(got["v"][4:]) - 2.5) <= 0.25
    for k in range(40):
        assert got["u"][k] + got["v"][k] <= 4


def test_a_converged_column_lends_nothing_even_with_long_queues() -> None:
    """u, v: 1.5 and 2.5 tasks fill the 4 CPUs; however many tasks wait, the slots follow the
    column as without lending (lending is for capacity the allocation leaves idle)."""
    adm = admission()
    column = np.array([1.5, 2.5, 3.0])
    got: dict[str, list[int]] = {"u": [], "v": []}
    for k in range(40):
        for user in got:
            got[user].append(adm.ask(user, 0, k * adm.interval, column, SCENARIO,
                                     queued=100).slots)
    assert abs(np.mean(got["u"][4:]) - 1.5) <= 0.25 and abs(np.mean(got["v"][4:]) - 2.5) <= 0.25


def test_a_column_not_yet_grown_lends_the_idle_room() -> None:
    adm = admission()
    column = np.array([1.0, 0.0, 0.0])  # v just arrived: nothing allocated to it yet
    assert adm.ask("v", 0, 0.0, column, SCENARIO, queued=50).slots == 3  # 3 CPU, 6 GiB idle
    assert adm.ask("u", 0, 0.1, column, SCENARIO, queued=50).slots == 1


def test_one_plan_per_interval() -> None:
    adm = admission()
    column = np.array([0.5, 0.0, 0.0])
    first = adm.ask("u", 0, 0.0, column, SCENARIO).slots
    assert adm.ask("u", first, 0.1, column, SCENARIO).slots == first  # same plan
    assert adm.ask("u", first, adm.interval, column, SCENARIO).slots != first  # next one


def test_a_restarted_server_listens_for_one_lease_lifetime() -> None:
    adm = admission(restarted=True)
    column = np.array([2.0, 1.0, 0.0])
    assert adm.ask("u", 3, 0.0, column, SCENARIO).slots == 0
    assert adm.ask("v", 0, 0.1, column, SCENARIO).slots == 0
    after = ServerAdmission.ttl_of(T) + 0.01
    # u still runs 3 tasks (3 CPU of 4): v's one task fits, u keeps its target of 2
    assert adm.ask("v", 0, after, column, SCENARIO).slots == 1
    assert adm.ask("u", 3, after, column, SCENARIO).slots == 2


def test_work_outside_the_allocator_keeps_its_room_whatever_a_tenant_is_owed() -> None:
    """An intruder holds all 4 CPUs of server a (``unmanaged@a``: all but ~1/10^4 of its one
    task); u was allocated there before and is still owed credit.  The rounding gives the
    unmanaged task first: u's owed extra task does not go into the intruder's room (it would
    only wait at the node)."""
    scenario = Scenario.from_dict({
        "resources": ["CPU", "memory"],
        "servers": [{"name": "a", "capacity": {"CPU": 4, "memory": 8}}],
        "users": [{"name": "u", "demand": {"CPU": 1, "memory": 1}},
                  {"name": unmanaged_user("a"), "demand": {"CPU": 4}, "servers": ["a"],
                   "max_tasks": 1, "weight": UNMANAGED_WEIGHT}]})
    adm = ServerAdmission.start("a", scenario.capacity[0], T, 0.0, restarted=False)
    adm.credit = {"u": CREDIT_LIMIT}
    column = np.array([0.0004, 0.9999])
    for k in range(20):
        assert adm.ask("u", 0, k * adm.interval, column, scenario, queued=100).slots == 0
