"""Building a scenario from a parsed document: every key checked, the arrays built.

The document is read once, here: its entries become typed values (:mod:`.entries`) placed in
file order by the same steps that grow a scenario (:meth:`Scenario.with_servers
<psdsf_dist.model.scenario.Scenario.with_servers>`, :meth:`~psdsf_dist.model.scenario.Scenario.
with_users`), its events typed :class:`~psdsf_dist.model.events.Event` values, its ``tenants`` a
flag.  Lists longer than their limits are refused before they are walked, and a new user or
server that an event brings is checked as a declared one would be.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from psdsf_dist.errors import ScenarioError, ScenarioWarning
from psdsf_dist.model.arrays import demand_gamma, first_duplicate, frozen
from psdsf_dist.model.entries import server_spec, user_spec
from psdsf_dist.model.events import Event, SetDemand, SetMaxTasks, SetWeight, parse_events
from psdsf_dist.model.fields import _check_keys, _kind, _mapping, _name, _sequence, number
from psdsf_dist.model.limits import (
    LIMITS_ENV,
    Limits,
    check_span,
    current_limits,
    nesting_depth,
)
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.model.tenant_policy import parse_tenant_policy

TOP_KEYS = {"resources", "servers", "users", "external", "events", "name", "description",
            "tenants", "tenant_policy"}


def build_scenario(data: Any) -> Scenario:
    """The scenario a parsed document describes (:meth:`Scenario.from_dict`), every key
    checked: the first problem in file order raises :class:`ScenarioError` naming its field."""
    if data is None:
        raise ScenarioError("", "empty scenario")
    limits = current_limits()
    if isinstance(data, Mapping):
        # each entry is at least one server, user or event: a list longer than the limit is
        # refused before any walk of it (walking a huge list is the cost the limit bounds)
        for key in ("servers", "users", "events"):
            listed = data.get(key)
            if isinstance(listed, list):
                limits.check(key, len(listed), key)
    depth = nesting_depth(data, limits.depth)
    if depth > limits.depth:
        raise ScenarioError("", f"nested more than {limits.depth} levels deep (a scenario "
                                f"needs about 5; raise it with {LIMITS_ENV}=\"depth=N\")")
    if not isinstance(data, Mapping) or not any(k in TOP_KEYS for k in data):
        # not a scenario at all (e.g. some other file): say so without quoting any of it
        none = " with none of those keys" if isinstance(data, Mapping) else ""
        raise ScenarioError("", "not a scenario: expected a mapping with resources, servers "
                                f"and users, got {_kind(data)}{none}")
    top = _mapping(data, "scenario")
    _check_keys(top, TOP_KEYS, "")
    if "resources" not in top:
        raise ScenarioError("resources", "missing")
    resources = [
        _name(r, f"resources[{j}]")
        for j, r in enumerate(_sequence(top["resources"], "resources"))
    ]
    if not resources:
        raise ScenarioError("resources", "no resource declared")
    limits.check("resources", len(resources), "resources")
    _unique(resources, "resources")

    # servers (classes expanded)
    if "servers" not in top:
        raise ScenarioError("servers", "missing")
    servers_in = _sequence(top["servers"], "servers")
    _check_server_count(servers_in, limits)
    M = len(resources)
    no_one = Scenario(
        resources=tuple(resources), server_names=(), server_class=(), server_labels=(),
        user_names=(), capacity=frozen(np.zeros((0, M))), demand=frozen(np.zeros((0, M))),
        weight=frozen(np.zeros(0)), placement=frozen(np.zeros((0, 0), dtype=bool)),
        gamma=frozen(np.zeros((0, 0))), demand_gamma=frozen(np.zeros((0, 0))),
        max_tasks=frozen(np.zeros(0)), gamma_given=frozen(np.zeros((0, 0))),
        placement_rules=(),
    )
    # each entry parsed as it is placed: the first problem in file order is the one reported
    scenario = no_one.with_servers(server_spec(srv, f"servers[{s}]", resources)
                                   for s, srv in enumerate(servers_in))
    if not scenario.num_servers:
        raise ScenarioError("servers", "no server declared")

    # external resources (outside every server; TSF-ER)
    ext_names: list[str] = []
    ext_cap = np.zeros(0)
    if "external" in top and top["external"] is not None:
        ext = _mapping(top["external"], "external")
        ext_names = list(ext)
        for k in ext_names:
            if k in resources:
                raise ScenarioError(f"external.{k}", "already declared as a server resource")
        ext_cap = np.array([number(ext[k], f"external.{k}") for k in ext_names], dtype=float)
    scenario = dataclasses.replace(scenario, external_resources=tuple(ext_names),
                                   external_capacity=frozen(ext_cap),
                                   external_demand=frozen(np.zeros((0, len(ext_names)))))

    # users
    tenants = top.get("tenants", False)
    if not isinstance(tenants, bool):
        raise ScenarioError("tenants", f"expected true or false, got {tenants!r}")
    if "users" not in top and not tenants:
        raise ScenarioError("users", "missing")
    policy = None
    if "tenant_policy" in top:
        if not tenants:
            raise ScenarioError("tenant_policy", "needs `tenants: true`")
        policy = parse_tenant_policy(top["tenant_policy"], resources)
    users_in = _sequence(top.get("users") or [], "users")
    limits.check("users", len(users_in), "users")
    limits.check("cells", len(users_in) * scenario.num_servers, "users")
    if not users_in and not tenants:
        raise ScenarioError("users", "no user declared")
    scenario = scenario.with_users(user_spec(usr, f"users[{n}]", resources, ext_names)
                                   for n, usr in enumerate(users_in))
    for n, uname in enumerate(scenario.user_names):
        if not (scenario.gamma[n] > 0).any():
            warnings.warn(
                f"users[{n}] ({uname}): eligible on no server; it will get no task",
                ScenarioWarning,
                stacklevel=3,
            )

    # events (churn)
    events = top.get("events") or ()
    if events:
        limits.check("events", len(_sequence(events, "events")), "events")
    parsed = parse_events(top.get("events"), resources=resources, external=ext_names,
                          server_names=scenario.server_names, user_names=scenario.user_names)
    scenario = dataclasses.replace(scenario, events=parsed, tenants=tenants,
                                   tenant_policy=policy)
    # a new user or server is checked as a declared one is, by growing the scenario with it;
    # the grown scenario is kept (a cached property) for the universe of a run
    _ = scenario.grown
    _check_span_with_settings(parsed, scenario)
    return scenario


def _check_server_count(servers: Sequence[Any], limits: Limits) -> None:
    """Refuse more servers than the limit before a class is expanded (a count is checked
    for what it is when its class is read)."""
    total = 0
    for s, srv in enumerate(servers):
        cnt = srv.get("count", 1) if isinstance(srv, Mapping) else 1
        total += cnt if isinstance(cnt, int) and not isinstance(cnt, bool) and cnt > 0 else 1
        limits.check("servers", total, f"servers[{s}].count")


def _check_span_with_settings(events: Sequence[Event], scenario: Scenario) -> None:
    """The span limit (:func:`check_span`) over every value a declared user's settings take
    in the run: the declared ones and those ``set_weight``, ``set_max_tasks`` and
    ``set_demand`` events give (joining users and servers are checked when the scenario grows
    by them)."""
    rows = [scenario.gamma]
    caps = list(scenario.max_tasks)
    weights = list(scenario.weight)
    more = False
    placement, given = scenario.placement, scenario.gamma_given
    for e in events:
        if isinstance(e, SetWeight):
            weights.append(e.weight)
            more = True
        elif isinstance(e, SetMaxTasks):
            caps.append(e.max_tasks)
            more = True
        elif isinstance(e, SetDemand) and e.user in scenario.user_index:
            n = scenario.user_index[e.user]
            vec = np.array([[float(e.demand.get(r, 0.0)) for r in scenario.resources]])
            dg_row = demand_gamma(scenario.capacity, vec)[0] * placement[n]
            rows.append((np.where(np.isnan(given[n]), dg_row, given[n]) * placement[n])[None, :])
            more = True
    if not more:
        return
    try:
        check_span(np.concatenate(rows), caps, weights)
    except ScenarioError as err:
        raise ScenarioError("events", f"with the values its events set, {err.message}") from None


def _unique(items: Sequence[str], fld: str) -> None:
    dup = first_duplicate(items)
    if dup is not None:
        raise ScenarioError(fld, f"duplicate name {dup!r}")
