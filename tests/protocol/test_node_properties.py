"""The protocol's servers under a hostile network: every column stays feasible.

Hypothesis drives a few :class:`ServerNode` s through a random schedule of wake-ups (at random,
increasing times: any staleness) and of message deliveries from a shared network in which
messages are lost, duplicated and delivered out of order — and churn (a user leaving, a weight
changing) at random moments.  After every step each server's column fits its capacities and
gives nothing to an ineligible user, and every total it sees is finite and non-negative.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.model.events import SetWeight, UserLeaves
from psdsf_dist.model.random_scenarios import random_scenario
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.membership import ChurnState
from psdsf_dist.protocol.node import Message, ServerNode
from psdsf_dist.protocol.update_rule import is_feasible_column

STEP = st.one_of(
    st.tuples(st.just("wake"), st.integers(0, 10**6), st.floats(0.0, 3.0)),
    st.tuples(st.just("deliver"), st.integers(0, 10**6), st.floats(0.0, 1.0)),
    st.tuples(st.just("duplicate"), st.integers(0, 10**6), st.floats(0.0, 1.0)),
    st.tuples(st.just("drop"), st.integers(0, 10**6), st.floats(0.0, 1.0)),
    st.tuples(st.just("churn"), st.integers(0, 10**6), st.floats(0.1, 5.0)),
)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), K=st.integers(2, 5), N=st.integers(1, 4),
       M=st.integers(1, 3), rule=st.sampled_from(["split", "best-response", "damped"]),
       steps=st.lists(STEP, min_size=20, max_size=150))
def test_every_column_stays_feasible_under_any_schedule(
        seed: int, K: int, N: int, M: int, rule: str,
        steps: list[tuple[str, int, float]]) -> None:
    scenario = random_scenario(np.random.default_rng(seed), K=K, N=N, M=M)
    config = ProtocolConfig(seed=seed, rule=rule, fanout=2)
    churn, _ = ChurnState.start(scenario)
    table = churn.table()
    names = churn.present_servers()
    nodes = [ServerNode(name, 0, table, config, config.make_rule()) for name in names]
    for node in nodes:
        node.introduce([n.origin for n in nodes], 0.0)
    network: list[tuple[str, Message]] = []
    by_origin = {n.origin: n for n in nodes}
    now = 0.0
    for kind, pick, amount in steps:
        if kind == "wake":
            now += amount
            node = nodes[pick % len(nodes)]
            network += list(node.wake(now).exchanges)
        elif kind == "churn":
            now += amount
            present = [u for u, p in zip(churn.full.user_names, churn.users_present,
                                         strict=True) if p]
            user = present[pick % len(present)] if present else None
            if user is not None and pick % 2 and len(present) > 1:
                churn.apply(UserLeaves(now, -1, user), now)
            elif user is not None:
                churn.apply(SetWeight(now, -1, user, amount), now)
            else:
                continue
            table = churn.table()
            for node in nodes:
                node.adopt(table, now)
        elif network:
            j = pick % len(network)
            to, message = network[j]
            if kind != "duplicate":
                del network[j]
            if kind == "drop":
                continue
            reply = by_origin[to].receive(message, now)
            if reply is not None:
                network.append((message.sender, reply))
        for node in nodes:
            assert is_feasible_column(node.view, node.column), (node.name, node.column)
            totals = node.gossip.totals()
            assert np.all(np.isfinite(totals)) and np.all(totals >= -1e-12)
