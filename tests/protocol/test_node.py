"""The server core without Ray: gossip rounds in-process, feasibility, totals, convergence."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.core.certificate import certificate
from psdsf_dist.model.random_scenarios import random_scenario
from psdsf_dist.model.scenario import Scenario, load_scenario
from psdsf_dist.protocol.config import RunConfig
from psdsf_dist.protocol.membership import ChurnState
from psdsf_dist.protocol.node import (
    TIMED_ROUNDS,
    ServerCore,
    incarnation_of,
    origin_name,
    server_of,
)
from tests.conftest import SMALL_CLUSTER as SMALL


def cluster(scenario: Scenario, config: RunConfig) -> tuple[ChurnState, list[ServerCore]]:
    churn, _ = ChurnState.start(scenario)
    table = churn.table()
    cores = [ServerCore(n, 0, table, config) for n in churn.present_servers()]
    for c in cores:
        c.introduce([d.origin for d in cores], 0.0)
    return churn, cores


def gossip_round(cores: list[ServerCore], rng: np.random.Generator, now: float) -> None:
    by = {c.origin: c for c in cores}
    for c in cores:
        for p in c.peers(rng, []):
            ack = by[p].on_syn(c.syn(), now)
            by[p].on_ack2(c.on_ack(ack, now), now)


def allocation(cores: list[ServerCore]) -> npt.NDArray[np.float64]:
    return np.array([c.column for c in cores]).T


def test_origins_name_incarnations() -> None:
    assert origin_name("B-1", 0) == "B-1" and origin_name("B-1", 2) == "B-1#2"
    assert server_of("B-1#2") == "B-1" and server_of("B-1") == "B-1"
    assert incarnation_of("B-1#2") == 2 and incarnation_of("B-1") == 0
    for n in (0, 1, 17):
        assert incarnation_of(origin_name("s-3", n)) == n


def test_rounds_carry_their_duration_and_the_gossip_staleness() -> None:
    config = RunConfig(period=2.0)
    _, cores = cluster(load_scenario(SMALL), config)
    first = cores[0]
    assert first.staleness_seconds is None and not first.round_seconds
    first.update(0.0)
    # the others are known (introduced at t=0) but not heard yet: no age to tell
    assert first.staleness_seconds is None and len(first.round_seconds) == 1
    rng = np.random.default_rng(3)
    for r in range(1, TIMED_ROUNDS + 10):
        for c in cores:
            c.update(2.0 * r)
        gossip_round(cores, rng, 2.0 * r + 1.0)
    first.update(2.0 * (TIMED_ROUNDS + 10))
    assert first.rounds == TIMED_ROUNDS + 11
    assert len(first.round_seconds) == TIMED_ROUNDS  # a bounded window of the latest
    assert all(0.0 < s < 1.0 for s in first.round_seconds)
    # one exchange per server per period: the others' columns are one to a few periods old
    assert first.staleness_seconds is not None
    assert config.period <= first.staleness_seconds <= 4 * config.period


def test_in_process_rounds_reach_the_certificate() -> None:
    churn, cores = cluster(load_scenario(SMALL), RunConfig(seed=0))
    rng = np.random.default_rng(0)
    for r in range(40):
        for c in cores:
            c.update(float(r))
        gossip_round(cores, rng, float(r) + 0.5)
    cert = certificate(churn.current(), allocation(cores), rtol=1e-3)
    assert cert.holds, cert.violations[:3]


def test_a_new_table_preempts_what_no_longer_fits() -> None:
    churn, cores = cluster(load_scenario(SMALL), RunConfig())
    for c in cores:
        c.update(0.0)
    assert allocation(cores)[3].sum() > 0
    churn.apply(churn.parse({"user_leaves": "u4"}), 1.0)
    for c in cores:
        assert c.adopt(churn.table(), 1.0)
        assert not c.adopt(churn.table(), 1.5)  # an old epoch changes nothing
    assert allocation(cores)[3].sum() == 0


@settings(max_examples=15)
@given(seed=st.integers(0, 10_000), K=st.integers(2, 6), N=st.integers(1, 4))
def test_columns_fit_and_gossip_totals_match_the_truth(seed: int, K: int, N: int) -> None:
    rng = np.random.default_rng(seed)
    scenario = random_scenario(rng, K=K, N=N, M=2)
    _, cores = cluster(scenario, RunConfig(seed=seed, fanout=2))
    for r in range(6):
        for c in cores:
            if rng.random() < 0.7:  # asynchronous: not everyone acts every round
                c.update(float(r))  # raises FeasibilityError on an over-full column
        for _ in range(K):  # enough exchanges for news to reach everyone
            gossip_round(cores, rng, float(r) + 0.5)
        truth = allocation(cores).sum(axis=1)
        for c in cores:
            np.testing.assert_allclose(c.gossip.totals(), truth, rtol=1e-9, atol=1e-12)
    traffic = [c.traffic for c in cores]
    assert all(t.messages > 0 and t.bytes > 0 for t in traffic)
