"""The coordinator's record of each server of the run: which actor hosts it, as which
incarnation, on which node — and how servers are grouped into actors.  No Ray: the handle is
only held here (its type is :mod:`psdsf_dist.runtime.handles`')."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from psdsf_dist.runtime.handles import ServerHandle


@dataclass
class Member:
    name: str
    handle: ServerHandle
    """The actor hosting this server."""
    actor: str
    """That actor's name."""
    incarnation: int = 0
    node: str | None = None
    pinned: bool = False
    """A ``servers: from-ray`` server: it is its node, and fails with it."""
    gone: int = 0
    """Consecutive reports that failed because the actor is dead for good."""


def groups(names: list[str], where: Mapping[str, tuple[str | None, bool]],
            size: int) -> list[list[str]]:
    """Servers in groups of at most ``size`` that share a node (one actor per group)."""
    by_node: dict[tuple[str | None, bool], list[str]] = {}
    for n in names:
        by_node.setdefault(where[n], []).append(n)
    out: list[list[str]] = []
    for members in by_node.values():
        out += [members[k:k + size] for k in range(0, len(members), size)]
    return out
