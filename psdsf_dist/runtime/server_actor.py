"""The server actor: Ray transport and a clock around the protocol's
:class:`~psdsf_dist.protocol.node.ServerNode` — one per hosted server (``servers_per_actor``
of them, to save a process per server on a small machine; each keeps its own node, loop, gossip
origin and random stream; messages between two of one actor skip Ray, otherwise the same).

Each server's loop wakes when its node asks (:meth:`ServerNode.wake`), starts the exchanges the wake
returned as background tasks, and sleeps until the next wake.  The transport moves messages: a
:class:`~psdsf_dist.protocol.node.Syn` is a call to the peer's actor whose answer is the peer's
:class:`~psdsf_dist.protocol.node.Ack`; the starter's :class:`~psdsf_dist.protocol.node.Ack2` goes
back without an answer.  Messages to one actor that are queued together go in one call, pickled as
one payload.  On top of Ray's own latency, the transport holds each message ``delay`` seconds and
drops it with probability ``loss`` (``ProtocolConfig``), exactly as the simulator's transport does —
for experiments on a real cluster.

After a crash Ray restarts the actor (``max_restarts``) with a fresh, un-started state; the
coordinator notices (``report`` says not running) and starts it again with the current table, as
a new incarnation: a new gossip origin, which supersedes the crashed incarnation's column
wherever it is heard (:mod:`psdsf_dist.protocol.gossip`, "Incarnations"), while the new one
starts empty and is filled by the rule.

The server actors are detached (they outlive a coordinator restart), so nothing of Ray ends
them when the run's driver dies with its coordinator (``kill -9``): each actor looks up its
run's coordinator by name every :data:`ORPHAN_CHECK_PERIODS` periods and ends itself once it
has found none :data:`ORPHAN_CHECKS` times in a row.  A restarting coordinator keeps its name,
so only a run that is gone for good loses its servers.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import traceback
from dataclasses import dataclass

import numpy as np
import ray

from psdsf_dist.admission.identity import token_ok
from psdsf_dist.admission.leases import Lease
from psdsf_dist.admission.server_admission import ServerAdmission
from psdsf_dist.admission.unmanaged import UnmanagedEstimate, WorkerUsage, node_sample
from psdsf_dist.protocol.convergence import Observation
from psdsf_dist.protocol.gossip import server_of
from psdsf_dist.protocol.membership import Table
from psdsf_dist.protocol.node import Message, ServerNode
from psdsf_dist.protocol.transport import Transport
from psdsf_dist.protocol.update_rule import UpdateRule
from psdsf_dist.runtime.clock import Clock, ManualClock, WallClock
from psdsf_dist.runtime.from_ray import node_capacity
from psdsf_dist.runtime.handles import CoordinatorHandle, ServerHandle, actor_class, named_actor
from psdsf_dist.runtime.messages import (
    ActorState,
    ActorStatus,
    Notes,
    ServerReport,
    hosted_status,
)
from psdsf_dist.runtime.names import actor_key, coordinator_name, server_actor_name
from psdsf_dist.runtime.ray_state import available_per_node, node_workers, nodes
from psdsf_dist.runtime.settings import RunConfig

# Messages to one actor queued before the event loop next turns go in one call.  A timed wait
# (even of milliseconds) costs a scheduling quantum on a loaded machine, so there is none
# (experiments/notes/design_measurements.md).
BATCH_SECONDS = 0.0
PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL
ORPHAN_CHECK_PERIODS = 4.0
ORPHAN_CHECK_MIN_SECONDS = 1.0
ORPHAN_CHECKS = 2

Outgoing = tuple[str, Message, asyncio.Future[Message | None]]
"""A message queued for a peer actor: (its addressee's origin, the message, the future its
reply is set on)."""


@dataclass
class _Slot:
    """One hosted server."""

    name: str
    node: ServerNode | None = None
    task: asyncio.Task[None] | None = None
    error: str | None = None

    @property
    def running(self) -> bool:
        return self.node is not None and self.task is not None and not self.task.done()


class ServerActor:
    def __init__(self, run_id: str, names: list[str], config: RunConfig,
                 tenant_secret: str | None = None) -> None:
        self.run_id = run_id
        self.tenant_secret = tenant_secret
        """A run with a tenant policy: a lease or release is answered only for the token of
        the user it names (:mod:`psdsf_dist.admission.identity`; None: an open run)."""
        self.config = config
        self.rule: UpdateRule = config.protocol.make_rule()
        self.slots = {n: _Slot(n) for n in names}
        self.clock: Clock | None = None
        self.handles: dict[str, ServerHandle] = {}
        self.started_at = 0.0
        # one transport stream per actor: with one actor it is the simulator's exactly
        self.transport = Transport(config.protocol)
        self.outbox: dict[str, tuple[ServerHandle, list[Outgoing]]] = {}
        """Per peer actor (:func:`actor_key`): the messages queued for its next call."""
        self.notes: Notes = {}
        self.journal: list[Observation] = []
        self.admissions: dict[str, ServerAdmission] = {}
        """Per hosted server: the leases of task slots on its node (tenant runs)."""
        self.unmanaged_estimates: dict[str, UnmanagedEstimate] = {}
        """Per hosted server: its node's usage by work it did not admit (tenant runs)."""
        self.raylets: dict[str, tuple[str, int]] = {}
        """Node id -> its raylet's address and port (for the workers there)."""
        self.reconstructed = bool(ray.get_runtime_context().was_current_actor_reconstructed)
        self.watchdog: asyncio.Task[None] | None = None

    # -- control (called by the coordinator) ---------------------------------------------------
    async def start(self, servers: list[tuple[str, int, list[str]]], table: Table,
                    started_at: float, handles: dict[str, ServerHandle],
                    now: float | None = None) -> None:
        """Start (or restart) hosted servers with the current table, in the given order: each
        ``(name, incarnation, seeds)``, ``seeds`` being the peers it is introduced to.
        ``handles``: server name -> the actor hosting it.  One call per actor, however many
        servers it hosts: calls queue behind the gossip this actor's running servers receive,
        and the handles are sent once."""
        if self.watchdog is None:
            self.watchdog = asyncio.get_running_loop().create_task(self._end_when_orphaned())
        if self.clock is None:
            self.started_at = started_at
            self.clock = (ManualClock(now or 0.0) if self.config.clock == "manual"
                          else WallClock(started_at))
        self.handles.update(handles)
        for name, incarnation, seeds in servers:
            slot = self.slots[name]
            if slot.task is not None:
                slot.task.cancel()
            node = ServerNode(name, incarnation, table, self.config.protocol, self.rule)
            slot.node = node
            node.introduce(list(seeds), self.clock.now())
            slot.error = None
            slot.task = self.clock.spawn(self._loop(slot, node))

    async def adopt(self, table: Table, handles: dict[str, ServerHandle] | None = None) -> int:
        """A newer table (churn) for every hosted server and, optionally, members' handles."""
        if handles is not None:
            self.handles.update(handles)
        if self.clock is None:
            return -1
        for slot in self.slots.values():
            if slot.node is not None:
                slot.node.adopt(table, self.clock.now())
        return table.epoch

    async def leave(self, name: str) -> None:
        """One hosted server leaves gracefully: a tombstone, spread by one round of exchanges,
        then it stops."""
        slot = self.slots[name]
        if slot.node is None or self.clock is None:
            return
        if slot.task is not None:
            slot.task.cancel()
            slot.task = None
        node = slot.node
        await asyncio.gather(*(self._exchange(node, peer, syn)
                               for peer, syn in node.leave(self.clock.now())))

    async def advance_to(self, t: float) -> bool:
        """Manual clock: run every wake-up due before ``t`` (in order), then set the time to
        ``t``; returns once everything woken has settled."""
        if not isinstance(self.clock, ManualClock):
            return False
        return await self.clock.advance_to(t)

    # -- admission (tenant runs) ----------------------------------------------------------------
    async def lease(self, server: str, user: str, running: int, queued: int = 0,
                    token: str | None = None, job: str | None = None) -> Lease:
        """A tenant's queue runs ``running`` of ``user``'s tasks on ``server``'s node (in Ray
        job ``job``), has ``queued`` more waiting, and asks how many it may run (the server's
        :class:`~psdsf_dist.admission.server_admission.ServerAdmission`, from its own column).
        A server not running here, or a call without ``user``'s token in a run with a tenant
        policy, is answered with no slots (and records no claim)."""
        slot = self.slots.get(server)
        if not token_ok(self.tenant_secret, user, token) or slot is None or slot.node is None \
                or self.clock is None or not slot.running:
            return Lease(server, user, 0, ServerAdmission.ttl_of(self.config.period), 0)
        node = slot.node
        scenario = node.table.scenario
        now = self.clock.now()
        admission = self.admissions.get(server)
        if admission is None:
            i = scenario.server_names.index(server)
            # after Ray restarted this actor the book knows no claims: it listens first
            admission = ServerAdmission.start(server, scenario.capacity[i], self.config.period,
                                              now, restarted=self.reconstructed)
            self.admissions[server] = admission
        return admission.ask(user, running, now, node.column, scenario, queued, job)

    async def unmanaged(self, server: str) -> dict[str, float] | None:
        """The usage of ``server``'s node by work it did not admit, per resource (once it
        persisted: :class:`~psdsf_dist.admission.unmanaged.UnmanagedEstimate`): what the
        workers of other jobs hold there, and what Ray reports available there against what
        the tenants' tasks there hold (:func:`~psdsf_dist.admission.unmanaged.node_sample`).
        None when the server does not run here or Ray does not know the node."""
        slot = self.slots.get(server)
        if slot is None or slot.node is None or self.clock is None or not slot.running:
            return None
        scenario = slot.node.table.scenario
        node_id = ray.get_runtime_context().get_node_id()
        # a blocking read of Ray's GCS: in a worker thread, so that this actor's loop (the
        # server procedure, gossip, leases) goes on meanwhile
        available = (await asyncio.to_thread(available_per_node)).get(node_id)
        raylet = await self._raylet(node_id)
        if available is None or raylet is None:
            return None
        workers = await asyncio.to_thread(node_workers, *raylet)
        i = scenario.server_names.index(server)
        capacity = np.asarray(scenario.capacity[i], dtype=float)
        free = node_capacity({"Resources": available}, scenario.resources)
        admission = self.admissions.get(server)
        book = admission.book if admission is not None else None
        estimate = self.unmanaged_estimates.get(server)
        if estimate is None:
            estimate = self.unmanaged_estimates[server] = UnmanagedEstimate(capacity)
        held = [WorkerUsage(job, np.array(list(node_capacity(
            {"Resources": amounts}, scenario.resources).values()))) for job, amounts in workers]
        usage = estimate.observe(node_sample(
            capacity, np.array([free[r] for r in scenario.resources]), held,
            book.jobs if book is not None else {}, book.running() if book is not None else {},
            book.admitted() if book is not None else {}, scenario.user_index,
            np.asarray(scenario.demand)))
        return {r: float(v) for r, v in zip(scenario.resources, usage, strict=True)}

    async def _raylet(self, node_id: str) -> tuple[str, int] | None:
        """The address and port of ``node_id``'s raylet (read once from Ray's node table)."""
        if node_id not in self.raylets:
            table = await asyncio.to_thread(nodes)
            for n in table:
                if n.get("NodeID") == node_id and n.get("Alive"):
                    self.raylets[node_id] = (str(n.get("NodeManagerAddress", "")),
                                             int(n.get("NodeManagerPort", 0)))
        return self.raylets.get(node_id)

    async def release(self, server: str, user: str, token: str | None = None) -> None:
        """``user``'s queue runs nothing more on ``server``'s node: its claim goes at once
        (with a tenant policy, only when the call carries ``user``'s token)."""
        if not token_ok(self.tenant_secret, user, token):
            return
        admission = self.admissions.get(server)
        if admission is not None:
            admission.book.release(user)

    async def _end_when_orphaned(self) -> None:
        """End this actor once its run's coordinator is gone for good (module docstring)."""
        wait = max(ORPHAN_CHECK_MIN_SECONDS, ORPHAN_CHECK_PERIODS * self.config.period)
        missing = 0
        while missing < ORPHAN_CHECKS:
            await asyncio.sleep(wait)
            try:
                # a blocking GCS lookup: in a thread, the loop serves the servers meanwhile
                await asyncio.to_thread(named_actor, coordinator_name(self.run_id),
                                        CoordinatorHandle)
            except ValueError:
                missing += 1
            else:
                missing = 0
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)

    # -- queries ----------------------------------------------------------------------------
    async def report(self) -> list[ServerReport]:
        """One report per hosted server (one call per actor per observation)."""
        pid = os.getpid()
        return [ServerReport.of(name, slot.node, slot.running, slot.error, pid)
                for name, slot in self.slots.items()]

    async def status(self) -> ActorStatus:
        """Health of the hosted servers (answers while their loops work)."""
        return {"time": None if self.clock is None else self.clock.now(), "pid": os.getpid(),
                "node": ray.get_runtime_context().get_node_id(),
                "servers": {name: hosted_status(slot.node, slot.running, slot.error)
                            for name, slot in self.slots.items()}}

    async def keep_notes(self, notes: Notes) -> None:
        """Keep the coordinator's notes for a restarted coordinator (lost if this actor
        restarts; every actor keeps a copy)."""
        self.notes = notes.copy()

    async def keep_journal(self, first: int, entries: list[Observation]) -> int:
        """Keep the coordinator's observations ``first, first + 1, ...`` for a restarted
        coordinator (a copy on a few actors).  Returns how many it holds: fewer than
        ``first + len(entries)`` if it lost its copy (a restart), so the coordinator sends the
        rest again."""
        if first <= len(self.journal):
            del self.journal[first:]
            self.journal.extend(entries)
        return len(self.journal)

    async def state(self) -> ActorState:
        """What a restarted coordinator rebuilds its state from."""
        return ActorState.of({n: s.node for n, s in self.slots.items()}, self.started_at,
                             self.notes, self.journal, ray.get_runtime_context().get_node_id(),
                             None if self.clock is None else self.clock.now())

    # -- messages from peers --------------------------------------------------------------------
    async def deliver_batch(self, payload: bytes) -> bytes:
        """Messages for hosted servers, ``[(origin, message), ...]`` pickled; their replies
        (each a message or None), pickled in the same order.  The transport pickles a batch
        itself: Ray would hand each message dataclass to cloudpickle's pure-Python pickler,
        several times slower than the C pickler, and serialization was the largest part of a
        busy server actor's CPU (``experiments/notes/design_measurements.md``)."""
        messages: list[tuple[str, Message]] = pickle.loads(payload)
        return pickle.dumps([self._receive(to, m) for to, m in messages], PICKLE_PROTOCOL)

    def _receive(self, to: str, message: Message) -> Message | None:
        slot = self.slots.get(server_of(to))
        if slot is None or slot.node is None or slot.node.origin != to or self.clock is None:
            return None  # not hosted here, or an old incarnation: the message is lost
        return slot.node.receive(message, self.clock.now())

    # -- the loop ---------------------------------------------------------------------------
    async def _loop(self, slot: _Slot, node: ServerNode) -> None:
        clock = self.clock
        assert clock is not None
        await clock.sleep(node.first_wake(clock.now()) - clock.now())
        while True:
            try:
                woke = node.wake(clock.now())
            except Exception as err:  # a bug must show in reports, not kill silently
                slot.error = f"{type(err).__name__}: {err}"
                traceback.print_exception(err)  # where it was raised, in the actor's log
                raise
            for peer, syn in woke.exchanges:
                clock.spawn(self._exchange(node, peer, syn))
            await clock.sleep(woke.next_at - clock.now())

    # -- transport ----------------------------------------------------------------------------
    async def _exchange(self, node: ServerNode, peer: str, syn: Message) -> None:
        """One push-pull exchange: syn -> peer, its ack back, ack2 -> peer."""
        ack = await self._send(peer, syn)
        if ack is None:
            return  # lost, or a crashed or slow peer: gossip routes around it
        if not await self._transit():
            return
        assert self.clock is not None
        ack2 = node.receive(ack, self.clock.now())
        if ack2 is not None:
            await self._send(peer, ack2)

    async def _transit(self) -> bool:
        """A message in flight: dropped with probability ``loss``, else held ``delay``."""
        if self.transport.lost():
            return False
        if self.transport.delay > 0:
            assert self.clock is not None
            await self.clock.sleep(self.transport.delay)
        return True

    async def _send(self, to: str, message: Message) -> Message | None:
        """Deliver a message to the server whose origin is ``to``; its reply (None: none, or
        lost)."""
        if not await self._transit():
            return None
        target = server_of(to)
        if target in self.slots:  # hosted here: the same delivery, without Ray
            return self._receive(to, message)
        handle = self._handle(target)
        if handle is None:
            return None
        key = actor_key(handle)
        future: asyncio.Future[Message | None] = asyncio.get_running_loop().create_future()
        entry = self.outbox.get(key)
        if entry is None:
            entry = (handle, [])
            self.outbox[key] = entry
            asyncio.get_running_loop().create_task(self._flush(key))
        entry[1].append((to, message, future))
        assert self.clock is not None
        answer: Message | None = await self.clock.away(future)
        return answer

    async def _flush(self, key: str) -> None:
        await asyncio.sleep(BATCH_SECONDS)
        handle, items = self.outbox.pop(key)
        answers: list[Message | None]
        try:
            payload = pickle.dumps([(t, m) for t, m, _ in items], PICKLE_PROTOCOL)
            answers = pickle.loads(await asyncio.wait_for(
                handle.deliver_batch.remote(payload), self.config.rpc_timeout))
        except (TimeoutError, ray.exceptions.RayError):
            answers = [None] * len(items)
        for (_, _, future), answer in zip(items, answers, strict=True):
            if not future.done():
                future.set_result(answer)

    def _handle(self, server: str) -> ServerHandle | None:
        h = self.handles.get(server)
        if h is None:
            try:  # a member the coordinator did not hand out (joined since): look it up
                h = named_actor(server_actor_name(self.run_id, server), ServerHandle)
            except ValueError:
                return None
            self.handles[server] = h
        return h


RemoteServerActor = actor_class(ServerActor, ServerHandle)
