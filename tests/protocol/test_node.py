"""The protocol's server without a driver: wake schedule, gossip exchanges, churn, totals."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.core.certificate import certificate
from psdsf_dist.model.random_scenarios import random_scenario
from psdsf_dist.model.scenario import Scenario, load_scenario
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.membership import ChurnState
from psdsf_dist.protocol.node import (
    SEED_PEERS,
    TIMED_ROUNDS,
    Ack,
    Ack2,
    ServerNode,
    Syn,
    seed_peers,
    server_seed,
    slots_carry,
)
from tests.conftest import SMALL_CLUSTER as SMALL


def cluster(scenario: Scenario, config: ProtocolConfig) -> tuple[ChurnState, list[ServerNode]]:
    churn, _ = ChurnState.start(scenario)
    table = churn.table()
    rule = config.make_rule()
    nodes = [ServerNode(n, 0, table, config, rule) for n in churn.present_servers()]
    for node in nodes:
        node.introduce([d.origin for d in nodes], 0.0)
    return churn, nodes


def gossip_round(nodes: list[ServerNode], now: float) -> None:
    """Every server's exchanges, each carried out at once: Syn, Ack, Ack2."""
    by = {n.origin: n for n in nodes}
    for node in nodes:
        for peer, syn in node.exchanges():
            ack = by[peer].receive(syn, now)
            assert isinstance(ack, Ack)
            ack2 = node.receive(ack, now)
            assert isinstance(ack2, Ack2)
            assert by[peer].receive(ack2, now) is None


def rounds(nodes: list[ServerNode], first: int, last: int) -> None:
    """Rounds ``first`` to ``last - 1``: every server updates at ``r``, gossips at ``r + 0.5``."""
    for r in range(first, last):
        for node in nodes:
            node.update(float(r))
        gossip_round(nodes, r + 0.5)


def allocation(nodes: list[ServerNode]) -> npt.NDArray[np.float64]:
    return np.array([n.column for n in nodes]).T


def test_seeds_are_per_server_and_per_incarnation_and_stable() -> None:
    a = server_seed(1, "s-1", 0)
    assert a == server_seed(1, "s-1", 0)
    assert len({a, server_seed(2, "s-1", 0), server_seed(1, "s-2", 0),
                server_seed(1, "s-1", 1)}) == 4
    others = [f"s-{i}" for i in range(30)]
    assert seed_peers(others, 5, everyone=True) == others
    few = seed_peers(others, 5, everyone=False)
    assert len(few) == SEED_PEERS and set(few) <= set(others)
    assert few == seed_peers(others, 5, everyone=False)


def test_wakes_follow_the_period_gossip_rate_and_jitter() -> None:
    config = ProtocolConfig(period=2.0, gossip_rate=4, jitter=0.2, rule="split")  # no slots
    _, nodes = cluster(load_scenario(SMALL), config)
    node = nodes[0]
    first = node.first_wake(10.0)
    assert 10.0 <= first < 12.0  # a random phase within one period
    now, updates = first, []
    step = config.period / config.gossip_rate
    for _ in range(12):
        woke = node.wake(now)
        updates.append(woke.updated)
        assert len(woke.exchanges) == config.fanout  # four of the other five servers
        assert step * 0.9 - 1e-12 <= woke.next_at - now <= step * 1.1 + 1e-12
        now = woke.next_at
    assert updates == [True, False, False, False] * 3  # one update per period
    assert node.rounds == 3
    lockstep = cluster(load_scenario(SMALL), ProtocolConfig(period=2.0, jitter=0.0))[1][0]
    assert lockstep.first_wake(10.0) == 10.0
    assert lockstep.wake(10.0).next_at == 10.5


def test_rounds_carry_their_duration_and_the_gossip_staleness() -> None:
    config = ProtocolConfig(period=2.0, fanout=1)
    _, nodes = cluster(load_scenario(SMALL), config)
    first = nodes[0]
    assert first.staleness_seconds is None and not first.round_seconds
    first.update(0.0)
    # the others are known (introduced at t=0) but not heard yet: no age to tell
    assert first.staleness_seconds is None and len(first.round_seconds) == 1
    for r in range(1, TIMED_ROUNDS + 10):
        for node in nodes:
            node.update(2.0 * r)
        gossip_round(nodes, 2.0 * r + 1.0)
    first.update(2.0 * (TIMED_ROUNDS + 10))
    assert first.rounds == TIMED_ROUNDS + 11
    assert len(first.round_seconds) == TIMED_ROUNDS  # a bounded window of the latest
    assert all(0.0 < s < 1.0 for s in first.round_seconds)
    # one exchange per server per period: the others' columns are one to a few periods old
    assert first.staleness_seconds is not None
    assert config.period <= first.staleness_seconds <= 4 * config.period


def test_in_process_rounds_reach_the_certificate() -> None:
    churn, nodes = cluster(load_scenario(SMALL), ProtocolConfig(seed=0))
    for r in range(40):
        for node in nodes:
            node.update(float(r))
        gossip_round(nodes, float(r) + 0.5)
    cert = certificate(churn.current(), allocation(nodes), rtol=1e-3)
    assert cert.holds, cert.violations[:3]


def test_class_rule_servers_driven_all_at_once_take_the_step_without_slots() -> None:
    """A driver that updates every server at each whole second (every class at once, though
    the nodes hold slots): the heartbeats show the classes acting at one phase, so the rule
    takes ``split``'s step and certifies (the slotted step among classes acting at once
    flips, as best response does: residual 0.94 after these 40 rounds)."""
    churn, nodes = cluster(load_scenario(SMALL), ProtocolConfig(seed=0, rule="class"))
    assert all(n.slot is not None for n in nodes)
    rounds(nodes, 0, 40)
    cert = certificate(churn.current(), allocation(nodes), rtol=1e-3)
    assert cert.holds, cert.violations[:3]


def test_a_new_table_preempts_what_no_longer_fits() -> None:
    churn, nodes = cluster(load_scenario(SMALL), ProtocolConfig())
    for node in nodes:
        node.update(0.0)
    assert allocation(nodes)[3].sum() > 0
    churn.apply(churn.parse({"user_leaves": "u4"}), 1.0)
    for node in nodes:
        assert node.adopt(churn.table(), 1.0)
        assert not node.adopt(churn.table(), 1.5)  # an old epoch changes nothing
    assert allocation(nodes)[3].sum() == 0


def test_a_new_user_grows_every_server_and_gets_tasks() -> None:
    churn, nodes = cluster(load_scenario(SMALL), ProtocolConfig(seed=1))
    rounds(nodes, 0, 5)
    churn.apply(churn.parse({"user_joins": {"name": "u9", "demand": {"cpu": 1, "mem": 1}}}), 5.0)
    for node in nodes:
        assert node.adopt(churn.table(), 5.0)
        assert len(node.column) == churn.full.num_users
    rounds(nodes, 6, 40)
    X = allocation(nodes)
    assert X[-1].sum() > 0
    cert = certificate(churn.current(), X, rtol=1e-3)
    assert cert.holds, cert.violations[:3]


def test_a_server_that_hears_of_a_new_user_before_its_table_keeps_working() -> None:
    """Tables reach the servers at different times: one that gossips with a server on the
    newer table (one more user) before its own copy arrives holds its column until it
    adopts the table, then updates with every user."""
    churn, nodes = cluster(load_scenario(SMALL), ProtocolConfig(seed=1))
    rounds(nodes, 0, 5)
    churn.apply(churn.parse({"user_joins": {"name": "u9", "demand": {"cpu": 1, "mem": 1}}}), 5.0)
    early, late = nodes[0], nodes[1:]
    assert early.adopt(churn.table(), 5.0)
    early.update(5.0)
    gossip_round(nodes, 5.5)  # the others now gossip columns of one more user
    for r in range(6, 9):
        for node in nodes:
            before = node.column.copy()
            node.update(float(r))  # the late ones hold their columns: no error
            if node in late:
                assert np.array_equal(node.column, before)
        gossip_round(nodes, r + 0.5)
    for node in late:
        assert node.adopt(churn.table(), 9.0)
    rounds(nodes, 9, 45)
    X = allocation(nodes)
    assert X[-1].sum() > 0
    cert = certificate(churn.current(), X, rtol=1e-3)
    assert cert.holds, cert.violations[:3]


def test_a_leaving_server_spreads_its_tombstone() -> None:
    _, nodes = cluster(load_scenario(SMALL), ProtocolConfig(fanout=5))
    for node in nodes:
        node.update(0.0)
    gossip_round(nodes, 0.5)
    leaving, others = nodes[0], nodes[1:]
    syns = leaving.leave(1.0)
    assert len(syns) == 5 and all(isinstance(s, Syn) for _, s in syns)
    by = {n.origin: n for n in others}
    for peer, syn in syns:
        by[peer].receive(syn, 1.0)
    for node in others:
        assert leaving.origin not in node.gossip.members()
        assert node.gossip.totals() == pytest.approx(allocation(others).sum(axis=1))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), K=st.integers(2, 6), N=st.integers(1, 4))
def test_columns_fit_and_gossip_totals_match_the_truth(seed: int, K: int, N: int) -> None:
    rng = np.random.default_rng(seed)
    scenario = random_scenario(rng, K=K, N=N, M=2)
    _, nodes = cluster(scenario, ProtocolConfig(seed=seed, fanout=2))
    for r in range(6):
        for node in nodes:
            if rng.random() < 0.7:  # asynchronous: not everyone acts every round
                node.update(float(r))  # raises FeasibilityError on an over-full column
        for _ in range(K):  # enough exchanges for news to reach everyone
            gossip_round(nodes, float(r) + 0.5)
        truth = allocation(nodes).sum(axis=1)
        for node in nodes:
            np.testing.assert_allclose(node.gossip.totals(), truth, rtol=1e-9, atol=1e-12)
    assert all(n.traffic.messages > 0 and n.traffic.bytes > 0 for n in nodes)


def test_class_rule_servers_update_in_their_class_slot_on_the_period_grid() -> None:
    """Classes act in turn: class c of C at phase c / C of every period, whatever the jitter
    of the gossip rounds in between; the members of a class compute one column."""
    sc = Scenario.from_dict({
        "resources": ["cpu"],
        "servers": [{"name": "a", "count": 3, "capacity": {"cpu": 1}},
                    {"name": "b", "count": 2, "capacity": {"cpu": 2}}],
        "users": [{"name": "u", "demand": {"cpu": 0.1}}, {"name": "v", "demand": {"cpu": 0.3}}],
    })
    config = ProtocolConfig(rule="class", jitter=0.2)
    _, nodes = cluster(sc, config)
    assert [n.slot for n in nodes] == [0.0, 0.0, 0.0, 0.5, 0.5]
    # class b's first wake is its pull, half a slot before its slot
    assert [n.first_wake(0.0) for n in nodes] == [0.0, 0.0, 0.0, 0.25, 0.25]
    for node in nodes:
        updates, pulls, at = [], [], node.anchor
        while at < 4.0:
            woke = node.wake(at)
            if woke.updated:
                updates.append(at)
            elif len(woke.exchanges) == 1:
                pulls.append(at)
            at = woke.next_at
        assert node.slot is not None
        assert updates == pytest.approx([node.slot + t for t in range(4)])
        due = (node.slot + t - 0.25 for t in range(1, 5))
        assert pulls == pytest.approx([t for t in due if t < 4.0])
    cols = allocation(nodes)
    assert np.allclose(cols[:, :3], cols[:, [0]]) and np.allclose(cols[:, 3:], cols[:, [3]])
    split = ProtocolConfig(rule="split")
    assert ServerNode(nodes[0].name, 1, nodes[0].table, split,
                      split.make_rule()).slot is None  # only the class rule
    slow = ProtocolConfig(rule="class", fanout=2)  # and only with the defaults' gossip or more
    assert ServerNode(nodes[0].name, 1, nodes[0].table, slow, slow.make_rule()).slot is None
    # and only while a message takes less than a slot (two classes: T / 2)
    for delay, slotted in ((0.49, True), (0.5, False), (2.0, False)):
        held = ProtocolConfig(rule="class", delay=delay)
        node = ServerNode(nodes[0].name, 1, nodes[0].table, held, held.make_rule())
        assert (node.slot is not None) is slotted, delay
        assert slots_carry(held, 2) is slotted


def test_a_slotted_server_pulls_from_the_previous_class_half_a_slot_before_its_slot() -> None:
    """Before its slot a member pulls from one member of the class that acted just before:
    the reply brings that class's new column, however the class's own exchanges went."""
    sc = Scenario.from_dict({
        "resources": ["cpu"],
        "servers": [{"name": "a", "count": 3, "capacity": {"cpu": 1}},
                    {"name": "b", "count": 2, "capacity": {"cpu": 2}}],
        "users": [{"name": "u", "demand": {"cpu": 0.1}}, {"name": "v", "demand": {"cpu": 0.3}}],
    })
    _, nodes = cluster(sc, ProtocolConfig(rule="class", jitter=0.2))
    by = {n.origin: n for n in nodes}
    a, b = nodes[0], nodes[3]
    assert [n.pull_from for n in nodes] == [1, 1, 1, 0, 0]
    assert a.first_wake(0.0) == 0.0  # its slot; its pull (half a slot before) is at 0.75
    assert b.first_wake(0.0) == pytest.approx(0.25)  # the pull comes first
    for n in nodes[:3]:
        if n is not a:
            n.first_wake(0.0)
        assert n.wake(0.0).updated  # class a acts; its exchanges are all lost
        assert n.column.sum() > 0
    woke = b.wake(0.25)
    assert not woke.updated and b.rounds == 0 and len(woke.exchanges) == 1
    assert woke.next_at == pytest.approx(0.5)  # then its slot
    peer, syn = woke.exchanges[0]
    assert peer in {n.origin for n in nodes[:3]}  # a member of the previous class
    ack = by[peer].receive(syn, 0.25)
    assert isinstance(ack, Ack)
    b.receive(ack, 0.25)
    heard = {o: (c, at) for o, c, at in b.gossip.counted()}
    assert np.allclose(heard[peer][0], by[peer].column) and heard[peer][1] == 0.0
    woke = b.wake(0.5)
    assert woke.updated and b.rounds == 1 and woke.next_at < 1.25  # next: a gossip round
    assert b.pull_at == pytest.approx(1.25) and a.pull_at == pytest.approx(0.75)


def test_a_server_moves_its_updates_to_its_class_new_slot_when_the_classes_change() -> None:
    sc = Scenario.from_dict({
        "resources": ["cpu"],
        "servers": [{"name": "a", "count": 2, "capacity": {"cpu": 1}},
                    {"name": "b", "capacity": {"cpu": 2}},
                    {"name": "c", "count": 2, "capacity": {"cpu": 3}}],
        "users": [{"name": "u", "demand": {"cpu": 0.1}}],
    })
    churn, nodes = cluster(sc, ProtocolConfig(rule="class", jitter=0.2))
    node = nodes[-1]
    assert node.slot == pytest.approx(2 / 3)
    node.first_wake(0.0)
    churn.apply(churn.parse({"server_fails": nodes[2].name}), 5.2)
    assert node.adopt(churn.table(), 5.2)
    assert node.slot == pytest.approx(0.5)
    assert node.anchor == pytest.approx(1.5)  # the next instant at phase 1/2, not earlier
