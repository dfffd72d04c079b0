"""Leases: grants never make the claims exceed the capacity; expiry and quarantine."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.admission.leases import LeaseBook
from psdsf_dist.admission.rounding import most_that_fit

TTL = 0.75


def book(cap: list[float]) -> LeaseBook:
    return LeaseBook("s1", np.array(cap))


def test_a_grant_fits_beside_the_others_claims() -> None:
    b = book([4.0, 8.0])
    d = {"a": np.array([1.0, 1.0]), "b": np.array([1.0, 4.0])}
    assert b.ask("a", 0, 3, 0.0, TTL, d).slots == 3
    # b's target 2 needs 8 mem; a claims 3 mem of 8: room for one
    lease = b.ask("b", 0, 2, 0.1, TTL, d)
    assert (lease.slots, lease.target) == (1, 2)


def test_a_shrunk_lease_frees_room_only_as_tasks_finish() -> None:
    b = book([4.0])
    d = {"a": np.array([1.0]), "b": np.array([1.0])}
    assert b.ask("a", 0, 4, 0.0, TTL, d).slots == 4
    assert b.ask("b", 0, 2, 0.1, TTL, d).slots == 0
    assert b.ask("a", 4, 2, 0.2, TTL, d).slots == 2  # a still runs 4: claims 4
    assert b.ask("b", 0, 2, 0.3, TTL, d).slots == 0
    assert b.ask("a", 2, 2, 0.4, TTL, d).slots == 2  # two finished
    assert b.ask("b", 0, 2, 0.5, TTL, d).slots == 2


def test_an_expired_lease_releases_its_claim() -> None:
    b = book([2.0])
    d = {"a": np.array([1.0]), "b": np.array([1.0])}
    b.ask("a", 0, 2, 0.0, TTL, d)
    assert b.ask("b", 0, 2, 0.5, TTL, d).slots == 0
    assert b.ask("b", 0, 2, 0.8, TTL, d).slots == 2  # a's lease ran out at 0.75
    assert "a" not in b.running()


def test_release_frees_at_once() -> None:
    b = book([2.0])
    d = {"a": np.array([1.0]), "b": np.array([1.0])}
    b.ask("a", 0, 2, 0.0, TTL, d)
    b.release("a")
    assert b.ask("b", 0, 2, 0.1, TTL, d).slots == 2


def test_quarantine_listens_before_it_grants() -> None:
    b = book([2.0])
    b.quarantine_until = 0.5
    d = {"a": np.array([1.0]), "b": np.array([1.0])}
    assert b.ask("a", 2, 2, 0.2, TTL, d).slots == 0  # records a's 2 running tasks
    assert b.ask("b", 0, 2, 0.6, TTL, d).slots == 0  # a's running tasks fill the node
    assert b.ask("a", 2, 2, 0.7, TTL, d).slots == 2


def test_unknown_user_gets_nothing() -> None:
    assert book([2.0]).ask("x", 0, 3, 0.0, TTL, {}).slots == 0


def test_idle_capacity_is_lent_to_a_user_with_tasks_waiting() -> None:
    b = book([4.0])
    d = {"a": np.array([1.0]), "b": np.array([1.0])}
    lease = b.ask("a", 0, 1, 0.0, TTL, d, queued=10, reserved={"a": 1, "b": 0})
    assert (lease.slots, lease.target) == (4, 1)  # nobody else is allocated anything here
    assert b.granted("a") == 1  # the credit is charged for the allocation's part only
    assert b.ask("a", 0, 1, 0.1, TTL, d, queued=2, reserved={"a": 1}).slots == 2  # its wish


def test_lending_takes_no_one_elses_reservation() -> None:
    b = book([4.0])
    d = {"a": np.array([1.0]), "b": np.array([1.0])}
    # b is allocated 1.5 here (reserved: 2) but runs nothing yet: a may borrow 2, not 3
    assert b.ask("a", 0, 1, 0.0, TTL, d, queued=10, reserved={"a": 1, "b": 2}).slots == 2
    assert b.ask("b", 0, 2, 0.1, TTL, d, queued=10, reserved={"a": 1, "b": 2}).slots == 2
    # a's lent slots go back as its tasks finish: with 2 running it keeps its claim of 2
    assert b.ask("a", 2, 1, 0.2, TTL, d, queued=10, reserved={"a": 1, "b": 2}).slots == 2
    assert b.ask("a", 1, 1, 0.3, TTL, d, queued=0, reserved={"a": 1, "b": 2}).slots == 1


def test_no_lending_without_tasks_waiting() -> None:
    b = book([4.0])
    d = {"a": np.array([1.0])}
    assert b.ask("a", 1, 1, 0.0, TTL, d, queued=0, reserved={"a": 1}).slots == 1


def test_a_sole_user_filling_the_node_may_pipeline() -> None:
    b = book([4.0, 8.0])
    d = {"a": np.array([1.0, 1.0]), "b": np.array([1.0, 4.0])}
    assert b.ask("a", 0, 4, 0.0, TTL, d, reserved={"a": 4, "b": 0}).pipeline == 4  # one a slot
    # slots that leave room for one more task: a waiting task could start beside them
    assert b.ask("a", 3, 3, 0.1, TTL, d, reserved={"a": 3, "b": 0}).pipeline == 0
    # another user allocated here, or holding a claim: a freed slot may be theirs
    assert b.ask("a", 4, 4, 0.2, TTL, d, reserved={"a": 3, "b": 1}).pipeline == 0
    c = book([4.0, 8.0])
    c.ask("b", 1, 1, 0.0, TTL, d, reserved={"a": 0, "b": 0})
    assert c.ask("a", 0, 4, 0.1, TTL, d, reserved={"a": 4, "b": 0}).pipeline == 0
    assert c.ask("a", 0, 4, 0.8, TTL, d, reserved={"a": 4, "b": 0}).pipeline == 4  # b expired


def test_most_that_fit() -> None:
    cap = np.array([4.0, 8.0])
    assert most_that_fit(np.array([1.0, 3.0]), cap, cap) == 2
    assert most_that_fit(np.array([0.0, 0.5]), cap, cap) == 16
    assert most_that_fit(np.array([5.0, 0.0]), cap, cap) == 0
    assert most_that_fit(np.array([0.1, 0.1]), np.array([0.3, 0.3]), cap) == 3  # round-off
    assert most_that_fit(np.zeros(2), cap, cap) == 0


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_claims_never_exceed_capacity(data: st.DataObject) -> None:
    """Queues asking in turn, within the lease's lifetime, and behaving (running at most
    max(lease, what ran before)): the book's claims, and so the tasks the queues run, stay
    within the capacity whatever the targets and the finishing tasks."""
    users = ["a", "b", "c"]
    demand = {u: np.array(data.draw(st.lists(st.floats(0.1, 2.0), min_size=2, max_size=2)))
              for u in users}
    cap = np.array([4.0, 6.0])
    b = LeaseBook("s", cap)
    running = dict.fromkeys(users, 0)
    now = 0.0
    for step in range(45):
        u = users[step % 3]
        now += data.draw(st.floats(0.0, 0.2))  # three asks take < TTL: no lease expires
        running[u] = data.draw(st.integers(0, running[u]))  # some tasks finished
        reserved = {v: data.draw(st.integers(0, 4)) for v in users}
        lease = b.ask(u, running[u], data.draw(st.integers(0, 8)), now, TTL, demand,
                      queued=data.draw(st.integers(0, 10)), reserved=reserved)
        running[u] = max(running[u], data.draw(st.integers(0, lease.slots)))  # fills up
        if lease.pipeline:
            # a task waiting at the node starts only in place of one of u's: u is alone here
            # and one more of its tasks would not fit
            assert all(running[v] == 0 and reserved[v] == 0 for v in users if v != u)
            assert most_that_fit(demand[u], cap, cap) <= lease.slots
        used = sum((running[v] * demand[v] for v in users), np.zeros(2))
        assert np.all(used <= cap + 1e-9)
        assert np.all(b.claims(now, demand) <= cap + 1e-9)
