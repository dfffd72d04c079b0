"""A real Prometheus server scrapes a running allocator; its query API agrees with the allocator.

Needs Debian's ``prometheus`` package (``scripts/test.sh`` installs it).  Without the binary the
test fails when ``CI`` is set and is skipped otherwise.  Prometheus runs on loopback, on a free
port, with its configuration and storage in the test's temporary directory, so it neither meets
a system-wide Prometheus nor leaves anything behind.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from psdsf_dist.observability.metrics import METRICS
from psdsf_dist.observability.ray_export import RAY_PREFIX, ray_names
from tests.cli.test_observe import (
    CHURN,  # the paper's Fig. 1 with churn; converges within 40 rounds
)
from tests.conftest import SMALL_CLUSTER

PROMETHEUS = "/usr/bin/prometheus"
PATIENCE = 60.0  # seconds; the machine may be busy with other test suites
T = TypeVar("T")


def prometheus_binary() -> str:
    found = PROMETHEUS if os.access(PROMETHEUS, os.X_OK) else shutil.which("prometheus")
    if found is None:
        message = ("the prometheus binary is missing: install Debian's `prometheus` package "
                   "(scripts/test.sh does)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def eventually(probe: Callable[[], T | None], what: str, timeout: float = PATIENCE) -> T:
    """Poll ``probe`` until it returns something other than None."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            got = probe()
        except (urllib.error.URLError, ConnectionError, ValueError) as err:
            last, got = err, None
        if got is not None:
            return got
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last error: {last})")


def read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stderr is not None
    ready, _, _ = select.select([proc.stderr], [], [], timeout)
    if not ready:
        raise AssertionError(f"no line from the allocator within {timeout:g} s")
    return proc.stderr.readline()


def stop(proc: subprocess.Popen[Any]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


@pytest.fixture(scope="module")
def allocator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``psdsf-dist observe`` on the churn scenario: its endpoint and its final-state file."""
    tmp_path = tmp_path_factory.mktemp("allocator")
    final = tmp_path / "final.json"
    scenario = tmp_path / "churn.json"
    scenario.write_text(json.dumps(CHURN), encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "psdsf_dist.cli.main", "observe", str(scenario),
         "--port", "0", "--rounds", "40", "--pace", "0.05", "--keep-serving", "300", "--quiet",
         "--json", "-o", str(final)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    try:
        line = read_line(proc, PATIENCE)
        prefix = "psdsf-dist: observe: serving metrics on http://"
        assert line.startswith(prefix), line
        yield line.removeprefix(prefix).strip().removesuffix("/metrics"), final
    finally:
        status = stop(proc)
    assert status == 0, "the allocator did not shut down cleanly on SIGTERM"


@contextmanager
def running_prometheus(target: str, tmp_path: Path) -> Iterator[str]:
    """A Prometheus server on a free loopback port scraping ``target`` (host:port) every
    second, configuration and storage in ``tmp_path``; yields its base URL."""
    binary = prometheus_binary()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: psdsf\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n",
        encoding="utf-8",
    )
    address = f"127.0.0.1:{free_port()}"
    log_path = tmp_path / "prometheus.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address={address}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        base = f"http://{address}"
        try:
            def ready() -> bool | None:
                if proc.poll() is not None:
                    raise AssertionError(f"prometheus exited: {log_path.read_text()[-2000:]}")
                with urllib.request.urlopen(f"{base}/-/ready", timeout=5) as response:
                    return True if response.status == 200 else None

            eventually(ready, "prometheus to be ready")
            yield base
        finally:
            stop(proc)


def wait_for_target(base: str, target: str) -> None:
    def up() -> bool | None:
        active = api(base, "targets")["activeTargets"]
        return True if [t["health"] for t in active] == ["up"] else None

    eventually(up, f"prometheus to scrape {target}")


@pytest.fixture(scope="module")
def prometheus(allocator: tuple[str, Path],
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Prometheus server scraping the observe command's endpoint; yields its base URL."""
    with running_prometheus(allocator[0], tmp_path_factory.mktemp("prometheus")) as base:
        yield base


def api(base: str, path: str, **params: str) -> Any:
    url = f"{base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as response:
        doc = json.loads(response.read())
    assert doc["status"] == "success", doc
    return doc["data"]


def query(base: str, promql: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Instant query: labels (without job and instance) -> value."""
    data = api(base, "query", query=promql)
    assert data["resultType"] == "vector"
    return {tuple(sorted((k, v) for k, v in r["metric"].items()
                         if k not in ("job", "instance", "__name__"))): float(r["value"][1])
            for r in data["result"]}


def scalar(base: str, promql: str) -> float | None:
    got = query(base, promql)
    return next(iter(got.values())) if len(got) == 1 else None


def test_prometheus_sees_what_the_allocator_did(allocator: tuple[str, Path],
                                                 prometheus: str) -> None:
    target, final = allocator
    wait_for_target(prometheus, target)
    # the run takes ~2 s; then the allocator holds its final state
    state = eventually(lambda: json.loads(final.read_text()) if final.exists() else None,
                       "the allocator to finish its run")
    last = state["trace"][-1]

    def scraped_after_the_run() -> bool | None:
        # the final residual is this run's last value; wait for a scrape that has it
        got = scalar(prometheus, "psdsf_certificate_residual")
        return True if got == last["residual"] else None

    eventually(scraped_after_the_run, "a scrape of the final state")

    # tasks per user: every present user, as the allocator reports them
    tasks = {dict(k)["user"]: v for k, v in query(prometheus, "psdsf_user_tasks").items()}
    assert set(tasks) == {"u1", "u3"}  # u2 left: its series went stale
    for user, value in tasks.items():
        assert value == pytest.approx(state["tasks"][user], rel=1e-12)
    per_pair = query(prometheus, "sum by (user) (psdsf_allocated_tasks)")
    assert {dict(k)["user"]: v for k, v in per_pair.items()} == pytest.approx(tasks)

    # certificate residual and the converged flag
    assert scalar(prometheus, "psdsf_certificate_residual") == last["residual"]
    assert scalar(prometheus, "psdsf_converged") == (1.0 if last["holds"] else 0.0)
    assert last["holds"], "the churn scenario converges within 40 rounds"
    assert state["certificate"]["holds"]

    # churn: every event counted by kind, the returning server's restart
    churn = {dict(k)["kind"]: v for k, v in query(prometheus, "psdsf_churn_events_total").items()}
    assert churn == {"user_leaves": 1.0, "user_joins": 0.0, "server_fails": 1.0,
                     "server_joins": 1.0, "set_demand": 0.0, "set_weight": 0.0,
                     "set_max_tasks": 0.0}
    assert scalar(prometheus, 'psdsf_server_restarts_total{server="s2"}') == 1.0
    assert scalar(prometheus, 'psdsf_members{role="user"}') == 2.0
    assert scalar(prometheus, 'psdsf_members{role="server"}') == 2.0
    rounds = scalar(prometheus, "sum(psdsf_server_rounds_total)")
    assert rounds is not None and rounds > 0
    assert (scalar(prometheus, "psdsf_reconvergence_seconds_count") or 0.0) >= 1.0


# -- the shipped configuration and dashboard ---------------------------------------------------

CONFIGS = Path(__file__).resolve().parents[2] / "cluster_configs"
DASHBOARD_VARIABLES = {"$job": ".*", "$cluster": ".*", "$user": ".*",
                       "$__rate_interval": "10s", "$__range": "5m"}


def dashboard_queries() -> list[tuple[str, str, bool]]:
    """(where, PromQL, whether it must find data once the run has converged)."""
    doc = json.loads((CONFIGS / "grafana-dashboard.json").read_text(encoding="utf-8"))
    # series through Ray's metrics pipeline (ray_psdsf_*: the tenant row) are not on the
    # allocator's endpoint; tests/observability/test_ray_export.py runs those queries against a
    # Prometheus scraping Ray's metrics agent
    # and unmanaged usage is measured only by the servers of a tenants run (from Ray's nodes)
    out = [(p["title"], t["expr"], RAY_PREFIX + "psdsf_" not in t["expr"]
            and "psdsf_unmanaged_usage" not in t["expr"])
           for p in doc["panels"] for t in p.get("targets", [])]
    # the churn annotation marks changes within a minute; this run's events came before the
    # first scrape, so there are none to mark
    out += [(a["name"], a["expr"], False) for a in doc["annotations"]["list"]]
    return out


def test_the_scrape_config_is_valid() -> None:
    promtool = str(Path(prometheus_binary()).with_name("promtool"))
    check = subprocess.run([promtool, "check", "config", str(CONFIGS / "prometheus.yml")],
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr


def test_every_dashboard_query_runs_and_finds_data(allocator: tuple[str, Path],
                                                    prometheus: str) -> None:
    _, final = allocator
    eventually(lambda: True if final.exists() else None, "the allocator to finish its run")
    # rates and increases need two samples of the final state in their window
    eventually(lambda: True if scalar(prometheus, "psdsf_converged") == 1.0 else None,
               "a scrape of the converged state")
    eventually(lambda: True if (scalar(prometheus, "count_over_time(psdsf_converged[10s])")
                                or 0) >= 3 else None, "three scrapes")
    queries = dashboard_queries()
    assert len(queries) >= 20
    for title, expr, has_data in queries:
        for name, value in DASHBOARD_VARIABLES.items():
            expr = expr.replace(name, value)
        assert "$" not in expr, (title, expr)
        data = api(prometheus, "query", query=expr)  # asserts success: the PromQL is valid
        assert data["result"] or not has_data, f"{title}: no data for {expr}"


def tenant_ray_names() -> dict[str, str]:
    """The tenant queues' series (:mod:`psdsf_dist.observability.tenant_metrics`) as Prometheus
    shows them when it scrapes Ray -> the ``ray.util.metrics`` name they come from."""
    from ray.util import metrics  # these objects need no running Ray

    from psdsf_dist.observability.tenant_metrics import TenantMetrics

    out: dict[str, str] = {}
    for metric in vars(TenantMetrics("u")).values():
        if not isinstance(metric, metrics.Metric):
            continue
        name = metric.info["name"]
        if isinstance(metric, metrics.Histogram):
            out |= {f"{RAY_PREFIX}{name}{s}": name for s in ("_bucket", "_sum", "_count")}
        elif isinstance(metric, metrics.Counter):  # Ray adds _total where it is missing
            out[RAY_PREFIX + name + ("" if name.endswith("_total") else "_total")] = name
        else:
            out[RAY_PREFIX + name] = name
    return out


def test_the_dashboard_uses_only_exported_metrics_and_its_datasource_variable() -> None:
    doc = json.loads((CONFIGS / "grafana-dashboard.json").read_text(encoding="utf-8"))
    exported = set()
    for spec in METRICS:  # the allocator's endpoint
        exported.add(spec.name)
        if spec.type == "histogram":
            exported |= {f"{spec.name}_bucket", f"{spec.name}_sum", f"{spec.name}_count"}
    tenants = tenant_ray_names()
    assert len(set(tenants.values())) == 7
    exported |= set(ray_names()) | set(tenants)  # through Ray's pipeline, with its ray_ prefix
    used = {name for _, expr, _ in dashboard_queries()
            for name in re.findall(r"\b(?:ray_)?psdsf_[a-z_]+", expr)}
    assert used <= exported, used - exported
    # every family of the table has a panel on the endpoint's names, except the per-pair one
    # (off on large clusters); every tenant series has one
    families = {re.sub(r"_(bucket|sum|count)$", "", name) for name in used}
    assert {f for f in families if not f.startswith(RAY_PREFIX)} == {
        s.name for s in METRICS if not s.per_pair}
    assert {tenants[n] for n in used if n in tenants} == set(tenants.values())
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for p in doc["panels"]:
        assert set(p["gridPos"]) == {"h", "w", "x", "y"}
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert all(t["datasource"] == p["datasource"] for t in p["targets"])


# -- the allocator on Ray ----------------------------------------------------------------------



@pytest.fixture(scope="module")
def ray_run() -> Iterator[Any]:
    """The Ray allocator on the small cluster (6 server actors), manual clock: time moves only
    when the test says, so the state Prometheus scrapes stands still."""
    prometheus_binary()  # fail or skip before paying for Ray
    import ray

    from psdsf_dist.protocol.config import ProtocolConfig
    from psdsf_dist.runtime.launcher import launch
    from psdsf_dist.runtime.settings import RunConfig

    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, namespace="psdsf", include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    # fanout 2: in lock-step, with 4 peers of 5 every server could hear every other column in
    # the very instant it updates, and the staleness check below wants the ordinary case
    run = launch(SMALL_CLUSTER,
                 RunConfig(ProtocolConfig(period=1.0, jitter=0.0, seed=1, fanout=2),
                           clock="manual"),
                 run_id="metrics-prometheus")
    try:
        yield run
    finally:
        run.stop()
        if started:
            ray.shutdown()


def test_prometheus_sees_what_the_ray_allocator_did(
        ray_run: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    import ray

    from psdsf_dist.cli.run import serve_metrics

    url = serve_metrics(ray_run, 0, "127.0.0.1", True)
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
    assert serve_metrics(ray_run, 0, "127.0.0.1", True) == url  # one endpoint per run
    seen = ray_run.advance(60)  # u4 leaves at t=20 and comes back at t=40
    assert seen[-1]["holds"], "the small cluster re-converges within 20 periods"
    result = ray_run.result()
    target = url.removeprefix("http://").removesuffix("/metrics")
    with running_prometheus(target, tmp_path_factory.mktemp("prometheus-ray")) as base:
        wait_for_target(base, target)
        last = result.trace[-1]
        eventually(lambda: True if scalar(base, "psdsf_certificate_residual") == last.residual
                   else None, "a scrape of the run's last observation")
        tasks = {dict(k)["user"]: v for k, v in query(base, "psdsf_user_tasks").items()}
        expected = dict(zip(result.scenario.user_names, result.allocation.sum(axis=1),
                            strict=True))
        assert tasks == pytest.approx(expected, rel=1e-12)
        assert scalar(base, "psdsf_converged") == 1.0
        churn = {dict(k)["kind"]: v
                 for k, v in query(base, "psdsf_churn_events_total").items()}
        assert churn["user_leaves"] == 1.0 and churn["user_joins"] == 1.0
        assert scalar(base, 'psdsf_members{role="server"}') == 6.0
        assert scalar(base, 'psdsf_members{role="user"}') == 4.0
        servers = {dict(k)["server"] for k in query(base, "psdsf_server_rounds_total")}
        assert servers == set(result.scenario.server_names)
        assert (scalar(base, "sum(psdsf_gossip_bytes_total)") or 0.0) > 0
        assert (scalar(base, "psdsf_reconvergence_seconds_count") or 0.0) >= 1.0
        # the server procedure's latency: one sample per round the servers ran (the reports
        # carry the latest durations), each well under a period
        rounds = scalar(base, "sum(psdsf_server_rounds_total)") or 0.0
        timed = scalar(base, "psdsf_server_round_duration_seconds_count") or 0.0
        assert rounds >= 6 * 50 and timed == rounds
        mean = (scalar(base, "psdsf_server_round_duration_seconds_sum") or 0.0) / timed
        assert 1e-6 < mean < 0.5
        # gossip staleness, per server: the median age of the others' columns, at most a few
        # periods. The servers' rounds of one instant run in any order, so a server can hear
        # three of its five peers' columns of the very instant it updates (median 0.0); the
        # server that updates first in an instant has heard none, its median is a period or more
        stale = {dict(k)["server"]: v
                 for k, v in query(base, "psdsf_gossip_staleness_seconds").items()}
        assert set(stale) == set(result.scenario.server_names)
        assert all(0.0 <= v <= 4.0 for v in stale.values()), stale
        assert max(stale.values()) >= 1.0, stale
    # the endpoint ends with the run
    ray.get(ray_run.coordinator.stop.remote(ray_run.secret))
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=5)
