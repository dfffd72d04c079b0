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

Modules around the value: :mod:`.document` reads a file into a parsed document,
:mod:`.build` checks the document and builds the scenario (:meth:`Scenario.from_dict`), and
:mod:`.growth` appends servers and users (:meth:`Scenario.with_servers`,
:meth:`Scenario.with_users`, :meth:`Scenario.with_joiners`) through the same steps that place
the declared ones, so a joining entry is checked exactly as a declared one would be.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.arrays import demand_gamma, frozen
from psdsf_dist.model.document import read_document
from psdsf_dist.model.entries import PlacementRule, ServerSpec, UserSpec
from psdsf_dist.model.events import Event, ServerJoins, UserJoins
from psdsf_dist.model.growth import add_servers, add_users
from psdsf_dist.model.task_groups import TaskGroups
from psdsf_dist.model.tenant_policy import TenantPolicy

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
Mode = Literal["rdm", "tdm"]
MODES: tuple[Mode, ...] = ("rdm", "tdm")


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

    @functools.cached_property
    def grown(self) -> Scenario:
        """The scenario grown by every new server and user its :attr:`events` bring
        (:meth:`with_joiners`): every server and user a run of it may have.  Built once per
        scenario: loading a document builds it to check the joiners as declared entries
        (:mod:`.build`), and a run's universe (:func:`~psdsf_dist.model.universe.universe`)
        is this same value.  The scenario itself when no event brings anyone new."""
        return self.with_joiners(self.events)

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
        """Validate a parsed scenario document (the file schema) and build the arrays
        (:func:`psdsf_dist.model.build.build_scenario`); errors name ``source``."""
        from psdsf_dist.model.build import build_scenario  # it builds on this module

        try:
            return build_scenario(data)
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
            demand=frozen(d),
            weight=frozen(self.weight if weight is None else np.asarray(weight, dtype=float)),
            placement=frozen(p),
            gamma=frozen(gam),
            demand_gamma=frozen(dg),
            max_tasks=frozen(
                self.max_tasks if max_tasks is None else np.asarray(max_tasks, dtype=float)
            ),
            gamma_given=self.gamma_given,
            external_resources=self.external_resources,
            external_capacity=self.external_capacity,
            external_demand=self.external_demand if external_demand is None
            else frozen(np.asarray(external_demand, dtype=float)),
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
            demand=frozen(self.demand[r]),
            weight=frozen(self.weight[r]),
            placement=frozen(self.placement[r]),
            gamma=frozen(self.gamma[r]),
            demand_gamma=frozen(self.demand_gamma[r]),
            max_tasks=frozen(self.max_tasks[r]),
            gamma_given=frozen(self.gamma_given[r]),
            placement_rules=tuple(self.placement_rules[n] for n in r),
            external_demand=frozen(self.external_demand[r]),
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
        return add_servers(self, servers, fields)

    def with_users(self, users: Iterable[UserSpec],
                   fields: Sequence[str] | None = None) -> Scenario:
        """A copy with ``users`` appended, each checked as an entry of ``users`` is against
        the servers: a name no user has, servers and classes it names that exist, ``gamma``
        and bound tasks only where it may run, within the ``users`` and ``cells`` limits, and
        the span of every user's task counts and weights (:func:`~.limits.check_span`).  ``fields``:
        the field each entry is reported under (default ``users[n]``, its row).  The entries
        are taken one at a time, so a lazily parsed list reports its first problem first
        (bound tasks are checked after every entry, as the task groups are built at once).
        Indices do not move; the arrays are those of a document with the entries appended."""
        return add_users(self, users, fields)

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


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file (``.yaml``, ``.yml`` or ``.json``)."""
    return Scenario.from_dict(read_document(path), str(path))
