"""Scenario events (churn): the top-level ``events:`` list of a scenario file, typed and checked.

Each event is a mapping with ``at`` (seconds >= 0) and exactly one kind::

    - {at: 100, user_leaves: u4}
    - {at: 250, user_joins: u4}                     # a declared user (re)joins
    - {at: 300, user_joins: {name: u9, demand: {cpu: 0.1}, weight: 2}}   # a new user
    - {at: 30, server_fails: s3}
    - {at: 40, server_joins: {name: s9, capacity: {cpu: 1, mem: 2}, labels: {gpu: true}}}
    - {at: 45, server_joins: {name: s3}}            # a failed server comes back
    - {at: 60, set_demand: {user: u1, demand: {cpu: 0.2, mem: 0.1}}}
    - {at: 70, set_weight: {user: u1, weight: 3}}
    - {at: 80, set_max_tasks: {user: u1, max_tasks: 40}}   # its backlog (.inf: unlimited)

Events are checked in time order (ties in file order) against the membership at that time: a
user leaves only while present, joins only while absent, and so on.  A declared user whose first
event is ``user_joins`` is absent until then.  A new user is specified like an entry of ``users``
(same keys and checks); a new server like an entry of ``servers`` without ``count``.  A joining
server is open to users without a ``servers`` list whose ``requires`` its labels match.
Every problem raises :class:`~psdsf_dist.errors.ScenarioError` naming the field, e.g.
``events[3].at`` or ``events[0].set_demand.demand.gpu``.

Events are typed values: a new user or server is carried as its checked entry
(:class:`~psdsf_dist.model.entries.UserSpec`, :class:`~psdsf_dist.model.entries.ServerSpec`),
which the scenario places among its own when it grows
(:meth:`Scenario.with_joiners <psdsf_dist.model.scenario.Scenario.with_joiners>`; what needs the
other servers, such as whether a server a new user names exists, is checked then).
:func:`~psdsf_dist.model.universe.universe` turns a scenario and its events into one fixed-size
scenario holding every server and user that is ever present, plus who is present at time 0: the
simulator works on it with presence masks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.entries import (
    NEW_SERVER_KEYS,
    ServerSpec,
    UserSpec,
    server_spec,
    user_spec,
)
from psdsf_dist.model.fields import (
    USER_KEYS,
    _check_keys,
    _mapping,
    _name,
    _sequence,
    number,
    resource_vector,
    show,
)

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

EVENT_KINDS = ("user_leaves", "user_joins", "server_fails", "server_joins", "set_demand",
               "set_weight", "set_max_tasks")
USER_SETTINGS = ("set_demand", "set_weight", "set_max_tasks")


@dataclass(frozen=True)
class Event:
    at: float
    index: int
    """Position in the file's ``events`` list."""

    @property
    def kind(self) -> str:
        raise NotImplementedError

    @property
    def field(self) -> str:
        """The field an error about this event names: ``events[3].user_joins`` for the
        scenario file's, ``event.user_joins`` for one given while a run goes (index -1)."""
        return f"events[{self.index}].{self.kind}" if self.index >= 0 else f"event.{self.kind}"

    def describe(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class UserLeaves(Event):
    user: str

    @property
    def kind(self) -> str:
        return "user_leaves"

    def describe(self) -> str:
        return f"user {self.user} leaves"


@dataclass(frozen=True)
class UserJoins(Event):
    user: str
    spec: UserSpec | None
    """The checked entry of a user not declared in ``users`` (None for a declared one)."""

    @property
    def kind(self) -> str:
        return "user_joins"

    def describe(self) -> str:
        return f"user {self.user} joins"


@dataclass(frozen=True)
class ServerFails(Event):
    server: str

    @property
    def kind(self) -> str:
        return "server_fails"

    def describe(self) -> str:
        return f"server {self.server} fails"


@dataclass(frozen=True)
class ServerJoins(Event):
    server: str
    spec: ServerSpec | None
    """The new server's checked entry (None when a failed server comes back)."""

    @property
    def kind(self) -> str:
        return "server_joins"

    def describe(self) -> str:
        return f"server {self.server} joins"


@dataclass(frozen=True)
class SetDemand(Event):
    user: str
    demand: Mapping[str, float]

    @property
    def kind(self) -> str:
        return "set_demand"

    def describe(self) -> str:
        return f"user {self.user} demand set to {dict(self.demand)}"


@dataclass(frozen=True)
class SetWeight(Event):
    user: str
    weight: float

    @property
    def kind(self) -> str:
        return "set_weight"

    def describe(self) -> str:
        return f"user {self.user} weight set to {self.weight:g}"


@dataclass(frozen=True)
class SetMaxTasks(Event):
    user: str
    max_tasks: float
    """The user's backlog: at most this many tasks in all (``inf``: unlimited)."""

    @property
    def kind(self) -> str:
        return "set_max_tasks"

    def describe(self) -> str:
        return f"user {self.user} max_tasks set to {self.max_tasks:g}"


def new_user_joins(entry: Any, resources: Sequence[str], external: Sequence[str] = (), *,
                   at: float = 0.0, index: int = -1, fld: str = "event.user_joins") -> UserJoins:
    """A new user's join, its entry checked like an entry of ``users``
    (:func:`~psdsf_dist.model.entries.user_spec`; ``resources`` and ``external``: the
    scenario's).  Whether the servers it names exist is checked when the scenario grows by
    it."""
    spec = user_spec(entry, fld, resources, external)
    return UserJoins(at, index, spec.name, spec)


def new_server_joins(entry: Any, resources: Sequence[str], *, at: float = 0.0, index: int = -1,
                     fld: str = "event.server_joins") -> ServerJoins:
    """A new server's join, its entry (``name``, ``capacity``, ``labels``) checked like an
    entry of ``servers``."""
    spec = server_spec(entry, fld, resources, NEW_SERVER_KEYS)
    return ServerJoins(at, index, spec.name, spec)


def set_demand(user: str, demand: Any, resources: Sequence[str], *, at: float = 0.0,
               index: int = -1, fld: str = "event.set_demand") -> SetDemand:
    """A demand change, checked: known resources, finite and >= 0, not all zero."""
    d = resource_vector(demand, resources, f"{fld}.demand")
    if not (d > 0).any():
        raise ScenarioError(f"{fld}.demand", "all zero: a task must need some resource")
    return SetDemand(at, index, user, {r: float(d[i]) for i, r in enumerate(resources)})


def set_weight(user: str, weight: Any, *, at: float = 0.0, index: int = -1,
               fld: str = "event.set_weight") -> SetWeight:
    """A weight change, checked: a finite number > 0."""
    return SetWeight(at, index, user, number(weight, f"{fld}.weight", positive=True))


def set_max_tasks(user: str, max_tasks: Any, *, at: float = 0.0, index: int = -1,
                  fld: str = "event.set_max_tasks") -> SetMaxTasks:
    """A backlog change, checked: a number >= 0 (``inf``: unlimited)."""
    return SetMaxTasks(at, index, user, number(max_tasks, f"{fld}.max_tasks", allow_inf=True))


def parse_events(
    value: Any,
    *,
    resources: Sequence[str],
    external: Sequence[str] = (),
    server_names: Sequence[str],
    user_names: Sequence[str],
) -> tuple[Event, ...]:
    """Check an ``events`` list against the scenario's membership; events sorted by time.

    ``resources`` and ``external`` are the scenario's (resources and external resources),
    ``server_names`` its servers after expanding classes and ``user_names`` its declared
    users.  A new user's or server's entry is checked on its own here; whether it fits among
    the others (the servers a new user names exist, ...) is checked by growing the scenario
    with it (:meth:`Scenario.with_joiners
    <psdsf_dist.model.scenario.Scenario.with_joiners>`).
    """
    if value is None:
        return ()
    items = _sequence(value, "events")
    raw: list[tuple[float, int, Mapping[str, Any]]] = []
    for j, item in enumerate(items):
        fld = f"events[{j}]"
        ev = _mapping(item, fld)
        for k in ev:
            if k != "at" and k not in EVENT_KINDS:
                allowed = ", ".join(["at", *EVENT_KINDS])
                raise ScenarioError(f"{fld}.{k}", f"unknown key (allowed: {allowed})")
        if "at" not in ev:
            raise ScenarioError(f"{fld}.at", "missing")
        at = number(ev["at"], f"{fld}.at")
        kinds = [k for k in ev if k in EVENT_KINDS]
        if not kinds:
            raise ScenarioError(fld, f"no event: give one of {', '.join(EVENT_KINDS)}")
        if len(kinds) > 1:
            raise ScenarioError(fld, f"one event per entry, got {', '.join(kinds)}")
        raw.append((at, j, ev))

    users_present = {u: True for u in user_names}
    declared = set(user_names)
    servers_present = {s: True for s in server_names}
    first_user_event: dict[str, str] = {}
    for _at, _j, ev in sorted(raw, key=lambda t: (t[0], t[1])):
        kind = next(k for k in ev if k in EVENT_KINDS)
        if kind in ("user_leaves", "user_joins", *USER_SETTINGS):
            body = ev[kind]
            uname = body.get("user") if isinstance(body, Mapping) and kind in USER_SETTINGS \
                else body
            if isinstance(uname, str):
                first_user_event.setdefault(uname, kind)
    # a declared user whose first event is a join starts absent
    for u, kind in first_user_event.items():
        if u in users_present and kind == "user_joins":
            users_present[u] = False

    out: list[Event] = []
    for at, j, ev in sorted(raw, key=lambda t: (t[0], t[1])):
        fld = f"events[{j}]"
        kind = next(k for k in ev if k in EVENT_KINDS)
        body = ev[kind]
        kf = f"{fld}.{kind}"
        if kind == "user_leaves":
            u = _name(body, kf)
            if u not in users_present:
                raise ScenarioError(kf, f"unknown user {u!r}")
            if not users_present[u]:
                raise ScenarioError(kf, f"user {u!r} is already absent at {at:g} s")
            users_present[u] = False
            out.append(UserLeaves(at, j, u))
        elif kind == "user_joins":
            if isinstance(body, Mapping):
                u = _new_user_name(body, kf)
                if u in users_present:
                    raise ScenarioError(f"{kf}.name", f"user {u!r} already exists")
                users_present[u] = True
                out.append(new_user_joins(body, resources, external, at=at, index=j, fld=kf))
            else:
                u = _name(body, kf)
                if u not in users_present:
                    raise ScenarioError(
                        kf, f"unknown user {u!r} (a new user needs a full entry: {{name, demand}})"
                    )
                if users_present[u]:
                    raise ScenarioError(kf, f"user {show(u)} is already present at {at:g} s")
                if at == 0 and u in declared:
                    raise ScenarioError(kf, f"user {show(u)} is declared in users, so present "
                                            "from the start: a join at 0 s changes nothing")
                users_present[u] = True
                out.append(UserJoins(at, j, u, None))
        elif kind == "server_fails":
            s = _name(body, kf)
            if s not in servers_present:
                raise ScenarioError(kf, f"unknown server {s!r}")
            if not servers_present[s]:
                raise ScenarioError(kf, f"server {s!r} is already down at {at:g} s")
            servers_present[s] = False
            out.append(ServerFails(at, j, s))
        elif kind == "server_joins":
            body = _mapping(body, kf)
            _check_keys(body, NEW_SERVER_KEYS, kf)
            if "name" not in body:
                raise ScenarioError(f"{kf}.name", "missing")
            s = _name(body["name"], f"{kf}.name")
            if s in servers_present:
                if servers_present[s]:
                    raise ScenarioError(f"{kf}.name", f"server {s!r} is already up at {at:g} s")
                if len(body) > 1:
                    raise ScenarioError(kf, f"server {s!r} exists: give its name only")
                servers_present[s] = True
                out.append(ServerJoins(at, j, s, None))
                continue
            servers_present[s] = True
            out.append(new_server_joins(body, resources, at=at, index=j, fld=kf))
        elif kind == "set_demand":
            body = _mapping(body, kf)
            _only(body, {"user", "demand"}, kf)
            u = _known_user(body, users_present, kf)
            if "demand" not in body:
                raise ScenarioError(f"{kf}.demand", "missing")
            out.append(set_demand(u, body["demand"], resources, at=at, index=j, fld=kf))
        elif kind == "set_weight":
            body = _mapping(body, kf)
            _only(body, {"user", "weight"}, kf)
            u = _known_user(body, users_present, kf)
            if "weight" not in body:
                raise ScenarioError(f"{kf}.weight", "missing")
            out.append(set_weight(u, body["weight"], at=at, index=j, fld=kf))
        else:  # set_max_tasks
            body = _mapping(body, kf)
            _only(body, {"user", "max_tasks"}, kf)
            u = _known_user(body, users_present, kf)
            if "max_tasks" not in body:
                raise ScenarioError(f"{kf}.max_tasks", "missing")
            out.append(set_max_tasks(u, body["max_tasks"], at=at, index=j, fld=kf))
    return tuple(out)


def at_each_instant(events: Sequence[Event]) -> list[list[Event]]:
    """Events in time order grouped by instant (each group in file order): what happens at
    one instant is one change of the state."""
    groups: list[list[Event]] = []
    for e in sorted(events, key=lambda e: (e.at, e.index)):
        if groups and groups[-1][0].at == e.at:
            groups[-1].append(e)
        else:
            groups.append([e])
    return groups


def _only(body: Mapping[str, Any], allowed: set[str], fld: str) -> None:
    hint = ", ".join(sorted(allowed))
    for k in body:
        if k not in allowed:
            raise ScenarioError(f"{fld}.{k}", f"unknown key (allowed: {hint})")


def _known_user(body: Mapping[str, Any], present: Mapping[str, bool], fld: str) -> str:
    if "user" not in body:
        raise ScenarioError(f"{fld}.user", "missing")
    u = _name(body["user"], f"{fld}.user")
    if u not in present:
        raise ScenarioError(f"{fld}.user", f"unknown user {u!r}")
    return u


def _new_user_name(body: Mapping[str, Any], fld: str) -> str:
    """The name of a new user's entry, after the checks that come before it (its keys, its
    name): the membership check needs the name before the entry's values are read."""
    body = _mapping(body, fld)
    _check_keys(body, USER_KEYS, fld)
    if "name" not in body:
        raise ScenarioError(f"{fld}.name", "missing")
    return _name(body["name"], f"{fld}.name")
