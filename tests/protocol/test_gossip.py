"""Gossip: merge is idempotent and commutative, anti-entropy converges, membership expires."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.protocol.gossip import (
    COLUMN_HEADER_BYTES,
    COLUMN_VALUE_BYTES,
    DELTA_ENTRY_BYTES,
    DIGEST_ENTRY_BYTES,
    MESSAGE_HEADER_BYTES,
    REBUILD_EVERY,
    SIGN_ENTRY_BYTES,
    Delta,
    Entry,
    GossipState,
    incarnation_of,
    origin_name,
    server_of,
)


def _history(
    seed: int, origins: int, steps: int, users: int
) -> tuple[list[Delta], list[GossipState]]:
    """Origins publishing random (often unchanged, sometimes sparse) columns; every delta they
    would ever send, against digests of every age (full and heartbeat-only entries).  Origins
    2 and 3 are the next incarnations of the servers of origins 0 and 1."""
    rng = np.random.default_rng(seed)
    states = [GossipState(origin_name(f"s{o % 2}", o // 2), users) for o in range(origins)]
    observer = GossipState("observer", users)
    deltas: list[Delta] = []
    digests = [observer.digest()]
    for t in range(steps):
        for st_ in states:
            if rng.random() < 0.3:
                st_.heartbeat(float(t))
            elif rng.random() < 0.1:
                st_.leave(float(t))
            else:
                col = np.where(rng.random(users) < 0.5, rng.uniform(0, 5, users), 0.0)
                st_.set_column(col, float(t))
            for d in digests:
                deltas.append(st_.delta_for(d))
        # an observer that heard part of it: its digest makes heartbeat-only entries appear
        observer.merge(deltas[int(rng.integers(len(deltas)))], float(t))
        digests.append(observer.digest())
    return deltas, states


def _state(g: GossipState) -> tuple[dict[str, tuple[int, int, bool]], dict[str, list[float]]]:
    cols = {}
    for o in g.versions():
        col = g.known_column(o)
        assert col is not None
        cols[o] = [round(float(v), 12) for v in col]
    return g.versions(), cols


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    order_seed=st.integers(0, 2**31),
    origins=st.integers(1, 4),
    steps=st.integers(1, 5),
)
def test_any_order_and_duplication_gives_the_same_state(
    seed: int, order_seed: int, origins: int, steps: int
) -> None:
    deltas, _ = _history(seed, origins, steps, users=3)
    rng = np.random.default_rng(order_seed)
    a = GossipState("a", 3)
    for d in deltas:
        a.merge(d, 0.0)
    b = GossipState("a", 3)
    shuffled = [deltas[i] for i in rng.permutation(len(deltas))]
    dupes = [deltas[int(i)] for i in rng.integers(0, len(deltas), size=len(deltas))]
    for d in shuffled + dupes:
        b.merge(d, 0.0)
    assert _state(a) == _state(b)
    np.testing.assert_allclose(a.totals(), b.totals(), atol=1e-9)
    np.testing.assert_array_equal(a.holders(), b.holders())
    np.testing.assert_array_equal(a.raising(), b.raising())
    np.testing.assert_array_equal(a.lowering(), b.lowering())


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), origins=st.integers(1, 4), steps=st.integers(1, 5),
       keep=st.floats(0.0, 1.0))
def test_loss_then_anti_entropy_reaches_the_origins_latest_columns(
    seed: int, origins: int, steps: int, keep: float
) -> None:
    deltas, states = _history(seed, origins, steps, users=3)
    rng = np.random.default_rng(seed)
    g = GossipState("r", 3)
    for d in deltas:
        if rng.random() < keep:  # the rest is lost
            g.merge(d, 0.0)
    for s in states:  # one anti-entropy exchange with each origin repairs everything
        g.merge(s.delta_for(g.digest()), 0.0)
        assert s.delta_for(g.digest()).entries == ()
    # only each server's newest incarnation counts
    newest = [s for s in states if not any(server_of(t.origin) == server_of(s.origin) and
                                           incarnation_of(t.origin) > incarnation_of(s.origin)
                                           for t in states)]
    expected = sum((s.column for s in newest), np.zeros(3))
    np.testing.assert_allclose(g.totals(), expected, atol=1e-9)
    assert g.holders().tolist() == sum(((s.column > 0).astype(int) for s in newest),
                                       np.zeros(3, dtype=int)).tolist()
    # the origins never heard each other: each one's counts are its own latest moves
    assert g.raising().tolist() == sum((s.raising() for s in newest),
                                       np.zeros(3, dtype=int)).tolist()
    assert g.lowering().tolist() == sum((s.lowering() for s in newest),
                                        np.zeros(3, dtype=int)).tolist()
    assert set(g.members()) <= {"r", *(s.origin for s in newest)}  # never a superseded one


def test_the_totals_and_counts_stay_the_sum_of_the_counted_columns_over_many_updates() -> None:
    """Past ``REBUILD_EVERY`` incremental updates the running totals are rebuilt from the
    columns: with every column as it stands after the change that triggered it (at every
    update here, checked against the columns summed afresh)."""
    rng = np.random.default_rng(7)
    users, origins = 4, 3
    peers = [GossipState(f"p{j}", users) for j in range(origins)]
    me = GossipState("me", users)
    me.set_column(np.array([1.0, 0.0, 2.0, 0.0]), 0.0)
    for t in range(REBUILD_EVERY + 50):
        p = peers[t % origins]
        col = np.where(rng.random(users) < 0.6, rng.uniform(0, 5, users), 0.0)
        p.set_column(col, float(t))
        me.merge(p.delta_for(me.digest()), float(t))
        cols = np.array([me.column, *(q.column for q in peers)])
        np.testing.assert_allclose(me.totals(), cols.sum(axis=0), rtol=1e-12, atol=1e-9)
        assert me.holders().tolist() == (cols > 0).sum(axis=0).tolist()
        signs = np.array([np.zeros(users) if e.moves is None else e.moves
                          for e in (q.own_entry() for q in [me, *peers])])
        assert me.raising().tolist() == (signs > 0).sum(axis=0).tolist()
        assert me.lowering().tolist() == (signs < 0).sum(axis=0).tolist()


def test_push_pull_exchange_and_message_size_follow_what_changed() -> None:
    a, b = GossipState("a", 4), GossipState("b", 4)
    a.set_column(np.array([1.0, 0, 0, 0]), 0.0)
    b.set_column(np.array([0, 2.0, 0, 3.0]), 0.0)
    ack = b.delta_for(a.digest())
    a.merge(ack, 0.0)
    b.merge(a.delta_for(b.digest()), 0.0)
    np.testing.assert_allclose(a.totals(), [1, 2, 0, 3])
    np.testing.assert_allclose(b.totals(), [1, 2, 0, 3])
    # nothing new: an empty delta (header only); a heartbeat carries no column
    assert a.delta_for(b.digest()).size_bytes() == MESSAGE_HEADER_BYTES
    a.heartbeat(1.0)
    hb = a.delta_for(b.digest())
    assert len(hb.entries) == 1 and hb.entries[0].column is None
    a.set_column(np.array([1.0, 0, 5.0, 0]), 2.0)
    full = a.delta_for(b.digest())
    assert full.entries[0].column is not None
    assert full.size_bytes() > hb.size_bytes()
    assert a.digest().size_bytes() == MESSAGE_HEADER_BYTES + 2 * DIGEST_ENTRY_BYTES


def test_own_origin_is_never_overwritten_by_gossip() -> None:
    a = GossipState("a", 2)
    a.set_column(np.array([1.0, 1.0]), 0.0)
    a.merge([Entry("a", 99, 99, np.array([7.0, 7.0]))], 0.0)
    np.testing.assert_allclose(a.column, [1.0, 1.0])


def test_tombstone_removes_tasks_and_is_forgotten_after_its_ttl() -> None:
    a = GossipState("a", 2, tombstone_ttl=10.0)
    b = GossipState("b", 2)
    b.set_column(np.array([2.0, 0.0]), 0.0)
    a.merge(b.delta_for(a.digest()), 0.0)
    assert a.totals().tolist() == [2.0, 0.0]
    b.leave(1.0)
    a.merge(b.delta_for(a.digest()), 1.0)
    assert a.totals().tolist() == [0.0, 0.0]
    assert "b" not in a.members()
    a.expire(5.0)
    assert "b" in a.versions()  # still remembered: an old live entry cannot resurrect it
    a.merge([Entry("b", 1, 1, np.array([2.0, 0.0]))], 6.0)
    assert a.totals().tolist() == [0.0, 0.0]
    a.expire(11.0)
    assert "b" not in a.versions()


def test_origins_name_incarnations() -> None:
    assert origin_name("B-1", 0) == "B-1" and origin_name("B-1", 2) == "B-1#2"
    assert server_of("B-1#2") == "B-1" and server_of("B-1") == "B-1"
    assert incarnation_of("B-1#2") == 2 and incarnation_of("B-1") == 0
    for n in (0, 1, 17):
        assert incarnation_of(origin_name("s-3", n)) == n


def test_a_restarted_server_supersedes_its_crashed_predecessor_at_once() -> None:
    # b crashed holding 2 tasks of user 0; its restart b#1 is heard long before b's column
    # would expire (ttl 8): b stops counting then, and a late message of b cannot revive it
    a = GossipState("a", 2, ttl=8.0, tombstone_ttl=64.0)
    b, b1 = GossipState("b", 2), GossipState("b#1", 2)
    b.set_column(np.array([2.0, 0.0]), 0.0)
    a.merge(b.delta_for(a.digest()), 0.0)
    late = b.delta_for(GossipState("x", 2).digest())
    b.set_column(np.array([3.0, 0.0]), 0.5)  # its last change, still in flight
    in_flight = b.delta_for(a.digest())
    b1.set_column(np.array([0.0, 1.0]), 1.0)
    a.merge(b1.delta_for(a.digest()), 1.0)
    assert a.totals().tolist() == [0.0, 1.0] and a.holders().tolist() == [0, 1]
    assert sorted(a.members()) == ["a", "b#1"]
    a.merge(late, 2.0)
    a.merge(in_flight, 2.0)
    assert a.totals().tolist() == [0.0, 1.0]
    assert a.versions()["b"][2]  # a tombstone, passed on as one
    # an introduction of the new incarnation is enough too; an older one changes nothing
    c = GossipState("c", 2)
    c.merge(b.delta_for(c.digest()), 0.0)
    c.introduce("b#1", 1.0)
    assert c.totals().tolist() == [0.0, 0.0]
    c.introduce("b", 1.0)
    c.merge([Entry("b#1", 1, 1, np.array([0.0, 1.0]))], 1.0)
    assert c.totals().tolist() == [0.0, 1.0]
    b1.heartbeat(65.0)
    a.merge(b1.delta_for(a.digest()), 65.0)
    a.expire(66.0)  # the tombstone is forgotten; the newest incarnation is not
    assert "b" not in a.versions()
    a.merge(late, 67.0)
    assert a.totals().tolist() == [0.0, 1.0]


def test_silent_origin_expires_and_a_newer_heartbeat_revives_it() -> None:
    a = GossipState("a", 2, ttl=3.0)
    b = GossipState("b", 2)
    b.set_column(np.array([0.0, 4.0]), 0.0)
    a.merge(b.delta_for(a.digest()), 0.0)
    assert a.expire(2.0) == []
    assert a.expire(3.5) == ["b"]
    assert a.totals().tolist() == [0.0, 0.0]
    assert a.holders().tolist() == [0, 0]
    b.heartbeat(4.0)
    a.merge(b.delta_for(a.digest()), 4.0)
    assert a.totals().tolist() == [0.0, 4.0]
    assert a.holders().tolist() == [0, 1]
    assert "b" in a.members()


def test_columns_of_different_lengths_merge_zero_padded() -> None:
    a = GossipState("a", 2)
    a.set_column(np.array([1.0, 1.0]), 0.0)
    b = GossipState("b", 3)
    b.set_column(np.array([0.0, 1.0, 5.0]), 0.0)
    a.merge(b.delta_for(a.digest()), 0.0)
    assert a.num_users == 3
    assert a.totals().tolist() == [1.0, 2.0, 5.0]
    b.merge(a.delta_for(b.digest()), 0.0)
    assert b.totals().tolist() == [1.0, 2.0, 5.0]
    a.resize(4)
    assert a.totals().tolist() == [1.0, 2.0, 5.0, 0.0]


def test_introduced_member_is_counted_empty_until_heard() -> None:
    a = GossipState("a", 2, ttl=math.inf)
    a.introduce("b", 0.0)
    assert sorted(a.members()) == ["a", "b"]
    assert a.totals().tolist() == [0.0, 0.0]


def test_ages_follow_the_origins_heartbeat_clock() -> None:
    a, b, c = GossipState("a", 1), GossipState("b", 1), GossipState("c", 1)
    b.set_column(np.array([1.0]), 10.0)
    c.heartbeat(12.0)
    a.merge(b.delta_for(a.digest()), 13.0)
    a.merge(c.delta_for(a.digest()), 13.0)
    assert sorted(a.ages(14.0).tolist()) == [2.0, 4.0]
    b.heartbeat(13.5)
    a.merge(b.delta_for(a.digest()), 13.7)
    assert sorted(a.ages(14.0).tolist()) == [0.5, 2.0]
    assert a.median_age(14.0) == 1.25
    assert a.median_age(12.0) == 0.0  # a peer's clock ahead of ours is no negative age
    assert GossipState("d", 1).median_age(14.0) is None


def test_signed_moves_count_who_raised_and_who_lowered_each_user() -> None:
    a, b, c = GossipState("a", 3), GossipState("b", 3), GossipState("c", 3)
    a.set_column(np.array([1.0, 2.0, 0.0]), 0.0)  # raises users 0 and 1
    b.set_column(np.array([0.0, 1.0, 0.0]), 0.0)  # raises user 1
    b.set_column(np.array([0.5, 0.0, 0.0]), 1.0)  # raises user 0, lowers user 1 (leaves it)
    for origin in (a, b):
        c.merge(origin.delta_for(c.digest()), 1.0)
    assert c.raising().tolist() == [2, 1, 0]
    assert c.lowering().tolist() == [0, 1, 0]
    assert c.holders().tolist() == [2, 1, 0]
    # an unchanged column is published once more, with no moves, and then not again
    a.set_column(np.array([1.0, 2.0, 0.0]), 2.0)
    entry = a.delta_for(c.digest()).entries[0]
    assert entry.column is not None and entry.moves is None
    c.merge(a.delta_for(c.digest()), 2.0)
    assert c.raising().tolist() == [1, 0, 0]
    a.set_column(np.array([1.0, 2.0, 0.0]), 3.0)
    assert a.delta_for(c.digest()).entries[0].column is None  # a heartbeat only
    # a silent origin's moves stop counting with its column
    c.ttl = 5.0
    c.expire(6.5)
    assert c.lowering().tolist() == [0, 0, 0] and c.raising().tolist() == [0, 0, 0]


def test_moves_add_their_signs_to_the_message_size() -> None:
    a = GossipState("a", 4)
    a.set_column(np.array([1.0, 2.0, 0.0, 0.0]), 0.0)
    a.set_column(np.array([1.0, 0.0, 3.0, 0.0]), 1.0)  # user 1 lowered to 0, user 2 raised
    entry = a.own_entry()
    assert entry.moves is not None and entry.moves.tolist() == [0, -1, 1, 0]
    assert entry.size_bytes() == (DELTA_ENTRY_BYTES + COLUMN_HEADER_BYTES
                                  + 2 * COLUMN_VALUE_BYTES + 2 * SIGN_ENTRY_BYTES)
