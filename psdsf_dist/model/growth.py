"""Growing a scenario by servers and users: the arrays of its document with the entries
appended, each entry checked as a declared one is.

A scenario grows when its document is built (the entries of ``servers`` and ``users`` are placed
one at a time, :mod:`psdsf_dist.model.build`) and when servers or users join a run
(:meth:`Scenario.with_joiners <psdsf_dist.model.scenario.Scenario.with_joiners>`), through the
same steps, so a joining entry is checked exactly as a declared one would be.  Indices never
move: servers are appended as columns, users as rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.arrays import demand_gamma, first_duplicate, frozen
from psdsf_dist.model.entries import PlacementRule, ServerSpec, UserSpec
from psdsf_dist.model.fields import resource_vector
from psdsf_dist.model.limits import check_span, current_limits
from psdsf_dist.model.task_groups import BoundTasks, extend_task_groups

if TYPE_CHECKING:  # the scenario's methods call these: it imports this module
    from psdsf_dist.model.scenario import Scenario

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def add_servers(scenario: Scenario, servers: Iterable[ServerSpec],
                fields: Sequence[str] | None) -> Scenario:
    """:meth:`Scenario.with_servers <psdsf_dist.model.scenario.Scenario.with_servers>`: the
    new columns are the demand-based ``gamma`` of every user whose placement rule admits the
    server (:func:`_admitted`)."""
    limits = current_limits()
    first = len(scenario.class_names)
    names = list(scenario.server_names)
    classes = list(scenario.server_class)
    labels = list(scenario.server_labels)
    caps: list[FloatArray] = []
    taken = set(scenario.class_members)
    for j, spec in enumerate(servers):
        fld = fields[j] if fields is not None else f"servers[{first + j}]"
        if spec.name in taken or spec.name in scenario.server_index:
            raise ScenarioError(f"{fld}.name", f"duplicate server name {spec.name!r}")
        taken.add(spec.name)
        cap = resource_vector(spec.capacity, scenario.resources, f"{fld}.capacity")
        for m in spec.members:
            limits.check("servers", len(names) + 1,
                         f"{fld}.count" if spec.count is not None else fld)
            names.append(m)
            classes.append(spec.name)
            labels.append(spec.labels)
            caps.append(cap)
    if not caps:
        return scenario
    dup = first_duplicate(names)
    if dup is not None:
        raise ScenarioError("servers", f"duplicate server name {dup!r} after expanding classes")
    limits.check("cells", scenario.num_users * len(names), "users")
    K0 = scenario.num_servers
    new_cap = np.array(caps, dtype=float)
    col = _admitted(scenario.placement_rules,
                    [(names[i], classes[i], labels[i]) for i in range(K0, len(names))])
    dg = demand_gamma(new_cap, scenario.demand) * col
    gamma = np.hstack([scenario.gamma, dg])
    check_span(gamma, scenario.max_tasks, scenario.weight)
    return dataclasses.replace(
        scenario,
        server_names=tuple(names),
        server_class=tuple(classes),
        server_labels=tuple(labels),
        capacity=frozen(np.vstack([scenario.capacity, new_cap])),
        placement=frozen(np.hstack([scenario.placement, col])),
        gamma=frozen(gamma),
        demand_gamma=frozen(np.hstack([scenario.demand_gamma, dg])),
        gamma_given=frozen(np.hstack([scenario.gamma_given, np.full(dg.shape, np.nan)])),
    )


def add_users(scenario: Scenario, users: Iterable[UserSpec],
              fields: Sequence[str] | None) -> Scenario:
    """:meth:`Scenario.with_users <psdsf_dist.model.scenario.Scenario.with_users>`: each new
    row is open where its placement rule admits (:func:`_placement_row`), its ``gamma`` the
    demand-based one but where it gives its own (:func:`_gamma_overrides`)."""
    limits = current_limits()
    N0, K = scenario.num_users, scenario.num_servers
    taken = set(scenario.user_names)
    added: list[UserSpec] = []
    where: list[str] = []
    rows: list[BoolArray] = []
    given: list[FloatArray] = []
    demand: list[FloatArray] = []
    ext: list[FloatArray] = []
    matches: dict[tuple[tuple[str, str], ...], BoolArray] = {}
    for j, spec in enumerate(users):
        fld = fields[j] if fields is not None else f"users[{N0 + j}]"
        if spec.name in taken:
            raise ScenarioError(f"{fld}.name", f"duplicate user name {spec.name!r}")
        taken.add(spec.name)
        demand.append(resource_vector(spec.demand, scenario.resources, f"{fld}.demand"))
        row = _placement_row(scenario, spec.placement, fld, matches)
        gvals = np.full(K, np.nan)
        for i, g in _gamma_overrides(scenario, spec.gamma, row, fld).items():
            gvals[i] = g
        ext.append(resource_vector(spec.external_demand, scenario.external_resources,
                                   f"{fld}.external_demand"))
        added.append(spec)
        where.append(fld)
        rows.append(row)
        given.append(gvals)
    n = len(added)
    limits.check("users", N0 + n, "users")
    limits.check("cells", (N0 + n) * K, "users")
    new_rows = np.array(rows, dtype=bool).reshape(n, K)
    groups = extend_task_groups(
        scenario.task_groups, N0,
        [BoundTasks(u.server_tasks, u.task_groups, fld) for u, fld in zip(added, where,
                                                                          strict=True)],
        new_rows, scenario.server_index, scenario.class_members, limits)
    new_given = np.array(given, dtype=float).reshape(n, K)
    dg = demand_gamma(scenario.capacity,
                      np.array(demand, dtype=float).reshape(n, scenario.num_resources)) * new_rows
    gamma = np.vstack([scenario.gamma, np.where(np.isnan(new_given), dg, new_given) * new_rows])
    weight = np.concatenate([scenario.weight, [u.weight for u in added]])
    max_tasks = np.concatenate([scenario.max_tasks, [u.max_tasks for u in added]])
    check_span(gamma, max_tasks, weight)
    return dataclasses.replace(
        scenario,
        user_names=(*scenario.user_names, *(u.name for u in added)),
        demand=frozen(np.vstack([scenario.demand, np.array(demand, dtype=float).reshape(
            n, scenario.num_resources)])),
        weight=frozen(weight),
        placement=frozen(np.vstack([scenario.placement, new_rows])),
        gamma=frozen(gamma),
        demand_gamma=frozen(np.vstack([scenario.demand_gamma, dg])),
        max_tasks=frozen(max_tasks),
        gamma_given=frozen(np.vstack([scenario.gamma_given, new_given])),
        placement_rules=(*scenario.placement_rules, *(u.placement for u in added)),
        external_demand=frozen(np.vstack([scenario.external_demand, np.array(
            ext, dtype=float).reshape(n, len(scenario.external_resources))])),
        task_groups=groups,
    )


def _placement_row(scenario: Scenario, rule: PlacementRule, fld: str,
                   matches: dict[tuple[tuple[str, str], ...], BoolArray]) -> BoolArray:
    """The servers a placement rule opens, every server or class it names checked to
    exist.  ``matches``: the servers whose labels meet each ``requires`` seen so far
    (users share a handful of them; each is matched against the labels once)."""
    K = scenario.num_servers
    row = np.ones(K, dtype=bool)
    if rule.servers is not None:
        row = np.zeros(K, dtype=bool)
        for j, sname in enumerate(rule.servers):
            if sname in scenario.class_members:
                row[list(scenario.class_members[sname])] = True
            elif sname in scenario.server_index:
                row[scenario.server_index[sname]] = True
            else:
                raise ScenarioError(f"{fld}.servers[{j}]", f"unknown server or class {sname!r}")
    if rule.requires:
        key = tuple(sorted(rule.requires.items()))
        if key not in matches:
            matches[key] = np.array([all(lab.get(k) == v for k, v in key)
                                     for lab in scenario.server_labels], dtype=bool).reshape(K)
        row &= matches[key]
    return row


def _gamma_overrides(scenario: Scenario, gamma: Mapping[str, float], row: BoolArray,
                     fld: str) -> dict[int, float]:
    """A user's ``gamma`` by column: a class gives each member its value, a member named
    explicitly overrides its class; only where the user may run."""
    out: dict[int, float] = {}
    # class entries first so that a member named explicitly overrides its class
    for sname in sorted(gamma, key=lambda s: s not in scenario.class_members):
        if sname in scenario.class_members:
            targets: Sequence[int] = scenario.class_members[sname]
        elif sname in scenario.server_index:
            targets = [scenario.server_index[sname]]
        else:
            raise ScenarioError(f"{fld}.gamma.{sname}", "unknown server or class")
        if not row[list(targets)].all():
            raise ScenarioError(f"{fld}.gamma.{sname}",
                                "server is excluded by the user's placement")
        for t in targets:
            out[t] = gamma[sname]
    return out



def _admitted(rules: Sequence[PlacementRule],
              servers: Sequence[tuple[str, str, Mapping[str, str]]]) -> BoolArray:
    """N x K': whether user n's rule admits server i (name, class, labels).  Each distinct
    rule is evaluated once: users share a handful of rules (most users have none)."""
    out = np.ones((len(rules), len(servers)), dtype=bool)
    done: dict[tuple[tuple[str, ...] | None, tuple[tuple[str, str], ...]], BoolArray] = {}
    for n, rule in enumerate(rules):
        if rule.servers is None and not rule.requires:
            continue
        key = (rule.servers, tuple(sorted(rule.requires.items())))
        if key not in done:
            done[key] = np.array([rule.admits(*srv) for srv in servers], dtype=bool)
        out[n] = done[key]
    return out


