"""The typed messages between the run's processes: what a server actor reports each
period (:class:`ServerReport`) and keeps for a restarted coordinator (:class:`ActorState`,
with the coordinator's :class:`Notes`), what the coordinator answers tenants
(:class:`TenantInfo`, :class:`TenantReply`), and a run's result (:class:`RunResult`).  Plain
frozen dataclasses and typed dicts, no Ray: any process may import them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import numpy.typing as npt

from psdsf_dist.admission.tenant_queue_state import TenantQueueState
from psdsf_dist.errors import PsdsfError
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.convergence import Observation
from psdsf_dist.protocol.membership import Table
from psdsf_dist.protocol.node import ServerNode
from psdsf_dist.protocol.outcome import ProtocolOutcome
from psdsf_dist.runtime.settings import RunConfig

if TYPE_CHECKING:
    from psdsf_dist.runtime.handles import ServerHandle

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class ServerReport:
    name: str
    running: bool
    origin: str
    epoch: int
    column: FloatArray
    messages: int
    bytes: int
    rounds: int
    error: str | None
    pid: int
    round_seconds: tuple[float, ...] = ()
    """Durations of the server procedure (the update rule) in the latest rounds, oldest first."""
    staleness_seconds: float | None = None
    """Median age of the other servers' columns in the totals at the latest round."""

    @classmethod
    def of(cls, name: str, node: ServerNode | None, running: bool, error: str | None,
           pid: int) -> ServerReport:
        """The report of a hosted server (``node`` None: not started)."""
        if node is None:
            return cls(name, False, "", -1, np.zeros(0), 0, 0, 0, error, pid)
        return cls(name, running, node.origin, node.table.epoch, np.array(node.column),
                   node.traffic.messages, node.traffic.bytes, node.rounds, error, pid,
                   tuple(node.round_seconds), node.staleness_seconds)


class HostedStatus(TypedDict):
    """One hosted server's health, as its actor's ``status`` answers it."""

    running: bool
    origin: str | None
    """Its gossip origin (None: not started)."""
    rounds: int
    members: int
    """Servers its gossip knows of."""
    epoch: int | None
    """The epoch of its table (None: not started)."""
    error: str | None
    """Why its loop stopped, if it erred."""


def hosted_status(node: ServerNode | None, running: bool, error: str | None) -> HostedStatus:
    """The health of a hosted server (``node`` None: not started)."""
    return {"running": running,
            "origin": None if node is None else node.origin,
            "rounds": 0 if node is None else node.rounds,
            "members": 0 if node is None else len(node.gossip.members()),
            "epoch": None if node is None else node.table.epoch,
            "error": error}


class ActorStatus(TypedDict):
    """A server actor's health (its ``status``)."""

    time: float | None
    """Its clock (None: not started)."""
    pid: int
    node: str
    """Its Ray node id."""
    servers: dict[str, HostedStatus]


class Notes(TypedDict, total=False):
    """What the coordinator keeps in every server actor for a restarted coordinator
    (:meth:`ServerActor.keep_notes <psdsf_dist.runtime.server_actor.ServerActor.keep_notes>`):
    each key is sent whole whenever it changes."""

    metrics: tuple[int, str, bool] | None
    """The metrics endpoint it serves (port, bind address, per pair), to serve it again."""
    faults: list[tuple[str, float]]
    """Faults as events of the run (description, run time)."""
    restarts: int
    """Server incarnations started after a crash, an error or their node's loss."""
    coordinator_restarts: int
    tenant_policy: dict[str, object]
    """The tenant policy as the operator last changed it (the scenario syntax)."""
    policy_changes: list[tuple[str, float]]
    """The operator's policy changes (description, run time)."""


@dataclass(frozen=True)
class HostedState:
    """One hosted server as a restarted coordinator needs it."""

    name: str
    table: Table | None
    """The newest table it adopted (None: not started since the actor (re)started)."""
    incarnation: int
    """-1 when not started."""
    started_at: float


@dataclass(frozen=True)
class ActorState:
    """What a restarted coordinator rebuilds its state from (one per server actor)."""

    servers: tuple[HostedState, ...]
    origins: tuple[str, ...]
    """Every gossip origin the hosted servers know of (all incarnations still remembered)."""
    notes: Notes
    """The coordinator's notes."""
    journal: tuple[Observation, ...]
    """The coordinator's observations as far as this actor keeps them
    (:meth:`ServerActor.keep_journal`)."""
    node: str
    time: float | None
    """Its clock (None: not started); a manual clock's time is only known to the actors."""

    @classmethod
    def of(cls, hosted: Mapping[str, ServerNode | None], started_at: float, notes: Notes,
           journal: Sequence[Observation], node: str, time: float | None) -> ActorState:
        """The state of an actor hosting the servers ``hosted`` (None: not started since the
        actor (re)started): each one's table and incarnation, and every origin their gossip
        knows of."""
        servers = tuple(HostedState(n, None, -1, started_at) if h is None
                        else HostedState(n, h.table, h.incarnation, started_at)
                        for n, h in hosted.items())
        origins = {o for h in hosted.values() if h is not None for o in h.gossip.versions()}
        return cls(servers, tuple(sorted(origins)), notes.copy(), tuple(journal), node, time)


@dataclass(frozen=True)
class RunResult(ProtocolOutcome):
    config: RunConfig
    servers: int
    restarts: int
    """Server incarnations started after a crash (the coordinator's own restarts are
    ``coordinator_restarts``)."""
    pids: tuple[int, ...]
    coordinator_restarts: int = 0
    """Times the coordinator was restarted (and rebuilt its state from the servers)."""

    @property
    def protocol(self) -> ProtocolConfig:
        return self.config.protocol


class TenantRunError(PsdsfError, RuntimeError):
    """A tenant connected to a run that does not take tenants."""


class NotStartedError(RuntimeError):
    """A call to a run that was never started (and is not a restarted coordinator)."""


@dataclass(frozen=True)
class TenantInfo:
    """What a tenant's client needs to check its submissions."""

    resources: tuple[str, ...]
    servers: tuple[str, ...]
    capacity: FloatArray
    """Present servers x resources."""
    weight: float | None
    """The user's weight in the cluster's configuration (None: not declared)."""
    period: float
    token: str | None = None
    """The token the tenant's calls carry (a run with a tenant policy: the one it proved, or
    the one issued to an unknown tenant the policy lets join)."""


@dataclass(frozen=True)
class TenantReply:
    servers: dict[str, tuple[ServerHandle, str]]
    """Present server -> (its actor, its Ray node id)."""
    error: str | None
    """Why the report's change was refused (e.g. a demand the scenario cannot take)."""


@dataclass
class QueueStatus:
    user: str
    queued: int
    running: dict[str, int]
    """Server -> tasks running there (launched and not ended; ``pipelined`` of them may still
    wait at the node for one of the user's own to end)."""
    slots: dict[str, int]
    """Server -> slots of its current lease (0: none, or expired)."""
    admitted: int
    completed: int
    retried: int
    failed: int
    present_servers: int
    gone: str | None
    nodes: dict[str, str] = field(default_factory=dict)
    """Server -> Ray node id."""
    pipelined: dict[str, int] = field(default_factory=dict)
    """Server -> tasks launched beyond the lease's slots, waiting at the node (pipelining)."""
    withdrawn: int = 0
    """Tasks of bulk submissions withdrawn by their caller before they started (not in
    ``failed``)."""
    cancelled: int = 0
    """Tasks cancelled by their caller, queued (never started) or running (not in
    ``failed``)."""
    blocked: int = 0
    """Tasks waiting in ``ray.get`` / ``ray.wait`` now, their slots given back (not in
    ``running``)."""
    actors: int = 0
    """The tenant's live actors (each holds a slot: in ``running``)."""
    preempted: int = 0
    """Times a preemptible task was stopped to make room and queued again (it runs again
    from the start; not in ``retried``, ``failed`` or ``cancelled``)."""
    delegated: dict[str, int] = field(default_factory=dict)
    """Server -> slots delegated to the client (in ``running``; the client launches its own
    tasks in them)."""

    @classmethod
    def of(cls, state: TenantQueueState, now: float, actors: int) -> QueueStatus:
        """A queue's counts at ``now`` from its state; ``actors``: the tenant's live ones."""
        servers = state.servers
        return cls(state.user, len(state.queue), {n: s.running for n, s in servers.items()},
                   {n: (s.slots if now < s.expires else 0) for n, s in servers.items()},
                   state.admitted, state.completed, state.retried, state.failed,
                   len(servers), state.gone, {n: s.node for n, s in servers.items()},
                   {n: s.waiting for n, s in servers.items()}, state.withdrawn,
                   state.cancelled, state.blocked_tasks, actors, state.preempted,
                   state.delegated_per_server())
