"""One server or one user of a scenario, as typed values: an entry of ``servers`` or ``users``
(or of a ``server_joins`` / ``user_joins`` event) checked on its own.

A scenario file is read once: each entry becomes a :class:`ServerSpec` or a :class:`UserSpec`
here, and every later step — building the scenario's arrays, appending a server or a user that
joins (:meth:`Scenario.with_servers <psdsf_dist.model.scenario.Scenario.with_servers>`,
:meth:`~psdsf_dist.model.scenario.Scenario.with_users`) — works on these values, never on the
document again.  What an entry can be checked against on its own is checked here: its keys, its
names, its numbers, its resources (the scenario's resources are given).  What needs the other
servers — whether a server or class it names exists, whether a ``gamma`` or a bound task falls
where the user may run, whether a name is taken — is checked when the entry is placed in a
scenario.  Every problem raises :class:`~psdsf_dist.errors.ScenarioError` naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.fields import (
    USER_KEYS,
    _check_keys,
    _label,
    _mapping,
    _name,
    _required,
    _sequence,
    number,
    resource_vector,
)
from psdsf_dist.model.task_groups import GroupSpec, parse_server_tasks, parse_task_groups

SERVER_KEYS = {"name", "capacity", "count", "labels"}
"""Keys of an entry of ``servers``."""
NEW_SERVER_KEYS = {"name", "capacity", "labels"}
"""Keys of a server that joins by an event (one server: no ``count``)."""


@dataclass(frozen=True)
class PlacementRule:
    """Where a user may run, as its entry declares it: on the servers or classes ``servers``
    names (None: on any), and of those only on servers whose labels include ``requires``.

    A scenario keeps each user's rule so that a server joining later is opened to exactly the
    users the entry would open it to had the server been declared: a joining server is its own
    class and no declared name can be its name, so it is open to the users without a
    ``servers`` list whose ``requires`` its labels meet."""

    servers: tuple[str, ...] | None = None
    requires: Mapping[str, str] = field(default_factory=dict)

    def admits(self, server: str, server_class: str, labels: Mapping[str, str]) -> bool:
        """Whether the rule lets the user run on this server."""
        if self.servers is not None and server not in self.servers \
                and server_class not in self.servers:
            return False
        return all(labels.get(k) == v for k, v in self.requires.items())


@dataclass(frozen=True)
class UserSpec:
    """A user entry, checked on its own (see the module docstring); amounts by resource name."""

    name: str
    demand: Mapping[str, float]
    """Per-task demand of every resource of the scenario (0 where the entry leaves one out)."""
    weight: float = 1.0
    max_tasks: float = math.inf
    placement: PlacementRule = field(default_factory=PlacementRule)
    gamma: Mapping[str, float] = field(default_factory=dict)
    """Tasks alone given per server or class (``gamma``), in the entry's order."""
    external_demand: Mapping[str, float] = field(default_factory=dict)
    server_tasks: Mapping[str, float] | None = None
    task_groups: tuple[GroupSpec, ...] | None = None


@dataclass(frozen=True)
class ServerSpec:
    """A server entry, checked on its own: one server, or with ``count`` a class of that many
    members named ``name-1`` ... ``name-count``."""

    name: str
    capacity: Mapping[str, float]
    """Capacity of every resource of the scenario (0 where the entry leaves one out)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    count: int | None = None

    @property
    def members(self) -> tuple[str, ...]:
        """The names of the servers the entry declares."""
        if self.count is None:
            return (self.name,)
        return tuple(f"{self.name}-{k}" for k in range(1, self.count + 1))


def user_spec(value: Any, fld: str, resources: Sequence[str],
              external: Sequence[str] = ()) -> UserSpec:
    """A user entry (``users[n]``, or the body of a ``user_joins`` event) as a
    :class:`UserSpec`; ``resources`` and ``external`` are the scenario's resources and
    external resources, which its amounts must name."""
    usr = _mapping(value, fld)
    _check_keys(usr, USER_KEYS, fld)
    name = _name(_required(usr, "name", fld), f"{fld}.name")
    d = resource_vector(_required(usr, "demand", fld), resources, f"{fld}.demand")
    if not (d > 0).any():
        raise ScenarioError(f"{fld}.demand", "all zero: a task must need some resource")
    weight = number(usr.get("weight", 1), f"{fld}.weight", positive=True)
    cap = usr.get("max_tasks")
    max_tasks = math.inf if cap is None else number(cap, f"{fld}.max_tasks", allow_inf=True)
    servers: tuple[str, ...] | None = None
    if usr.get("servers") is not None:
        servers = tuple(_name(s, f"{fld}.servers[{j}]")
                        for j, s in enumerate(_sequence(usr["servers"], f"{fld}.servers")))
    requires: dict[str, str] = {}
    if usr.get("requires") is not None:
        req = _mapping(usr["requires"], f"{fld}.requires")
        requires = {k: _label(v, f"{fld}.requires.{k}") for k, v in req.items()}
    gamma: dict[str, float] = {}
    if usr.get("gamma") is not None:
        gm = _mapping(usr["gamma"], f"{fld}.gamma")
        gamma = {s: number(v, f"{fld}.gamma.{s}") for s, v in gm.items()}
    ext: dict[str, float] = {}
    if usr.get("external_demand") is not None:
        if not external:
            raise ScenarioError(f"{fld}.external_demand", "no `external` resource is declared")
        xd = resource_vector(usr["external_demand"], external, f"{fld}.external_demand")
        ext = {r: float(xd[j]) for j, r in enumerate(external)}
    server_tasks = None
    if usr.get("server_tasks") is not None:
        server_tasks = parse_server_tasks(usr["server_tasks"], f"{fld}.server_tasks")
    groups = None
    if usr.get("task_groups") is not None:
        groups = parse_task_groups(usr["task_groups"], f"{fld}.task_groups")
    return UserSpec(name, {r: float(d[j]) for j, r in enumerate(resources)}, weight, max_tasks,
                    PlacementRule(servers, requires), gamma, ext, server_tasks, groups)


def server_spec(value: Any, fld: str, resources: Sequence[str],
                keys: set[str] = SERVER_KEYS) -> ServerSpec:
    """A server entry (``servers[i]``, or the body of a ``server_joins`` event, whose ``keys``
    are :data:`NEW_SERVER_KEYS`) as a :class:`ServerSpec`."""
    srv = _mapping(value, fld)
    _check_keys(srv, keys, fld)
    name = _name(_required(srv, "name", fld), f"{fld}.name")
    cap = resource_vector(_required(srv, "capacity", fld), resources, f"{fld}.capacity")
    lab = _mapping(srv.get("labels", {}) or {}, f"{fld}.labels")
    labels = {k: _label(v, f"{fld}.labels.{k}") for k, v in lab.items()}
    count = None
    if "count" in srv:
        count = srv["count"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ScenarioError(f"{fld}.count", f"must be a whole number >= 1, got {count!r}")
    return ServerSpec(name, {r: float(cap[j]) for j, r in enumerate(resources)}, labels, count)
