"""The reachability probe run before joining a Ray cluster by address: refusals are quick and
say why; an HTTP/2 server's answer passes."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest

from psdsf_dist.runtime.ray_address import answers_http2, check_ray_address, split_address


def test_split_address_reads_host_and_port_and_refuses_the_rest() -> None:
    assert split_address("10.0.0.1:6379") == ("10.0.0.1", 6379)
    assert split_address("[::1]:6379") == ("::1", 6379)
    for bad in ["abc", ":6379", "host:", "host:0", "host:65536", "host:6x", "host:-1"]:
        with pytest.raises(ValueError, match="host:port"):
            split_address(bad)


def test_only_a_settings_frame_counts_as_http2() -> None:
    assert answers_http2(b"\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x03")
    assert not answers_http2(b"HTTP/1.0 400 Bad request\r\n")
    assert not answers_http2(b"\x00\x00\x06\x04")  # a frame header cut short
    assert not answers_http2(b"")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_closed_port_an_http1_server_and_an_unresolvable_host_are_refused() -> None:
    with pytest.raises(ConnectionError, match="nothing reachable"):
        check_ray_address(f"127.0.0.1:{_closed_port()}", timeout=2)
    with pytest.raises(ConnectionError, match="nothing reachable"):
        check_ray_address("no-such-host.invalid:6379", timeout=2)
    with pytest.raises(ConnectionError, match="host:port"):
        check_ray_address("localhost", timeout=2)


def _answering(reply: bytes) -> tuple[socket.socket, threading.Thread]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(1024)
            if reply:
                conn.sendall(reply)
            time.sleep(0.8)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


@pytest.mark.parametrize(("reply", "passes"), [
    (b"\x00\x00\x00\x04\x00\x00\x00\x00\x00", True),
    (b"HTTP/1.0 400 Bad request\r\n\r\n", False),
    (b"", False),  # silent: the read times out
])
def test_the_probe_passes_only_an_http2_answer(reply: bytes, passes: bool) -> None:
    listener, thread = _answering(reply)
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    began = time.monotonic()
    try:
        if passes:
            check_ray_address(address, timeout=0.5)
        else:
            with pytest.raises(ConnectionError, match=r"not a Ray cluster|no answer"):
                check_ray_address(address, timeout=0.5)
    finally:
        thread.join(timeout=5)
        listener.close()
    assert time.monotonic() - began < 4


def test_stop_at_an_address_where_nothing_listens_ends_in_one_line_at_once() -> None:
    """It hung for ever (Ray's GCS client retries without end, a warning per try)."""
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "psdsf_dist.cli.main", "stop", "--address",
                           f"127.0.0.1:{_closed_port()}"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "cannot connect to Ray" in done.stderr
    assert time.monotonic() - began < 30
