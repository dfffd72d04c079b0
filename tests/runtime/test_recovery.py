"""What the coordinator does about its servers after an observation, without Ray."""

from __future__ import annotations

from typing import cast

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from psdsf_dist.runtime.handles import ServerHandle
from psdsf_dist.runtime.members import Member
from psdsf_dist.runtime.messages import ServerReport
from psdsf_dist.runtime.recovery import (
    ERROR_RESTARTS,
    RecoveryPlan,
    RecoveryRequest,
    plan_recovery,
)

NO_HANDLE = cast(ServerHandle, None)
"""The plan only reads where servers are: it calls no actor."""


def members() -> dict[str, Member]:
    """A and B share actor a1 on node n1; C alone on n2; D is its node n3 (from-ray)."""
    return {"A": Member("A", NO_HANDLE, "a1", 0, "n1"),
            "B": Member("B", NO_HANDLE, "a1", 0, "n1"),
            "C": Member("C", NO_HANDLE, "a2", 1, "n2"),
            "D": Member("D", NO_HANDLE, "a3", 0, "n3", pinned=True)}


def report(name: str, *, epoch: int = 4, running: bool = True,
           error: str | None = None) -> ServerReport:
    return ServerReport(name, running, name, epoch, np.zeros(2), 0, 0, 0, error, 1)


def plan(*, reports: dict[str, ServerReport] | None = None, restart: tuple[str, ...] = (),
         errors: dict[str, str] | None = None, failed: tuple[str, ...] = (),
         erred: dict[str, int] | None = None, alive: tuple[str, ...] = ("n1", "n2", "n3")
         ) -> RecoveryPlan:
    return plan_recovery(RecoveryRequest(
        reports if reports is not None else {n: report(n) for n in members()}, members(),
        restart, errors or {}, failed, erred or {}, 4, alive))


def test_a_healthy_run_needs_nothing() -> None:
    p = plan(erred={"C": 2})
    assert p == RecoveryPlan((), (), (), frozenset(), (), (), {})  # C's streak ended


def test_servers_ray_restarted_start_again_and_unknown_names_are_ignored() -> None:
    assert plan(restart=("C", "gone")).crashed == ("C",)


def test_an_erring_server_restarts_until_its_streak_reaches_the_limit() -> None:
    erred: dict[str, int] = {}
    for k in range(1, ERROR_RESTARTS):
        p = plan(reports={"A": report("A", running=False, error="boom")},
                 errors={"A": "boom"}, erred=erred)
        assert p.broke == ("A",) and p.hopeless == ()
        erred = p.erred
        assert erred == {"A": k}
    p = plan(errors={"A": "boom"}, erred=erred)
    assert p.broke == () and p.hopeless == (("A", "boom"),)
    assert p.erred == {}  # it leaves the run: no streak kept


def test_a_healthy_report_between_two_errors_ends_the_streak() -> None:
    p = plan(reports={"A": report("A")}, erred={"A": ERROR_RESTARTS - 1})
    assert p.erred == {}
    p = plan(errors={"A": "boom"}, erred=p.erred)
    assert p.broke == ("A",)


def test_actors_with_a_server_on_an_older_table_get_it_again() -> None:
    reports = {n: report(n) for n in members()}
    reports["B"] = report("B", epoch=3)
    reports["C"] = report("C", epoch=3, running=False)  # not running: started anew instead
    assert plan(reports=reports).repush == frozenset({"a1"})


def test_a_failed_server_whose_node_is_gone_moves_with_its_actor_once() -> None:
    p = plan(failed=("A", "B", "C"), alive=("n2", "n3"))
    assert p.relocate == ("a1",)  # A and B share a1: one new actor for both
    assert p.fail == ("C",)  # its node is alive: its actor is gone for good


def test_a_server_that_is_its_node_fails_with_it() -> None:
    p = plan(failed=("D",), alive=("n1", "n2"))
    assert p.relocate == () and p.fail == ("D",)


@given(st.lists(st.sampled_from(["A", "B", "C", "D", "E"]), max_size=6, unique=True),
       st.lists(st.sampled_from(["n1", "n2", "n3"]), max_size=3, unique=True))
def test_every_known_failed_server_either_moves_or_fails(failed: list[str],
                                                         alive: list[str]) -> None:
    p = plan(failed=tuple(failed), alive=tuple(alive))
    ms = members()
    moved = {n for n, m in ms.items() if m.actor in p.relocate}
    assert set(p.fail).isdisjoint(moved)
    assert {n for n in failed if n in ms} <= set(p.fail) | moved
    assert len(p.relocate) == len(set(p.relocate))
    assert all(not ms[n].pinned for n in moved)
