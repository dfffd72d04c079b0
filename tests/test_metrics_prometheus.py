"""A real Prometheus server scrapes a running allocator; its query API agrees with the allocator.

Needs Debian's ``prometheus`` package (``scripts/test.sh`` installs it).  Without the binary the
test fails when ``CI`` is set and is skipped otherwise.  Prometheus runs on loopback, on a free
port, with its configuration and storage in the test's temporary directory, so it neither meets
a system-wide Prometheus nor leaves anything behind.
"""

from __future__ import annotations

import json
import os
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
from pathlib import Path
from typing import Any, TypeVar

import pytest
from conftest import WriteScenario
from test_cli_observe import CHURN

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


@pytest.fixture
def allocator(write_scenario: WriteScenario, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``psdsf-dist observe`` on the churn scenario: its endpoint and its final-state file."""
    final = tmp_path / "final.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "psdsf_dist.cli.main", "observe", str(write_scenario(CHURN)),
         "--port", "0", "--rounds", "40", "--pace", "0.05", "--hold", "300", "--quiet",
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


@pytest.fixture
def prometheus(allocator: tuple[str, Path], tmp_path: Path) -> Iterator[str]:
    """A Prometheus server scraping the allocator every second; yields its base URL."""
    binary = prometheus_binary()
    target, _ = allocator
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: psdsf\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n",
        encoding="utf-8",
    )
    address = f"127.0.0.1:{free_port()}"
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address={address}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://{address}"
    try:
        def ready() -> bool | None:
            if proc.poll() is not None:
                raise AssertionError("prometheus exited: "
                                     + (tmp_path / "prometheus.log").read_text()[-2000:])
            with urllib.request.urlopen(f"{base}/-/ready", timeout=5) as response:
                return True if response.status == 200 else None

        eventually(ready, "prometheus to be ready")
        yield base
    finally:
        stop(proc)
        log.close()


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

    def target_up() -> bool | None:
        active = api(prometheus, "targets")["activeTargets"]
        return True if [t["health"] for t in active] == ["up"] else None

    eventually(target_up, f"prometheus to scrape {target}")
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
                     "server_joins": 1.0, "set_demand": 0.0, "set_weight": 0.0}
    assert scalar(prometheus, 'psdsf_server_restarts_total{server="s2"}') == 1.0
    assert scalar(prometheus, 'psdsf_members{role="user"}') == 2.0
    assert scalar(prometheus, 'psdsf_members{role="server"}') == 2.0
    rounds = scalar(prometheus, "sum(psdsf_server_rounds_total)")
    assert rounds is not None and rounds > 0
    assert (scalar(prometheus, "psdsf_reconvergence_seconds_count") or 0.0) >= 1.0
