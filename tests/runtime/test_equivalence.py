"""One protocol, two drivers: the simulator and a paced run on Ray give the same columns.

The same scenario (with churn), seed and settings go through the simulator and through the
runtime — paced (manual clock), every server hosted by one actor, so that no message crosses
Ray and the actor's clock wakes the servers in the simulator's order.  Every round, the whole
allocation (every server's column) must agree to 1e-12; it agrees exactly.  Between actors
Ray's message order cannot be fixed: there the test only asks for the same convergence.

This is what keeps the drivers from drifting apart: a protocol step changed in one driver
only shows here at once.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from psdsf_dist.model.scenario import load_scenario
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.convergence import Observation
from psdsf_dist.runtime.launcher import launch
from psdsf_dist.runtime.settings import RunConfig
from psdsf_dist.simulator.simulation import SimConfig, Simulator

pytestmark = pytest.mark.usefixtures("ray_session")

FloatArray = npt.NDArray[np.float64]
ROUNDS = 50  # the small cluster's events come at 20 and 40


def simulated_columns(path: Path, protocol: ProtocolConfig) -> list[FloatArray]:
    sim = Simulator(load_scenario(path), SimConfig(protocol=protocol, rounds=ROUNDS,
                                                   gossip="scuttlebutt"))
    seen: list[FloatArray] = []

    def record(_: Observation) -> None:
        seen.append(sim.allocation())

    sim.progress = record
    sim.run()
    return seen


def paced_columns(path: Path, protocol: ProtocolConfig, run_id: str,
                  servers_per_actor: int) -> list[FloatArray]:
    cfg = RunConfig(protocol=protocol, clock="manual", servers_per_actor=servers_per_actor)
    run = launch(path, cfg, run_id=run_id)
    try:
        seen = []
        for _ in range(ROUNDS):
            run.advance(1)
            seen.append(run.result().allocation)
        return seen
    finally:
        run.stop()


@pytest.mark.parametrize("protocol", [
    ProtocolConfig(seed=3),
    ProtocolConfig(seed=5, loss=0.1),
    ProtocolConfig(seed=7, delay=0.3, jitter=0.0, fanout=2, gossip_rate=2),
], ids=["defaults", "loss", "delay-lockstep"])
def test_paced_one_actor_run_gives_the_simulators_columns_every_round(
        small_cluster: Path, protocol: ProtocolConfig) -> None:
    simulated = simulated_columns(small_cluster, protocol)
    paced = paced_columns(small_cluster, protocol, f"equivalence-{protocol.seed}", 6)
    assert len(simulated) == len(paced) == ROUNDS
    for r, (a, b) in enumerate(zip(simulated, paced, strict=True)):
        assert a.shape == b.shape, r
        gap = float(np.max(np.abs(a - b), initial=0.0))
        assert gap <= 1e-12, f"round {r}: columns differ by {gap:.3e}"
    assert np.any(simulated[-1] > 0)


def test_across_actors_only_the_message_order_differs(small_cluster: Path) -> None:
    """Three actors of two servers: calls between actors interleave as Ray delivers them, so
    columns may differ; the run must still certify after every event as the simulator does."""
    protocol = ProtocolConfig(seed=3)
    rounds = 60  # the last event (at 40) has time to show it held for good
    sim = Simulator(load_scenario(small_cluster),
                    SimConfig(protocol=protocol, rounds=rounds, gossip="scuttlebutt")).run()
    cfg = RunConfig(protocol=protocol, clock="manual", servers_per_actor=2)
    run = launch(small_cluster, cfg, run_id="equivalence-spread")
    try:
        run.advance(rounds)
        result = run.result()
    finally:
        run.stop()
    assert [e.description for e in result.events] == [e.description for e in sim.events]
    assert all(e.rounds is not None for e in sim.events)
    assert all(e.rounds is not None for e in result.events)
    assert all(o.feasible for o in result.trace)
