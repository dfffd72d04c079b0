"""A tenant's task queue: an actor beside the tenant's driver that runs its tasks on the nodes,
and as many at a time, as the servers' leases allow.

Why the queue lives with the client
    A queued task must survive anything but its own driver: it is kept by an actor the driver
    owns (not detached), on the driver's node.  A crash or restart of a server actor, or of the
    coordinator, loses nothing queued; the driver exiting takes the queue with it, so its
    tasks are dropped and — its reports and asks stopping — its share is released (the leases
    expire after ``LEASE_TTL_INTERVALS`` intervals, the user leaves after
    ``TENANT_TIMEOUT_PERIODS``).  The data path stays queue -> raylet: each task is an ordinary
    Ray task with the tenant's resource shape and hard affinity to the lease's node.

Who decides
    Every decision — which queued task to launch next and where, slots given back by blocked
    tasks, actors admitted into free slots, cancel, retries, withdrawal, the backlog
    to report, when the allocator counts as gone — is taken by a pure
    :class:`~psdsf_dist.admission.tenant_queue_state.TenantQueueState` (events in, decisions
    out, tested without Ray); this actor only makes the Ray calls it asks for and tells it
    what Ray answered.

What it does
    * It reports its backlog (tasks queued plus running) to the coordinator once per period
      and at once when work arrives after idling, and asks the servers for leases every lease
      interval and at once where work arrives and a lease has run out
      (:mod:`psdsf_dist.runtime.allocator_link`); it launches queued tasks into the slots the
      leases allow.  Once the allocator is gone (Ray reports the coordinator dead, or it has
      not answered for ``ALLOCATOR_SILENCE_PERIODS`` periods) every queued task fails with
      :class:`AllocatorGoneError` (one line), and so does every new one.
    * A task lost to a system failure (its node or worker died, the node vanished before it
      started) goes back to the head of the queue, up to the task's ``max_retries``; an
      exception raised by the task's own code is the caller's result, as in plain Ray.

For a call through the queue (not launched by the client into a delegated slot, below), the
caller's ``ObjectRef`` is that of :meth:`TenantQueue.submit`, which returns the task's value:
``ray.get`` and ``ray.wait`` work as usual (the value passes through the queue once; the
arguments do not when large: the client puts them in the object store and the queue passes
their refs on, which Ray resolves for the task).  The task's own error is returned as Ray's
``RayTaskError``, which ``ray.get`` raises as it is: it names the user's function, with the
user's traceback.  ``num_returns=k`` makes both calls return ``k`` values.

Cancelling
    ``ray.cancel`` on the caller's ref cancels the :meth:`~TenantQueue.submit` call (an async
    actor call: Ray cancels its coroutine): a queued task is taken out of the queue and never
    starts; a running one is cancelled as Ray cancels a task (``KeyboardInterrupt`` in it).
    Ray refuses ``force=True`` on an actor call's ref; :meth:`TenantQueue.cancel` (the
    client's ``Tenant.cancel(ref, force=True)``) kills the running task's worker instead.

Actors
    A tenant's actor (:meth:`TenantQueue.create_actor`, the client's ``@tenant.actor``) is
    admitted like a task that runs until the actor ends: it waits in the queue, in order,
    for a slot of the lease of its own (never a pipelined one), and holds it while it lives.
    The queue creates it (so owns it: it ends with the tenant's driver or ``close``) and
    hands its handle out once constructed.  When the share shrinks below what the tenant's
    live actors and tasks hold, nothing is killed: the tenant gets no new slot until what it
    runs fits its lease again (its leases count every live actor as running).

Nested tasks
    Ray gives a task's CPU back while the task blocks in ``ray.get`` / ``ray.wait``, so a tree
    of tasks that wait for their children never deadlocks.  A tenant's task tells its queue
    when it blocks and resumes (:mod:`psdsf_dist.runtime.tenant_worker`:
    :meth:`TenantQueue.task_blocked`, :meth:`TenantQueue.task_resumed`): its slot goes to the
    next queued task while it waits — its children, or others — and comes back when it
    resumes, beyond the lease for a moment as with Ray's CPU.  A task submitted from inside a
    task is an ordinary task of its user.  Resources Ray does not give back while a task
    blocks (memory, GPUs, custom ones) stay the blocked task's in Ray: a task launched into
    the freed slot that needs them waits at the node, as it would in plain Ray.

Delegated slots
    While nothing waits in it, the queue delegates the open slots of its leases to the client
    that opened it (:meth:`TenantQueue.exchange`; the client's side is
    :mod:`psdsf_dist.runtime.direct_launcher`, the rules :mod:`psdsf_dist.admission.
    direct_slots` and the state's ``grant`` / ``revocations`` / ``direct_report``): the
    client launches its own calls into them as plain Ray tasks, and reports what it ran once
    per lease interval.  A task so launched names its slot when it blocks.

Bulk submissions
    :meth:`TenantQueue.submit` is one Ray actor call per task; a burst of them keeps the
    queue busy receiving, while the queue also launches the user's tasks.  A bulk submission
    (:meth:`TenantQueue.submit_many`, the client's ``map``) is one call for all of them, and
    its results come back as a stream (a Ray generator), several finished tasks per message.

The Ray calls that launch and watch the tasks are :class:`~psdsf_dist.runtime.task_runner.
TaskRunner`'s, those to the allocator :class:`~psdsf_dist.runtime.allocator_link.
AllocatorLink`'s; this actor receives the callers' calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import cast

import ray

from psdsf_dist.admission.direct_slots import DirectOutcome, DirectReply, DirectReport
from psdsf_dist.admission.leases import LEASE_INTERVALS_PER_PERIOD
from psdsf_dist.admission.shapes import ShapeError
from psdsf_dist.admission.tenant_queue_state import (
    AllocatorGoneError,
    TaskCancelledError,
    TaskWithdrawnError,
    TenantQueueState,
    TenantRefusedError,
)
from psdsf_dist.observability.tenant_metrics import TenantMetrics
from psdsf_dist.runtime.allocator_link import AllocatorLink
from psdsf_dist.runtime.clock import WallClock
from psdsf_dist.runtime.handles import QueueHandle, actor_class, this_actor
from psdsf_dist.runtime.messages import QueueStatus
from psdsf_dist.runtime.task_runner import Registered, TaskCall, TaskRunner

CONNECT_TIMEOUT = 30.0
"""Seconds a tenant's client waits for its queue, or the coordinator, to answer a call before it
gives up (connect, register, open, drop, cancel, status, close)."""


class TenantQueue:
    """See the module docstring: the Ray calls; :class:`TenantQueueState` decides."""

    def __init__(self, run_id: str, user: str, demand: dict[str, float],
                 weight: float | None, period: float, token: str | None = None) -> None:
        self.user = user
        self.interval = period / LEASE_INTERVALS_PER_PERIOD
        self.clock = WallClock(time.time())
        """The queue's one clock: its leases, asks, task ages and pauses all read it."""
        self.state = TenantQueueState(user, period, self.clock.now())
        self.metrics = TenantMetrics(user)
        self.runner = TaskRunner(self.state, self.clock, self.metrics, period)
        """Launches and watches the tasks; ``runner.tasks`` holds what Ray needs of each."""
        self.link = AllocatorLink(run_id, user, token, dict(demand), weight, period, self.state,
                                  self.runner, self.clock, self.metrics)
        """Reports to the coordinator and asks the servers for leases."""
        self.functions: dict[str, Registered] = {}
        """Registered key -> a Ray remote function (or actor class) and its options
        (:meth:`register`)."""
        self.by_key: dict[str, int] = {}
        """The :meth:`submit` call's Ray task id -> its task (to cancel it by its ref)."""
        self.slots_changed = self.runner.freed
        """Set when slots may have freed (a lease answered, a task ended or blocked): an
        exchange waiting for a slot looks again."""

    async def start(self) -> None:
        """Start the report and ask loops (the client waits for this at connect)."""
        self.link.start(this_actor(QueueHandle))

    # -- the caller's side --------------------------------------------------------------------
    async def register(self, key: str, function: Registered) -> None:
        """Keep a remote function (or actor class) and its options under ``key``, for the
        calls that name it.  The client registers each when it is declared, so that a call
        carries a key rather than an ObjectRef of the function, which would make every call
        a borrow of that object (Ray's reference counting: docs/tenants.md, "Latency")."""
        self.functions[key] = function

    def _registered(self, key: str) -> Registered:
        function = self.functions.get(key)
        if function is None:
            raise TenantRefusedError(f"user {self.user!r}: no function registered as {key!r} "
                                     "with this queue (declare it with this tenant)")
        return function

    async def submit(self, key: str, call: Sequence[object], max_retries: int,
                     num_returns: int = 1, preemptible: bool = False) -> object:
        """Queue one task of the function registered as ``key`` and return its value — a
        tuple of ``num_returns`` values when more than one (call it with that
        ``num_returns``).  ``call`` holds the arguments, boxed so that Ray does not resolve
        them here: the task itself gets them (large ones as ObjectRefs).  Nothing is awaited
        before the task is queued, so calls queue their tasks in the order they arrive.

        The task's own error is *returned*, not raised: Ray raises a returned
        ``RayTaskError`` at the caller's ``ray.get`` as it is — naming the user's function
        with the user's traceback — where a raised one would be wrapped in this method's.
        Cancelling this call (``ray.cancel`` on its ref) withdraws the task if it has not
        started and interrupts it if it runs."""
        if self.state.gone is not None:
            raise AllocatorGoneError(self.state.gone)
        function = self._registered(key)
        args, kwargs = unboxed(call)
        result: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        task_id = self.state.new_task(max_retries, self.clock.now(), preemptible=preemptible)
        self.runner.tasks[task_id] = TaskCall(function, args, kwargs, result, num_returns)
        call_id = ray.get_runtime_context().get_task_id()
        if call_id is not None:
            self.by_key[call_id] = task_id
        try:
            self._submit([task_id])
            return await result
        except ray.exceptions.RayTaskError as err:
            return err if num_returns == 1 else (err,) * num_returns
        except asyncio.CancelledError:
            self.runner.cancel(task_id, force=False)
            raise
        finally:
            if call_id is not None:
                self.by_key.pop(call_id, None)

    async def create_actor(self, key: str, call: Sequence[object]) -> object:
        """Queue the creation of one of the tenant's actors (``key``: its Ray actor class and
        options, registered) and return its handle once it is admitted and constructed — or
        raise its constructor's error.  See "Actors"."""
        if self.state.gone is not None:
            raise AllocatorGoneError(self.state.gone)
        cls = self._registered(key)
        args, kwargs = unboxed(call)
        result: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        task_id = self.state.new_task(0, self.clock.now(), actor=True)
        self.runner.tasks[task_id] = TaskCall(cls, args, kwargs, result, actor=True)
        self._submit([task_id])
        return await result

    async def cancel(self, key: str, force: bool = False) -> bool:
        """Cancel the task submitted by the :meth:`submit` call whose Ray task id is ``key``
        (:meth:`Tenant.cancel`): withdrawn if queued, else interrupted — ``force``: its worker
        killed, as ``ray.cancel(..., force=True)`` does.  Returns whether it was found."""
        task_id = self.by_key.get(key)
        if task_id is None:
            return False
        self.runner.cancel(task_id, force=force)
        return True

    async def submit_many(self, key: str, calls: Sequence[Sequence[object]], max_retries: int,
                          batch: str, num_returns: int = 1, preemptible: bool = False,
                          ) -> AsyncIterator[list[tuple[int, bool, object]]]:
        """Queue one task per ``(args, kwargs)`` of ``calls`` (in that order) and stream their
        outcomes as they end: each item is a list of ``(index, ok, value)`` — the value, or
        the error ``ray.get`` would raise — for every task of the batch that ended since the
        last item.  Call it with ``num_returns="streaming"``.  :meth:`drop` withdraws what is
        still queued of ``batch`` (it then ends with the running tasks)."""
        loop = asyncio.get_running_loop()
        ended: asyncio.Queue[tuple[int, asyncio.Future[object]]] = asyncio.Queue()
        futures: list[asyncio.Future[object]] = [loop.create_future() for _ in calls]
        for index, future in enumerate(futures):
            future.add_done_callback(functools.partial(_put_ended, ended, index))
        if self.state.gone is not None:
            for future in futures:
                future.set_exception(AllocatorGoneError(self.state.gone))
        else:
            function = self._registered(key)
            now = self.clock.now()
            ids = []
            for call, future in zip(calls, futures, strict=True):
                args, kwargs = unboxed(call)
                task_id = self.state.new_task(max_retries, now, batch=batch,
                                              preemptible=preemptible)
                self.runner.tasks[task_id] = TaskCall(function, args, kwargs, future,
                                                      num_returns)
                ids.append(task_id)
            self._submit(ids)
        left = len(futures)
        while left:
            chunk = [await ended.get()]
            while not ended.empty():
                chunk.append(ended.get_nowait())
            left -= len(chunk)
            yield [(i, f.exception() is None, f.exception() or f.result()) for i, f in chunk]

    async def task_blocked(self, ray_task: str, slot: int | None = None) -> None:
        """The running task whose Ray task id is ``ray_task`` blocks in ``ray.get`` /
        ``ray.wait``: its slot is free until it resumes ("Nested tasks").  ``slot``: the
        delegated slot it runs in, launched by the client ("Delegated slots")."""
        if slot is not None:
            self.runner.launch_all(self.state.slot_blocked(slot, ray_task, self.clock.now()))
        else:
            task_id = self.runner.ray_tasks.get(ray_task)
            if task_id is not None:
                self.runner.launch_all(self.state.blocked(task_id, self.clock.now()))
        self.slots_changed.set()

    async def task_resumed(self, ray_task: str, slot: int | None = None) -> None:
        """The task whose Ray task id is ``ray_task`` resumes: it takes its slot back."""
        if slot is not None:
            self.state.slot_resumed(slot, ray_task)
            return
        task_id = self.runner.ray_tasks.get(ray_task)
        if task_id is not None:
            self.state.resumed(task_id)

    async def exchange(self, report: DirectReport, wait: bool = True) -> DirectReply:
        """The client's exchange ("Delegated slots"): take its report — the tasks it ran,
        the slots it gives back, its tasks waiting for a slot — and answer with slots
        granted (new, and the held ones renewed to their leases' expiry) and revoked.
        Where the client wants more slots than it holds and none is free, the answer waits
        up to a lease interval for one (``wait``)."""
        now = self.clock.now()
        for slot_id, waited in report.launched:
            slot = self.state.tasks.get(slot_id)
            if slot is not None and slot.server is not None:
                self.metrics.admitted(slot.server, waited)
        for slot_id, outcome, _seconds in report.ended:
            slot = self.state.tasks.get(slot_id)
            if slot is not None and slot.server is not None \
                    and outcome is DirectOutcome.COMPLETED:
                self.metrics.completed(slot.server)
        launches, woke = self.state.direct_report(report, now)
        if woke:
            self.link.wake()
        self.runner.launch_all(launches)
        self.link.ask_urgent(now)
        if self.state.gone is None and not self.state.grant(report.wanted, now) and wait \
                and report.wanted > len(self.state.delegated_slots()):
            self.slots_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.slots_changed.wait(), self.interval)
            if self.state.gone is None:
                self.state.grant(report.wanted, self.clock.now())
        return self.state.direct_reply(self.clock.now(), self.clock.started_at)

    async def drop(self, batch: str) -> int:
        """Withdraw the queued tasks of a bulk submission (its caller stopped reading it);
        running ones finish.  Returns how many were withdrawn."""
        ended = self.state.withdraw(TaskWithdrawnError(
            f"user {self.user!r}: withdrawn by its caller before it started"), batch)
        self.runner.settle(ended)
        return len(ended)

    async def status(self) -> QueueStatus:
        return QueueStatus.of(self.state, self.clock.now(), len(self.runner.actors))

    async def close(self) -> None:
        """Drop what is queued, give the slots back and leave (the driver is done)."""
        self.link.stop()
        self.runner.closed = True
        self.runner.settle(self.state.close())  # later submissions fail at once
        self.metrics.flush()
        self.runner.kill_actors()  # ours: they end with the tenant
        await self.link.leave()

    def _submit(self, ids: list[int]) -> None:
        now = self.clock.now()
        launches, woke = self.state.submit(ids, now)
        if woke:
            self.link.wake()
        self.runner.launch_all(launches)
        self.link.ask_urgent(now)


def unboxed(call: Sequence[object]) -> tuple[tuple[object, ...], dict[str, object]]:
    """A call's arguments as the client boxes them — ``[args, kwargs]``, so that Ray does not
    resolve them here (the task itself gets them) — as a task takes them."""
    args, kwargs = cast(tuple[Sequence[object], Mapping[str, object]], call)
    return tuple(args), dict(kwargs)


def _put_ended(ended: asyncio.Queue[tuple[int, asyncio.Future[object]]], index: int,
               future: asyncio.Future[object]) -> None:
    ended.put_nowait((index, future))


RemoteTenantQueue = actor_class(TenantQueue, QueueHandle)

__all__ = ["AllocatorGoneError", "RemoteTenantQueue", "ShapeError",
           "TaskCancelledError", "TaskWithdrawnError", "TenantQueue", "TenantRefusedError"]
