"""Where server actors go (pure): pinned to a node, or spread round-robin over the nodes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def assign_nodes(servers: Sequence[str], nodes: Sequence[str],
                 pinned: Mapping[str, str]) -> dict[str, tuple[str | None, bool]]:
    """server -> (node id or None, hard).  Pinned servers (``servers: from-ray``) must run on
    their node (hard); the others are dealt round-robin over the alive nodes, as a soft
    preference so that a restarted actor may come back elsewhere when its node is gone."""
    out: dict[str, tuple[str | None, bool]] = {}
    k = 0
    for s in servers:
        if s in pinned:
            out[s] = (pinned[s], True)
        elif nodes:
            out[s] = (nodes[k % len(nodes)], False)
            k += 1
        else:
            out[s] = (None, False)
    return out
