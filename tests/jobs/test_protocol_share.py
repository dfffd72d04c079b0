"""The per-server protocol sharing the sites' slots while jobs come and go: on jobs that stay
it reaches an allocation the paper's certificate accepts; a new set of jobs keeps the columns
and the rule's memory of the jobs that stay; and driving the job simulator it respects the
slots and sites, runs every task once, rounds once per period while jobs are present, and
gives the same run twice."""

from __future__ import annotations

import math

import numpy as np
import pytest

from psdsf_dist.core.certificate import certify_columns
from psdsf_dist.jobs.allocated import PROTOCOL, allocation, job_scenario, simulate_allocated
from psdsf_dist.jobs.protocol_share import ProtocolShare
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.update_rule import SplitState
from tests.jobs.test_allocated import two_jobs
from tests.jobs.test_simulator import check_run, random_workload

SITES = ("S1", "S2", "S3")
SLOTS = np.array([4, 6, 3], dtype=np.int64)


def jobs_scenario(jobs: list[int]) -> Scenario:
    """Job ``i``: ``2 + i`` unstarted tasks on the sites ``{i mod 3, i + 1 mod 3}``, one more
    running at site ``i mod 3``."""
    running = np.zeros((len(jobs), 3), dtype=np.int64)
    groups = []
    for p, i in enumerate(jobs):
        running[p, i % 3] = 1
        groups.append([([i % 3, (i + 1) % 3], 2 + i)])
    return job_scenario([f"j{i}" for i in jobs], running, groups, SLOTS, SITES)


def settle(servers: ProtocolShare, rounds: int = 80) -> None:
    for _ in range(rounds):
        servers.round()


def test_on_jobs_that_stay_the_servers_reach_a_certified_allocation() -> None:
    servers = ProtocolShare(ProtocolConfig(), 3)
    sc = jobs_scenario([0, 1, 2, 3, 4])
    servers.follow([0, 1, 2, 3, 4], sc)
    settle(servers)
    X = servers.columns
    cert = certify_columns(sc, X, X.sum(axis=1), np.arange(3, dtype=np.int64), mode="rdm",
                           rtol=1e-3)
    assert cert.holds, cert.violations[:2]
    assert servers.residuals[-1] == pytest.approx(cert.residual)
    assert servers.rounds == len(servers.residuals) == 80 and servers.certified >= 1
    assert (X.sum(axis=0) <= SLOTS + 1e-9).all()
    assert (X.sum(axis=1) <= 1 + np.array([2, 3, 4, 5, 6]) + 1e-9).all()  # the backlogs


def test_jobs_that_stay_keep_their_columns_and_memory_a_new_one_starts_empty() -> None:
    servers = ProtocolShare(ProtocolConfig(rule="split"), 3)
    servers.follow([0, 1, 2, 3], jobs_scenario([0, 1, 2, 3]))
    settle(servers, 10)
    before, states = servers.columns.copy(), list(servers.states)
    servers.follow([3, 7, 1], jobs_scenario([3, 7, 1]))
    np.testing.assert_array_equal(servers.columns[0], before[3])
    np.testing.assert_array_equal(servers.columns[2], before[1])
    assert (servers.columns[1] == 0).all()
    for old, new in zip(states, servers.states, strict=True):
        assert isinstance(old, SplitState) and isinstance(new, SplitState)
        np.testing.assert_array_equal(new.last_totals[[0, 2]], old.last_totals[[3, 1]])
        assert math.isnan(new.last_totals[1]) and new.draining[1] == 0
    assert all(len(X) == 3 for X in servers.history)
    servers.round()  # the new job gets slots from the next round on
    assert servers.columns[1].sum() > 0


def test_a_scenario_that_is_not_the_jobs_is_refused() -> None:
    servers = ProtocolShare(ProtocolConfig(), 3)
    with pytest.raises(ValueError, match="2 jobs on 3 sites"):
        servers.follow([0, 1], jobs_scenario([0, 1, 2]))


@pytest.mark.parametrize(("seed", "period", "delay"), [(3, 0.5, 0.0), (8, 2.0, 2.0)])
def test_the_protocol_drives_a_job_run(seed: int, period: float, delay: float) -> None:
    w = random_workload(seed, 8, 3, 2, 1.0, 2)
    cfg = ProtocolConfig(period=period, delay=delay)
    r = simulate_allocated(w, PROTOCOL, protocol=cfg)
    check_run(w, r.run)
    # a round per period while jobs are present, at most one per period of the run
    span = float(np.nanmax(r.run.finish)) - float(w.submit[0])
    assert 1 <= r.rounds <= math.ceil(span / period) + 1
    assert len(r.residuals) == r.rounds and 0 < r.certified_rounds <= r.rounds
    again = simulate_allocated(w, PROTOCOL, protocol=cfg)
    assert again.run.finish.tolist() == r.run.finish.tolist()
    assert again.run.task_site.tolist() == r.run.task_site.tolist()
    assert again.residuals.tolist() == r.residuals.tolist()


def test_two_jobs_busy_for_four_seconds_take_four_rounds() -> None:
    # both jobs arrive at 0 and the slots are busy until the last task ends at 4 s or later:
    # rounds at 0, 1, 2, 3 s (and one more for each further second)
    r = simulate_allocated(two_jobs(), PROTOCOL, protocol=ProtocolConfig(period=1.0))
    end = float(np.nanmax(r.run.finish))
    assert r.rounds == math.ceil(end)
    check_run(two_jobs(), r.run)


def test_the_protocol_is_not_a_one_shot_policy() -> None:
    with pytest.raises(ValueError, match="over time"):
        allocation(PROTOCOL, jobs_scenario([0, 1]))
    with pytest.raises(ValueError, match="protocol settings are for the protocol"):
        simulate_allocated(two_jobs(), "amf", protocol=ProtocolConfig())
