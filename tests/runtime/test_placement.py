"""Placement of server actors (pure): pinned servers stay on their node, the others go to the
least loaded alive node."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from psdsf_dist.runtime.placement import assign_nodes


def test_round_robin_over_equally_loaded_nodes_and_pins_kept() -> None:
    where = assign_nodes(["a", "b", "c", "d", "p"], ["n1", "n2", "n3"], {"p": "n9"})
    assert where == {"a": ("n1", False), "b": ("n2", False), "c": ("n3", False),
                     "d": ("n1", False), "p": ("n9", True)}
    assert assign_nodes(["a"], [], {}) == {"a": (None, False)}


def test_relocated_servers_go_to_the_least_loaded_nodes() -> None:
    # n2 is gone; its two servers join n1 (3 servers) and n3 (1 server)
    where = assign_nodes(["x", "y"], ["n1", "n3"], {}, {"n1": 3, "n3": 1, "n2": 2})
    assert where == {"x": ("n3", False), "y": ("n3", False)}


@given(servers=st.integers(0, 40), nodes=st.integers(1, 6),
       load=st.lists(st.integers(0, 5), min_size=6, max_size=6))
def test_placement_evens_out_the_load(servers: int, nodes: int, load: list[int]) -> None:
    names = [f"n{j}" for j in range(nodes)]
    before = dict(zip(names, load, strict=False))
    where = assign_nodes([f"s{k}" for k in range(servers)], names, {}, before)
    after = Counter(before) + Counter(node for node, _ in where.values())
    counts = [after[n] for n in names]
    # every server went to a least loaded node: the spread is the old one's or at most one
    assert max(counts) - min(counts) <= max(max(load[:nodes]) - min(load[:nodes]), 1)
    assert all(not pinned for _, pinned in where.values())
