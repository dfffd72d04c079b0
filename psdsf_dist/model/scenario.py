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
"""

from __future__ import annotations

import functools
import json
import math
import os
import stat
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import yaml

from psdsf_dist.errors import ScenarioError, ScenarioWarning
from psdsf_dist.model.events import Event, SetDemand, SetMaxTasks, SetWeight, parse_events
from psdsf_dist.model.fields import (
    USER_KEYS,
    _check_keys,
    _kind,
    _label,
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
from psdsf_dist.model.task_groups import TaskGroups, build_task_groups
from psdsf_dist.model.tenant_policy import TenantPolicy, parse_tenant_policy

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
Mode = Literal["rdm", "tdm"]
MODES: tuple[Mode, ...] = ("rdm", "tdm")

TOP_KEYS = {"resources", "servers", "users", "external", "events", "name", "description",
            "tenants", "tenant_policy"}
SERVER_KEYS = {"name", "capacity", "count", "labels"}


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
    external_resources: tuple[str, ...] = ()
    external_capacity: FloatArray = field(default_factory=lambda: np.zeros(0))
    external_demand: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    events: tuple[Mapping[str, Any], ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict)
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
            events=self.events,
            raw=self.raw,
            task_groups=self.task_groups if task_groups is None else task_groups,
            tenant_policy=self.tenant_policy,
        )


def _check_span_with_settings(events: Sequence[Event], resources: Sequence[str],
                              capacity: FloatArray, placement: npt.NDArray[np.bool_],
                              given: FloatArray, gamma: FloatArray, caps: Sequence[float],
                              weights: Sequence[float], unames: Sequence[str]) -> None:
    """The span limit (:func:`check_span`) over every value a user's settings take in the run:
    the declared ones and those ``set_weight``, ``set_max_tasks`` and ``set_demand`` events
    give (joining users and servers are checked when their document is built)."""
    rows = [gamma]
    more_caps = list(caps)
    more_weights = list(weights)
    index = {u: n for n, u in enumerate(unames)}
    for e in events:
        if isinstance(e, SetWeight):
            more_weights.append(e.weight)
        elif isinstance(e, SetMaxTasks):
            more_caps.append(e.max_tasks)
        elif isinstance(e, SetDemand) and e.user in index:
            n = index[e.user]
            vec = np.array([[float(e.demand.get(r, 0.0)) for r in resources]])
            dg_row = demand_gamma(capacity, vec)[0] * placement[n]
            rows.append((np.where(np.isnan(given[n]), dg_row, given[n]) * placement[n])[None, :])
    if len(rows) == 1 and len(more_caps) == len(caps) and len(more_weights) == len(weights):
        return
    try:
        check_span(np.concatenate(rows), more_caps, more_weights)
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
    servers_in = top["servers"]
    names: list[str] = []
    classes: list[str] = []
    labels: list[Mapping[str, str]] = []
    caps: list[FloatArray] = []
    class_members: dict[str, list[int]] = {}
    _check_server_count(_sequence(servers_in, "servers"), limits)
    for s, srv in enumerate(_sequence(servers_in, "servers")):
        fld = f"servers[{s}]"
        srv = _mapping(srv, fld)
        _check_keys(srv, SERVER_KEYS, fld)
        if "name" not in srv:
            raise ScenarioError(f"{fld}.name", "missing")
        cname = _name(srv["name"], f"{fld}.name")
        if cname in class_members:
            raise ScenarioError(f"{fld}.name", f"duplicate server name {cname!r}")
        if "capacity" not in srv:
            raise ScenarioError(f"{fld}.capacity", "missing")
        cap = resource_vector(srv["capacity"], resources, f"{fld}.capacity")
        lab_in = _mapping(srv.get("labels", {}) or {}, f"{fld}.labels")
        lab = {k: _label(v, f"{fld}.labels.{k}") for k, v in lab_in.items()}
        if "count" in srv:
            cnt = srv["count"]
            if isinstance(cnt, bool) or not isinstance(cnt, int) or cnt < 1:
                raise ScenarioError(f"{fld}.count", f"must be a whole number >= 1, got {cnt!r}")
            members = [f"{cname}-{k}" for k in range(1, cnt + 1)]
        else:
            members = [cname]
        class_members[cname] = []
        for m in members:
            class_members[cname].append(len(names))
            names.append(m)
            classes.append(cname)
            labels.append(lab)
            caps.append(cap)
    if not names:
        raise ScenarioError("servers", "no server declared")
    dup = _first_duplicate(names)
    if dup is not None:
        raise ScenarioError("servers", f"duplicate server name {dup!r} after expanding classes")
    server_index = {n: i for i, n in enumerate(names)}
    capacity = np.array(caps, dtype=float)
    K = len(names)

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
    limits.check("cells", len(users_in) * len(names), "users")
    unames: list[str] = []
    entries: list[Mapping[str, Any]] = []
    demands: list[FloatArray] = []
    weights: list[float] = []
    caps_n: list[float] = []
    placement_rows: list[BoolArray] = []
    overrides: list[dict[int, float]] = []
    ext_dem: list[FloatArray] = []
    for n, usr in enumerate(users_in):
        fld = f"users[{n}]"
        usr = _mapping(usr, fld)
        _check_keys(usr, USER_KEYS, fld)
        if "name" not in usr:
            raise ScenarioError(f"{fld}.name", "missing")
        uname = _name(usr["name"], f"{fld}.name")
        if uname in unames:
            raise ScenarioError(f"{fld}.name", f"duplicate user name {uname!r}")
        if "demand" not in usr:
            raise ScenarioError(f"{fld}.demand", "missing")
        d = resource_vector(usr["demand"], resources, f"{fld}.demand")
        if not (d > 0).any():
            raise ScenarioError(f"{fld}.demand", "all zero: a task must need some resource")
        w = number(usr.get("weight", 1), f"{fld}.weight", positive=True)
        mt_raw = usr.get("max_tasks")
        mt = math.inf if mt_raw is None else number(mt_raw, f"{fld}.max_tasks", allow_inf=True)
        row = np.ones(K, dtype=bool)
        if "servers" in usr and usr["servers"] is not None:
            row = np.zeros(K, dtype=bool)
            for j, sname in enumerate(_sequence(usr["servers"], f"{fld}.servers")):
                sname = _name(sname, f"{fld}.servers[{j}]")
                if sname in class_members:
                    row[class_members[sname]] = True
                elif sname in server_index:
                    row[server_index[sname]] = True
                else:
                    raise ScenarioError(f"{fld}.servers[{j}]", f"unknown server or class {sname!r}")
        if "requires" in usr and usr["requires"] is not None:
            req = _mapping(usr["requires"], f"{fld}.requires")
            want = {k: _label(v, f"{fld}.requires.{k}") for k, v in req.items()}
            match = np.array([all(lab.get(k) == v for k, v in want.items()) for lab in labels])
            row &= match
        ov: dict[int, float] = {}
        if "gamma" in usr and usr["gamma"] is not None:
            gm = _mapping(usr["gamma"], f"{fld}.gamma")
            # class entries first so that a member named explicitly overrides its class
            for sname in sorted(gm, key=lambda s: s not in class_members):
                gval = number(gm[sname], f"{fld}.gamma.{sname}")
                if sname in class_members:
                    targets = class_members[sname]
                elif sname in server_index:
                    targets = [server_index[sname]]
                else:
                    raise ScenarioError(f"{fld}.gamma.{sname}", "unknown server or class")
                if not row[targets].all():
                    raise ScenarioError(
                        f"{fld}.gamma.{sname}", "server is excluded by the user's placement"
                    )
                for t in targets:
                    ov[t] = gval
        xd = np.zeros(len(ext_names))
        if "external_demand" in usr and usr["external_demand"] is not None:
            if not ext_names:
                raise ScenarioError(f"{fld}.external_demand", "no `external` resource is declared")
            xd = resource_vector(usr["external_demand"], ext_names, f"{fld}.external_demand")
        unames.append(uname)
        entries.append(usr)
        demands.append(d)
        weights.append(w)
        caps_n.append(mt)
        placement_rows.append(row)
        overrides.append(ov)
        ext_dem.append(xd)
    if not unames and not tenants:
        raise ScenarioError("users", "no user declared")

    demand = np.array(demands, dtype=float).reshape(len(unames), len(resources))
    placement = np.array(placement_rows, dtype=bool).reshape(len(unames), K)
    task_groups = build_task_groups(entries, placement, server_index, class_members, limits)
    dg = demand_gamma(capacity, demand) * placement
    given = np.full(dg.shape, np.nan)
    for n, ov in enumerate(overrides):
        for i, gval in ov.items():
            given[n, i] = gval
    gamma = np.where(np.isnan(given), dg, given) * placement
    for n, uname in enumerate(unames):
        if not (gamma[n] > 0).any():
            warnings.warn(
                f"users[{n}] ({uname}): eligible on no server; it will get no task",
                ScenarioWarning,
                stacklevel=3,
            )
    check_span(gamma, caps_n, weights)
    events = top.get("events") or ()
    if events:
        limits.check("events", len(_sequence(events, "events")), "events")
    parsed = parse_events(top.get("events"), top, server_names=names, user_names=unames,
                          build=Scenario.from_dict)
    _check_span_with_settings(parsed, resources, capacity, placement, given, gamma, caps_n,
                              weights, unames)
    return Scenario(
        resources=tuple(resources),
        server_names=tuple(names),
        server_class=tuple(classes),
        server_labels=tuple(labels),
        user_names=tuple(unames),
        capacity=_frozen(capacity),
        demand=_frozen(demand),
        weight=_frozen(np.array(weights, dtype=float)),
        placement=_frozen(placement),
        gamma=_frozen(gamma),
        demand_gamma=_frozen(dg),
        max_tasks=_frozen(np.array(caps_n, dtype=float)),
        gamma_given=_frozen(given),
        external_resources=tuple(ext_names),
        external_capacity=_frozen(ext_cap),
        external_demand=_frozen(
            np.array(ext_dem, dtype=float).reshape(len(unames), len(ext_names))
        ),
        events=tuple(events),
        raw=dict(top),
        task_groups=task_groups,
        tenant_policy=policy,
    )


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
