"""Ray's cluster state as the run reads it, typed: the node table, the named actors, what is
available on each node, the workers on a node and what they hold, this node's address.

Ray's functions for these carry no types (or, for the named actors, the wrong one): each is
wrapped here, in one place, and its answer given the type Ray documents for it.  The node
table and the available resources are blocking reads of Ray's GCS, the workers one of a node's
raylet: an actor reads them in a worker thread, so that its event loop goes on meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, cast

import ray
import ray.util
from ray._private import internal_api

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


class _Slot(Protocol):
    allocation: float


class _Allocation(Protocol):
    resource_slots: Sequence[_Slot]


class _WorkerStats(Protocol):
    job_id: bytes
    used_resources: Mapping[str, _Allocation]


class _NodeStats(Protocol):
    """The fields of Ray's ``GetNodeStatsReply`` read here."""

    core_workers_stats: Sequence[_WorkerStats]


def node_workers(address: str, port: int) -> list[tuple[str, dict[str, float]]]:
    """The worker processes on the node whose raylet listens at ``address:port`` that hold
    resources: each one's job (hex id, as ``get_job_id()`` spells it) and what it holds, per
    resource, in Ray's units (Ray's node stats, as ``ray memory`` reads them)."""
    read = cast(Callable[..., _NodeStats], internal_api.node_stats)
    reply = read(address, port, include_memory_info=False)
    out: list[tuple[str, dict[str, float]]] = []
    for worker in reply.core_workers_stats:
        held = {name: float(sum(s.allocation for s in alloc.resource_slots))
                for name, alloc in worker.used_resources.items()}
        if any(v > 0 for v in held.values()):
            out.append((worker.job_id.hex(), held))
    return out


def node_ip_address() -> str:
    """The address Ray knows this node by."""
    read = cast(Callable[[], object], ray.util.get_node_ip_address)
    return str(read())
