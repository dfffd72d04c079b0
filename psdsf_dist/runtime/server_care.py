"""What happens to the run's servers when something goes wrong, carried out on Ray: a crashed
or erring server starts again as a new incarnation, the servers of an actor whose node is gone
move to a new actor on an alive node, a server that keeps erring or whose pinned node is gone
fails, and (``servers: from-ray``) every new Ray node becomes a server.

What to do is decided elsewhere, purely: after an observation by
:func:`~psdsf_dist.runtime.recovery.plan_recovery`, a node's loss or arrival by Ray's node
table.  :class:`ServerCare` only makes the calls, through its host
(:class:`~psdsf_dist.runtime.run_control.RunControl`), which keeps the run's state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from psdsf_dist.model.events import Event, ServerFails, ServerJoins, new_server_joins
from psdsf_dist.observability.metrics import RunMetrics
from psdsf_dist.protocol.membership import ChurnState, Table
from psdsf_dist.runtime.from_ray import RayNode, ServerEntry
from psdsf_dist.runtime.members import Member
from psdsf_dist.runtime.recovery import ERROR_RESTARTS, RecoveryPlan
from psdsf_dist.runtime.server_pool import ServerPool, ray_nodes

NodeSpec = Callable[[RayNode], ServerEntry]
"""from-ray runs: makes the server entry of a Ray node."""


class CareHost(Protocol):
    """What the servers' care needs of the coordinator."""

    pool: ServerPool
    metrics: RunMetrics
    restarts: int
    """Server incarnations started after a crash, an error or their node's loss."""
    node_spec: NodeSpec | None

    def now(self) -> float: ...

    def state(self) -> ChurnState: ...

    def table(self) -> Table: ...

    def clock_origin(self) -> tuple[float | None, float]: ...

    async def record_faults(self, *descriptions: str) -> None: ...

    async def spawn(self, names: list[str], start_clock: bool = False) -> None: ...

    async def apply_events(self, *events: Event, from_scenario: bool) -> None: ...

    async def push_table(self, actors: set[str] | frozenset[str] | None = None) -> None: ...


class ServerCare:
    """Carries out restarts, moves and failures of the run's servers (module docstring)."""

    def __init__(self, host: CareHost) -> None:
        self.host = host

    async def fail(self, *names: str) -> None:
        """``names`` have failed: events of the run, as churn, applied as one change (their
        actors stop and the others adopt one table, not one per failure)."""
        if names:
            now = self.host.now()
            await self.host.apply_events(*(ServerFails(now, -1, name) for name in names),
                                         from_scenario=False)

    async def start_again(self, members: list[Member]) -> None:
        """New incarnations of ``members`` start, together, on the current table."""
        now, started_at = self.host.clock_origin()
        await self.host.pool.start(members, self.host.table(), now, started_at)

    async def relocate(self, actor: str) -> None:
        """The servers of an actor whose node is gone: a new actor on an alive node hosts them,
        as new incarnations (the others learn its handle; the old columns expire)."""
        names = self.host.pool.kill(actor)
        if not names:
            return
        self.host.restarts += len(names)
        for name in names:
            self.host.metrics.restart(name)
        await self.host.record_faults(*(f"server {name} restarted on another node (its node "
                                        "is gone)" for name in names))
        await self.host.spawn(names)

    async def check_nodes(self) -> None:
        """from-ray: every alive node without a server becomes one; a server pinned to a node
        that is gone has failed with it."""
        assert self.host.node_spec is not None
        churn = self.host.state()
        nodes = await ray_nodes()
        alive = {str(n["NodeID"]) for n in nodes if n.get("Alive")}
        await self.fail(*(m.name for m in list(self.host.pool.members.values())
                          if m.pinned and m.node is not None and m.node not in alive))
        pinned = self.host.pool.pinned
        known = set(pinned.values())
        joins: list[Event] = []
        for node in nodes:
            if node.get("Alive") and node["NodeID"] not in known:
                spec = self.host.node_spec(node)
                pinned[spec["name"]] = node["NodeID"]
                back = spec["name"] in churn.full.server_names  # a node came back
                joins.append(ServerJoins(self.host.now(), -1, spec["name"], None) if back
                             else new_server_joins(spec, churn.full.resources,
                                                   at=self.host.now()))
        if joins:  # one change: the servers start together on one table
            await self.host.apply_events(*joins, from_scenario=False)

    async def recover(self, plan: RecoveryPlan) -> None:
        """Carry out the observation's recovery plan (:mod:`psdsf_dist.runtime.recovery`)."""
        restarted = [self.host.pool.new_incarnation(n) for n in (*plan.crashed, *plan.broke)]
        for m in restarted:
            self.host.restarts += 1
            self.host.metrics.restart(m.name)
        if restarted:  # one notes update, and the servers start together
            await self.host.record_faults(
                *(f"server {n} restarted after a crash" for n in plan.crashed),
                *(f"server {n} restarted after an error" for n in plan.broke))
            await self.start_again(restarted)
        if plan.repush:
            await self.host.push_table(plan.repush)
        if plan.hopeless:
            await self.host.record_faults(*(f"server {name} failed: its loop erred "
                                            f"{ERROR_RESTARTS} times in a row ({error})"
                                            for name, error in plan.hopeless))
            await self.fail(*(name for name, _ in plan.hopeless))
        for actor in plan.relocate:
            await self.relocate(actor)
        await self.fail(*(name for name in plan.fail if name in self.host.pool.members))
