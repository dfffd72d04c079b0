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

A scrape may land between two updates of one round (each value is consistent on its own, a
round's values are not read atomically); the next scrape sees the round complete.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from psdsf_dist.events import EVENT_KINDS
from psdsf_dist.report import utilization
from psdsf_dist.scenario import Scenario

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
)
"""Every metric the allocator exposes, in exposition order."""

_BUCKETS = {
    "psdsf_server_round_duration_seconds": ROUND_SECONDS_BUCKETS,
    "psdsf_reconvergence_seconds": RECONVERGENCE_SECONDS_BUCKETS,
}

MetricObject = Gauge | Counter | Histogram


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


class AllocatorMetrics:
    """The allocator's metrics in a registry of their own; the coordinator calls the methods.

    ``per_pair=False`` drops the per-(user, server) task series (N x K of them at worst) and keeps
    the per-user and per-server aggregates.
    """

    def __init__(self, registry: CollectorRegistry | None = None, per_pair: bool = True) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.per_pair = per_pair
        self._metrics: dict[str, MetricObject] = {}
        self._specs: dict[str, MetricSpec] = {}
        # label values of every child created, so a departed member's series can be removed
        self._series: dict[str, set[tuple[str, ...]]] = {}
        for spec in METRICS:
            if spec.per_pair and not per_pair:
                continue
            self._specs[spec.name] = spec
            self._series[spec.name] = set()
            self._metrics[spec.name] = _make(spec, self.registry)
        for kind in EVENT_KINDS:  # every kind at 0 from the start, so rate() sees the first one
            self._child("psdsf_churn_events_total", kind)

    # -- allocation ---------------------------------------------------------------------------
    def set_state(self, state: AllocationState) -> None:
        """Everything :func:`allocation_state` computes: tasks, shares, utilisation, levels."""
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
        """Tasks per (user, server) (if ``per_pair``), per user and per server; each user's
        weight-normalised share; utilisation per server and resource.

        ``allocation`` is (N, K) over ``users`` x ``servers``, ``weighted_shares`` (N,),
        ``utilization`` (K, M) over ``servers`` x ``resources``.  Pairs without tasks have no
        series (a pair that drops to zero is removed).
        """
        X = np.asarray(allocation, dtype=float)
        util = np.asarray(utilization, dtype=float)
        shares = np.asarray(weighted_shares, dtype=float)
        N, K, M = len(users), len(servers), len(resources)
        if X.shape != (N, K) or util.shape != (K, M) or shares.shape != (N,):
            raise ValueError(f"shapes {X.shape}, {shares.shape}, {util.shape} do not match "
                             f"{N} users, {K} servers, {M} resources")
        for n, user in enumerate(users):
            self._gauge("psdsf_user_tasks", user).set(float(X[n].sum()))
            self._gauge("psdsf_user_weighted_share", user).set(float(shares[n]))
        for i, server in enumerate(servers):
            self._gauge("psdsf_server_tasks", server).set(float(X[:, i].sum()))
            for r, resource in enumerate(resources):
                self._gauge("psdsf_server_utilization_ratio", server, resource).set(
                    float(util[i, r]))
        if self.per_pair:
            name = "psdsf_allocated_tasks"
            seen: set[tuple[str, ...]] = set()
            for n, i in zip(*np.nonzero(X > 0), strict=True):
                key = (users[int(n)], servers[int(i)])
                seen.add(key)
                self._gauge(name, *key).set(float(X[n, i]))
            # only pairs of the users and servers given here are this call's business
            given_users, given_servers = set(users), set(servers)
            stale = [key for key in self._series[name]
                     if key not in seen and key[0] in given_users and key[1] in given_servers]
            self._remove(name, stale)

    def set_server_levels(self, servers: Sequence[str], levels: FloatArray) -> None:
        """Per-server minimum virtual dominant share; NaN (no holder) removes the series."""
        values = np.asarray(levels, dtype=float)
        if values.shape != (len(servers),):
            raise ValueError(f"{values.shape[0] if values.ndim else 0} levels for "
                             f"{len(servers)} servers")
        name = "psdsf_server_min_vds"
        for server, level in zip(servers, values, strict=True):
            if math.isnan(level):
                self._remove(name, [(server,)])
            else:
                self._gauge(name, server).set(float(level))

    # -- protocol -----------------------------------------------------------------------------
    def observe_server_round(self, server: str, seconds: float) -> None:
        """One run of the server procedure at ``server`` that took ``seconds``."""
        _check_nonnegative("seconds", seconds)
        self._counter("psdsf_server_rounds_total", server).inc()
        self._histogram("psdsf_server_round_duration_seconds").observe(seconds)

    def observe_gossip(self, server: str, messages: float, bytes: float,
                       staleness_seconds: float) -> None:
        """``messages`` messages of ``bytes`` bytes sent by ``server`` since the last call, and
        how old (seconds) the other servers' columns in its view of the totals are."""
        _check_nonnegative("messages", messages)
        _check_nonnegative("bytes", bytes)
        self._counter("psdsf_gossip_messages_total", server).inc(messages)
        self._counter("psdsf_gossip_bytes_total", server).inc(bytes)
        self._gauge("psdsf_gossip_staleness_seconds", server).set(staleness_seconds)

    def set_certificate(self, residual: float, converged: bool) -> None:
        self._gauge("psdsf_certificate_residual").set(residual)
        self._gauge("psdsf_converged").set(1.0 if converged else 0.0)

    # -- churn --------------------------------------------------------------------------------
    def observe_event(self, kind: str) -> None:
        """A churn event of ``kind`` (one of :data:`EVENT_KINDS`) was applied."""
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {kind!r}; expected one of "
                             f"{', '.join(EVENT_KINDS)}")
        self._counter("psdsf_churn_events_total", kind).inc()

    def observe_reconvergence(self, seconds: float) -> None:
        """The certificate held again ``seconds`` after the last event."""
        _check_nonnegative("seconds", seconds)
        self._gauge("psdsf_last_reconvergence_seconds").set(seconds)
        self._histogram("psdsf_reconvergence_seconds").observe(seconds)

    def observe_restart(self, server: str) -> None:
        self._counter("psdsf_server_restarts_total", server).inc()

    def set_membership(self, servers: int, users: int) -> None:
        """Live servers and present users."""
        _check_nonnegative("servers", servers)
        _check_nonnegative("users", users)
        self._gauge("psdsf_members", "server").set(servers)
        self._gauge("psdsf_members", "user").set(users)

    def forget_server(self, name: str, *, restarts: bool = False) -> None:
        """Remove every series labelled with server ``name`` (it failed or left).

        Its restart count is kept unless ``restarts`` is true: a failed server is expected
        back, and its restarts are what an operator wants to see then.  Pass ``restarts=True``
        for a server decommissioned for good.
        """
        keep = () if restarts else ("psdsf_server_restarts_total",)
        self._forget("server", name, keep)

    def forget_user(self, name: str) -> None:
        """Remove every series labelled with user ``name`` (it left)."""
        self._forget("user", name)

    # -- plumbing -----------------------------------------------------------------------------
    def _forget(self, label: str, value: str, keep: tuple[str, ...] = ()) -> None:
        for name, spec in self._specs.items():
            if label in spec.labels and name not in keep:
                at = spec.labels.index(label)
                self._remove(name, [key for key in self._series[name] if key[at] == value])

    def _remove(self, name: str, keys: Iterable[tuple[str, ...]]) -> None:
        metric = self._metrics[name]
        series = self._series[name]
        for key in list(keys):
            if key in series:
                metric.remove(*key)
                series.discard(key)

    def _child(self, name: str, *labels: str) -> MetricObject:
        metric = self._metrics[name]
        if not labels:
            return metric
        key = tuple(str(v) for v in labels)
        self._series[name].add(key)
        return metric.labels(*key)

    def _gauge(self, name: str, *labels: str) -> Gauge:
        child = self._child(name, *labels)
        assert isinstance(child, Gauge)
        return child

    def _counter(self, name: str, *labels: str) -> Counter:
        child = self._child(name, *labels)
        assert isinstance(child, Counter)
        return child

    def _histogram(self, name: str, *labels: str) -> Histogram:
        child = self._child(name, *labels)
        assert isinstance(child, Histogram)
        return child


def _make(spec: MetricSpec, registry: CollectorRegistry) -> MetricObject:
    if spec.type == "gauge":
        return Gauge(spec.name, spec.help, spec.labels, registry=registry)
    if spec.type == "counter":
        return Counter(spec.name, spec.help, spec.labels, registry=registry)
    return Histogram(spec.name, spec.help, spec.labels, registry=registry,
                     buckets=_BUCKETS[spec.name])


def _check_nonnegative(what: str, value: float) -> None:
    if not value >= 0:  # also rejects NaN
        raise ValueError(f"{what} must be >= 0, got {value}")
