"""Check that a Ray cluster answers at an address before ``ray.init`` is asked to join it.

``ray.init(address=...)`` on an address where no Ray runs does not fail: its GCS client retries
for ever (each try waits 5 s for the connection and 30 s for the cluster id), printing a warning
per try — so a mistyped ``--address`` hung ``stop`` and ``run``.  A Ray cluster's bootstrap
address is its GCS, a gRPC server, and gRPC speaks HTTP/2: a server that answers the HTTP/2
client preface with a SETTINGS frame is one that ``ray.init`` can talk to.
:func:`check_ray_address` opens a TCP connection (bounded by ``timeout``), sends the preface and
an empty SETTINGS frame, and reads the first frame header of the answer (bounded likewise).
It raises :class:`ConnectionError` with the reason when nothing listens, when the host does not
resolve, or when the listener does not speak HTTP/2 (an HTTP/1 server, Prometheus, SSH...).  What it
cannot tell apart from a GCS is another HTTP/2 server; that case is left to Ray.
"""

from __future__ import annotations

import socket

PROBE_SECONDS = 5.0
"""Bound of each step of the probe (connect, then the answer)."""

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # length 0, type SETTINGS, stream 0
_SETTINGS = 0x4
_FRAME_HEADER = 9


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (IPv6 as ``[::1]:6379``) as a pair; :class:`ValueError` if it is not one."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not host:port: {address!r}")
    return host.strip("[]"), int(port)


def answers_http2(first_bytes: bytes) -> bool:
    """Whether the first bytes of an answer to the preface begin an HTTP/2 SETTINGS frame (a
    server's first frame must be SETTINGS, RFC 9113 section 3.4)."""
    return len(first_bytes) >= _FRAME_HEADER and first_bytes[3] == _SETTINGS


def check_ray_address(address: str, timeout: float = PROBE_SECONDS) -> None:
    """Raise :class:`ConnectionError` unless a gRPC (HTTP/2) server answers at ``address``
    (``host:port``) within ``timeout`` seconds per step; see the module docstring."""
    try:
        host, port = split_address(address)
    except ValueError as err:
        raise ConnectionError(str(err)) from None
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            conn.sendall(_PREFACE + _EMPTY_SETTINGS)
            answer = b""
            while len(answer) < _FRAME_HEADER:
                chunk = conn.recv(_FRAME_HEADER - len(answer))
                if not chunk:
                    break
                answer += chunk
    except TimeoutError:
        raise ConnectionError(f"no answer from {address} within {timeout:g} s") from None
    except OSError as err:
        raise ConnectionError(f"nothing reachable at {address}: "
                              f"{err.strerror or type(err).__name__}") from None
    if not answers_http2(answer):
        raise ConnectionError(f"{address} answers, but is not a Ray cluster (no gRPC server)")
