"""``psdsf-dist stop``: end an allocator running in a Ray cluster — a detached one
(``psdsf-dist run --detach``), or the leftover actors of one whose driver died.

Every actor named after the allocator (``--name``) is ended — its coordinator and its server
actors — and the command waits until Ray has freed their names, so a ``run`` of the same name
can follow at once.  Tenants' queues belong to the tenants' drivers: their queued tasks fail
with ``AllocatorGoneError``.  Without ``--address`` the cluster is the one this machine's Ray
tools would reach (``RAY_ADDRESS``, else the most recent cluster started here): a local Ray
started by ``run`` ends with that command, so there is nothing to start here.
"""

from __future__ import annotations

import argparse
import sys

from psdsf_dist.cli.common import (
    EXIT_FAILURE,
    CommandError,
    add_name_option,
    results_only_on_stdout,
)

AUTO = "auto"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("stop", help="end an allocator running in a Ray cluster (by its --name)")
    p.add_argument("--address", metavar="ADDR",
                   help="Ray cluster it runs in (`auto` or host:port); default: the cluster "
                        "this machine's Ray tools reach (`auto`)")
    add_name_option(p)
    p.set_defaults(run=stop)


def stop(args: argparse.Namespace) -> int:
    import ray

    from psdsf_dist.runtime.launcher import connect, stop_run

    address = args.address or AUTO
    connected_before = ray.is_initialized()  # called from a driver (tests): stay connected
    with results_only_on_stdout():
        try:
            connect(address)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise CommandError(f"--address {address}: cannot connect to Ray: {err}",
                               EXIT_FAILURE) from None
        try:
            ended = stop_run(args.name)
        finally:
            if not connected_before:
                ray.shutdown()
    if not ended:
        raise CommandError(f"--name: no allocator {args.name!r} in the Ray cluster at "
                           f"{address}", EXIT_FAILURE)
    print(f"psdsf-dist: stop: allocator {args.name!r}: {ended} actor"
          f"{'' if ended == 1 else 's'} ended", file=sys.stderr)
    return 0
