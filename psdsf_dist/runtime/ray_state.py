"""Ray's cluster state as the run reads it, typed: the node table, the named actors, what is
available on each node, this node's address.

Ray's functions for these carry no types (or, for the named actors, the wrong one): each is
wrapped here, in one place, and its answer given the type Ray documents for it.  The node
table and the available resources are blocking reads of Ray's GCS: an actor reads them in a
worker thread, so that its event loop goes on meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import ray
import ray.util

from psdsf_dist.runtime.from_ray import RayNode
from psdsf_dist.runtime.names import NamedActor


def nodes() -> list[RayNode]:
    """Ray's node table (alive and dead nodes)."""
    read = cast(Callable[[], list[RayNode]], ray.nodes)
    return list(read())


def named_actors() -> list[NamedActor]:
    """Every named actor of the cluster, in every namespace."""
    return list(cast(list[NamedActor], ray.util.list_named_actors(all_namespaces=True)))


def available_per_node() -> dict[str, dict[str, float]]:
    """Node id -> resource -> the amount available there now."""
    read = cast(Callable[[], dict[str, dict[str, float]]],
                ray._private.state.available_resources_per_node)
    return read()


def node_ip_address() -> str:
    """The address Ray knows this node by."""
    read = cast(Callable[[], object], ray.util.get_node_ip_address)
    return str(read())
