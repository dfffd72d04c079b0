"""The validated scenario: servers, users, resources as dense numpy arrays.

A scenario is read from YAML or JSON (one schema, see docs/scenario-format.md) or built from
Python with :meth:`Scenario.from_dict`.  Everything is checked up front; a problem raises
:class:`~psdsf_dist.errors.ScenarioError` naming the field (``users[2].weight``), so a typo never
passes silently.

Array conventions (used by every other module):

* ``capacity``  K x M   capacity of resource r on server i
* ``demand``    N x M   per-task demand of user n
* ``weight``    N       phi, > 0
* ``placement`` N x K   delta: user n may run on server i (``servers`` and ``requires``)
* ``gamma``     N x K   tasks n could run alone on i; 0 where ineligible
* ``demand_gamma`` N x K  the demand-based gamma before per-user overrides
* ``max_tasks`` N       finite backlog, ``inf`` when unlimited
* ``gamma_given`` N x K  per-user gamma overrides (section IV extension), NaN where not given
* ``task_groups`` per-server task counts and task groups of bound users (Guan thesis chapters
  4-5, :mod:`.task_groups`), None when no user declares any

The document is read once, here: its entries become typed values (:mod:`.entries`), its events
typed :class:`~psdsf_dist.model.events.Event` values, its ``tenants`` a flag.  A scenario grows
by servers and users that join (:meth:`Scenario.with_servers`, :meth:`Scenario.with_users`,
:meth:`Scenario.with_joiners`) through the same steps that place the declared ones, so a joining
entry is checked exactly as a declared one would be.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import stat
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import yaml

from psdsf_dist.errors import ScenarioError, ScenarioWarning
from psdsf_dist.model.entries import (
    PlacementRule,
    ServerSpec,
    UserSpec,
    server_spec,
    user_spec,
)
from psdsf_dist.model.events import (
    Event,
    ServerJoins,
    SetDemand,
    SetMaxTasks,
    SetWeight,
    UserJoins,
    parse_events,
)
from psdsf_dist.model.fields import (
    _check_keys,
    _kind,
    _mapping,
    _name,
    _sequence,
    number,
    resource_vector,
    show,
)
from psdsf_dist.model.limits import (
    LIMITS_ENV,
    Limits,
    check_span,
    current_limits,
    nesting_depth,
)
from psdsf_dist.model.task_groups import BoundTasks, TaskGroups, extend_task_groups
from psdsf_dist.model.tenant_policy import TenantPolicy, parse_tenant_policy

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
Mode = Literal["rdm", "tdm"]
MODES: tuple[Mode, ...] = ("rdm", "tdm")

TOP_KEYS = {"resources", "servers", "users", "external", "events", "name", "description",
            "tenants", "tenant_policy"}


@dataclass(frozen=True, eq=False)
class Scenario:
    """A validated scenario. Arrays are read-only; build variants with :meth:`replace_users`."""

    resources: tuple[str, ...]
    server_names: tuple[str, ...]
    server_class: tuple[str, ...]
    server_labels: tuple[Mapping[str, str], ...]
    user_names: tuple[str, ...]
    capacity: FloatArray
    demand: FloatArray
    weight: FloatArray
    placement: BoolArray
    gamma: FloatArray
    demand_gamma: FloatArray
    max_tasks: FloatArray
    gamma_given: FloatArray
    placement_rules: tuple[PlacementRule, ...]
    """Each user's declared placement (``servers``, ``requires``): what opens a server that
    joins later to it (:meth:`with_servers`)."""
    external_resources: tuple[str, ...] = ()
    external_capacity: FloatArray = field(default_factory=lambda: np.zeros(0))
    external_demand: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    events: tuple[Event, ...] = ()
    """The scenario file's events (churn), checked and in time order (ties in file order)."""
    tenants: bool = False
    """``tenants: true``: users are tenants' task queues, present only while they have work."""
    task_groups: TaskGroups | None = None
    tenant_policy: TenantPolicy | None = None
    """A tenants run's operator policy (:mod:`~psdsf_dist.model.tenant_policy`; None: open)."""

    # -- sizes -------------------------------------------------------------------------------
    @property
    def num_servers(self) -> int:
        return len(self.server_names)

    @property
    def num_users(self) -> int:
        return len(self.user_names)

    @property
    def num_resources(self) -> int:
        return len(self.resources)

    @functools.cached_property
    def tasks_alone(self) -> FloatArray:
        """(N,) each user's tasks alone summed over every server it may use (``gamma``'s row
        sums; servers left out of ``placement`` add nothing).  Computed once per scenario: every
        server's view divides by it (O(N K) each time otherwise)."""
        total: FloatArray = self.gamma.sum(axis=1)
        return total

    @functools.cached_property
    def user_index(self) -> Mapping[str, int]:
        """Each user's row, by name (a lookup, not a scan of ``user_names``)."""
        return {u: n for n, u in enumerate(self.user_names)}

    @functools.cached_property
    def server_index(self) -> Mapping[str, int]:
        """Each server's column, by name."""
        return {s: i for i, s in enumerate(self.server_names)}

    @functools.cached_property
    def class_members(self) -> Mapping[str, tuple[int, ...]]:
        """The columns of each server class, by class name (a server declared alone is a
        class of one, named after it)."""
        members: dict[str, list[int]] = {}
        for i, c in enumerate(self.server_class):
            members.setdefault(c, []).append(i)
        return {c: tuple(m) for c, m in members.items()}

    @property
    def eligible(self) -> BoolArray:
        """N x K: user n can run tasks on server i (gamma > 0)."""
        return self.gamma > 0

    @property
    def class_names(self) -> tuple[str, ...]:
        """Server classes in order of first appearance."""
        return tuple(dict.fromkeys(self.server_class))

    # -- per-mode resource view --------------------------------------------------------------
    def check_mode(self, mode: str) -> Mode:
        if mode not in MODES:
            raise ScenarioError("mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
        if mode == "rdm":
            bad = (self.gamma > 0) & (self.demand_gamma <= 0)
            if bad.any():
                n, i = map(int, np.argwhere(bad)[0])
                raise ScenarioError(
                    f"users[{n}].gamma.{self.server_names[i]}",
                    "server lacks a resource the user demands, so a gamma given there is only "
                    "meaningful when servers are time-shared (use mode tdm)",
                )
        return mode

    def server_capacity(self, mode: Mode) -> FloatArray:
        """K x M' capacities of the resources the server procedure shares (time: M' = 1)."""
        if mode == "tdm":
            return np.ones((self.num_servers, 1))
        return self.capacity

    def consumption(self, server: int, mode: Mode) -> FloatArray:
        """N x M' per-task consumption at one server.

        RDM: the demand, scaled where gamma was given so that a user alone gets exactly gamma
        tasks.  TDM: a share ``1/gamma`` of the server's time per task.
        """
        g = self.gamma[:, server]
        with np.errstate(divide="ignore", invalid="ignore"):
            if mode == "tdm":
                return np.where(g > 0, 1.0 / g, 0.0)[:, None]
            scale = np.where(g > 0, self.demand_gamma[:, server] / g, 0.0)
        return self.demand * scale[:, None]

    def consumption_tensor(
        self, mode: Mode, servers: slice | npt.NDArray[np.int64] | None = None
    ) -> FloatArray:
        """K' x N x M' consumption for a block (or an index array) of servers (vectorised
        :meth:`consumption`)."""
        sl = servers if servers is not None else slice(None)
        g = self.gamma[:, sl].T  # K' x N
        with np.errstate(divide="ignore", invalid="ignore"):
            if mode == "tdm":
                return np.where(g > 0, 1.0 / g, 0.0)[:, :, None]
            scale = np.where(g > 0, self.demand_gamma[:, sl].T / g, 0.0)
        return scale[:, :, None] * self.demand[None, :, :]

    # -- building ----------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, source: str | None = None) -> Scenario:
        """Validate a parsed scenario document (the file schema) and build the arrays."""
        try:
            return _build(data)
        except ScenarioError as err:
            raise err.with_source(source) if source else err from None

    def replace_users(
        self,
        *,
        demand: FloatArray | None = None,
        weight: FloatArray | None = None,
        max_tasks: FloatArray | None = None,
        placement: BoolArray | None = None,
        task_groups: TaskGroups | None = None,
        external_demand: FloatArray | None = None,
    ) -> Scenario:
        """A copy with some user arrays replaced (gamma recomputed). Used by churn and probes."""
        d = self.demand if demand is None else np.asarray(demand, dtype=float)
        p = self.placement if placement is None else np.asarray(placement, dtype=bool)
        dg = demand_gamma(self.capacity, d) * p
        gam = np.where(np.isnan(self.gamma_given), dg, self.gamma_given) * p
        return Scenario(
            resources=self.resources,
            server_names=self.server_names,
            server_class=self.server_class,
            server_labels=self.server_labels,
            user_names=self.user_names,
            capacity=self.capacity,
            demand=_frozen(d),
            weight=_frozen(self.weight if weight is None else np.asarray(weight, dtype=float)),
            placement=_frozen(p),
            gamma=_frozen(gam),
            demand_gamma=_frozen(dg),
            max_tasks=_frozen(
                self.max_tasks if max_tasks is None else np.asarray(max_tasks, dtype=float)
            ),
            gamma_given=self.gamma_given,
            external_resources=self.external_resources,
            external_capacity=self.external_capacity,
            external_demand=self.external_demand if external_demand is None
            else _frozen(np.asarray(external_demand, dtype=float)),
            placement_rules=self.placement_rules,
            events=self.events,
            tenants=self.tenants,
            task_groups=self.task_groups if task_groups is None else task_groups,
            tenant_policy=self.tenant_policy,
        )

    def only_users(self, rows: Sequence[int]) -> Scenario:
        """A copy with only the users ``rows`` (in that order), every server kept: what the
        document with only those entries of ``users`` builds (a user's arrays depend on its
        entry and the servers alone).  Without events, which may name users left out."""
        r = list(rows)
        return dataclasses.replace(
            self,
            user_names=tuple(self.user_names[n] for n in r),
            demand=_frozen(self.demand[r]),
            weight=_frozen(self.weight[r]),
            placement=_frozen(self.placement[r]),
            gamma=_frozen(self.gamma[r]),
            demand_gamma=_frozen(self.demand_gamma[r]),
            max_tasks=_frozen(self.max_tasks[r]),
            gamma_given=_frozen(self.gamma_given[r]),
            placement_rules=tuple(self.placement_rules[n] for n in r),
            external_demand=_frozen(self.external_demand[r]),
            events=(),
            task_groups=None if self.task_groups is None else self.task_groups.of_users(r),
        )

    # -- growing -----------------------------------------------------------------------------
    def with_servers(self, servers: Iterable[ServerSpec],
                     fields: Sequence[str] | None = None) -> Scenario:
        """A copy with ``servers`` appended (a class entry expanded to its members), each
        checked as an entry of ``servers`` is: a name no server or class has, and within the
        ``servers`` and ``cells`` limits.  ``fields``: the field each entry is reported under
        (default ``servers[i]``, its place were it written after the declared ones).  The
        entries are taken one at a time, so a lazily parsed list reports its first problem
        first.

        Indices do not move.  A new server is open to each user whose declared placement
        admits it (:class:`~psdsf_dist.model.entries.PlacementRule`); its tasks alone are the
        demand-based ones (a ``gamma`` can name only servers that exist when the user is
        declared), so the arrays are those of a document with the entries appended."""
        limits = current_limits()
        first = len(self.class_names)
        names = list(self.server_names)
        classes = list(self.server_class)
        labels = list(self.server_labels)
        caps: list[FloatArray] = []
        taken = set(self.class_members)
        for j, spec in enumerate(servers):
            fld = fields[j] if fields is not None else f"servers[{first + j}]"
            if spec.name in taken or spec.name in self.server_index:
                raise ScenarioError(f"{fld}.name", f"duplicate server name {spec.name!r}")
            taken.add(spec.name)
            cap = resource_vector(spec.capacity, self.resources, f"{fld}.capacity")
            for m in spec.members:
                limits.check("servers", len(names) + 1,
                             f"{fld}.count" if spec.count is not None else fld)
                names.append(m)
                classes.append(spec.name)
                labels.append(spec.labels)
                caps.append(cap)
        if not caps:
            return self
        dup = _first_duplicate(names)
        if dup is not None:
            raise ScenarioError("servers", f"duplicate server name {dup!r} after expanding classes")
        limits.check("cells", self.num_users * len(names), "users")
        K0 = self.num_servers
        new_cap = np.array(caps, dtype=float)
        col = _admitted(self.placement_rules,
                        [(names[i], classes[i], labels[i]) for i in range(K0, len(names))])
        dg = demand_gamma(new_cap, self.demand) * col
        gamma = np.hstack([self.gamma, dg])
        check_span(gamma, self.max_tasks, self.weight)
        return dataclasses.replace(
            self,
            server_names=tuple(names),
            server_class=tuple(classes),
            server_labels=tuple(labels),
            capacity=_frozen(np.vstack([self.capacity, new_cap])),
            placement=_frozen(np.hstack([self.placement, col])),
            gamma=_frozen(gamma),
            demand_gamma=_frozen(np.hstack([self.demand_gamma, dg])),
            gamma_given=_frozen(np.hstack([self.gamma_given, np.full(dg.shape, np.nan)])),
        )

    def with_users(self, users: Iterable[UserSpec],
                   fields: Sequence[str] | None = None) -> Scenario:
        """A copy with ``users`` appended, each checked as an entry of ``users`` is against
        the servers: a name no user has, servers and classes it names that exist, ``gamma``
        and bound tasks only where it may run, within the ``users`` and ``cells`` limits, and
        the span of every user's task counts and weights (:func:`check_span`).  ``fields``:
        the field each entry is reported under (default ``users[n]``, its row).  The entries
        are taken one at a time, so a lazily parsed list reports its first problem first
        (bound tasks are checked after every entry, as the task groups are built at once).
        Indices do not move; the arrays are those of a document with the entries appended."""
        limits = current_limits()
        N0, K = self.num_users, self.num_servers
        taken = set(self.user_names)
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
            demand.append(resource_vector(spec.demand, self.resources, f"{fld}.demand"))
            row = self._placement_row(spec.placement, fld, matches)
            gvals = np.full(K, np.nan)
            for i, g in self._gamma_overrides(spec.gamma, row, fld).items():
                gvals[i] = g
            ext.append(resource_vector(spec.external_demand, self.external_resources,
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
            self.task_groups, N0,
            [BoundTasks(u.server_tasks, u.task_groups, fld) for u, fld in zip(added, where,
                                                                              strict=True)],
            new_rows, self.server_index, self.class_members, limits)
        new_given = np.array(given, dtype=float).reshape(n, K)
        dg = demand_gamma(self.capacity,
                          np.array(demand, dtype=float).reshape(n, self.num_resources)) * new_rows
        gamma = np.vstack([self.gamma, np.where(np.isnan(new_given), dg, new_given) * new_rows])
        weight = np.concatenate([self.weight, [u.weight for u in added]])
        max_tasks = np.concatenate([self.max_tasks, [u.max_tasks for u in added]])
        check_span(gamma, max_tasks, weight)
        return dataclasses.replace(
            self,
            user_names=(*self.user_names, *(u.name for u in added)),
            demand=_frozen(np.vstack([self.demand, np.array(demand, dtype=float).reshape(
                n, self.num_resources)])),
            weight=_frozen(weight),
            placement=_frozen(np.vstack([self.placement, new_rows])),
            gamma=_frozen(gamma),
            demand_gamma=_frozen(np.vstack([self.demand_gamma, dg])),
            max_tasks=_frozen(max_tasks),
            gamma_given=_frozen(np.vstack([self.gamma_given, new_given])),
            placement_rules=(*self.placement_rules, *(u.placement for u in added)),
            external_demand=_frozen(np.vstack([self.external_demand, np.array(
                ext, dtype=float).reshape(n, len(self.external_resources))])),
            task_groups=groups,
        )

    def with_joiners(self, events: Sequence[Event]) -> Scenario:
        """A copy with every new server and then every new user that ``events`` bring
        (joins with an entry, in the order given) appended: the scenario that holds all of
        them (errors name the event's field).  The scenario itself when none is new."""
        servers = [e for e in events if isinstance(e, ServerJoins) and e.spec is not None]
        users = [e for e in events if isinstance(e, UserJoins) and e.spec is not None]
        grown = self.with_servers([e.spec for e in servers if e.spec is not None],
                                  [e.field for e in servers])
        if users:
            grown = grown.with_users([e.spec for e in users if e.spec is not None],
                                     [e.field for e in users])
        return grown

    def _placement_row(self, rule: PlacementRule, fld: str,
                       matches: dict[tuple[tuple[str, str], ...], BoolArray]) -> BoolArray:
        """The servers a placement rule opens, every server or class it names checked to
        exist.  ``matches``: the servers whose labels meet each ``requires`` seen so far
        (users share a handful of them; each is matched against the labels once)."""
        K = self.num_servers
        row = np.ones(K, dtype=bool)
        if rule.servers is not None:
            row = np.zeros(K, dtype=bool)
            for j, sname in enumerate(rule.servers):
                if sname in self.class_members:
                    row[list(self.class_members[sname])] = True
                elif sname in self.server_index:
                    row[self.server_index[sname]] = True
                else:
                    raise ScenarioError(f"{fld}.servers[{j}]", f"unknown server or class {sname!r}")
        if rule.requires:
            key = tuple(sorted(rule.requires.items()))
            if key not in matches:
                matches[key] = np.array([all(lab.get(k) == v for k, v in key)
                                         for lab in self.server_labels], dtype=bool).reshape(K)
            row &= matches[key]
        return row

    def _gamma_overrides(self, gamma: Mapping[str, float], row: BoolArray,
                         fld: str) -> dict[int, float]:
        """A user's ``gamma`` by column: a class gives each member its value, a member named
        explicitly overrides its class; only where the user may run."""
        out: dict[int, float] = {}
        # class entries first so that a member named explicitly overrides its class
        for sname in sorted(gamma, key=lambda s: s not in self.class_members):
            if sname in self.class_members:
                targets: Sequence[int] = self.class_members[sname]
            elif sname in self.server_index:
                targets = [self.server_index[sname]]
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


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file (``.yaml``, ``.yml`` or ``.json``)."""
    return Scenario.from_dict(read_document(path), str(path))


def read_document(path: str | Path) -> Any:
    """The parsed document of a scenario file, before validation: YAML, or JSON for a
    ``.json`` suffix.  Only a regular file is read, and at most ``file_bytes`` + 1 bytes of it
    (a device such as ``/dev/zero``, a FIFO or a directory is refused without reading), so
    nothing here allocates more than the limit; YAML aliases may add at most
    ``alias_nodes`` nodes to the document (:func:`_check_aliases`).  A problem raises
    :class:`ScenarioError` naming the file, without quoting its content."""
    p = Path(path)
    source = str(path)
    text = _read_bounded(p, source, current_limits().file_bytes)
    return parse_document(text, source, as_json=p.suffix.lower() == ".json")


def parse_document(text: str, source: str, *, as_json: bool = False) -> Any:
    """A scenario document (or a piece of one, such as an event given on the command line)
    parsed from YAML or JSON text, under the same limits as a file (see
    :func:`read_document`)."""
    limits = current_limits()
    if len(text) > limits.file_bytes:
        raise ScenarioError("", f"more than the limit of {limits.file_bytes:,} bytes (raise it "
                                f"with {LIMITS_ENV}=\"file_bytes=N\")", source)
    if as_json:
        try:
            return json.loads(text, object_pairs_hook=_json_object)
        except _DuplicateKeyError as err:
            raise ScenarioError("", f"malformed JSON: duplicate key {show(err.key)}",
                                source) from None
        except json.JSONDecodeError as err:
            raise ScenarioError(
                "", f"malformed JSON at line {err.lineno}: {err.msg}", source
            ) from None
        except ValueError as err:  # e.g. an integer of more digits than Python converts
            raise ScenarioError("", f"malformed JSON: {str(err).splitlines()[0]}",
                                source) from None
        except RecursionError:
            raise ScenarioError("", "malformed JSON: nested too deeply to read",
                                source) from None
    loader: _StrictYamlLoader | None = None
    try:
        loader = _StrictYamlLoader(text)  # its reader refuses unprintable characters at once
        loader.alias_budget = limits.alias_nodes
        return loader.get_single_data()
    except RecursionError:
        raise ScenarioError("", "malformed YAML: nested too deeply to read", source) from None
    except _AliasBombError as err:
        raise ScenarioError("", f"YAML aliases expand to more than {err.budget:,} extra nodes "
                                f"(raise it with {LIMITS_ENV}=\"alias_nodes=N\")",
                            source) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise ScenarioError("", f"malformed YAML{at}: {problem}", source) from None
    finally:
        if loader is not None:
            loader.dispose()


def read_text(path: str | Path) -> str:
    """The text of a regular file of at most ``file_bytes`` (the reading of
    :func:`read_document`, for inputs that are not scenario documents, e.g. job traces)."""
    return _read_bounded(Path(path), str(path), current_limits().file_bytes)


def _read_bounded(p: Path, source: str, limit: int) -> str:
    """The text of a regular file of at most ``limit`` bytes.  The file is opened without
    blocking (a FIFO with no writer would wait forever) and checked to be regular on the open
    descriptor before a byte is read; at most ``limit`` + 1 bytes are read, so a file that
    grows after the check is refused too."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ScenarioError("", "no such file", source) from None
    except IsADirectoryError:
        raise ScenarioError("", "is a directory, not a scenario file", source) from None
    except OSError as err:
        raise ScenarioError("", f"cannot read: {err.strerror or type(err).__name__}",
                            source) from None
    except ValueError:  # a NUL byte, or a character the file system cannot encode
        raise ScenarioError("", "cannot read: not a valid file name", source) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ScenarioError("", "is a directory, not a scenario file", source)
        if not stat.S_ISREG(info.st_mode):
            raise ScenarioError("", "not a regular file (a device, pipe or socket is not read)",
                                source)
        too_big = ScenarioError("", f"more than the limit of {limit:,} bytes (raise it with "
                                    f"{LIMITS_ENV}=\"file_bytes=N\")", source)
        if info.st_size > limit:
            raise too_big
        chunks: list[bytes] = []
        got = 0
        while got <= limit:
            chunk = os.read(fd, min(limit + 1 - got, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:
            raise too_big
    except OSError as err:
        raise ScenarioError("", f"cannot read: {err.strerror or type(err).__name__}",
                            source) from None
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as err:
        raise ScenarioError("", f"cannot read: not UTF-8 text (byte {err.start + 1})",
                            source) from None


class _DuplicateKeyError(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of two equal keys: a repeated key is a typo to report.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


class _AliasBombError(yaml.YAMLError):
    def __init__(self, budget: int) -> None:
        super().__init__(budget)
        self.budget = budget


class _StrictYamlLoader(yaml.SafeLoader):
    """The safe loader, refusing a key repeated in one mapping (PyYAML keeps the last) and a
    document whose aliases would expand it by more than ``alias_budget`` nodes."""

    alias_budget: int = Limits.alias_nodes

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        _check_aliases(node, self.alias_budget)
        return self.construct_document(node)


def _check_aliases(root: yaml.Node, budget: int) -> None:
    """Refuse a composed document whose expansion — every alias replaced by a copy of what it
    names — has more than ``budget`` nodes beyond the distinct ones written.  The composed
    document is a graph in which an alias is the very node it names, so ten levels of nine
    aliases are 100 nodes but 9^10 once expanded: everything that walks the constructed data
    (the nesting check, validation, output) would walk the expansion.  The expanded size is
    computed once per distinct node, children before parents, so this costs time linear in the
    file whatever the expansion."""
    size: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in size and not done:
            continue
        children = _children(node)
        if done:
            size[key] = 1 + sum(size.get(id(c), 0) for c in children)
            if size[key] - len(size) > budget:
                raise _AliasBombError(budget)
            continue
        size.setdefault(key, 0)  # on the path: a recursive alias counts as nothing more
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in size)
    if size[id(root)] - len(size) > budget:
        raise _AliasBombError(budget)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _yaml_mapping(loader: _StrictYamlLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        # merge keys (<<) may be overridden on purpose; only keys written twice are refused
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            key = loader.construct_object(key_node)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {show(key)}", key_node.start_mark
                )
            seen.add(key)
    return loader.construct_mapping(node)


_StrictYamlLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _yaml_mapping)


def demand_gamma(capacity: FloatArray, demand: FloatArray) -> FloatArray:
    """N x K: min over demanded resources of C[i, r] / D[n, r] (0 if a demanded one is missing)."""
    d = demand[:, None, :]  # N x 1 x M
    c = capacity[None, :, :]  # 1 x K x M
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(d > 0, c / d, np.inf)
    g = ratio.min(axis=2)
    g[~np.isfinite(g)] = 0.0
    return np.asarray(g, dtype=float)


# ---------------------------------------------------------------------------------------------
# validation


def _frozen(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


def document_size(data: Any) -> tuple[int, int]:
    """(users x servers, distinct event times) of a scenario document, counted without
    building anything: servers after expanding classes, users and servers that join by events
    included.  A malformed document counts what it can (the loader refuses it after)."""
    if not isinstance(data, Mapping):
        return 0, 0
    servers_in = data.get("servers")
    users_in = data.get("users")
    events = data.get("events")
    servers = 0
    for srv in servers_in if isinstance(servers_in, list) else []:
        cnt = srv.get("count", 1) if isinstance(srv, Mapping) else 1
        servers += cnt if isinstance(cnt, int) and not isinstance(cnt, bool) and cnt > 0 else 1
    users = len(users_in) if isinstance(users_in, list) else 0
    times: set[Any] = set()
    for e in events if isinstance(events, list) else []:
        if isinstance(e, Mapping):
            users += isinstance(e.get("user_joins"), Mapping)
            body = e.get("server_joins")
            servers += isinstance(body, Mapping) and "capacity" in body
            at = e.get("at")
            times.add(at if isinstance(at, int | float) else None)
    return users * servers, len(times)


def _check_server_count(servers: Sequence[Any], limits: Limits) -> None:
    """Refuse more servers than the limit before a class is expanded (a count is checked
    for what it is when its class is read)."""
    total = 0
    for s, srv in enumerate(servers):
        cnt = srv.get("count", 1) if isinstance(srv, Mapping) else 1
        total += cnt if isinstance(cnt, int) and not isinstance(cnt, bool) and cnt > 0 else 1
        limits.check("servers", total, f"servers[{s}].count")


def _build(data: Any) -> Scenario:
    if data is None:
        raise ScenarioError("", "empty scenario")
    limits = current_limits()
    if isinstance(data, Mapping):
        # each entry is at least one server, user or event: a list longer than the limit is
        # refused before any walk of it (a million listed servers took seconds to walk)
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
        user_names=(), capacity=_frozen(np.zeros((0, M))), demand=_frozen(np.zeros((0, M))),
        weight=_frozen(np.zeros(0)), placement=_frozen(np.zeros((0, 0), dtype=bool)),
        gamma=_frozen(np.zeros((0, 0))), demand_gamma=_frozen(np.zeros((0, 0))),
        max_tasks=_frozen(np.zeros(0)), gamma_given=_frozen(np.zeros((0, 0))),
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
                                   external_capacity=_frozen(ext_cap),
                                   external_demand=_frozen(np.zeros((0, len(ext_names)))))

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
    # a new user or server is checked as a declared one is, by growing the scenario with it
    # (what the universe of the run does again: nothing of the grown scenario is kept here)
    scenario.with_joiners(parsed)
    _check_span_with_settings(parsed, scenario)
    return scenario


def _unique(items: Sequence[str], fld: str) -> None:
    dup = _first_duplicate(items)
    if dup is not None:
        raise ScenarioError(fld, f"duplicate name {dup!r}")


def _first_duplicate(items: Sequence[str]) -> str | None:
    seen: set[str] = set()
    for it in items:
        if it in seen:
            return it
        seen.add(it)
    return None
