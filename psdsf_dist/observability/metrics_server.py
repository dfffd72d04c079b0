"""One HTTP endpoint serving an allocator's metrics registry, for Prometheus to scrape.

One endpoint per running allocator (the coordinator's), so Prometheus scrapes one target per
cluster.  It binds to loopback unless told otherwise: the metrics name users and servers, which
is nobody else's business by default.  Port 0 picks a free port; :attr:`MetricsServer.port` says
which.  The server runs in a daemon thread (prometheus-client's WSGI server) and stops cleanly.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from psdsf_dist.errors import PsdsfError

if TYPE_CHECKING:  # the metrics module is not needed to serve a registry
    from psdsf_dist.observability.metrics import AllocatorMetrics

DEFAULT_BIND = "127.0.0.1"
DEFAULT_PORT = 9475
METRICS_PATH = "/metrics"


class MetricsEndpointError(PsdsfError, OSError):
    """The endpoint could not be opened (address in use, no such address, no permission)."""


class MetricsServer:
    """Serves ``registry`` on ``http://bind:port/metrics`` between :meth:`start` and
    :meth:`stop` (or as a context manager)."""

    def __init__(self, registry: CollectorRegistry, port: int = DEFAULT_PORT,
                 bind: str = DEFAULT_BIND) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {port}")
        self.registry = registry
        self.bind = bind
        self._requested_port = port
        self._httpd: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._httpd is not None

    @property
    def port(self) -> int:
        """The port actually bound (the chosen one when 0 was asked for)."""
        if self._httpd is None:
            raise RuntimeError("the metrics endpoint is not running")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.bind}]" if ":" in self.bind else self.bind
        return f"http://{host}:{self.port}{METRICS_PATH}"

    def start(self) -> Self:
        if self._httpd is not None:
            raise RuntimeError("the metrics endpoint is already running")
        try:
            self._httpd, self._thread = start_http_server(
                self._requested_port, addr=self.bind, registry=self.registry)
        except (OSError, UnicodeError) as err:  # UnicodeError: a bind address IDNA cannot encode
            raise MetricsEndpointError(
                f"cannot serve metrics on {self.bind}:{self._requested_port}: "
                f"{getattr(err, 'strerror', None) or err}") from None
        return self

    def stop(self) -> None:
        """Stop serving and release the port; a no-op when not running."""
        httpd, thread = self._httpd, self._thread
        self._httpd = self._thread = None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if thread is not None:
            thread.join(timeout=5.0)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


class MetricsEndpoint:
    """A run's one metrics endpoint: opened when asked for, opened again by a restarted
    coordinator on the port its predecessor bound (from the noted ``(port, bind,
    per_pair)``), stopped with the run."""

    def __init__(self, metrics: AllocatorMetrics) -> None:
        self.metrics = metrics
        self.server: MetricsServer | None = None

    def open(self, port: int, bind: str, per_pair: bool) -> MetricsServer:
        """Serve the metrics on ``bind:port`` (0: any free port); :class:`MetricsEndpointError`
        if it cannot be bound."""
        self.metrics.per_pair = per_pair
        self.server = MetricsServer(self.metrics.registry, port, bind).start()
        return self.server

    def noted(self) -> tuple[int, str, bool] | None:
        """What a restarted coordinator needs to open the same endpoint (None: none open)."""
        s = self.server
        return None if s is None else (s.port, s.bind, self.metrics.per_pair)

    def reopen(self, noted: Any) -> str | None:
        """Open the endpoint ``noted`` by a predecessor, unless one is open; the error, or
        None."""
        if noted is None or self.server is not None:
            return None
        port, bind, per_pair = noted
        try:
            self.open(int(port), str(bind), bool(per_pair))
        except MetricsEndpointError as err:
            return str(err)
        return None

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
