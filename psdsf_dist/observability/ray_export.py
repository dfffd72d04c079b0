"""The allocator's metrics through Ray's own metrics pipeline (``ray.util.metrics``) as well.

:class:`~psdsf_dist.observability.metrics.AllocatorMetrics` is served on one HTTP endpoint of its
own (:mod:`~psdsf_dist.observability.metrics_server`).  A Prometheus that already scrapes Ray
(through the service-discovery file Ray writes on the head node) gets the same series with no
extra target when the coordinator mirrors them into ``ray.util.metrics``: :class:`RayMetricsExport`
does that on every :meth:`~RayMetricsExport.push` (the coordinator pushes after each
observation).  Ray's metrics agent on the coordinator's node exports them with Ray's ``ray_``
prefix and its own labels added (``SessionName``, ``NodeAddress``, ``WorkerId``, ...):
``psdsf_certificate_residual`` shows as ``ray_psdsf_certificate_residual`` (see
:func:`ray_names`).

The mapping, per type of :data:`~psdsf_dist.observability.metrics.METRICS`:

gauge
    A Ray gauge of the same name and labels (the tag keys), set to the current value on every
    push.  Ray drops a gauge value that is not set again within about two of its export intervals
    (``metrics_report_interval_ms``, 10 s by default), so every present series is set on every
    push, and a series that disappears from the registry (a user who left, a failed server, a
    server holding no tasks any more) is set to 0 once and then left to age out of Ray's export,
    as it disappears at once from the standalone endpoint.  Ray offers no way to delete a series;
    0 rather than the last value for those seconds, because the count-like gauges (tasks,
    utilisation) are summed by dashboards.
counter
    A Ray counter of the same name (ending in ``_total``, which Ray then keeps as it is),
    incremented by what the counter gained since the last push, per label set.  A value lower
    than the last one pushed (a reset) counts in full, as Prometheus' ``rate`` reads a reset; a
    series that disappears is forgotten, so one that comes back starting from zero again adds
    its whole value.  Ray's counter stays monotonic either way.  Ray exports a counter's series
    only from its first increment, so a label set still at zero (a churn kind that never
    happened) is absent from Ray's export.
histogram
    Its samples as gauges: ``<name>_bucket`` (with ``le``, the bounds as the standalone endpoint
    writes them: ``0.001``, ``+Inf``), ``<name>_sum`` and ``<name>_count``, set to the
    cumulative values.  ``histogram_quantile`` and ``rate`` in Prometheus need only the names
    and the ``le`` label, not the family's type, so the dashboard's queries work on
    ``ray_<name>_bucket`` unchanged.  A Ray histogram is not used: it takes single
    observations, while the registry holds bucket counts, and Ray's agent rebuilds a worker's
    histogram from bucket midpoints, so its ``_sum`` would be an estimate — the gauges are
    exact.

Outside a Ray worker, or with Ray's metrics collection off (``RAY_enable_metrics_collection=0``,
no metrics agent), the ``ray.util.metrics`` calls raise nothing and their values go nowhere.  A
push costs one registry collection plus a few microseconds per series (per-pair series included
unless switched off).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry

from psdsf_dist.observability.metrics import METRICS, MetricSpec

RAY_PREFIX = "ray_"
"""What Ray's metrics agent puts in front of every ``ray.util.metrics`` name."""

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

LabelKey = tuple[str, ...]
"""A series' label values, in its metric's tag-key order."""


class GaugeLike(Protocol):
    def set(self, value: float, tags: dict[str, str]) -> None: ...


class CounterLike(Protocol):
    def inc(self, value: float, tags: dict[str, str]) -> None: ...


class MetricFactory(Protocol):
    """Makes the Ray metric objects (the default: ``ray.util.metrics``; tests pass fakes)."""

    def gauge(self, name: str, description: str, tag_keys: tuple[str, ...]) -> GaugeLike: ...

    def counter(self, name: str, description: str, tag_keys: tuple[str, ...]) -> CounterLike: ...


class RayMetrics:
    """:class:`MetricFactory` of ``ray.util.metrics`` (imported on first use)."""

    def gauge(self, name: str, description: str, tag_keys: tuple[str, ...]) -> GaugeLike:
        from ray.util import metrics

        gauge: GaugeLike = metrics.Gauge(name, description, tag_keys=tag_keys)
        return gauge

    def counter(self, name: str, description: str, tag_keys: tuple[str, ...]) -> CounterLike:
        from ray.util import metrics

        counter: CounterLike = metrics.Counter(name, description, tag_keys=tag_keys)
        return counter


class RayMetricsExport:
    """Mirrors the samples of ``registry`` (the metrics of ``specs``) into Ray metrics on each
    :meth:`push` (see the module docstring for the mapping).  The Ray metric objects are made
    once, in the constructor, one per exported name with the spec's labels as tag keys."""

    def __init__(self, registry: CollectorRegistry, specs: Sequence[MetricSpec] = METRICS,
                 factory: MetricFactory | None = None) -> None:
        make = factory if factory is not None else RayMetrics()
        self.registry = registry
        self._lock = threading.Lock()
        self._gauges: dict[str, tuple[GaugeLike, tuple[str, ...]]] = {}
        self._counters: dict[str, tuple[CounterLike, tuple[str, ...]]] = {}
        for spec in specs:
            labels = tuple(spec.labels)
            if spec.type == "gauge":
                self._gauges[spec.name] = (make.gauge(spec.name, spec.help, labels), labels)
            elif spec.type == "counter":
                self._counters[spec.name] = (make.counter(spec.name, spec.help, labels), labels)
            else:
                for suffix in HISTOGRAM_SUFFIXES:
                    keys = (*labels, "le") if suffix == "_bucket" else labels
                    name = spec.name + suffix
                    self._gauges[name] = (make.gauge(name, f"{spec.help} ({suffix[1:]})", keys),
                                          keys)
        self._set: dict[str, set[LabelKey]] = {name: set() for name in self._gauges}
        """Per gauge, the label sets set by the last push."""
        self._counted: dict[str, dict[LabelKey, float]] = {name: {} for name in self._counters}
        """Per counter, each label set's value at the last push."""

    def push(self) -> None:
        """Collect the registry once and mirror every sample into Ray's metrics."""
        with self._lock:
            present: dict[str, set[LabelKey]] = {name: set() for name in self._gauges}
            counted: dict[str, dict[LabelKey, float]] = {name: {} for name in self._counters}
            for family in self.registry.collect():
                for sample in family.samples:
                    if sample.name in self._gauges:
                        gauge, keys = self._gauges[sample.name]
                        key = _key(sample.labels, keys)
                        gauge.set(float(sample.value), tags=dict(zip(keys, key, strict=True)))
                        present[sample.name].add(key)
                    elif sample.name in self._counters:
                        counter, keys = self._counters[sample.name]
                        key = _key(sample.labels, keys)
                        value = float(sample.value)
                        last = self._counted[sample.name].get(key, 0.0)
                        gained = value - last if value >= last else value  # a reset: in full
                        if gained > 0:
                            counter.inc(gained, tags=dict(zip(keys, key, strict=True)))
                        counted[sample.name][key] = value
            for name, before in self._set.items():
                gauge, keys = self._gauges[name]
                for key in before - present[name]:  # gone: 0 once, then it ages out
                    gauge.set(0.0, tags=dict(zip(keys, key, strict=True)))
            self._set = present
            self._counted = counted


def _key(labels: Mapping[str, str], keys: Iterable[str]) -> LabelKey:
    return tuple(str(labels[k]) for k in keys)


def ray_names(specs: Sequence[MetricSpec] = METRICS) -> dict[str, str]:
    """Every series name :class:`RayMetricsExport` makes for ``specs``, as Prometheus shows it
    when it scrapes Ray -> the metric of the table it comes from."""
    out: dict[str, str] = {}
    for spec in specs:
        suffixes = HISTOGRAM_SUFFIXES if spec.type == "histogram" else ("",)
        for suffix in suffixes:
            out[RAY_PREFIX + spec.name + suffix] = spec.name
    return out
