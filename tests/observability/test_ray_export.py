"""The allocator's metrics through Ray's metrics pipeline (``observability/ray_export.py``).

First the mapping, against fake Ray metric objects; then with real Ray: an actor's hand-filled
registry and a coordinator's own (no HTTP endpoint asked for) arrive in the Prometheus text that
Ray's metrics agent serves on its node (``MetricsExportPort``), with Ray's ``ray_`` prefix and
the registry's values; last, a real Prometheus scraping that agent runs the dashboard's queries
on Ray-pipeline names (the tenant row) and finds data for each.
"""

from __future__ import annotations

import math
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from psdsf_dist.observability.metrics import METRICS, AllocatorMetrics
from psdsf_dist.observability.ray_export import RAY_PREFIX, RayMetricsExport, ray_names
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.runtime.settings import RunConfig

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]
"""(name, sorted labels) -> value."""

PATIENCE = 45.0  # seconds: Ray's workers report every 10 s, the agent keeps a gauge ~20 s more


# -- the mapping, with fake Ray metrics -------------------------------------------------------

class FakeRay:
    """Records what the export does to the Ray metric objects it makes."""

    def __init__(self) -> None:
        self.made: list[tuple[str, str, tuple[str, ...]]] = []
        self.gauges: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.sets: list[tuple[str, dict[str, str], float]] = []
        self.counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def gauge(self, name: str, description: str, tag_keys: tuple[str, ...]) -> Any:
        self.made.append(("gauge", name, tag_keys))
        fake = self

        class Gauge:
            def set(self, value: float, tags: dict[str, str]) -> None:
                assert set(tags) == set(tag_keys)
                fake.sets.append((name, tags, value))
                fake.gauges[name, tuple(sorted(tags.items()))] = value

        return Gauge()

    def counter(self, name: str, description: str, tag_keys: tuple[str, ...]) -> Any:
        self.made.append(("counter", name, tag_keys))
        fake = self

        class Counter:
            def inc(self, value: float, tags: dict[str, str]) -> None:
                assert set(tags) == set(tag_keys) and value > 0  # as Ray requires
                key = (name, tuple(sorted(tags.items())))
                fake.counters[key] = fake.counters.get(key, 0.0) + value

        return Counter()


def test_one_ray_metric_per_name_with_the_specs_labels_as_tag_keys() -> None:
    fake = FakeRay()
    export = RayMetricsExport(AllocatorMetrics().registry, factory=fake)
    expected = []
    for spec in METRICS:
        if spec.type == "histogram":
            expected += [("gauge", spec.name + "_bucket", (*spec.labels, "le")),
                         ("gauge", spec.name + "_sum", spec.labels),
                         ("gauge", spec.name + "_count", spec.labels)]
        else:
            expected.append((spec.type, spec.name, spec.labels))
    assert fake.made == expected
    export.push()
    export.push()
    assert len(fake.made) == len(expected)  # made once, not per push
    assert {RAY_PREFIX + name for _, name, _ in fake.made} == set(ray_names())


def test_gauges_counters_and_histograms_are_mirrored() -> None:
    fake = FakeRay()
    m = AllocatorMetrics()
    export = RayMetricsExport(m.registry, factory=fake)
    m.set_allocation(["alice", "bob"], ["s1", "s2"], ["CPU"], np.array([[2.0, 1.0], [0.0, 3.0]]),
                     np.array([0.5, 0.25]), np.array([[0.5], [1.0]]))
    m.set_certificate(0.125, False)
    for _ in range(3):
        m.observe_server_round("s1", 0.003)
    m.observe_event("user_leaves")
    export.push()
    g, c = fake.gauges, fake.counters
    assert g["psdsf_certificate_residual", ()] == 0.125
    assert g["psdsf_converged", ()] == 0.0
    assert g["psdsf_allocated_tasks", (("server", "s1"), ("user", "alice"))] == 2.0
    assert ("psdsf_allocated_tasks", (("server", "s1"), ("user", "bob"))) not in g  # no tasks
    assert g["psdsf_user_tasks", (("user", "bob"),)] == 3.0
    assert g["psdsf_server_utilization_ratio", (("resource", "CPU"), ("server", "s2"))] == 1.0
    assert c == {("psdsf_server_rounds_total", (("server", "s1"),)): 3.0,
                 ("psdsf_churn_events_total", (("kind", "user_leaves"),)): 1.0}  # zeros: none
    hist = "psdsf_server_round_duration_seconds"
    assert g[f"{hist}_bucket", (("le", "0.005"),)] == 3.0
    assert g[f"{hist}_bucket", (("le", "0.0025"),)] == 0.0
    assert g[f"{hist}_bucket", (("le", "+Inf"),)] == 3.0
    assert g[f"{hist}_count", ()] == 3.0
    assert g[f"{hist}_sum", ()] == pytest.approx(0.009)

    # a push without changes sets every gauge again and adds nothing to the counters
    fake.sets.clear()
    export.push()
    assert {(n, tuple(sorted(t.items()))) for n, t, _ in fake.sets} == set(g)
    assert c[("psdsf_server_rounds_total", (("server", "s1"),))] == 3.0

    # counters grow by the difference; a user gone: its gauges go to 0 once, then are left alone
    m.observe_server_round("s1", 0.003)
    m.observe_server_round("s2", 0.003)
    m.forget_user("bob")
    fake.sets.clear()
    export.push()
    assert c[("psdsf_server_rounds_total", (("server", "s1"),))] == 4.0
    assert c[("psdsf_server_rounds_total", (("server", "s2"),))] == 1.0
    gone = {(n, tuple(sorted(t.items()))): v for n, t, v in fake.sets
            if t.get("user") == "bob"}
    assert gone == {("psdsf_user_tasks", (("user", "bob"),)): 0.0,
                    ("psdsf_user_weighted_share", (("user", "bob"),)): 0.0,
                    ("psdsf_allocated_tasks", (("server", "s2"), ("user", "bob"))): 0.0}
    fake.sets.clear()
    export.push()
    assert not [s for s in fake.sets if s[1].get("user") == "bob"]


def test_a_counter_that_restarts_counts_in_full() -> None:
    """A server forgotten (its counters go) and back from zero; a reset seen in one series."""
    fake = FakeRay()
    m = AllocatorMetrics()
    export = RayMetricsExport(m.registry, factory=fake)
    m.observe_gossip("s1", 10, 1000)
    export.push()
    m.forget_server("s1")
    export.push()
    m.observe_gossip("s1", 15, 1500)  # more than before it went: still counted in full
    export.push()
    assert fake.counters[("psdsf_gossip_messages_total", (("server", "s1"),))] == 25.0

    class Resetting:
        """A registry whose one counter goes 5, 8, 2, 4 (a reset between 8 and 2)."""

        values = iter((5.0, 8.0, 2.0, 4.0))

        def collect(self) -> Iterator[Any]:
            from prometheus_client.metrics_core import CounterMetricFamily

            family = CounterMetricFamily("psdsf_churn_events", "x", labels=["kind"])
            family.add_metric(["user_joins"], next(self.values))
            yield family

    registry = CollectorRegistry()
    registry.register(Resetting())
    spec = next(s for s in METRICS if s.name == "psdsf_churn_events_total")
    fake = FakeRay()
    export = RayMetricsExport(registry, [spec], factory=fake)
    for _ in range(4):
        export.push()
    assert fake.counters == {("psdsf_churn_events_total", (("kind", "user_joins"),)): 12.0}


def test_ray_metrics_do_not_raise_without_a_metrics_agent() -> None:
    """The real ``ray.util.metrics`` objects, in a process that may not even be a Ray worker."""
    m = AllocatorMetrics()
    m.set_certificate(0.5, False)
    m.observe_server_round("s1", 0.01)
    export = RayMetricsExport(m.registry)
    export.push()
    m.observe_server_round("s1", 0.01)
    export.push()


# -- with real Ray: what its metrics agent serves ----------------------------------------------

def agent_url(node_id: str) -> str:
    import ray

    nodes: Any = ray.nodes  # untyped
    node = next(n for n in nodes() if n["NodeID"] == node_id)
    assert node["MetricsExportPort"] > 0, f"Ray exports no metrics on this node: {node}"
    return f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"


def parse(text: str, prefix: str = "",
          keep: Callable[[dict[str, str]], bool] = lambda labels: True) -> Series:
    """The psdsf series of a Prometheus text whose names carry ``prefix``, with only their own
    labels (Ray's dropped) and names without the prefix."""
    names = {name.removeprefix(RAY_PREFIX): spec for name, spec in ray_names().items()}
    specs = {s.name: s for s in METRICS}
    out: Series = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            own = s.name.removeprefix(prefix)
            if not s.name.startswith(prefix) or own not in names or not keep(s.labels):
                continue
            spec = specs[names[own]]
            keys = set(spec.labels) | ({"le"} if own.endswith("_bucket") else set())
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k in keys))
            out[own, labels] = float(s.value)
    return out


def ray_series(url: str, worker: str) -> Series:
    """What Ray's agent at ``url`` serves for one worker's psdsf series (names without the
    ``ray_`` prefix)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return parse(text, RAY_PREFIX, lambda labels: labels.get("WorkerId") == worker)


def differences(registry_text: str, ray: Series) -> list[str]:
    """Where Ray's series are not the registry's: every registry sample must be there with its
    value (counters still at zero excepted: Ray exports a counter from its first increment);
    the only others allowed are gauges at 0 (series that went, ageing out)."""
    own = parse(registry_text)
    counters = {s.name for s in METRICS if s.type == "counter"}
    out = []
    for key, value in own.items():
        if key[0] in counters and value == 0.0:
            continue
        got = ray.get(key)
        if got is None or not math.isclose(got, value, rel_tol=1e-12, abs_tol=1e-15):
            out.append(f"{key}: registry {value}, Ray {got}")
    out += [f"{key}: only in Ray, {v}" for key, v in ray.items()
            if key not in own and not (key[0] not in counters and v == 0.0)]
    return out


def wait_for(probe: Callable[[], list[str]], what: str, timeout: float = PATIENCE) -> None:
    """Poll until ``probe`` finds no difference."""
    deadline = time.monotonic() + timeout
    diff = ["not polled"]
    while time.monotonic() < deadline:
        diff = probe()
        if not diff:
            return
        time.sleep(0.5)
    raise AssertionError(f"{what}: after {timeout:g} s still {len(diff)} differences, "
                         f"e.g. {diff[:6]}")


class Filled:
    """An actor's own AllocatorMetrics, filled by hand, exported through Ray."""

    def __init__(self) -> None:
        self.metrics = AllocatorMetrics()
        self.export = RayMetricsExport(self.metrics.registry)

    def where(self) -> tuple[str, str]:
        import ray

        ctx = ray.get_runtime_context()
        return ctx.get_worker_id(), ctx.get_node_id()

    def fill(self, phase: int) -> str:
        m = self.metrics
        if phase == 1:
            m.set_allocation(["alice", "bob"], ["s1", "s2"], ["CPU", "memory"],
                             np.array([[2.0, 1.0], [0.0, 3.0]]), np.array([0.5, 0.25]),
                             np.array([[0.5, 0.25], [0.75, 1.0]]))
            m.set_server_levels(["s1", "s2"], np.array([0.5, 0.25]))
            m.set_certificate(0.125, False)
            for _ in range(3):
                m.observe_server_round("s1", 0.003)
            m.observe_gossip("s1", 5, 500, 0.5)
            m.observe_event("user_leaves")
            m.observe_reconvergence(4.0)
            m.set_membership(2, 2)
        else:
            m.forget_user("bob")
            m.observe_server_round("s1", 0.2)
            m.observe_server_round("s2", 0.001)
            m.observe_restart("s2")
            m.set_certificate(0.0, True)
        return self.push()

    def push(self) -> str:
        from prometheus_client import generate_latest

        self.export.push()  # again and again: Ray drops a gauge not set for ~20 s
        return generate_latest(self.metrics.registry).decode()


@pytest.mark.usefixtures("ray_session")
def test_an_actors_metrics_arrive_in_rays_export() -> None:
    import ray

    actor: Any = ray.remote(num_cpus=0)(Filled).remote()
    worker, node = ray.get(actor.where.remote())
    url = agent_url(node)
    for phase in (1, 2):
        text: str = ray.get(actor.fill.remote(phase))

        def probe(text: str = text) -> list[str]:
            ray.get(actor.push.remote())
            return differences(text, ray_series(url, worker))

        wait_for(probe, f"phase {phase}")
        got = ray_series(url, worker)
        if phase == 1:
            assert got["psdsf_certificate_residual", ()] == 0.125
            assert got["psdsf_server_rounds_total", (("server", "s1"),)] == 3.0
            assert got["psdsf_server_round_duration_seconds_bucket", (("le", "0.005"),)] == 3.0
            assert got["psdsf_reconvergence_seconds_count", ()] == 1.0
            assert ("psdsf_churn_events_total", (("kind", "user_joins"),)) not in got
        else:
            assert got["psdsf_converged", ()] == 1.0
            assert got["psdsf_server_rounds_total", (("server", "s1"),)] == 4.0
            assert got["psdsf_server_restarts_total", (("server", "s2"),)] == 1.0
            assert got["psdsf_server_round_duration_seconds_count", ()] == 5.0
            # bob left: 0 in Ray until the series ages out (gone from the registry at once)
            assert got.get(("psdsf_user_tasks", (("user", "bob"),)), 0.0) == 0.0
    ray.kill(actor)


@pytest.mark.usefixtures("ray_session")
def test_a_run_exports_through_ray_from_the_start(small_cluster: Path) -> None:
    """No endpoint asked for: the coordinator's metrics still go out through Ray, and they are
    the registry the endpoint serves once asked for (same values, counters since the start)."""
    import ray

    from psdsf_dist.cli.run import serve_metrics
    from psdsf_dist.runtime.launcher import launch

    run = launch(small_cluster,
                 RunConfig(ProtocolConfig(period=1.0, jitter=0.0, seed=1), clock="manual"),
                 run_id="ray-export")
    try:
        seen = run.advance(60)  # u4 leaves at t=20 and comes back at t=40
        assert seen[-1]["holds"]
        worker, node = ray.get(run.coordinator.__ray_call__.remote(
            lambda _: (ray.get_runtime_context().get_worker_id(),
                       ray.get_runtime_context().get_node_id())))
        url = agent_url(node)
        endpoint = serve_metrics(run, 0, "127.0.0.1", True)
        with urllib.request.urlopen(endpoint, timeout=10) as response:
            text = response.read().decode()  # the manual clock stands still: so does this
        wait_for(lambda: differences(text, ray_series(url, worker)), "the run's metrics")
        got = ray_series(url, worker)
        result = run.result()
        last = result.trace[-1]
        assert got["psdsf_certificate_residual", ()] == last.residual
        assert got["psdsf_converged", ()] == 1.0
        assert got["psdsf_members", (("role", "server"),)] == 6.0
        tasks = {dict(k[1])["user"]: v for k, v in got.items() if k[0] == "psdsf_user_tasks"}
        expected = dict(zip(result.scenario.user_names, result.allocation.sum(axis=1),
                            strict=True))
        assert tasks == pytest.approx(expected, rel=1e-12)
        assert got["psdsf_churn_events_total", (("kind", "user_leaves"),)] == 1.0
        assert got["psdsf_churn_events_total", (("kind", "user_joins"),)] == 1.0
        rounds = sum(v for k, v in got.items() if k[0] == "psdsf_server_rounds_total")
        assert rounds >= 6 * 50
        assert got["psdsf_server_round_duration_seconds_count", ()] == rounds
    finally:
        run.stop()


# -- the dashboard's Ray-pipeline queries, against a Prometheus scraping Ray's agent -----------

class Tenant:
    """A tenant queue's metrics (as a queue records them) and an allocator's, in one actor."""

    def __init__(self) -> None:
        from psdsf_dist.observability.tenant_metrics import TenantMetrics

        self.tenant = TenantMetrics("alice")
        self.metrics = AllocatorMetrics()
        self.export = RayMetricsExport(self.metrics.registry)
        self.metrics.set_allocation(["alice"], ["n1"], ["CPU"], np.array([[3.0]]),
                                    np.array([0.5]), np.array([[0.75]]))

    def node(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def work(self) -> None:
        for delay in (0.02, 0.3, 4.0):
            self.tenant.admitted("n1", delay)
        self.tenant.completed("n1")
        self.tenant.retried("n1")
        self.tenant.preempted("n1")
        self.refresh()

    def refresh(self) -> None:
        self.tenant.backlog(2, {"n1": 2})
        self.export.push()


def ray_pipeline_queries() -> list[tuple[str, str]]:
    from tests.observability.test_metrics_prometheus import DASHBOARD_VARIABLES, dashboard_queries

    out = []
    for title, expr, _ in dashboard_queries():
        if RAY_PREFIX + "psdsf_" in expr:
            for name, value in DASHBOARD_VARIABLES.items():
                expr = expr.replace(name, value)
            out.append((title, expr))
    return out


@pytest.mark.usefixtures("ray_session")
def test_the_dashboards_ray_queries_find_data_in_a_prometheus_scraping_ray(
        tmp_path: Path) -> None:
    import ray

    from tests.observability.test_metrics_prometheus import api, running_prometheus

    queries = ray_pipeline_queries()
    assert len(queries) >= 9  # the tenant row
    actor: Any = ray.remote(num_cpus=0)(Tenant).remote()
    ray.get(actor.work.remote())
    url = agent_url(ray.get(actor.node.remote()))
    target = url.removeprefix("http://").removesuffix("/metrics")
    with running_prometheus(target, tmp_path) as base:
        missing = [title for title, _ in queries]
        deadline = time.monotonic() + PATIENCE + 30.0
        while missing and time.monotonic() < deadline:
            ray.get(actor.refresh.remote())
            missing = [f"{title}: {expr}" for title, expr in queries
                       if not api(base, "query", query=expr)["result"]]
            time.sleep(1.0)
        assert not missing, missing
        # and the numbers are the ones recorded
        got = api(base, "query", query='sum by (user) (ray_psdsf_tenant_queued_tasks)')
        assert [(r["metric"]["user"], float(r["value"][1])) for r in got["result"]] == [
            ("alice", 2.0)]
        got = api(base, "query", query="sum(ray_psdsf_tenant_queue_delay_seconds_count)")
        assert float(got["result"][0]["value"][1]) == 3.0
    ray.kill(actor)

