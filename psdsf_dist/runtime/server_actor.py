"""The server actor: one Ray actor per server, a thin transport shell around :class:`ServerCore`.

(An actor can also host several servers — ``RunConfig.servers_per_actor``, off by default — to
save the ~50 MB and the start-up of one process per server on a small machine; each hosted
server keeps its own core, loop, gossip origin and random stream, and exchanges between two
servers of one actor skip Ray but are otherwise the same.)

Each server's loop wakes ``gossip_rate`` times per period (jittered, on an injectable clock); at
every ``gossip_rate``-th wake-up it runs the update rule, and at every wake-up it starts push-pull
exchanges with ``fanout`` random peers.  An exchange is two calls: ``syn`` (digest and own
entry; answered by the peer's ack) and a fire-and-forget ``ack2``.  The actor is asynchronous,
so ``status``, ``report`` and the peers' calls are answered between the loops' steps.

After a crash Ray restarts the actor (``max_restarts``) with a fresh, un-started state; the
coordinator notices (``report`` says not running) and starts it again with the current table, as
a new incarnation: a new gossip origin, so the crashed incarnation's column expires from the
others' totals after the time-to-live, while the new one starts empty and is filled by the rule.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import ray

from psdsf_dist.protocol.config import RunConfig
from psdsf_dist.protocol.gossip import Delta
from psdsf_dist.protocol.membership import Table
from psdsf_dist.protocol.node import (
    Ack,
    ServerCore,
    Syn,
    initial_phase,
    next_wait,
    server_of,
    server_seed,
)
from psdsf_dist.runtime.clock import Clock, ManualClock
from psdsf_dist.runtime.names import NAMESPACE, server_actor_name

FloatArray = npt.NDArray[np.float64]

# Messages to one actor queued before the event loop next turns go in one call.  A timed wait
# (even 2 ms) costs a scheduling quantum on a loaded machine: 4x slower rounds were measured.
BATCH_SECONDS = 0.0


class WallClock:
    """Seconds since the run started, by the wall clock: comparable across processes and
    nodes (gossip ages compare one server's clock with another's)."""

    def __init__(self, started_at: float) -> None:
        self._origin = started_at

    def now(self) -> float:
        return time.time() - self._origin

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))


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
    notes: dict[str, Any]
    """The coordinator's notes (:meth:`ServerActor.keep_notes`)."""
    node: str
    time: float | None
    """Its clock (None: not started); a manual clock's time is only known to the actors."""


@dataclass
class _Slot:
    """One hosted server."""

    name: str
    rng: np.random.Generator
    core: ServerCore | None = None
    task: asyncio.Task[None] | None = None
    seeds: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def running(self) -> bool:
        return self.core is not None and self.task is not None and not self.task.done()


class ServerActor:
    def __init__(self, run_id: str, names: list[str], config: RunConfig) -> None:
        self.run_id = run_id
        self.config = config
        self.slots = {n: _Slot(n, np.random.default_rng(server_seed(config, n, 0)))
                      for n in names}
        self.clock: Clock | None = None
        self.handles: dict[str, Any] = {}
        self.started_at = 0.0
        # Messages to the same actor that are queued together go in one call.
        self.syn_outbox: dict[str, tuple[Any, list[tuple[str, Syn, asyncio.Future[Any]]]]] = {}
        self.ack2_outbox: dict[str, tuple[Any, list[tuple[str, Delta]]]] = {}
        self.notes: dict[str, Any] = {}

    # -- control (called by the coordinator) ---------------------------------------------------
    async def start(self, name: str, table: Table, incarnation: int, started_at: float,
                    handles: dict[str, Any], seeds: list[str], now: float | None = None) -> str:
        """Start (or restart) one hosted server with the current table; ``seeds`` are peers
        to gossip with.  ``handles``: server name -> the actor hosting it."""
        slot = self.slots[name]
        if slot.task is not None:
            slot.task.cancel()
        if self.clock is None:
            self.started_at = started_at
            self.clock = (ManualClock(now or 0.0) if self.config.clock == "manual"
                          else WallClock(started_at))
        slot.rng = np.random.default_rng(server_seed(self.config, name, incarnation))
        slot.core = ServerCore(name, incarnation, table, self.config)
        self.handles.update(handles)
        slot.seeds = list(seeds)
        slot.core.introduce(slot.seeds, self.clock.now())
        slot.error = None
        slot.task = asyncio.get_running_loop().create_task(self._loop(slot))
        return slot.core.origin

    async def adopt(self, table: Table, handles: dict[str, Any] | None = None) -> int:
        """A newer table (churn) for every hosted server and, optionally, members' handles."""
        if handles is not None:
            self.handles.update(handles)
        if self.clock is None:
            return -1
        for slot in self.slots.values():
            if slot.core is not None:
                slot.core.adopt(table, self.clock.now())
        return table.epoch

    async def leave(self, name: str) -> None:
        """One hosted server leaves gracefully: a tombstone, told to one peer, then it stops."""
        slot = self.slots[name]
        if slot.core is None:
            return
        if slot.task is not None:
            slot.task.cancel()
            slot.task = None
        assert self.clock is not None
        slot.core.leave(self.clock.now())
        await self._exchange(slot)

    async def advance_to(self, t: float) -> bool:
        """Manual clock: move time to ``t`` and return once every loop is idle again."""
        running = sum(slot.running for slot in self.slots.values())
        if not isinstance(self.clock, ManualClock) or running == 0:
            return False
        await self.clock.advance_to(t)
        return await self.clock.idle_after(running, timeout=60.0)

    # -- queries ----------------------------------------------------------------------------
    async def report(self) -> list[ServerReport]:
        """One report per hosted server (one call per actor per observation)."""
        out: list[ServerReport] = []
        for name, slot in self.slots.items():
            core = slot.core
            if core is None:
                out.append(ServerReport(name, False, "", -1, np.zeros(0), 0, 0, 0, slot.error,
                                        os.getpid()))
            else:
                out.append(ServerReport(name, slot.running, core.origin, core.table.epoch,
                                        np.array(core.column), core.traffic.messages,
                                        core.traffic.bytes, core.rounds, slot.error,
                                        os.getpid(), tuple(core.round_seconds),
                                        core.staleness_seconds))
        return out

    async def status(self) -> dict[str, Any]:
        """Health of the hosted servers (answers while their loops work)."""
        servers = {}
        for name, slot in self.slots.items():
            core = slot.core
            servers[name] = {
                "running": slot.running,
                "origin": None if core is None else core.origin,
                "rounds": 0 if core is None else core.rounds,
                "members": 0 if core is None else len(core.gossip.members()),
                "epoch": None if core is None else core.table.epoch,
                "error": slot.error,
            }
        return {"time": None if self.clock is None else self.clock.now(), "pid": os.getpid(),
                "node": ray.get_runtime_context().get_node_id(), "servers": servers}

    async def keep_notes(self, notes: dict[str, Any]) -> None:
        """Keep the coordinator's notes for a restarted coordinator (lost if this actor
        restarts; every actor keeps a copy)."""
        self.notes = dict(notes)

    async def state(self) -> ActorState:
        """What a restarted coordinator rebuilds its state from."""
        servers = tuple(
            HostedState(n, None, -1, self.started_at) if s.core is None
            else HostedState(n, s.core.table, s.core.incarnation, self.started_at)
            for n, s in self.slots.items())
        origins = {o for s in self.slots.values() if s.core is not None
                   for o in s.core.gossip.versions()}
        return ActorState(servers, tuple(sorted(origins)), dict(self.notes),
                          ray.get_runtime_context().get_node_id(),
                          None if self.clock is None else self.clock.now())

    # -- gossip (called by peers) -------------------------------------------------------------
    async def syn(self, name: str, message: Syn) -> Ack | None:
        slot = self.slots.get(name)
        if slot is None or slot.core is None or self.clock is None:
            return None
        return slot.core.on_syn(message, self.clock.now())

    async def ack2(self, name: str, message: Delta) -> None:
        slot = self.slots.get(name)
        if slot is not None and slot.core is not None and self.clock is not None:
            slot.core.on_ack2(message, self.clock.now())

    async def syn_batch(self, messages: list[tuple[str, Syn]]) -> list[Ack | None]:
        return [await self.syn(name, m) for name, m in messages]

    async def ack2_batch(self, messages: list[tuple[str, Delta]]) -> None:
        for name, m in messages:
            await self.ack2(name, m)

    # -- the loop ---------------------------------------------------------------------------
    async def _loop(self, slot: _Slot) -> None:
        assert slot.core is not None and self.clock is not None
        core, clock = slot.core, self.clock
        # Wake-ups are scheduled on absolute times so that the period does not drift with the
        # work done; a server that fell more than a period behind skips what it missed.
        target = clock.now() + initial_phase(slot.rng, self.config)
        await clock.sleep(target - clock.now())
        wake = 0
        while True:
            if wake % self.config.gossip_rate == 0:
                try:
                    core.update(clock.now())
                except Exception as err:  # a bug must show in reports, not kill silently
                    slot.error = f"{type(err).__name__}: {err}"
                    raise
            await self._exchange(slot)
            wake += 1
            target = max(target + next_wait(slot.rng, self.config),
                         clock.now() - self.config.period)
            await clock.sleep(target - clock.now())

    async def _exchange(self, slot: _Slot) -> None:
        assert slot.core is not None
        peers = slot.core.peers(slot.rng, slot.seeds)
        if peers:
            await asyncio.gather(*(self._exchange_with(slot.core, p) for p in peers))

    async def _exchange_with(self, core: ServerCore, origin: str) -> None:
        assert self.clock is not None
        target = server_of(origin)
        local = self.slots.get(target)
        if local is not None:  # hosted here: the same exchange, without Ray
            if local.core is None:
                return
            ack = local.core.on_syn(core.syn(), self.clock.now())
            local.core.on_ack2(core.on_ack(ack, self.clock.now()), self.clock.now())
            return
        handle = self._handle(target)
        if handle is None:
            return
        answer = await self._send_syn(handle, target, core.syn())
        if answer is None:
            return  # a crashed or slow peer: gossip routes around it
        self._send_ack2(handle, target, core.on_ack(answer, self.clock.now()))

    # -- batching: the exchanges of hosted servers that start together share calls ---------
    async def _send_syn(self, handle: Any, target: str, syn: Syn) -> Ack | None:
        key = _actor_key(handle)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        entry = self.syn_outbox.get(key)
        if entry is None:
            entry = (handle, [])
            self.syn_outbox[key] = entry
            asyncio.get_running_loop().create_task(self._flush_syn(key))
        entry[1].append((target, syn, future))
        answer: Ack | None = await future
        return answer

    async def _flush_syn(self, key: str) -> None:
        await asyncio.sleep(BATCH_SECONDS)
        handle, items = self.syn_outbox.pop(key)
        answers: list[Ack | None]
        try:
            if len(items) == 1:
                target, syn, _ = items[0]
                answers = [await asyncio.wait_for(handle.syn.remote(target, syn),
                                                  self.config.rpc_timeout)]
            else:
                answers = await asyncio.wait_for(
                    handle.syn_batch.remote([(t, m) for t, m, _ in items]),
                    self.config.rpc_timeout)
        except (TimeoutError, ray.exceptions.RayError):
            answers = [None] * len(items)
        for (_, _, future), answer in zip(items, answers, strict=True):
            if not future.done():
                future.set_result(answer)

    def _send_ack2(self, handle: Any, target: str, ack2: Delta) -> None:
        key = _actor_key(handle)
        entry = self.ack2_outbox.get(key)
        if entry is None:
            entry = (handle, [])
            self.ack2_outbox[key] = entry
            asyncio.get_running_loop().create_task(self._flush_ack2(key))
        entry[1].append((target, ack2))

    async def _flush_ack2(self, key: str) -> None:
        await asyncio.sleep(BATCH_SECONDS)
        handle, items = self.ack2_outbox.pop(key)
        # the last message of an exchange: no answer awaited
        if len(items) == 1:
            handle.ack2.remote(*items[0])
        else:
            handle.ack2_batch.remote(items)

    def _handle(self, server: str) -> Any:
        h = self.handles.get(server)
        if h is None:
            try:  # a member the coordinator did not hand out (joined since): look it up
                h = ray.get_actor(server_actor_name(self.run_id, server), namespace=NAMESPACE)
            except ValueError:
                return None
            self.handles[server] = h
        return h


def _actor_key(handle: Any) -> str:
    actor_id = getattr(handle, "_actor_id", None)
    return actor_id.hex() if actor_id is not None else str(id(handle))


RemoteServerActor: Any = ray.remote(ServerActor)
