"""Several Ray nodes (``ray.cluster_utils.Cluster``, one machine): ``servers: from-ray``
pins one server per node, and nodes leaving and joining are server failures and joins; the
servers of a normal scenario are spread over the nodes (hard node affinity, least loaded
first) and are placed again on an alive node when their node goes.  The allocation stays
feasible and is certified again after each change.

These tests shut the shared local session down and run last (see ``conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import ray

from psdsf_dist.core.certificate import certificate
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.convergence import ObservationJson
from psdsf_dist.runtime.coordinator import RemoteCoordinator
from psdsf_dist.runtime.launcher import Run, launch, prepare
from psdsf_dist.runtime.names import NAMESPACE, coordinator_name
from psdsf_dist.runtime.settings import RunConfig
from tests.conftest import ray_cluster

pytestmark = pytest.mark.multinode

MANUAL = RunConfig(ProtocolConfig(period=1.0, jitter=0.0, seed=5, ttl_periods=4.0),
                   clock="manual")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with ray_cluster({"num_cpus": 1, "resources": {"slots": 4}},
                     *({"num_cpus": 1, "resources": {"slots": n}} for n in (2, 3))) as c:
        yield c


def advance_until_held(run: Run, hold: int = 3, limit: int = 80) -> list[ObservationJson]:
    seen: list[ObservationJson] = []
    while len(seen) < limit:
        seen += run.advance(1)
        if len(seen) >= hold and all(o["holds"] for o in seen[-hold:]):
            assert all(o["feasible"] for o in seen)
            res = run.result()
            assert certificate(res.scenario, res.allocation, rtol=1e-3).holds
            return seen
    raise AssertionError(f"not certified within {limit} rounds: "
                         f"{[round(o['residual'], 4) for o in seen[-5:]]}")


def node_of(run: Run) -> dict[str, str]:
    return {name: ray.get(h.status.remote())["node"] for name, h in run.handles().items()}


FROM_RAY = {
    "servers": "from-ray",
    "resources": ["CPU", "slots"],
    "users": [{"name": "a", "demand": {"CPU": 0.25, "slots": 1}, "weight": 1},
              {"name": "b", "demand": {"CPU": 0.5, "slots": 0.5}, "weight": 2}],
}


def test_from_ray_servers_follow_the_nodes(cluster: Any) -> None:
    run = launch(FROM_RAY, MANUAL, run_id="from-ray")
    try:
        advance_until_held(run)
        res = run.result()
        assert res.servers == 3
        assert sorted(res.scenario.capacity[:, 1]) == [2.0, 3.0, 4.0]  # slots per node
        placed = node_of(run)
        for name, node in placed.items():
            assert name == f"node-{node[:8]}"  # pinned to the node it stands for
        workers = cluster.list_all_nodes()[1:]  # both go together: one change
        gone = {f"node-{w.node_id[:8]}" for w in workers}
        for worker in workers:
            cluster.remove_node(worker)
        seen = advance_until_held(run, limit=60)
        assert any(not o["holds"] for o in seen)
        status = run.status()
        assert not gone & set(status["members"]) and status["servers"] == 1
        new = [cluster.add_node(num_cpus=1, resources={"slots": n}) for n in (5, 6)]
        cluster.wait_for_nodes()
        joined = {f"node-{n.node_id[:8]}" for n in new}
        for _ in range(20):  # the coordinator looks for new nodes every few periods
            run.advance(1)
            if joined <= set(run.status()["members"]):
                break
        advance_until_held(run, limit=60)
        status = run.status()
        assert joined <= set(status["members"]) and status["servers"] == 3
        assert {5.0, 6.0} <= set(run.result().scenario.capacity[:, 1])
    finally:
        run.stop()


def test_scenario_servers_are_spread_and_restart_elsewhere(cluster: Any) -> None:
    doc = {"resources": ["cpu", "mem"],
           "servers": [{"name": "s", "count": 6, "capacity": {"cpu": 1, "mem": 1}}],
           "users": [{"name": "u1", "demand": {"cpu": 0.1, "mem": 0.2}},
                     {"name": "u2", "demand": {"cpu": 0.2, "mem": 0.1}, "weight": 2}]}
    run = launch(doc, MANUAL, run_id="spread")
    try:
        advance_until_held(run)
        placed = node_of(run)
        assert len(set(placed.values())) == len(cluster.list_all_nodes())  # spread
        worker = next(n for n in cluster.list_all_nodes() if not n.head)
        victims = [s for s, node in placed.items() if node == worker.node_id]
        assert victims
        cluster.remove_node(worker)
        advance_until_held(run, limit=80)
        assert run.result().restarts >= len(victims)
        after = node_of(run)
        assert all(after[s] != worker.node_id for s in victims)  # came back elsewhere
    finally:
        run.stop()


def coordinator_on(node: str, run_id: str, attempts: int = 40) -> Run:
    """A from-ray run whose coordinator sits on ``node`` but may restart elsewhere (launch()
    pins it beside the driver; Ray places an unpinned zero-CPU actor as it likes: try again
    until it lands there)."""
    prepared = prepare(FROM_RAY)
    for k in range(attempts):
        name = f"{run_id}-{k}"
        handle = RemoteCoordinator.options(
            name=coordinator_name(name), namespace=NAMESPACE, num_cpus=0, max_restarts=3,
            max_concurrency=1000,
        ).remote(name, prepared.scenario, MANUAL, prepared.pinned, True, prepared.node_spec)
        where = ray.get(handle.__ray_call__.remote(
            lambda _: ray.get_runtime_context().get_node_id()))
        if where == node:
            ray.get(handle.start.remote())
            return Run(handle, name, MANUAL)
        ray.kill(handle, no_restart=True)
    raise AssertionError(f"the coordinator never landed on node {node[:8]}")


def test_a_coordinator_lost_with_its_node_rebuilds_and_fails_that_nodes_server(
        cluster: Any) -> None:
    worker = next(n for n in cluster.list_all_nodes() if not n.head)
    run = coordinator_on(worker.node_id, "lost-coordinator")
    try:
        advance_until_held(run)
        servers = run.status()["servers"]
        cluster.remove_node(worker)
        # the restarted coordinator finds no actor for the removed node's server, which its
        # table still counts: that server failed with its node (it used to stay counted, idle,
        # and the certificate never held again)
        advance_until_held(run, limit=40)  # the handle rides out the restart
        status = run.status()
        assert status["coordinator_restarted"]
        assert status["servers"] == servers - 1
        assert f"node-{worker.node_id[:8]}" not in status["members"]
    finally:
        run.stop()
