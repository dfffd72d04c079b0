"""The coordinator's observation step without Ray: reports and membership in, the observation
and what to do about each server out."""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.solver import solve
from psdsf_dist.model.scenario import load_scenario
from psdsf_dist.protocol.membership import ChurnState
from psdsf_dist.runtime.messages import ServerReport
from psdsf_dist.runtime.observation import (
    MISSES_BEFORE_FAILED,
    ObservationRequest,
    observe_reports,
)
from psdsf_dist.runtime.settings import RunConfig
from tests.conftest import SMALL_CLUSTER

FloatArray = npt.NDArray[np.float64]


def setting() -> tuple[ChurnState, FloatArray]:
    churn, _ = ChurnState.start(load_scenario(SMALL_CLUSTER))
    return churn, solve(churn.current()).allocation


def report(name: str, column: FloatArray, *, epoch: int = 0, messages: int = 10,
           bytes_: int = 1000, running: bool = True, error: str | None = None) -> ServerReport:
    return ServerReport(name=name, running=running, origin=name, epoch=epoch, column=column,
                        messages=messages, bytes=bytes_, rounds=5, error=error, pid=1)


def request(churn: ChurnState, reports: dict[str, ServerReport | None], **changes: object
            ) -> ObservationRequest:
    table = churn.table()
    base = ObservationRequest(
        round=4, time=5.0, scenario=table.scenario, servers_present=table.servers_present,
        epoch=table.epoch, tables={table.epoch: table.scenario},
        members=tuple(churn.present_servers()), reports=reports, gone={}, sent={},
        previous_totals=None, config=RunConfig())
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def all_reports(churn: ChurnState, X: FloatArray, **kw: object) -> dict[str, ServerReport | None]:
    names = churn.current().server_names
    return {n: report(n, X[:, i].copy(), **kw) for i, n in enumerate(names)}  # type: ignore[arg-type]


def test_every_current_column_of_a_ps_dsf_allocation_certifies() -> None:
    churn, X = setting()
    reply = observe_reports(request(churn, all_reports(churn, X)))
    o = reply.observation
    assert o.holds and o.feasible and o.residual < 1e-9
    np.testing.assert_array_equal(reply.allocation, X)
    assert (o.round, o.time, o.servers) == (4, 5.0, 6)
    assert o.messages == 10 and o.bytes == 1000 and o.max_bytes == 1000
    assert reply.sent == {n: (10, 1000) for n in churn.present_servers()}
    assert reply.restart == () and reply.failed == () and not reply.errors


def test_traffic_counts_since_the_previous_observation_and_restarts_from_zero() -> None:
    churn, X = setting()
    names = churn.present_servers()
    sent = {n: (4, 400) for n in names}
    sent[names[0]] = (50, 5000)  # more than it reports now: a new incarnation, counted from 0
    reply = observe_reports(request(churn, all_reports(churn, X), sent=sent))
    assert reply.observation.messages == (10 + 5 * 6) / 6
    assert reply.observation.max_bytes == 1000
    assert reply.sent[names[0]] == (10, 1000)


def test_a_silent_or_stale_server_keeps_the_certificate_from_counting() -> None:
    churn, X = setting()
    names = churn.present_servers()
    silent = all_reports(churn, X)
    silent[names[2]] = None
    reply = observe_reports(request(churn, silent))
    assert not reply.observation.holds
    assert reply.allocation[:, 2].sum() == 0  # a silent server holds nothing
    assert reply.failed == ()  # not gone for good yet
    stale = all_reports(churn, X)
    stale[names[1]] = report(names[1], X[:, 1].copy(), epoch=-1)
    assert not observe_reports(request(churn, stale)).observation.holds


def test_an_infeasible_column_is_flagged() -> None:
    churn, X = setting()
    reports = all_reports(churn, X)
    name = churn.present_servers()[0]
    reports[name] = report(name, X[:, 0] * 3.0)
    assert not observe_reports(request(churn, reports)).observation.feasible


def test_what_each_server_needs_from_the_coordinator() -> None:
    churn, X = setting()
    names = churn.present_servers()
    reports = all_reports(churn, X)
    reports[names[0]] = report(names[0], X[:, 0], running=False)  # Ray restarted it
    reports[names[1]] = report(names[1], X[:, 1], running=False, error="ValueError: boom")
    reports[names[2]] = None
    reports[names[3]] = None
    gone = {names[2]: MISSES_BEFORE_FAILED, names[3]: MISSES_BEFORE_FAILED - 1}
    reply = observe_reports(request(churn, reports, gone=gone))
    assert reply.restart == (names[0],)
    assert reply.errors == {names[1]: "ValueError: boom"}
    assert reply.failed == (names[2],)
    assert not reply.observation.holds


def test_change_is_measured_against_the_previous_totals() -> None:
    churn, X = setting()
    totals = X.sum(axis=1)
    reply = observe_reports(request(churn, all_reports(churn, X), previous_totals=totals * 0.5))
    assert reply.observation.max_relative_change == np.float64(0.5)


def test_a_server_on_a_table_older_than_a_new_user_is_checked_against_that_table() -> None:
    """A user joined (the table grew) and a server has not adopted it yet: its shorter column
    is checked against the table it acted on, not the current one (no crash, still feasible,
    not yet converged)."""
    churn, X = setting()
    old = churn.table()
    names = churn.present_servers()
    churn.apply(churn.parse({"user_joins": {"name": "late", "demand": {"cpu": 1}}}), 1.0)
    new = churn.table()
    reports: dict[str, ServerReport | None] = {
        n: report(n, X[:, i].copy(), epoch=old.epoch) for i, n in enumerate(names)}
    reply = observe_reports(request(churn, reports, tables={old.epoch: old.scenario,
                                                            new.epoch: new.scenario}))
    assert reply.observation.feasible and not reply.observation.holds
    assert reply.allocation.shape == (new.scenario.num_users, len(names))
