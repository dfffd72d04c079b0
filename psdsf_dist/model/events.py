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

:func:`universe` turns a scenario and its events into one fixed-size scenario holding every
server and user that is ever present, plus who is present at time 0: the simulator works on it
with presence masks.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from psdsf_dist.errors import ScenarioError, ScenarioWarning
from psdsf_dist.model.fields import (
    USER_KEYS,
    _label,
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
NEW_SERVER_KEYS = {"name", "capacity", "labels"}


@dataclass(frozen=True)
class Event:
    at: float
    index: int
    """Position in the file's ``events`` list."""

    @property
    def kind(self) -> str:
        raise NotImplementedError

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
    spec: Mapping[str, Any] | None
    """The full user entry for a user not declared in ``users`` (None for a declared one)."""

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
    spec: Mapping[str, Any] | None
    """The new server's entry (None when a failed server comes back)."""

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


def new_user_joins(spec: Mapping[str, Any], *, at: float = 0.0, index: int = -1,
                   fld: str = "event.user_joins") -> UserJoins:
    """A new user's join, its entry checked like an entry of ``users`` (its keys here; its
    values when the scenario grows by it)."""
    entry = _check_new_user(spec, fld)
    return UserJoins(at, index, str(entry["name"]), entry)


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
    doc: Mapping[str, Any],
    *,
    server_names: Sequence[str],
    user_names: Sequence[str],
    build: Callable[[dict[str, Any]], Any],
) -> tuple[Event, ...]:
    """Check an ``events`` list against the scenario document; events sorted by time.
    ``build`` makes a scenario of a document (new users and servers are checked by building the
    document with them appended).

    ``doc`` is the (already checked) scenario document; ``server_names`` are the servers after
    expanding classes and ``user_names`` the declared users.
    """
    if value is None:
        return ()
    items = _sequence(value, "events")
    resources = [str(r) for r in doc.get("resources", [])]
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
                spec = _check_new_user(body, kf)
                u = str(spec["name"])
                if u in users_present:
                    raise ScenarioError(f"{kf}.name", f"user {u!r} already exists")
                users_present[u] = True
                out.append(UserJoins(at, j, u, spec))
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
            for k in body:
                if k not in NEW_SERVER_KEYS:
                    allowed = ", ".join(sorted(NEW_SERVER_KEYS))
                    raise ScenarioError(f"{kf}.{k}", f"unknown key (allowed: {allowed})")
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
            if "capacity" not in body:
                raise ScenarioError(f"{kf}.capacity", "missing")
            resource_vector(body["capacity"], resources, f"{kf}.capacity")
            labels = _mapping(body.get("labels", {}) or {}, f"{kf}.labels")
            _check_labels(labels, f"{kf}.labels")
            servers_present[s] = True
            out.append(ServerJoins(at, j, s, dict(body)))
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
    if any(isinstance(e, UserJoins | ServerJoins) and e.spec is not None for e in out):
        # new users and servers are checked like declared ones, by building the universe
        check_grown(doc, out, build)
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


def _check_labels(labels: Mapping[str, Any], fld: str) -> None:
    for k, v in labels.items():
        _label(v, f"{fld}.{k}")


def _check_new_user(body: Mapping[str, Any], fld: str) -> dict[str, Any]:
    hint = ", ".join(sorted(USER_KEYS))
    for k in body:
        if k not in USER_KEYS:
            raise ScenarioError(f"{fld}.{k}", f"unknown key (allowed: {hint})")
    if "name" not in body:
        raise ScenarioError(f"{fld}.name", "missing")
    _name(body["name"], f"{fld}.name")
    if "demand" not in body:
        raise ScenarioError(f"{fld}.demand", "missing")
    return dict(body)


def _universe_doc(doc: Mapping[str, Any], events: Sequence[Event]) -> tuple[
        dict[str, Any], dict[int, str], dict[int, str]]:
    """The scenario document with every joining server and new user appended.

    Returns the document and, for error messages, which appended ``servers[i]`` / ``users[i]``
    came from which event field.
    """
    servers = list(doc.get("servers") or [])
    users = list(doc.get("users") or [])
    server_origin: dict[int, str] = {}
    user_origin: dict[int, str] = {}
    for e in events:
        if isinstance(e, ServerJoins) and e.spec is not None:
            server_origin[len(servers)] = f"events[{e.index}].server_joins"
            servers.append(dict(e.spec))
        elif isinstance(e, UserJoins) and e.spec is not None:
            user_origin[len(users)] = f"events[{e.index}].user_joins"
            users.append(dict(e.spec))
    out = {k: v for k, v in doc.items() if k != "events"}
    out["servers"] = servers
    out["users"] = users
    return out, server_origin, user_origin


def check_grown(doc: Mapping[str, Any], events: Sequence[Event],
                build: Callable[[dict[str, Any]], Any]) -> Any:
    """Build the document with every joining server and new user appended (``build``:
    :meth:`Scenario.from_dict <psdsf_dist.model.scenario.Scenario.from_dict>`), so that they are
    checked like declared ones; an error names the event field behind it."""
    udoc, server_origin, user_origin = _universe_doc(doc, events)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScenarioWarning)
        try:
            return build(udoc)
        except ScenarioError as err:
            raise _remap(err, server_origin, user_origin) from None


def _remap(err: ScenarioError, server_origin: Mapping[int, str],
           user_origin: Mapping[int, str]) -> ScenarioError:
    """Name the event field behind an error found in an appended server or user."""
    for prefix, origin in (("servers", server_origin), ("users", user_origin)):
        for i, where in origin.items():
            head = f"{prefix}[{i}]"
            if err.field == head or err.field.startswith(head + "."):
                return ScenarioError(where + err.field[len(head):], err.message)
    return err


