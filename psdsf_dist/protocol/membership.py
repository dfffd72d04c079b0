"""Who is present and what they ask for, as churn changes it (the coordinator's user table).

The state starts from the scenario's universe (every server and user its events ever name,
:func:`psdsf_dist.model.universe.universe`) with who is present at time 0, and grows when a user
or a server unknown so far joins at run time (:meth:`Scenario.with_joiners
<psdsf_dist.model.scenario.Scenario.with_joiners>`, which checks it as a declared one would be).
Each change makes a new :class:`Table` with a larger ``epoch``; servers adopt the newest table
they hear of.  Indices never move: new users and new servers are appended, absent ones are
masked out, as in the simulator.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.events import (
    Event,
    ServerFails,
    ServerJoins,
    SetDemand,
    SetMaxTasks,
    SetWeight,
    UserJoins,
    UserLeaves,
    parse_events,
)
from psdsf_dist.model.limits import check_span
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.model.universe import universe
from psdsf_dist.protocol.classes import ClassMap, server_classes

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Table:
    """Everything a server needs to know about the others' demands, weights and presence."""

    epoch: int
    scenario: Scenario
    """The scenario as it stands: absent users and servers left out of ``placement``."""
    full: Scenario
    """Every server and user known so far, placement unmasked."""
    users_present: BoolArray
    servers_present: BoolArray
    history: tuple[tuple[str, float], ...]
    """(description, run time) of every change so far, oldest first."""
    scenario_events_applied: int
    """How many of the scenario file's events are in this table (to resume after a restart)."""

    def server_index(self, name: str) -> int:
        return self.server_indices[name]

    @functools.cached_property
    def server_indices(self) -> dict[str, int]:
        """Server name -> index in the table's scenario."""
        return {n: i for i, n in enumerate(self.scenario.server_names)}

    @functools.cached_property
    def classes(self) -> ClassMap:
        """The classes of identical servers, computed once per table: every server of a
        driver that shares the table reads the same map (12,583 servers each grouping the
        whole cluster took longer than the run)."""
        return server_classes(self.scenario, self.servers_present)


@dataclass(frozen=True)
class ServerChange:
    """The servers one change stops (failed, in order) and starts (joined, in order)."""

    failed: tuple[str, ...]
    joined: tuple[str, ...]


@dataclass
class ChurnState:
    """The coordinator's mutable membership and user state (see the module docstring)."""

    full: Scenario
    users_present: BoolArray
    servers_present: BoolArray
    demand: FloatArray
    weight: FloatArray
    max_tasks: FloatArray
    epoch: int = 0
    history: list[tuple[str, float]] = field(default_factory=list)
    """(description, time) of every change applied, oldest first (appended: a tuple rebuilt
    per change would cost the square of their number)."""
    scenario_events_applied: int = 0

    @classmethod
    def start(cls, scenario: Scenario) -> tuple[ChurnState, tuple[Event, ...]]:
        """The state at time 0 and the scenario's events (typed, in time order)."""
        u = universe(scenario)
        state = cls(u.scenario, u.users_present.copy(), u.servers_present.copy(),
                    np.array(u.scenario.demand, dtype=float),
                    np.array(u.scenario.weight, dtype=float),
                    np.array(u.scenario.max_tasks, dtype=float))
        return state, u.events

    @classmethod
    def resume(cls, table: Table) -> ChurnState:
        """Rebuild the state from a table (a restarted coordinator asks its servers)."""
        s = table.scenario
        return cls(table.full, table.users_present.copy(), table.servers_present.copy(),
                   np.array(s.demand, dtype=float), np.array(s.weight, dtype=float),
                   np.array(s.max_tasks, dtype=float), table.epoch, list(table.history),
                   table.scenario_events_applied)

    # -- reading ------------------------------------------------------------------------------
    def current(self) -> Scenario:
        placement = (self.full.placement & self.users_present[:, None]
                     & self.servers_present[None, :])
        return self.full.replace_users(demand=self.demand, weight=self.weight,
                                       max_tasks=self.max_tasks, placement=placement)

    def table(self) -> Table:
        return Table(self.epoch, self.current(), self.full, self.users_present.copy(),
                     self.servers_present.copy(), tuple(self.history),
                     self.scenario_events_applied)

    def due(self, events: Sequence[Event], now: float, time_scale: float) -> tuple[Event, ...]:
        """The scenario's ``events`` not applied yet whose time (scaled by ``time_scale``) has
        come by ``now``, in order."""
        first = end = self.scenario_events_applied
        while end < len(events) and events[end].at * time_scale <= now + 1e-9:
            end += 1
        return tuple(events[first:end])

    def present_servers(self) -> list[str]:
        return [s for s, up in zip(self.full.server_names, self.servers_present, strict=True)
                if up]

    # -- changing -----------------------------------------------------------------------------
    def apply(self, event: Event, now: float, *, from_scenario: bool = False) -> None:
        """Apply one change at run time ``now``; a change that does not fit the current state
        (an unknown user, a user leaving twice, ...) raises :class:`ScenarioError`."""
        fld = "event" if event.index < 0 else f"events[{event.index}]"
        if isinstance(event, UserLeaves):
            n = self._user(event.user, f"{fld}.user_leaves")
            if not self.users_present[n]:
                raise ScenarioError(f"{fld}.user_leaves", f"user {event.user!r} is absent")
            self.users_present[n] = False
        elif isinstance(event, UserJoins):
            if event.user not in self.full.user_index:
                if event.spec is None:
                    raise ScenarioError(f"{fld}.user_joins",
                                        f"unknown user {event.user!r} (a new user needs a "
                                        "full entry: {name, demand})")
                self._grow(event)
            n = self.full.user_index[event.user]
            if self.users_present[n]:
                raise ScenarioError(f"{fld}.user_joins", f"user {event.user!r} is present")
            self.users_present[n] = True
        elif isinstance(event, SetDemand):
            n = self._user(event.user, f"{fld}.set_demand")
            self._set(self.demand, n, [float(event.demand.get(r, 0.0))
                                       for r in self.full.resources], f"{fld}.set_demand",
                      checked=from_scenario)
        elif isinstance(event, SetWeight):
            n = self._user(event.user, f"{fld}.set_weight")
            self._set(self.weight, n, event.weight, f"{fld}.set_weight", checked=from_scenario)
        elif isinstance(event, SetMaxTasks):
            n = self._user(event.user, f"{fld}.set_max_tasks")
            self._set(self.max_tasks, n, event.max_tasks, f"{fld}.set_max_tasks",
                      checked=from_scenario)
        elif isinstance(event, ServerFails):
            i = self._server(event.server, f"{fld}.server_fails")
            if not self.servers_present[i]:
                raise ScenarioError(f"{fld}.server_fails", f"server {event.server!r} is down")
            self.servers_present[i] = False
        elif isinstance(event, ServerJoins):
            if event.server not in self.full.server_index:
                if event.spec is None:
                    raise ScenarioError(f"{fld}.server_joins",
                                        f"unknown server {event.server!r} (a new server needs "
                                        "a capacity)")
                self._grow(event)
            i = self.full.server_index[event.server]
            if self.servers_present[i]:
                raise ScenarioError(f"{fld}.server_joins", f"server {event.server!r} is up")
            self.servers_present[i] = True
        else:  # pragma: no cover - every Event subclass is handled above
            raise ScenarioError(fld, f"unsupported event {event.kind}")
        self.epoch += 1
        self.history.append((event.describe(), float(now)))
        if from_scenario:
            self.scenario_events_applied += 1

    def apply_together(self, events: Sequence[Event], now: float, *,
                       from_scenario: bool) -> ServerChange:
        """Apply events due together, in order, as one change (the one churn step of the
        simulator and the coordinator): the servers then adopt the resulting table once — a
        server sees only the state after them, so adopting each intermediate table would be
        work without effect (100,000 weight changes at one instant were 100,000 pushes to
        every actor).  Returns the servers to stop and to start: a server that joins and
        fails within the change is not started; one that fails and joins again is both."""
        joined: list[str] = []
        failed: list[str] = []
        for event in events:
            self.apply(event, now, from_scenario=from_scenario)
            if isinstance(event, ServerFails):
                failed.append(event.server)
                joined = [s for s in joined if s != event.server]
            elif isinstance(event, ServerJoins):
                joined.append(event.server)
        return ServerChange(tuple(failed), tuple(joined))

    def parse(self, item: Mapping[str, Any]) -> Event:
        """One event mapping in the scenario-file syntax (``at`` optional) as a typed event.

        Only the syntax is checked here; :meth:`apply` checks it against the present state.
        """
        ev = dict(item)
        ev.setdefault("at", 0.0)
        kinds = [k for k in ev if k != "at"]
        if len(kinds) == 1 and kinds[0] in ("user_joins", "server_joins"):
            body = ev[kinds[0]]
            name = body.get("name") if isinstance(body, Mapping) else body
            known = (self.full.user_names if kinds[0] == "user_joins"
                     else self.full.server_names)
            if isinstance(name, str) and name in known:
                if kinds[0] == "user_joins":
                    return UserJoins(float(ev["at"]), -1, name, None)
                return ServerJoins(float(ev["at"]), -1, name, None)
        parsed = parse_events([ev], resources=self.full.resources,
                              external=self.full.external_resources,
                              server_names=self.full.server_names,
                              user_names=self.full.user_names)
        return _with_index(parsed[0], -1)

    # -- internals ----------------------------------------------------------------------------
    def _set(self, values: npt.NDArray[np.float64], n: int, value: Any, fld: str, *,
             checked: bool) -> None:
        """Set user ``n``'s entry of ``values`` (demand, weight or max_tasks), refusing a value
        that would make the users' task counts or weights span more than the solvers hold
        (:func:`~psdsf_dist.model.limits.check_span`), as a scenario is checked when loaded:
        a tenant asking for a weight of 1e-12 beside others of 1 would otherwise leave every
        certificate and distance of the run failing.  A refused value leaves no trace.
        ``checked``: a scenario's own event, whose values were checked with the scenario."""
        before = values[n].copy()
        values[n] = value
        if checked:
            return
        try:
            if values is self.weight:  # the task counts did not change
                check_span(np.zeros(0), np.zeros(0), self.weight)
            else:
                every = self.full.replace_users(demand=self.demand, max_tasks=self.max_tasks)
                check_span(every.gamma, every.max_tasks, self.weight)
        except ScenarioError as err:
            values[n] = before
            raise ScenarioError(fld, err.message) from None

    def _user(self, name: str, fld: str) -> int:
        n = self.full.user_index.get(name)
        if n is None:
            raise ScenarioError(fld, f"unknown user {name!r}")
        return n

    def _server(self, name: str, fld: str) -> int:
        i = self.full.server_index.get(name)
        if i is None:
            raise ScenarioError(fld, f"unknown server {name!r}")
        return i

    def _grow(self, event: UserJoins | ServerJoins) -> None:
        """Append the new user or server ``event`` brings (:meth:`Scenario.with_joiners`:
        checked as a declared one would be).  An error about the whole scenario (a limit, the
        span) is reported under the event's field."""
        try:
            grown = self.full.with_joiners([event])
        except ScenarioError as err:
            if err.field.startswith(event.field):
                raise
            raise ScenarioError(event.field, f"{err.field}: {err.message}") from None
        added_users = grown.num_users - self.full.num_users
        added_servers = grown.num_servers - self.full.num_servers
        self.users_present = np.concatenate([self.users_present, np.zeros(added_users, bool)])
        self.servers_present = np.concatenate(
            [self.servers_present, np.zeros(added_servers, bool)])
        self.demand = np.concatenate([self.demand, np.asarray(grown.demand)[-added_users:]
                                      if added_users else np.zeros((0, grown.num_resources))])
        self.weight = np.concatenate([self.weight, np.asarray(grown.weight)[-added_users:]
                                      if added_users else np.zeros(0)])
        self.max_tasks = np.concatenate([self.max_tasks,
                                         np.asarray(grown.max_tasks)[-added_users:]
                                         if added_users else np.zeros(0)])
        self.full = grown


def _with_index(event: Event, index: int) -> Event:
    return replace(event, index=index)
