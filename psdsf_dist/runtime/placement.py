"""Where server actors go (pure): pinned to a node, or spread over the alive nodes.

Every placed actor is pinned to its node by a *hard* node affinity: Ray does not honour a soft
affinity for these zero-CPU actors (asked round-robin over three nodes, they landed on two:
``experiments/notes/design_measurements.md``).  So a server of the scenario does not come
back elsewhere by Ray's restart when its node goes; the coordinator places it again on an alive
node (see :mod:`psdsf_dist.runtime.coordinator`, Faults), while a ``servers:
from-ray`` server, which *is* its node, fails with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def assign_nodes(servers: Sequence[str], nodes: Sequence[str], pinned: Mapping[str, str],
                 load: Mapping[str, int] | None = None) -> dict[str, tuple[str | None, bool]]:
    """server -> (node id or None, pinned).  Pinned servers (``servers: from-ray``) go to their
    node; each of the others to the alive node hosting the fewest servers so far (``load``:
    servers already on each node; ties in the order of ``nodes``), i.e. round-robin over
    equally loaded nodes.  No nodes: (None, False), Ray decides."""
    count = {n: 0 for n in nodes}
    for node, hosted in (load or {}).items():
        if node in count:
            count[node] += hosted
    out: dict[str, tuple[str | None, bool]] = {}
    for s in servers:
        if s in pinned:
            out[s] = (pinned[s], True)
        elif nodes:
            node = min(nodes, key=lambda n: count[n])  # the first of the least loaded
            count[node] += 1
            out[s] = (node, False)
        else:
            out[s] = (None, False)
    return out
