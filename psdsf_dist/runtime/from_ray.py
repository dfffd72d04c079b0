"""``servers: from-ray``: a scenario whose servers are the Ray cluster's nodes (pure).

Instead of a ``servers`` list the document says ``servers: from-ray``; every alive node
becomes one server named ``node-<first 8 hex digits of its node id>``, with capacities read
from the node's resources.  ``resources`` (optional) lists the Ray resources to share, e.g.
``[CPU, memory, GPU]``; without it: CPU, memory, and every GPU or custom resource some node
has.  Memory (``memory``, ``object_store_memory``) is counted in GiB, everything else as Ray
reports it.  Each server gets the labels ``ip`` (the node's address) and ``head`` (true on the
head node), so users can be restricted with ``requires``.  The result is a normal scenario
document, validated by :meth:`Scenario.from_dict` like any file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TypedDict, cast

from psdsf_dist.errors import ScenarioError

FROM_RAY = "from-ray"
GIB = float(2**30)
MEMORY_RESOURCES = ("memory", "object_store_memory")
# Ray's own bookkeeping resources, never shared by the allocator
_INTERNAL_PREFIXES = ("node:", "accelerator_type:")
_DEFAULT = ("CPU", "memory")


class RayNode(TypedDict, total=False):
    """The fields of an entry of Ray's node table (``ray.nodes()``) read here (Ray's entries
    hold more)."""

    NodeID: str
    Alive: bool
    NodeManagerAddress: str
    NodeManagerPort: int
    Resources: dict[str, float]
    """Resource -> the node's total (memory in bytes)."""


class ServerEntry(TypedDict):
    """A node's entry of ``servers`` in the scenario syntax."""

    name: str
    capacity: dict[str, float]
    labels: dict[str, str]


class ResolvedDocument(TypedDict):
    """A ``servers: from-ray`` document resolved against the nodes: its resources and
    servers (its other keys are the document's own)."""

    resources: list[str]
    servers: list[ServerEntry]


def is_from_ray(doc: object) -> bool:
    return isinstance(doc, Mapping) and doc.get("servers") == FROM_RAY


def node_server_name(node: RayNode) -> str:
    return f"node-{str(node['NodeID'])[:8]}"


def node_capacity(node: RayNode, resources: Sequence[str]) -> dict[str, float]:
    raw = node.get("Resources") or {}
    out: dict[str, float] = {}
    for r in resources:
        value = float(raw.get(r, 0.0))
        out[r] = value / GIB if r in MEMORY_RESOURCES else value
    return out


def node_entry(node: RayNode, resources: Sequence[str]) -> ServerEntry:
    """The ``servers`` entry of one node (also used when a node joins a running cluster)."""
    raw = node.get("Resources") or {}
    head = any(str(k) == "node:__internal_head__" for k in raw)
    return {"name": node_server_name(node), "capacity": node_capacity(node, resources),
            "labels": {"ip": str(node.get("NodeManagerAddress", "")),
                       "head": "true" if head else "false"}}


def default_resources(nodes: Sequence[RayNode]) -> list[str]:
    seen: list[str] = list(_DEFAULT)
    for node in nodes:
        for r in sorted(node.get("Resources") or {}):
            if r in seen or r == "object_store_memory" or r.startswith(_INTERNAL_PREFIXES):
                continue
            seen.append(r)
    return seen


def from_ray_document(doc: Mapping[str, object],
                      nodes: Sequence[RayNode]) -> tuple[ResolvedDocument, dict[str, str]]:
    """A normal scenario document with one server per alive node, and server -> node id."""
    if not is_from_ray(doc):
        raise ScenarioError("servers", f"expected {FROM_RAY!r}")
    alive = [n for n in nodes if n.get("Alive", True)]
    if not alive:
        raise ScenarioError("servers", "from-ray: the Ray cluster has no alive node")
    listed = doc.get("resources")
    # names as written: Scenario.from_dict checks them with the rest of the document
    resources = list(cast("Iterable[str]", listed)) if listed else default_resources(alive)
    out = cast(ResolvedDocument, {**doc, "resources": resources,
                                  "servers": [node_entry(n, resources) for n in alive]})
    pins = {node_server_name(n): str(n["NodeID"]) for n in alive}
    if len(pins) != len(alive):
        raise ScenarioError("servers", "from-ray: two nodes share the first 8 digits of their id")
    return out, pins
