"""The universe of a scenario: every server and user its events ever name, in one fixed-size
scenario, with who is present at time 0 (the membership table starts from it).

In a ``tenants: true`` scenario (a Ray cluster shared by tenants' task queues,
:mod:`psdsf_dist.admission.tenants`) no user is present at time 0: a user joins when its queue
first reports work, with the shape it submits as its demand."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from psdsf_dist.model.events import Event, UserJoins
from psdsf_dist.model.scenario import Scenario

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Universe:
    """Every server and user ever present, with who is present at time 0."""

    scenario: Scenario
    """All servers and users (fixed size)."""
    events: tuple[Event, ...]
    servers_present: BoolArray
    users_present: BoolArray


def universe(scenario: Scenario) -> Universe:
    """Build the fixed-size universe of a scenario and its events (see module docstring): the
    scenario grown by every server and user its events bring (:attr:`Scenario.grown`, built
    when the scenario was loaded; appended after the declared ones, so a declared one keeps
    its index), the declared ones present at time 0 but for a user whose first event is a
    join."""
    events = scenario.events
    full = scenario.grown
    users = np.zeros(full.num_users, dtype=bool)
    users[: scenario.num_users] = True
    servers = np.zeros(full.num_servers, dtype=bool)
    servers[: scenario.num_servers] = True
    seen: set[str] = set()
    for e in events:
        u = getattr(e, "user", None)
        if u is None or u in seen:
            continue
        seen.add(u)
        if isinstance(e, UserJoins) and e.spec is None:
            users[full.user_index[u]] = False  # declared, but first seen joining: absent until then
    if scenario.tenants:
        users[:] = False  # tenants are present only while their queues have work
    return Universe(full, events, servers, users)


def first_event_time(events: Sequence[Event]) -> float:
    return min((e.at for e in events), default=math.inf)
