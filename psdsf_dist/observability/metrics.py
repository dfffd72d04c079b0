"""Prometheus metrics of a running allocator: names, label sets and the update API.

Every metric lives in a :class:`prometheus_client.CollectorRegistry` of the allocator's own (never
the process-wide default registry), so several allocators, or tests, can run in one process.
:data:`METRICS` pins every exposed name, type and label set; operators' dashboards and alerts
depend on them, so changing one is a breaking change (``tests/test_metrics.py`` asserts the table).

Conventions (https://prometheus.io/docs/practices/naming/): the ``psdsf_`` prefix, base units
(seconds, bytes, ratios in [0, 1]), ``_total`` on counters.

Label cardinality stays bounded:

* per-(user, server) series (``psdsf_allocated_tasks``) exist only with ``per_pair=True`` and
  only for pairs holding tasks — switch them off for large clusters;
* per-user and per-server aggregates are always on; histograms carry no labels (a per-server
  histogram would cost one series per bucket per server);
* churn event kinds are the scenario format's closed set (:data:`EVENT_KINDS`);
* :meth:`AllocatorMetrics.forget_server` and :meth:`AllocatorMetrics.forget_user` remove every
  series of a departed member, so churn does not accumulate dead series.

:class:`AllocatorMetrics` is a collector, not a set of prometheus-client metric objects: an
update stores numbers (the allocation as arrays, counters in dictionaries) and the exposition is
built when Prometheus scrapes.  A coordinator of 12,583 servers updates ~10^5 series every
period; with one metric object per series that alone would take seconds of its loop.  A scrape
reads everything under one lock, so it never sees half of an update (nor half of several, made
within :meth:`AllocatorMetrics.atomically`).  Counters carry no
``_created`` series (they would double the per-server series).
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from psdsf_dist.core.report import utilization
from psdsf_dist.model.events import EVENT_KINDS, Event, ServerFails, UserLeaves
from psdsf_dist.model.scenario import Scenario

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
MetricType = Literal["gauge", "counter", "histogram"]

# Allocations below this fraction of a server's largest column entry are rounding dust, not
# tasks (the certificate treats them the same way).
DUST = 1e-12

ROUND_SECONDS_BUCKETS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25,
                         0.5, 1.0, 2.5)
"""Server-procedure latency: a water-fill over tens to thousands of users."""
RECONVERGENCE_SECONDS_BUCKETS = (1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Re-convergence after churn: a few update periods (T = 1 s by default) up to minutes."""

MEMBER_ROLES = ("server", "user")


@dataclass(frozen=True)
class MetricSpec:
    """One exposed metric: its full name (counters with ``_total``), type and label names."""

    name: str
    type: MetricType
    labels: tuple[str, ...]
    help: str
    per_pair: bool = False
    """Present only when per-(user, server) series are switched on."""


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("psdsf_allocated_tasks", "gauge", ("user", "server"),
               "Tasks of a user at a server (pairs holding tasks only)", per_pair=True),
    MetricSpec("psdsf_user_tasks", "gauge", ("user",),
               "Tasks of a user summed over all servers"),
    MetricSpec("psdsf_user_weighted_share", "gauge", ("user",),
               "A user's tasks as a fraction of what it could run alone on all its eligible "
               "servers, divided by its weight"),
    MetricSpec("psdsf_server_tasks", "gauge", ("server",),
               "Tasks at a server summed over all users"),
    MetricSpec("psdsf_server_utilization_ratio", "gauge", ("server", "resource"),
               "Fraction of a server's resource in use"),
    MetricSpec("psdsf_server_min_vds", "gauge", ("server",),
               "Smallest weight-normalised virtual dominant share x[n]/(weight[n] gamma[n,i]) "
               "among the users holding tasks at a server (its water level)"),
    MetricSpec("psdsf_server_rounds_total", "counter", ("server",),
               "Server-procedure rounds run by a server"),
    MetricSpec("psdsf_server_round_duration_seconds", "histogram", (),
               "Wall-clock seconds of one server-procedure round (all servers)"),
    MetricSpec("psdsf_gossip_messages_total", "counter", ("server",),
               "Gossip messages sent by a server"),
    MetricSpec("psdsf_gossip_bytes_total", "counter", ("server",),
               "Gossip bytes sent by a server"),
    MetricSpec("psdsf_gossip_staleness_seconds", "gauge", ("server",),
               "Typical age of the other servers' columns in a server's view of the totals"),
    MetricSpec("psdsf_certificate_residual", "gauge", (),
               "Largest relative violation of the PS-DSF certificate (Theorem 1/2) by the "
               "current allocation"),
    MetricSpec("psdsf_cap_excess_ratio", "gauge", (),
               "Largest relative excess of a user's task total over its max_tasks (0: every "
               "cap held)"),
    MetricSpec("psdsf_converged", "gauge", (),
               "1 if the current allocation passes the PS-DSF certificate, else 0"),
    MetricSpec("psdsf_last_reconvergence_seconds", "gauge", (),
               "Seconds from the last churn event until the certificate held again"),
    MetricSpec("psdsf_reconvergence_seconds", "histogram", (),
               "Seconds from a churn event until the certificate held again"),
    MetricSpec("psdsf_churn_events_total", "counter", ("kind",),
               "Churn events applied, by kind"),
    MetricSpec("psdsf_server_restarts_total", "counter", ("server",),
               "Restarts of a server (a server coming back after failing)"),
    MetricSpec("psdsf_members", "gauge", ("role",),
               "Current membership size: live servers and present users"),
    MetricSpec("psdsf_unmanaged_usage", "gauge", ("server", "resource"),
               "Usage of a server's node by work the allocator did not admit (tenant runs; "
               "left out of the tenants' allocation)"),
    MetricSpec("psdsf_distance_to_fair_ratio", "gauge", (),
               "Largest relative gap of a user's task total to its PS-DSF total (0: every "
               "user has its fair total)"),
)
"""Every metric the allocator exposes, in exposition order."""

_BUCKETS = {
    "psdsf_server_round_duration_seconds": ROUND_SECONDS_BUCKETS,
    "psdsf_reconvergence_seconds": RECONVERGENCE_SECONDS_BUCKETS,
}


@dataclass(frozen=True)
class AllocationState:
    """What the allocation looks like to an operator, for the present users and live servers."""

    users: tuple[str, ...]
    servers: tuple[str, ...]
    resources: tuple[str, ...]
    allocation: FloatArray
    """(N, K) tasks of each user at each server."""
    totals: FloatArray
    """(N,) tasks of each user."""
    weighted_shares: FloatArray
    """(N,) ``x[n] / (weight[n] * sum_i gamma[n, i])`` (0 for a user eligible nowhere)."""
    utilization: FloatArray
    """(K, M) fraction of each server resource in use."""
    min_vds: FloatArray
    """(K,) smallest ``x[n] / (weight[n] gamma[n, i])`` over the users holding tasks at server i
    (NaN at a server holding none)."""


def allocation_state(
    scenario: Scenario,
    allocation: FloatArray,
    *,
    users: BoolArray | None = None,
    servers: BoolArray | None = None,
) -> AllocationState:
    """The operator's view of ``allocation`` (N x K) on ``scenario``, restricted to the users and
    servers selected by the masks (default: all)."""
    X = np.asarray(allocation, dtype=float)
    N, K = scenario.num_users, scenario.num_servers
    if X.shape != (N, K):
        raise ValueError(f"allocation has shape {X.shape}, the scenario needs {(N, K)}")
    user_mask = np.ones(N, dtype=bool) if users is None else np.asarray(users, dtype=bool)
    server_mask = np.ones(K, dtype=bool) if servers is None else np.asarray(servers, dtype=bool)
    gamma = np.where(server_mask[None, :], scenario.gamma, 0.0)
    totals = X.sum(axis=1)
    weight = np.asarray(scenario.weight, dtype=float)
    reach = weight * gamma.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        shares = np.where(reach > 0, totals / reach, 0.0)
        vds = totals[:, None] / (weight[:, None] * gamma)
    scale = np.maximum(X.max(axis=0, initial=0.0), 1.0)
    holds = (X > DUST * scale[None, :]) & (gamma > 0)
    levels = np.where(holds, vds, np.inf).min(axis=0, initial=np.inf)
    levels = np.where(np.isfinite(levels), levels, np.nan)
    u = np.flatnonzero(user_mask)
    k = np.flatnonzero(server_mask)
    return AllocationState(
        users=tuple(scenario.user_names[int(n)] for n in u),
        servers=tuple(scenario.server_names[int(i)] for i in k),
        resources=tuple(scenario.resources),
        allocation=X[np.ix_(u, k)],
        totals=totals[u],
        weighted_shares=shares[u],
        utilization=utilization(scenario, X)[k],
        min_vds=levels[k],
    )


_SPECS = {m.name: m for m in METRICS}
_SERVER_COUNTERS = ("psdsf_server_rounds_total", "psdsf_gossip_messages_total",
                    "psdsf_gossip_bytes_total", "psdsf_server_restarts_total")
_SCALARS = ("psdsf_certificate_residual", "psdsf_cap_excess_ratio", "psdsf_converged",
            "psdsf_last_reconvergence_seconds")


@dataclass(frozen=True)
class _Allocation:
    """What :meth:`AllocatorMetrics.set_allocation` was last given (copies)."""

    users: tuple[str, ...]
    servers: tuple[str, ...]
    resources: tuple[str, ...]
    tasks: FloatArray
    totals: FloatArray
    """Per user, over all servers given (a forgotten server's tasks still count until the next
    allocation says otherwise)."""
    shares: FloatArray
    utilization: FloatArray

    def without_user(self, name: str) -> _Allocation:
        keep = [n for n, u in enumerate(self.users) if u != name]
        return _Allocation(tuple(self.users[n] for n in keep), self.servers, self.resources,
                           self.tasks[keep], self.totals[keep], self.shares[keep],
                           self.utilization)

    def without_server(self, name: str) -> _Allocation:
        keep = [i for i, s in enumerate(self.servers) if s != name]
        return _Allocation(self.users, tuple(self.servers[i] for i in keep), self.resources,
                           self.tasks[:, keep], self.totals, self.shares,
                           self.utilization[keep])


class _Histogram:
    """Bucket counts of one unlabelled histogram (``le`` buckets, cumulative on exposition)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1  # first bound >= value
        self.sum += value

    def snapshot(self) -> tuple[list[tuple[str, float]], float]:
        buckets: list[tuple[str, float]] = []
        total = 0
        for bound, count in zip((*self.bounds, math.inf), self.counts, strict=True):
            total += count
            buckets.append((_le(bound), float(total)))
        return buckets, self.sum


class AllocatorMetrics:
    """The allocator's metrics, registered as one collector in a registry of their own; the
    coordinator calls the methods (thread-safe: scrapes come from the endpoint's thread).

    ``per_pair=False`` drops the per-(user, server) task series (N x K of them at worst) and keeps
    the per-user and per-server aggregates.
    """

    def __init__(self, registry: CollectorRegistry | None = None, per_pair: bool = True) -> None:
        self.per_pair = per_pair
        self._lock = threading.RLock()  # re-entrant: atomically() holds it around updates
        self._allocation: _Allocation | None = None
        self._levels: dict[str, float] = {}
        self._unmanaged: dict[tuple[str, str], float] = {}
        self._staleness: dict[str, float] = {}
        self._counters: dict[str, dict[str, float]] = {name: {} for name in _SERVER_COUNTERS}
        self._events: dict[str, float] = dict.fromkeys(EVENT_KINDS, 0.0)
        self._scalars: dict[str, float] = {}
        self._members: dict[str, float] = {}
        self._histograms = {name: _Histogram(bounds) for name, bounds in _BUCKETS.items()}
        self.registry = registry if registry is not None else CollectorRegistry()
        self.registry.register(self)

    # -- allocation ---------------------------------------------------------------------------
    def atomically(self) -> AbstractContextManager[bool]:
        """``with metrics.atomically(): ...``: a scrape sees all of the updates made inside or
        none of them (e.g. an allocation together with its certificate)."""
        return self._lock

    def set_state(self, state: AllocationState) -> None:
        """Everything :func:`allocation_state` computes: tasks, shares, utilisation, levels."""
        with self.atomically():
            self.set_allocation(state.users, state.servers, state.resources, state.allocation,
                                state.weighted_shares, state.utilization)
            self.set_server_levels(state.servers, state.min_vds)

    def set_allocation(
        self,
        users: Sequence[str],
        servers: Sequence[str],
        resources: Sequence[str],
        allocation: FloatArray,
        weighted_shares: FloatArray,
        utilization: FloatArray,
    ) -> None:
        """The allocation as it stands, replacing the previous one: tasks per (user, server)
        (if ``per_pair``; pairs without tasks have no series), per user and per server; each
        user's weight-normalised share; utilisation per server and resource.

        ``allocation`` is (N, K) over ``users`` x ``servers``, ``weighted_shares`` (N,),
        ``utilization`` (K, M) over ``servers`` x ``resources``.  Users and servers not given
        lose these series.
        """
        X = np.array(allocation, dtype=float)
        util = np.array(utilization, dtype=float)
        shares = np.array(weighted_shares, dtype=float)
        N, K, M = len(users), len(servers), len(resources)
        if X.shape != (N, K) or util.shape != (K, M) or shares.shape != (N,):
            raise ValueError(f"shapes {X.shape}, {shares.shape}, {util.shape} do not match "
                             f"{N} users, {K} servers, {M} resources")
        state = _Allocation(tuple(map(str, users)), tuple(map(str, servers)),
                            tuple(map(str, resources)), X, X.sum(axis=1), shares, util)
        with self._lock:
            self._allocation = state

    def set_server_levels(self, servers: Sequence[str], levels: FloatArray) -> None:
        """Per-server minimum virtual dominant share, replacing the previous levels; a server
        with NaN (no holder) or not given has no series."""
        values = np.asarray(levels, dtype=float)
        if values.shape != (len(servers),):
            raise ValueError(f"{values.size} levels for {len(servers)} servers")
        fresh = {str(s): float(v) for s, v in zip(servers, values, strict=True)
                 if not math.isnan(v)}
        with self._lock:
            self._levels = fresh

    def set_unmanaged(self, usage: Mapping[str, Mapping[str, float]]) -> None:
        """Per server and resource, its node's usage by work the allocator did not admit,
        replacing the previous values."""
        fresh = {(str(s), str(r)): float(v) for s, per in usage.items() for r, v in per.items()}
        with self._lock:
            self._unmanaged = fresh

    # -- protocol -----------------------------------------------------------------------------
    def observe_server_round(self, server: str, seconds: float) -> None:
        """One run of the server procedure at ``server`` that took ``seconds``."""
        _check_nonnegative("seconds", seconds)
        with self._lock:
            self._add("psdsf_server_rounds_total", server, 1.0)
            self._histograms["psdsf_server_round_duration_seconds"].observe(seconds)

    def add_server_rounds(self, server: str, rounds: int) -> None:
        """``rounds`` runs of the server procedure whose durations were not measured."""
        _check_nonnegative("rounds", rounds)
        with self._lock:
            self._add("psdsf_server_rounds_total", server, float(rounds))

    def observe_gossip(self, server: str, messages: float, bytes: float,
                       staleness_seconds: float | None = None) -> None:
        """``messages`` messages of ``bytes`` bytes sent by ``server`` since the last call, and
        how old (seconds) the other servers' columns in its view of the totals are (None: not
        known, the gauge keeps its value)."""
        _check_nonnegative("messages", messages)
        _check_nonnegative("bytes", bytes)
        if staleness_seconds is not None:
            _check_nonnegative("staleness", staleness_seconds)
        with self._lock:
            self._add("psdsf_gossip_messages_total", server, float(messages))
            self._add("psdsf_gossip_bytes_total", server, float(bytes))
            if staleness_seconds is not None:
                self._staleness[str(server)] = float(staleness_seconds)

    def set_certificate(self, residual: float, converged: bool, cap_excess: float = 0.0,
                        distance: float | None = None) -> None:
        """The certificate's verdict, the cap excess and the distance to fair (None: not
        known, and the series is left out rather than guessed)."""
        _check_nonnegative("residual", residual)
        _check_nonnegative("cap excess", cap_excess)
        if distance is not None:
            _check_nonnegative("distance", distance)
        with self._lock:
            if distance is None:
                self._scalars.pop("psdsf_distance_to_fair_ratio", None)
            else:
                self._scalars["psdsf_distance_to_fair_ratio"] = float(distance)
            self._scalars["psdsf_certificate_residual"] = float(residual)
            self._scalars["psdsf_cap_excess_ratio"] = float(cap_excess)
            self._scalars["psdsf_converged"] = 1.0 if converged else 0.0

    # -- churn --------------------------------------------------------------------------------
    def observe_event(self, kind: str) -> None:
        """A churn event of ``kind`` (one of :data:`EVENT_KINDS`) was applied."""
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {kind!r}; expected one of "
                             f"{', '.join(EVENT_KINDS)}")
        with self._lock:
            self._events[kind] += 1.0

    def observe_reconvergence(self, seconds: float) -> None:
        """The certificate held again ``seconds`` after the last event."""
        _check_nonnegative("seconds", seconds)
        with self._lock:
            self._scalars["psdsf_last_reconvergence_seconds"] = float(seconds)
            self._histograms["psdsf_reconvergence_seconds"].observe(seconds)

    def observe_restart(self, server: str) -> None:
        with self._lock:
            self._add("psdsf_server_restarts_total", server, 1.0)

    def set_membership(self, servers: int, users: int) -> None:
        """Live servers and present users."""
        _check_nonnegative("servers", servers)
        _check_nonnegative("users", users)
        with self._lock:
            self._members = {"server": float(servers), "user": float(users)}

    def forget_server(self, name: str, *, restarts: bool = False) -> None:
        """Remove every series labelled with server ``name`` (it failed or left).

        Its restart count is kept unless ``restarts`` is true: a failed server is expected
        back, and its restarts are what an operator wants to see then.  Pass ``restarts=True``
        for a server decommissioned for good.
        """
        with self._lock:
            if self._allocation is not None:
                self._allocation = self._allocation.without_server(name)
            self._levels.pop(name, None)
            self._unmanaged = {k: v for k, v in self._unmanaged.items() if k[0] != name}
            self._staleness.pop(name, None)
            for counter, values in self._counters.items():
                if restarts or counter != "psdsf_server_restarts_total":
                    values.pop(name, None)

    def forget_user(self, name: str) -> None:
        """Remove every series labelled with user ``name`` (it left)."""
        with self._lock:
            if self._allocation is not None:
                self._allocation = self._allocation.without_user(name)

    # -- exposition ---------------------------------------------------------------------------
    def describe(self) -> Iterator[Metric]:
        """The families without samples (lets the registry refuse a clashing name)."""
        for spec in METRICS:
            if self.per_pair or not spec.per_pair:
                yield _family(spec)

    def collect(self) -> Iterator[Metric]:
        with self._lock:  # one consistent snapshot; the formatting happens outside the lock
            alloc = self._allocation
            levels = dict(self._levels)
            unmanaged = dict(self._unmanaged)
            staleness = dict(self._staleness)
            counters = {name: dict(values) for name, values in self._counters.items()}
            events = dict(self._events)
            scalars = dict(self._scalars)
            members = dict(self._members)
            histograms = {name: h.snapshot() for name, h in self._histograms.items()}
        families = _Families()
        if alloc is not None:
            _add_allocation(families, alloc, per_pair=self.per_pair)
        for server, level in levels.items():
            families.gauge("psdsf_server_min_vds").add_metric([server], level)
        for (server, resource), amount in unmanaged.items():
            families.gauge("psdsf_unmanaged_usage").add_metric([server, resource], amount)
        for server, seconds in staleness.items():
            families.gauge("psdsf_gossip_staleness_seconds").add_metric([server], seconds)
        for name, values in counters.items():
            for server, count in values.items():
                families.counter(name).add_metric([server], count)
        for kind, count in events.items():
            families.counter("psdsf_churn_events_total").add_metric([kind], count)
        for name, scalar in scalars.items():
            families.gauge(name).add_metric([], scalar)
        for role, size in members.items():
            families.gauge("psdsf_members").add_metric([role], size)
        for name, (buckets, total) in histograms.items():
            families.histogram(name).add_metric([], buckets, total)
        for spec in METRICS:
            if self.per_pair or not spec.per_pair:
                yield families.by_name[spec.name]

    def _add(self, counter: str, server: str, amount: float) -> None:
        values = self._counters[counter]
        key = str(server)
        values[key] = values.get(key, 0.0) + amount


@dataclass(frozen=True)
class ServerCounts:
    """A server's cumulative counters as it reports them; they restart from zero with each
    incarnation (a restarted server is a new gossip origin)."""

    server: str
    incarnation: str
    rounds: int
    messages: int
    bytes: int
    round_seconds: tuple[float, ...] = ()
    """Durations of this incarnation's latest server-procedure rounds, oldest first (a bounded
    window: rounds older than it count in ``rounds`` but not in the latency histogram)."""
    staleness_seconds: float | None = None
    """Typical age of the other servers' columns at the server's latest round (None: not yet
    known)."""


class RunMetrics:
    """Feeds :class:`AllocatorMetrics` from what a coordinator sees: one observation per period
    (the allocation, the certificate, the servers' cumulative counters) and the churn events it
    applies.  Turns cumulative counters into increments (each new round's duration, where the
    report still carries it, goes to the latency histogram) and times re-convergence: from an
    event to the first observation after it on which the certificate holds."""

    def __init__(self, metrics: AllocatorMetrics) -> None:
        self.metrics = metrics
        self._counts: dict[str, ServerCounts] = {}
        self._event_at: float | None = None

    def observe(
        self,
        scenario: Scenario,
        allocation: FloatArray,
        *,
        users: BoolArray,
        servers: BoolArray,
        residual: float,
        holds: bool,
        now: float,
        reports: Sequence[ServerCounts] = (),
        cap_excess: float = 0.0,
        distance: float | None = None,
    ) -> None:
        """One observation at run time ``now`` (seconds): ``allocation`` (N x K) on
        ``scenario`` with the present users and live servers masked in."""
        m = self.metrics
        state = allocation_state(scenario, allocation, users=users, servers=servers)
        with m.atomically():  # a scrape sees the allocation with its own certificate
            m.set_state(state)
            m.set_certificate(residual, holds, cap_excess, distance)
            m.set_membership(int(np.count_nonzero(servers)), int(np.count_nonzero(users)))
            for counts in reports:
                before = self._counts.get(counts.server)
                if before is None or before.incarnation != counts.incarnation:
                    before = ServerCounts(counts.server, counts.incarnation, 0, 0, 0)
                rounds = max(counts.rounds - before.rounds, 0)
                # the durations of the rounds new since the last report (as far as carried)
                timed = counts.round_seconds[max(len(counts.round_seconds) - rounds, 0):]
                for seconds in timed:
                    m.observe_server_round(counts.server, seconds)
                m.add_server_rounds(counts.server, rounds - len(timed))
                m.observe_gossip(counts.server, max(counts.messages - before.messages, 0),
                                 max(counts.bytes - before.bytes, 0), counts.staleness_seconds)
                self._counts[counts.server] = counts
            if self._event_at is not None and holds:
                m.observe_reconvergence(max(now - self._event_at, 0.0))
                self._event_at = None

    def event(self, event: Event, now: float) -> None:
        """A churn event applied at run time ``now``; a departed member's series go."""
        m = self.metrics
        with m.atomically():
            m.observe_event(event.kind)
            self._event_at = now
            if isinstance(event, UserLeaves):
                m.forget_user(event.user)
            elif isinstance(event, ServerFails):
                m.forget_server(event.server)
                self._counts.pop(event.server, None)

    def restart(self, server: str) -> None:
        """A server came back (a crashed actor restarted, or a failed server rejoined)."""
        self.metrics.observe_restart(server)


def _family(spec: MetricSpec) -> Metric:
    labels = list(spec.labels)
    if spec.type == "gauge":
        return GaugeMetricFamily(spec.name, spec.help, labels=labels)
    if spec.type == "counter":
        return CounterMetricFamily(spec.name, spec.help, labels=labels)
    return HistogramMetricFamily(spec.name, spec.help, labels=labels)


class _Families:
    """One empty family per metric of the table, typed for filling."""

    def __init__(self) -> None:
        self.by_name = {spec.name: _family(spec) for spec in METRICS}

    def gauge(self, name: str) -> GaugeMetricFamily:
        family = self.by_name[name]
        assert isinstance(family, GaugeMetricFamily)
        return family

    def counter(self, name: str) -> CounterMetricFamily:
        family = self.by_name[name]
        assert isinstance(family, CounterMetricFamily)
        return family

    def histogram(self, name: str) -> HistogramMetricFamily:
        family = self.by_name[name]
        assert isinstance(family, HistogramMetricFamily)
        return family


def _add_allocation(families: _Families, alloc: _Allocation, *, per_pair: bool) -> None:
    X = alloc.tasks
    user_tasks = families.gauge("psdsf_user_tasks")
    user_shares = families.gauge("psdsf_user_weighted_share")
    for n, user in enumerate(alloc.users):
        user_tasks.add_metric([user], float(alloc.totals[n]))
        user_shares.add_metric([user], float(alloc.shares[n]))
    server_tasks = families.gauge("psdsf_server_tasks")
    util = families.gauge("psdsf_server_utilization_ratio")
    for i, server in enumerate(alloc.servers):
        server_tasks.add_metric([server], float(X[:, i].sum()))
        for r, resource in enumerate(alloc.resources):
            util.add_metric([server, resource], float(alloc.utilization[i, r]))
    if per_pair:
        pairs = families.gauge("psdsf_allocated_tasks")
        for n, i in zip(*np.nonzero(X > 0), strict=True):
            pairs.add_metric([alloc.users[n], alloc.servers[i]], float(X[n, i]))


def _le(bound: float) -> str:
    """A bucket bound as Prometheus writes it (``1.0``, ``0.0001``, ``+Inf``)."""
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def _check_nonnegative(what: str, value: float) -> None:
    if not value >= 0:  # also rejects NaN
        raise ValueError(f"{what} must be >= 0, got {value}")
