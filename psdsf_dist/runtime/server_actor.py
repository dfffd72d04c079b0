"""The server actor: one Ray actor per server, a thin transport shell around :class:`ServerCore`.

Its loop wakes ``gossip_rate`` times per period (jittered, on an injectable clock); at every
``gossip_rate``-th wake-up it runs the update rule, and at every wake-up it starts push-pull
exchanges with ``fanout`` random peers.  An exchange is two calls: ``syn`` (digest and own
entry; answered by the peer's ack) and a fire-and-forget ``ack2``.  The actor is asynchronous,
so ``status``, ``report`` and the peers' calls are answered between the loop's steps.

After a crash Ray restarts the actor (``max_restarts``) with a fresh, un-started state; the
coordinator notices (``report`` says not running) and starts it again with the current table, as
a new incarnation: a new gossip origin, so the crashed incarnation's column expires from the
others' totals after the time-to-live, while the new one starts empty and is filled by the rule.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import ray

from psdsf_dist.gossip import Delta
from psdsf_dist.runtime.churn import Table
from psdsf_dist.runtime.clock import Clock, ManualClock
from psdsf_dist.runtime.config import RunConfig
from psdsf_dist.runtime.names import NAMESPACE, server_actor_name
from psdsf_dist.runtime.server_core import (
    Ack,
    ServerCore,
    Syn,
    initial_phase,
    next_wait,
    server_of,
    server_seed,
)

FloatArray = npt.NDArray[np.float64]


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


class ServerActor:
    def __init__(self, run_id: str, name: str, config: RunConfig) -> None:
        self.run_id = run_id
        self.name = name
        self.config = config
        self.core: ServerCore | None = None
        self.clock: Clock | None = None
        self.handles: dict[str, Any] = {}
        self.seeds: list[str] = []
        self.task: asyncio.Task[None] | None = None
        self.error: str | None = None
        self.started_at = 0.0
        self.rng = np.random.default_rng(server_seed(config, name, 0))

    # -- control (called by the coordinator) ---------------------------------------------------
    async def start(self, table: Table, incarnation: int, started_at: float,
                    handles: dict[str, Any], seeds: list[str], now: float | None = None) -> str:
        """Start (or restart) with the current table; ``seeds`` are peers to gossip with."""
        if self.task is not None:
            self.task.cancel()
        self.started_at = started_at
        self.clock = (ManualClock(now or 0.0) if self.config.clock == "manual"
                      else WallClock(started_at))
        self.rng = np.random.default_rng(server_seed(self.config, self.name, incarnation))
        self.core = ServerCore(self.name, incarnation, table, self.config)
        self.handles = dict(handles)
        self.seeds = list(seeds)
        self.core.introduce(seeds, self.clock.now())
        self.error = None
        self.task = asyncio.get_running_loop().create_task(self._loop())
        return self.core.origin

    async def adopt(self, table: Table, handles: dict[str, Any] | None = None) -> int:
        """A newer table (churn) and, optionally, the current members' handles."""
        if handles is not None:
            self.handles.update(handles)
        if self.core is None or self.clock is None:
            return -1
        self.core.adopt(table, self.clock.now())
        return self.core.table.epoch

    async def leave(self) -> None:
        """Leave gracefully: publish a tombstone, tell one peer, stop."""
        if self.core is None or self.clock is None:
            return
        if self.task is not None:
            self.task.cancel()
            self.task = None
        self.core.leave(self.clock.now())
        await self._exchange()

    async def advance_to(self, t: float) -> bool:
        """Manual clock: move time to ``t`` and return once the loop is idle again."""
        if not isinstance(self.clock, ManualClock) or self.task is None:
            return False
        await self.clock.advance_to(t)
        return await self.clock.idle_after(1, timeout=60.0)

    # -- queries ----------------------------------------------------------------------------
    async def report(self) -> ServerReport:
        core = self.core
        running = core is not None and self.task is not None and not self.task.done()
        if core is None:
            return ServerReport(self.name, False, "", -1, np.zeros(0), 0, 0, 0, self.error,
                                os.getpid())
        return ServerReport(self.name, running, core.origin, core.table.epoch,
                            np.array(core.column), core.traffic.messages, core.traffic.bytes,
                            core.rounds, self.error, os.getpid())

    async def status(self) -> dict[str, Any]:
        core = self.core
        return {
            "name": self.name,
            "running": self.task is not None and not self.task.done(),
            "origin": None if core is None else core.origin,
            "rounds": 0 if core is None else core.rounds,
            "members": 0 if core is None else len(core.gossip.members()),
            "epoch": None if core is None else core.table.epoch,
            "time": None if self.clock is None else self.clock.now(),
            "error": self.error,
        }

    async def state(self) -> tuple[Table, int, float] | None:
        """What a restarted coordinator rebuilds its state from."""
        if self.core is None:
            return None
        return self.core.table, self.core.incarnation, self.started_at

    # -- gossip (called by peers) -------------------------------------------------------------
    async def syn(self, message: Syn) -> Ack | None:
        if self.core is None or self.clock is None:
            return None
        return self.core.on_syn(message, self.clock.now())

    async def ack2(self, message: Delta) -> None:
        if self.core is not None and self.clock is not None:
            self.core.on_ack2(message, self.clock.now())

    # -- the loop ---------------------------------------------------------------------------
    async def _loop(self) -> None:
        assert self.core is not None and self.clock is not None
        core, clock = self.core, self.clock
        # Wake-ups are scheduled on absolute times so that the period does not drift with the
        # work done; a server that fell more than a period behind skips what it missed.
        target = clock.now() + initial_phase(self.rng, self.config)
        await clock.sleep(target - clock.now())
        wake = 0
        while True:
            if wake % self.config.gossip_rate == 0:
                try:
                    core.update(clock.now())
                except Exception as err:  # a bug must show in reports, not kill silently
                    self.error = f"{type(err).__name__}: {err}"
                    raise
            await self._exchange()
            wake += 1
            target = max(target + next_wait(self.rng, self.config),
                         clock.now() - self.config.period)
            await clock.sleep(target - clock.now())

    async def _exchange(self) -> None:
        assert self.core is not None
        peers = self.core.peers(self.rng, self.seeds)
        if peers:
            await asyncio.gather(*(self._exchange_with(p) for p in peers))

    async def _exchange_with(self, origin: str) -> None:
        assert self.core is not None and self.clock is not None
        handle = self._handle(server_of(origin))
        if handle is None:
            return
        try:
            ack = await asyncio.wait_for(handle.syn.remote(self.core.syn()),
                                         self.config.rpc_timeout)
        except (TimeoutError, ray.exceptions.RayError):
            return  # a crashed or slow peer: gossip routes around it
        if ack is None:
            return
        ack2 = self.core.on_ack(ack, self.clock.now())
        handle.ack2.remote(ack2)  # the last message of the exchange: no answer awaited

    def _handle(self, server: str) -> Any:
        h = self.handles.get(server)
        if h is None:
            try:  # a member the coordinator did not hand out (joined since): look it up
                h = ray.get_actor(server_actor_name(self.run_id, server), namespace=NAMESPACE)
            except ValueError:
                return None
            self.handles[server] = h
        return h


RemoteServerActor: Any = ray.remote(ServerActor)
