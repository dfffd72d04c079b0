"""The metrics endpoint: serves the registry's text, picks a free port, stops cleanly."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from psdsf_dist.observability.metrics import AllocatorMetrics
from psdsf_dist.observability.metrics_server import (
    DEFAULT_BIND,
    MetricsEndpointError,
    MetricsServer,
)


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return str(response.read().decode())


def test_serves_the_registry_on_loopback_by_default() -> None:
    metrics = AllocatorMetrics()
    metrics.set_certificate(0.25, False)
    with MetricsServer(metrics.registry, port=0) as server:
        assert server.bind == DEFAULT_BIND == "127.0.0.1"
        assert server.port > 0
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        text = fetch(server.url)
        values = {s.name: s.value for fam in text_string_to_metric_families(text)
                  for s in fam.samples}
        assert values["psdsf_certificate_residual"] == 0.25
        # updates show in the next scrape
        metrics.set_certificate(0.0, True)
        again = fetch(server.url)
        assert "psdsf_converged 1.0" in again


def test_stop_releases_the_port() -> None:
    metrics = AllocatorMetrics()
    server = MetricsServer(metrics.registry, port=0).start()
    port = server.port
    assert server.running
    server.stop()
    assert not server.running
    server.stop()  # idempotent
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
    # the same port can be bound again at once
    with MetricsServer(metrics.registry, port=port) as again:
        assert again.port == port
        fetch(again.url)


def test_a_port_in_use_is_a_one_line_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = MetricsServer(AllocatorMetrics().registry, port=port)
        with pytest.raises(MetricsEndpointError) as err:
            server.start()
        assert f"127.0.0.1:{port}" in str(err.value)
        assert "\n" not in str(err.value)
        assert not server.running


def test_bad_arguments_and_states() -> None:
    registry = AllocatorMetrics().registry
    with pytest.raises(ValueError, match="port"):
        MetricsServer(registry, port=70000)
    server = MetricsServer(registry, port=0)
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.port
    with server, pytest.raises(RuntimeError, match="already running"):
        server.start()


def test_a_bind_address_that_cannot_be_encoded_is_one_line() -> None:
    """A lone surrogate as the address was a UnicodeError traceback (IDNA encoding)."""
    from psdsf_dist.cli.main import main

    assert main(["observe", "psdsf_dist/examples/paper_fig1.yaml", "--rounds", "1", "--port",
                 "0", "--pace", "0", "--quiet", "--bind", "\ud800"]) == 2
