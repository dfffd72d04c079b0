"""A tenant's queue talking with the allocator: its backlog reports to the coordinator and its
lease asks to the servers.

An :class:`AllocatorLink` belongs to one :class:`~psdsf_dist.runtime.tenant_queue.TenantQueue`
and shares its :class:`~psdsf_dist.admission.tenant_queue_state.TenantQueueState` and
:class:`~psdsf_dist.runtime.task_runner.TaskRunner`: the state decides what to report, whom to
ask and what an answer changes; the link makes the calls, tells the state what came back, and
has the runner launch what the state then decided.

* Once per period (and at once when work arrives after idling: :meth:`AllocatorLink.wake`) it
  reports the backlog — tasks queued plus running — to the coordinator
  (:meth:`~psdsf_dist.runtime.coordinator.Coordinator.tenant_report`), which makes the user
  present with that ``max_tasks``, or absent once idle for ``IDLE_LINGER_PERIODS``; the answer
  says which servers exist, their actors and their nodes.
* Every lease interval (T/4) it asks each server where the queue has work to place or tasks
  running — and at once where work arrives and the server's lease has run out
  (:meth:`AllocatorLink.ask_urgent`; :meth:`~psdsf_dist.runtime.server_actor.ServerActor.lease`):
  the answer is how many of the user's tasks may run there for the lease's lifetime, counted
  from when the ask was sent.  While an ask is in flight the queue only replaces tasks that
  finish (never more than ran when the ask was sent, which the server counts as claimed), and
  otherwise launches as soon as a slot frees.  Where the lease allows it (``Lease.pipeline``:
  the user alone on a node its slots fill) one task more waits at the node, so that Ray starts
  it the moment one of the user's tasks there ends instead of after a round trip through the
  queue.  An answer may also ask to stop some of the user's preemptible tasks there
  (``Lease.preempt``): the runner interrupts those the state picks.
* When Ray reports the coordinator dead, or it has not answered for
  ``ALLOCATOR_SILENCE_PERIODS`` periods, every queued task fails with
  :class:`~psdsf_dist.admission.tenant_queue_state.AllocatorGoneError` (one line), and so does
  every new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars

import ray

from psdsf_dist.admission.leases import LEASE_INTERVALS_PER_PERIOD
from psdsf_dist.admission.tenant_queue_state import (
    ALLOCATOR_SILENCE_PERIODS,
    Ask,
    TenantQueueState,
)
from psdsf_dist.observability.tenant_metrics import TenantMetrics
from psdsf_dist.runtime.clock import WallClock
from psdsf_dist.runtime.handles import CoordinatorHandle, QueueHandle, ServerHandle, named_actor
from psdsf_dist.runtime.names import coordinator_name
from psdsf_dist.runtime.task_runner import TaskRunner

ASK_TIMEOUT_INTERVALS = 4.0
"""An ask unanswered this long is given up and asked again (a late answer still counts from
when its ask was sent; the lease it renews lasts ``LEASE_TTL_INTERVALS``)."""


class AllocatorLink:
    """The queue's reports and lease asks (module docstring)."""

    def __init__(self, run_id: str, user: str, token: str | None, demand: dict[str, float],
                 weight: float | None, period: float, state: TenantQueueState,
                 runner: TaskRunner, clock: WallClock, metrics: TenantMetrics) -> None:
        self.run_id = run_id
        self.user = user
        self.token = token
        """The user's token, carried by every call in its name (a run with a tenant policy)."""
        self.demand = demand
        self.weight = weight
        self.period = period
        self.interval = period / LEASE_INTERVALS_PER_PERIOD
        self.state = state
        self.runner = runner
        self.clock = clock
        self.metrics = metrics
        self.job = ray.get_runtime_context().get_job_id()
        """The Ray job the user's tasks run in (the driver's, which owns this queue): each ask
        names it, so that the servers tell the user's workers from work outside the allocator
        (:mod:`psdsf_dist.admission.unmanaged`)."""
        self.handles: dict[str, ServerHandle] = {}
        """Server name -> its actor handle."""
        self.work = asyncio.Event()
        """Set when work arrived after idling: report now, not at the period's end."""
        self.loops: list[asyncio.Task[None]] = []

    def start(self, queue: QueueHandle) -> None:
        """Start the report and ask loops; ``queue``: the queue's own handle (the coordinator
        keeps it to tell a silent queue from a gone one)."""
        if not self.loops:
            loop = asyncio.get_running_loop()
            self.coordinator = named_actor(coordinator_name(self.run_id), CoordinatorHandle)
            self.queue = queue
            self.loops = [loop.create_task(self._report_loop()),
                          loop.create_task(self._ask_loop())]

    def wake(self) -> None:
        """Work arrived after idling: report at once (a late user should not wait a period to
        join)."""
        self.work.set()

    def ask_urgent(self, now: float) -> None:
        """Ask at once the servers where work waits and the lease has run out."""
        for name in self.state.asks_urgent(now):
            self._send_ask(name)

    def stop(self) -> None:
        """No more reports or asks."""
        for loop_task in self.loops:
            loop_task.cancel()

    async def leave(self) -> None:
        """Give the servers' slots back and leave the run (the queue closed)."""
        calls = [self.handles[s].release.remote(s, self.user, self.token)
                 for s in self.state.servers if s in self.handles]
        calls.append(self.coordinator.tenant_leave.remote(self.user, self.queue, self.token))
        await asyncio.gather(*(asyncio.wait_for(c, self.period) for c in calls),
                             return_exceptions=True)

    # -- reports ------------------------------------------------------------------------------
    async def _report_loop(self) -> None:
        while True:
            await self._report()
            self.work.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.work.wait(), self.period)

    async def _report(self) -> None:
        backlog = self.state.report_backlog(self.clock.now())
        silence = ALLOCATOR_SILENCE_PERIODS * self.period
        try:
            reply = await asyncio.wait_for(
                self.coordinator.tenant_report.remote(self.user, self.demand, self.weight,
                                                      backlog, self.queue, self.token),
                silence)
        except (TimeoutError, ray.exceptions.RayError) as err:
            dead = isinstance(err, ray.exceptions.ActorDiedError)
            self.runner.settle(self.state.report_failed(self.clock.now(), self.run_id, dead,
                                                        type(err).__name__))
            if not dead and self.state.gone is None:
                await self.clock.sleep(self.period)  # not every error is a timeout: pace retries
            return
        for name, (handle, _node) in reply.servers.items():
            self.handles[name] = handle
        self.runner.settle(self.state.report_answered(
            self.clock.now(), backlog, {n: node for n, (_h, node) in reply.servers.items()},
            reply.error))
        for name in [n for n in self.handles if n not in self.state.servers]:
            del self.handles[name]
        servers = self.state.servers.values()
        self.metrics.backlog(len(self.state.queue) + sum(s.waiting for s in servers),
                             {s.name: s.running - s.waiting for s in servers})

    # -- lease asks ---------------------------------------------------------------------------
    async def _ask_loop(self) -> None:
        while True:
            for name in self.state.asks_due():
                self._send_ask(name)
            await self.clock.sleep(self.interval)

    def _send_ask(self, name: str) -> None:
        """Ask ``name`` for a lease (marked in flight at once: one ask per server at a time)."""
        if name not in self.handles:
            return
        now = self.clock.now()
        ask = self.state.ask_sent(name)
        self.runner.hold(asyncio.get_running_loop().create_task(
            self._ask(name, ask, now), context=contextvars.Context()))

    async def _ask(self, name: str, ask: Ask, sent: float) -> None:
        answer: tuple[int, int, float] | None = None
        try:
            lease = await asyncio.wait_for(
                self.handles[name].lease.remote(name, self.user, ask.running, ask.queued,
                                                self.token, self.job),
                ASK_TIMEOUT_INTERVALS * self.interval)
        except (TimeoutError, ray.exceptions.RayError):
            pass  # the old lease runs out on its own
        else:
            answer = (lease.slots, lease.pipeline, lease.ttl)
            self.runner.interrupt(self.state.preempt(name, lease.preempt))
        finally:
            self.runner.launch_all(self.state.ask_answered(name, sent, answer,
                                                           self.clock.now()))
            self.runner.freed.set()
