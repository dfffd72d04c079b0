"""A private Ray cluster for a benchmark: ``ray.cluster_utils.Cluster`` nodes on this machine,
the driver connected to them, both shut down however the block ends.

A benchmark that compares the allocator with plain Ray must not join another Ray running on
the machine (``ray.init()`` with no address would): this cluster is its own, with the nodes it
describes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import ray
from ray.cluster_utils import Cluster


@contextmanager
def local_cluster(*nodes: Mapping[str, Any], namespace: str | None = "psdsf") -> Iterator[Any]:
    """A cluster of ``nodes`` (the head first; each the keyword arguments of a Ray node:
    ``num_cpus``, ``memory``, ``resources``, ``object_store_memory``...), the driver connected
    to it in ``namespace``; yields the ``Cluster`` (its ``address`` for other drivers)."""
    if not nodes:
        raise ValueError("a cluster needs at least its head node")
    head, *rest = nodes
    cluster: Any = Cluster(initialize_head=True,
                           head_node_args={"include_dashboard": False, **head})
    try:
        for node in rest:
            cluster.add_node(**node)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace=namespace, log_to_driver=False,
                 configure_logging=False)
        try:
            yield cluster
        finally:
            ray.shutdown()
    finally:
        cluster.shutdown()
