"""A restarted coordinator's state from its server actors' answers, without Ray."""

from __future__ import annotations

import pytest

from psdsf_dist.model.scenario import load_scenario
from psdsf_dist.protocol.convergence import Observation
from psdsf_dist.protocol.membership import ChurnState, Table
from psdsf_dist.runtime.messages import ActorState, HostedState, Notes
from psdsf_dist.runtime.rebuild import NothingToRebuildError, rebuild_state
from tests.conftest import SMALL_CLUSTER


def tables() -> tuple[Table, Table]:
    """The first table of the small cluster, and the one after a user left at t = 7."""
    churn, _ = ChurnState.start(load_scenario(SMALL_CLUSTER))
    first = churn.table()
    churn.apply(churn.parse({"user_leaves": churn.full.user_names[0]}), 7.0,
                from_scenario=False)
    return first, churn.table()


def observation(k: int) -> Observation:
    return Observation(k, float(k), 0.0, True, True, 0.5, 0.0, 1.0, 10.0, 10.0, 6)


def actor(servers: list[tuple[str, Table | None, int]], *, origins: tuple[str, ...] = (),
          journal: int = 0, node: str = "n1", time: float | None = None,
          notes: Notes | None = None) -> ActorState:
    return ActorState(tuple(HostedState(n, t, i, 100.0) for n, t, i in servers), origins,
                      notes or {}, tuple(observation(k) for k in range(journal)), node,
                      time)


def test_the_newest_table_the_longest_journal_and_every_incarnation_heard_of() -> None:
    old, new = tables()
    names = old.full.server_names
    answers: dict[str, ActorState | BaseException] = {
        "a0": actor([(names[0], old, 0)], origins=(names[0], f"{names[1]}#3"), journal=5,
                    notes={"restarts": 2}, time=9.0),
        "a1": actor([(names[1], new, 3)], origins=(f"{names[0]}#1",), journal=7, node="n2",
                    notes={"faults": []}, time=8.0),
        "a2": actor([(names[2], None, -1)], node="n3"),  # restarted by Ray: not started
        "a3": TimeoutError(),
    }
    got = rebuild_state(answers, {}, ["n1", "n2", "n3"])
    assert got.table.epoch == new.epoch
    assert len(got.observations) == 7 and got.journaled == {"a0": 5, "a1": 7}
    assert got.incarnations == {names[0]: 1, names[1]: 3}
    assert got.notes == {"restarts": 2, "faults": []}
    assert got.unreachable == ("a3",)
    assert [(h.name, h.actor, h.incarnation, h.node) for h in got.hosted] == [
        (names[0], "a0", 0, "n1"), (names[1], "a1", 3, "n2"), (names[2], "a2", -1, "n3")]
    assert got.started_at == 100.0
    assert got.latest_time == 9.0  # an actor's clock beyond the last change (7.0)


def test_servers_no_answering_actor_hosts_start_again_or_fail_with_their_node() -> None:
    _, new = tables()
    names = [n for n, up in zip(new.full.server_names, new.servers_present, strict=True)
             if up]
    answers: dict[str, ActorState | BaseException] = {"a0": actor([(names[0], new, 0)])}
    pinned = {names[1]: "gone-node", names[2]: "n1"}
    got = rebuild_state(answers, pinned, ["n1"])
    assert got.missing_failed == (names[1],)
    assert got.missing_restart == tuple(names[2:])
    assert got.latest_time == 7.0  # the last change, no actor clock


def test_the_fault_counts_go_on_from_the_notes() -> None:
    _, new = tables()
    names = [n for n, up in zip(new.full.server_names, new.servers_present, strict=True)
             if up]
    notes: Notes = {"restarts": 2, "coordinator_restarts": 1, "faults": [("server x", 3.0)]}
    got = rebuild_state({"a0": actor([(names[0], new, 0)], notes=notes)}, {}, ["n1"])
    assert got.restarts == 2 + len(names) - 1  # the missing servers start again
    assert got.coordinator_restarts == 2
    assert got.faults == (("server x", 3.0),)


def test_nothing_to_rebuild_from_without_a_started_server() -> None:
    with pytest.raises(NothingToRebuildError):
        rebuild_state({"a0": actor([("x", None, -1)]), "a1": RuntimeError()}, {}, [])
