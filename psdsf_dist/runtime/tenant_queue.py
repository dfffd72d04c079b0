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

What it does
    * Once per period (and at once when work arrives after idling) it reports its backlog —
      tasks queued plus running — to the coordinator
      (:meth:`~psdsf_dist.runtime.coordinator.Coordinator.tenant_report`), which makes the user
      present with that ``max_tasks``, or absent once idle for ``IDLE_LINGER_PERIODS``; the
      answer says which servers exist and on which node.
    * Every lease interval (T/4) it asks each server where it has work to place or tasks
      running (:meth:`~psdsf_dist.runtime.server_actor.ServerActor.lease`): the answer is how
      many of its tasks may run there for the lease's lifetime, counted from when the ask was
      sent.  While an ask is in flight it only replaces tasks that finish (never more than ran
      when the ask was sent, which the server counts as claimed), and otherwise launches as
      soon as a slot frees.  Where the lease allows it (``Lease.pipeline``: the user alone on
      a node its slots fill) one task more waits at the node, so that Ray starts it the moment
      one of the user's tasks there ends instead of after a round trip through the queue.
    * A task lost to a system failure (its node or worker died, the node vanished before it
      started) goes back to the head of the queue, up to the task's ``max_retries``; an
      exception raised by the task's own code is the caller's result, as in plain Ray.
    * When Ray reports the coordinator dead, or it has not answered for
      ``ALLOCATOR_SILENCE_PERIODS`` periods, every queued task fails with
      :class:`AllocatorGoneError` (one line), and so does every new one.

The caller's ``ObjectRef`` is that of :meth:`TenantQueue.submit`, which returns the task's value:
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
    of tasks that wait for their children never deadlocks.  The queue cannot see a task block,
    so a task submitted from inside a running task of the same user (the client tells it the
    parent's node) *borrows its parent's slot*: it is launched at once on the parent's node,
    outside the lease and not counted in ``running`` (in ``borrowed``).  While the parent
    waits for it, Ray runs it in the CPU the parent gave back — the user's use of the node is
    what its lease allows, as with Ray; children of a parent that does not wait for them
    wait at the node until room frees there (Ray's order), as they would in plain Ray.
    Resources Ray does not give back while a task blocks (memory, GPUs, custom ones) are held
    by the parent: children that need them where parents hold them all wait as in plain Ray.
    A child lost to a node failure goes back to the queue as an ordinary task.  That is
one Ray actor call per task, ~1 ms of the queue's CPU on this machine; a burst of thousands
takes seconds to receive, while the queue also launches the user's tasks.  A bulk submission
(:meth:`TenantQueue.submit_many`, the client's ``map``) is one call for all of them, and its
results come back as a stream (a Ray generator), several finished tasks per message.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from psdsf_dist.admission.leases import LEASE_INTERVALS_PER_PERIOD
from psdsf_dist.admission.shapes import ShapeError
from psdsf_dist.admission.tenants import IDLE_LINGER_PERIODS
from psdsf_dist.errors import PsdsfError
from psdsf_dist.observability.tenant_metrics import TenantMetrics
from psdsf_dist.runtime.coordinator import TenantReply
from psdsf_dist.runtime.names import NAMESPACE, actor_key, coordinator_name

ASK_TIMEOUT_INTERVALS = 4.0
"""An ask unanswered this long is given up and asked again (a late answer still counts from
when its ask was sent; the lease it renews lasts ``LEASE_TTL_INTERVALS``)."""
ALLOCATOR_SILENCE_PERIODS = 30.0
"""A coordinator that has not answered a report for this long is taken for gone (one that
Ray reports dead is taken for gone at once).  Long: a loaded coordinator answers late."""


class AllocatorGoneError(PsdsfError, RuntimeError):
    """The allocator's coordinator stopped answering: queued tasks cannot be placed."""


class TenantRefusedError(PsdsfError, RuntimeError):
    """The coordinator refused the tenant's demand or weight (one line saying why)."""


class TaskWithdrawnError(PsdsfError, RuntimeError):
    """A task of a bulk submission withdrawn before it started (its caller closed the results)."""


class TaskCancelledError(PsdsfError, RuntimeError):
    """A task cancelled by its caller (``ray.cancel`` or :meth:`Tenant.cancel`): withdrawn
    from the queue if it had not started, else interrupted as Ray cancels a task."""


@dataclass
class _Task:
    function: tuple[Any, dict[str, Any]]
    """The Ray remote function and its options (the tenant's shape, passed options)."""
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    max_retries: int
    result: asyncio.Future[Any]
    submitted: float
    attempts: int = 0
    batch: str | None = None
    """The bulk submission the task came in (:meth:`TenantQueue.submit_many`), if any."""
    num_returns: int = 1
    parent_node: str | None = None
    """The node of the running task of this user that submitted this one (a child: it
    borrows its parent's slot, see "Nested tasks" in the module docstring)."""
    ref: Any = None
    """The launched Ray task's first return (None while queued)."""
    refs: Any = None
    """All its returns (``num_returns`` of them)."""
    borrowed: bool = False
    """Launched in its parent's slot, outside the lease."""
    cancelled: bool = False
    actor: bool = False
    """An actor of the tenant (``function`` is its class and options): admitted like a task
    that runs until the actor ends."""


@dataclass
class _Server:
    name: str
    handle: Any
    node: str
    slots: int = 0
    pipeline: int = 0
    """Tasks the lease lets wait at the node beyond ``slots`` (Ray starts them as ours end)."""
    expires: float = -1.0
    asking: bool = False
    running: int = 0
    """Tasks launched here and not yet ended (those waiting at the node included)."""
    running_at_ask: int = 0
    """Tasks running here when the ask in flight was sent."""
    waiting: int = 0
    """Of ``running``, tasks launched beyond the slots (pipelined) that have not started: each
    takes the place of the next of ours here to end (the lease allowed it only while the
    user's slots filled the node and nobody else held anything there)."""

    def open_slots(self, now: float) -> int:
        if now >= self.expires:
            return 0
        allowed = self.slots + self.pipeline
        if self.asking:
            # the server is deciding with ``running_at_ask``: replacing tasks that finish
            # meanwhile keeps within the claim it records (max(new slots, running_at_ask))
            return max(min(allowed, self.running_at_ask) - self.running, 0)
        return max(allowed - self.running, 0)

    def free_slots(self, now: float) -> int:
        """Slots of the lease nobody runs in (no pipelining)."""
        return max(self.slots - self.running, 0) if now < self.expires and not self.asking \
            else 0

    def launched(self) -> None:
        if self.running >= self.slots:
            self.waiting += 1  # the pipeline's task: it waits at the node
        self.running += 1

    def ended(self) -> None:
        self.running -= 1
        if self.waiting:
            self.waiting -= 1  # a waiting task took the slot (or was the one that ended)


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
    borrowed: int = 0
    """Children running in their parent's slot now (not in ``running``)."""
    actors: int = 0
    """The tenant's live actors (each holds a slot: in ``running``)."""


class TenantQueue:
    """See the module docstring."""

    def __init__(self, run_id: str, user: str, demand: dict[str, float],
                 weight: float | None, period: float, token: str | None = None) -> None:
        self.run_id = run_id
        self.user = user
        self.token = token
        """The user's token, carried by every call in its name (a run with a tenant policy)."""
        self.demand = dict(demand)
        self.weight = weight
        self.period = period
        self.interval = period / LEASE_INTERVALS_PER_PERIOD
        self.queue: deque[_Task] = deque()
        self.servers: dict[str, _Server] = {}
        self.functions: dict[str, Any] = {}
        self.placed: dict[tuple[int, str, int], Any] = {}
        self.admitted = 0
        self.completed = 0
        self.retried = 0
        self.failed = 0
        self.withdrawn = 0
        self.cancelled = 0
        self.borrowed = 0
        self.actors: dict[str, Any] = {}
        """The tenant's live actors: actor id -> handle (this queue owns them)."""
        self.by_key: dict[str, _Task] = {}
        """The :meth:`submit` call's Ray task id -> its task (to cancel it by its ref)."""
        self.gone: str | None = None
        self.last_answer = time.monotonic()
        self.idle_since: float | None = time.monotonic()
        self.reported = 0
        self.work = asyncio.Event()
        self.loops: list[asyncio.Task[None]] = []
        self.closed = False
        self.metrics = TenantMetrics(user)

    async def start(self) -> None:
        """Start the report and ask loops (the client waits for this at connect)."""
        if not self.loops:
            loop = asyncio.get_running_loop()
            self.coordinator = ray.get_actor(coordinator_name(self.run_id), namespace=NAMESPACE)
            self.handle = ray.get_runtime_context().current_actor
            self.loops = [loop.create_task(self._report_loop()),
                          loop.create_task(self._ask_loop())]

    # -- the caller's side --------------------------------------------------------------------
    async def submit(self, function_box: list[Any], call: list[Any], max_retries: int,
                     num_returns: int = 1, parent_node: str | None = None) -> Any:
        """Queue one task and return its value — a tuple of ``num_returns`` values when more
        than one (call it with that ``num_returns``).  ``function_box`` holds the remote
        function's ObjectRef and ``call`` the arguments — both boxed so that Ray does not
        resolve them here: the task itself gets them (large ones as ObjectRefs).

        The task's own error is *returned*, not raised: Ray raises a returned
        ``RayTaskError`` at the caller's ``ray.get`` as it is — naming the user's function
        with the user's traceback — where a raised one would be wrapped in this method's.
        Cancelling this call (``ray.cancel`` on its ref) withdraws the task if it has not
        started and interrupts it if it runs; ``parent_node``: see "Nested tasks"."""
        if self.gone is not None:
            raise AllocatorGoneError(self.gone)
        function = await self._function(function_box[0])
        args, kwargs = call
        result: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        task = _Task(function, tuple(args), dict(kwargs), max_retries, result, time.monotonic(),
                     num_returns=num_returns, parent_node=parent_node)
        key = ray.get_runtime_context().get_task_id()
        if key is not None:
            self.by_key[key] = task
        try:
            self._enqueue([task])
            return await result
        except ray.exceptions.RayTaskError as err:
            return err if num_returns == 1 else (err,) * num_returns
        except asyncio.CancelledError:
            self._cancel(task, force=False)
            raise
        finally:
            if key is not None:
                self.by_key.pop(key, None)

    async def create_actor(self, class_box: list[Any], call: list[Any]) -> Any:
        """Queue the creation of one of the tenant's actors (``class_box``: the boxed Ray
        actor class and its options) and return its handle once it is admitted and
        constructed — or raise its constructor's error.  See "Actors"."""
        if self.gone is not None:
            raise AllocatorGoneError(self.gone)
        cls = await self._function(class_box[0])
        args, kwargs = call
        result: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._enqueue([_Task(cls, tuple(args), dict(kwargs), 0, result, time.monotonic(),
                             actor=True)])
        return await result

    async def cancel(self, key: str, force: bool = False) -> bool:
        """Cancel the task submitted by the :meth:`submit` call whose Ray task id is ``key``
        (:meth:`Tenant.cancel`): withdrawn if queued, else interrupted — ``force``: its worker
        killed, as ``ray.cancel(..., force=True)`` does.  Returns whether it was found."""
        task = self.by_key.get(key)
        if task is None:
            return False
        self._cancel(task, force=force)
        return True

    def _cancel(self, task: _Task, *, force: bool) -> None:
        # (Ray cancelling the submit call has cancelled ``task.result`` already: it is done,
        # the task itself is not)
        ended = task.result.done() and not task.result.cancelled()
        if task.cancelled or ended:
            return
        task.cancelled = True
        self.cancelled += 1
        if task.ref is None:  # still queued: it never starts
            with contextlib.suppress(ValueError):
                self.queue.remove(task)
            if not task.result.done():
                task.result.set_exception(TaskCancelledError(
                    f"user {self.user!r}: task cancelled by its caller before it started"))
        else:
            ray.cancel(task.ref, force=force)

    async def submit_many(self, function_box: list[Any], calls: list[Any], max_retries: int,
                          batch: str, num_returns: int = 1, parent_node: str | None = None,
                          ) -> AsyncIterator[list[tuple[int, bool, Any]]]:
        """Queue one task per ``(args, kwargs)`` of ``calls`` (in that order) and stream their
        outcomes as they end: each item is a list of ``(index, ok, value)`` — the value, or
        the error ``ray.get`` would raise — for every task of the batch that ended since the
        last item.  Call it with ``num_returns="streaming"``.  :meth:`drop` withdraws what is
        still queued of ``batch`` (it then ends with the running tasks)."""
        loop = asyncio.get_running_loop()
        ended: asyncio.Queue[tuple[int, asyncio.Future[Any]]] = asyncio.Queue()
        futures: list[asyncio.Future[Any]] = [loop.create_future() for _ in calls]
        for index, future in enumerate(futures):
            future.add_done_callback(functools.partial(_put_ended, ended, index))
        if self.gone is not None:
            for future in futures:
                future.set_exception(AllocatorGoneError(self.gone))
        else:
            function = await self._function(function_box[0])
            now = time.monotonic()
            self._enqueue([_Task(function, tuple(args), dict(kwargs), max_retries, future, now,
                                 batch=batch, num_returns=num_returns, parent_node=parent_node)
                           for (args, kwargs), future in zip(calls, futures, strict=True)])
        left = len(futures)
        while left:
            chunk = [await ended.get()]
            while not ended.empty():
                chunk.append(ended.get_nowait())
            left -= len(chunk)
            yield [(i, f.exception() is None, f.exception() or f.result()) for i, f in chunk]

    async def drop(self, batch: str) -> int:
        """Withdraw the queued tasks of a bulk submission (its caller stopped reading it);
        running ones finish.  Returns how many were withdrawn."""
        return self._fail_queued(TaskWithdrawnError,
                                 f"user {self.user!r}: withdrawn by its caller before it "
                                 "started", batch)

    async def status(self) -> QueueStatus:
        now = time.monotonic()
        return QueueStatus(self.user, len(self.queue),
                           {n: s.running for n, s in self.servers.items()},
                           {n: (s.slots if now < s.expires else 0)
                            for n, s in self.servers.items()},
                           self.admitted, self.completed, self.retried, self.failed,
                           len(self.servers), self.gone,
                           {n: s.node for n, s in self.servers.items()},
                           {n: s.waiting for n, s in self.servers.items()}, self.withdrawn,
                           self.cancelled, self.borrowed, len(self.actors))

    async def close(self) -> None:
        """Drop what is queued, give the slots back and leave (the driver is done)."""
        for loop_task in self.loops:
            loop_task.cancel()
        self.closed = True
        self.gone = f"tenant {self.user!r} closed its queue"  # later submissions fail at once
        self._fail_queued(AllocatorGoneError, self.gone)
        self.metrics.flush()
        for handle in self.actors.values():  # ours: they end with the tenant
            ray.kill(handle, no_restart=True)
        calls = [s.handle.release.remote(s.name, self.user, self.token)
                 for s in self.servers.values()]
        calls.append(self.coordinator.tenant_leave.remote(self.user, self.handle, self.token))
        await asyncio.gather(*(asyncio.wait_for(c, self.period) for c in calls),
                             return_exceptions=True)

    async def _function(self, ref: Any) -> Any:
        """The remote function (or actor class) and options behind ``ref``: one object per
        ref, kept for the queue's life — :meth:`_placed` keys its cache by that object's
        ``id``.  (Calls that arrive together each await the ref and get their own copy; all
        but the first are dropped, else a dropped copy's ``id`` could be reused by another
        function's and find its placed variant.)"""
        key = ref.hex()
        function = self.functions.get(key)
        if function is None:
            function = self.functions.setdefault(key, await ref)
        return function

    def _enqueue(self, tasks: list[_Task]) -> None:
        children = [t for t in tasks if t.parent_node is not None]
        if children:
            now = time.monotonic()
            for task in children:
                home = next((s for s in self.servers.values() if s.node == task.parent_node),
                            None)
                if home is not None:
                    self._launch(task, home, now, borrowed=True)
                else:  # its parent's node is gone: an ordinary task
                    task.parent_node = None
                    self.queue.append(task)
            tasks = [t for t in tasks if t.parent_node is None]
        self.queue.extend(tasks)
        if self.idle_since is not None:
            self.idle_since = None
            self.work.set()  # report at once: a late user should not wait a period to join
        _outside_any_call(self._pump)

    def _placed(self, function: tuple[Any, dict[str, Any]], node: str,
                num_returns: int = 1) -> Any:
        """The function with its options and hard affinity to ``node``, made once per node
        (Ray's options wrapper costs ~30 us to build)."""
        key = (id(function), node, num_returns)
        placed = self.placed.get(key)
        if placed is None:
            remote, options = function
            placed = remote.options(
                **options, max_retries=0, num_returns=num_returns,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
            self.placed[key] = placed
        return placed

    # -- placing tasks ------------------------------------------------------------------------
    def _pump(self) -> None:
        """Launch queued tasks into the open slots, the server with the most first."""
        if not self.queue:
            return
        now = time.monotonic()
        while self.queue:
            if self.queue[0].actor:  # an actor takes a slot of its own, never a pipeline's
                best = max(self.servers.values(), key=lambda s: s.free_slots(now), default=None)
                if best is None or best.free_slots(now) <= 0:
                    return
            else:
                best = max(self.servers.values(), key=lambda s: s.open_slots(now), default=None)
                if best is None or best.open_slots(now) <= 0:
                    return
            self._launch(self.queue.popleft(), best, now)

    def _launch(self, task: _Task, server: _Server, now: float, borrowed: bool = False) -> None:
        if task.actor:
            self._launch_actor(task, server, now)
            return
        try:
            out = self._placed(task.function, server.node, task.num_returns).remote(
                *task.args, **task.kwargs)
        except Exception as err:  # e.g. arguments Ray cannot serialize: the caller's error
            self.failed += 1
            task.result.set_exception(err)
            return
        task.refs = out if task.num_returns > 1 else [out]
        task.ref = task.refs[0]
        task.borrowed = borrowed
        if borrowed:
            self.borrowed += 1
        else:
            server.launched()
        self.admitted += 1
        self.metrics.admitted(server.name, now - task.submitted)
        # outside the context of the call that happens to launch it: Ray counts a task launched
        # in an actor call as that call's child, and cancelling the call cancels its children
        asyncio.get_running_loop().create_task(self._watch(task, server),
                                               context=contextvars.Context())

    def _launch_actor(self, task: _Task, server: _Server, now: float) -> None:
        remote_class, options = task.function
        try:
            handle = remote_class.options(
                **options, max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(server.node, soft=False),
            ).remote(*task.args, **task.kwargs)
        except Exception as err:
            self.failed += 1
            task.result.set_exception(err)
            return
        task.ref = handle
        server.launched()
        self.admitted += 1
        self.metrics.admitted(server.name, now - task.submitted)
        asyncio.get_running_loop().create_task(self._watch_actor(task, server, handle),
                                               context=contextvars.Context())

    async def _watch_actor(self, task: _Task, server: _Server, handle: Any) -> None:
        """Hand the actor out once constructed, then hold its slot until it ends (its
        ``__ray_ready__`` raises once it is dead; asked once a period)."""
        key = actor_key(handle)
        try:
            await handle.__ray_ready__.remote()
            self.actors[key] = handle
            if not task.result.done():
                task.result.set_result(handle)
            while True:
                await asyncio.sleep(self.period)
                await handle.__ray_ready__.remote()
        except ray.exceptions.RayError as err:  # it ended (killed, its constructor raised, ...)
            if not task.result.done():
                self.failed += 1
                task.result.set_exception(err)
            else:
                self.completed += 1
                self.metrics.completed(server.name)
        finally:
            self.actors.pop(key, None)
            server.ended()
            self._pump()

    async def _watch(self, task: _Task, server: _Server) -> None:
        try:
            values = [await ref for ref in task.refs]
            value = values[0] if task.num_returns == 1 else tuple(values)
        except ray.exceptions.RayTaskError as err:  # the task's own code raised
            self.completed += 1
            self.metrics.completed(server.name)
            if not task.result.done():
                task.result.set_exception(err)
        except ray.exceptions.RayError as err:
            # lost to the system (node or worker died, node gone before it started), or
            # cancelled by its caller
            if task.cancelled:
                if not task.result.done():
                    task.result.set_exception(err)
                return
            server.slots = server.pipeline = 0  # nothing more there until the next lease
            if task.attempts < task.max_retries and self.gone is None:
                task.attempts += 1
                self.retried += 1
                self.metrics.retried(server.name)
                task.ref = task.refs = None
                task.parent_node = None  # again through the leases
                self.queue.appendleft(task)
            else:
                self.failed += 1
                if not task.result.done():
                    task.result.set_exception(err)
        else:
            self.completed += 1
            self.metrics.completed(server.name)
            if not task.result.done():
                task.result.set_result(value)
        finally:
            if task.borrowed:
                self.borrowed -= 1
                task.borrowed = False
            else:
                server.ended()
            self._pump()
            if self.closed:
                self.metrics.flush()  # the report loop that flushes is gone

    # -- talking to the allocator -------------------------------------------------------------
    def _backlog(self) -> int:
        return len(self.queue) + sum(s.running for s in self.servers.values())

    async def _report_loop(self) -> None:
        while True:
            await self._report()
            self.work.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.work.wait(), self.period)

    async def _report(self) -> None:
        now = time.monotonic()
        backlog = self._backlog()
        if backlog == 0 and self.idle_since is None:
            self.idle_since = now
        if backlog == 0 and self.idle_since is not None \
                and now - self.idle_since < IDLE_LINGER_PERIODS * self.period:
            backlog = self.reported  # lingering: a burst may follow
        silence = ALLOCATOR_SILENCE_PERIODS * self.period
        try:
            reply: TenantReply = await asyncio.wait_for(
                self.coordinator.tenant_report.remote(self.user, self.demand, self.weight,
                                                      backlog, self.handle, self.token),
                silence)
        except (TimeoutError, ray.exceptions.RayError) as err:
            dead = isinstance(err, ray.exceptions.ActorDiedError)
            if dead or time.monotonic() - self.last_answer > silence:
                why = "is gone" if dead else f"has not answered for {silence:g} s"
                self.gone = (f"the allocator of run {self.run_id!r} {why} "
                             f"({type(err).__name__}); queued tasks cannot be placed")
                self._fail_queued(AllocatorGoneError, self.gone)
            else:
                await asyncio.sleep(self.period)  # not every error is a timeout: pace retries
            return
        self.last_answer = time.monotonic()
        self.reported = backlog
        if reply.error is not None:
            self._fail_queued(TenantRefusedError, f"user {self.user!r}: {reply.error}")
        for name, (handle, node) in reply.servers.items():
            s = self.servers.get(name)
            if s is None or s.node != node:
                running = 0 if s is None else s.running
                self.servers[name] = _Server(name, handle, node, running=running)
            else:
                s.handle = handle
        for name in [n for n in self.servers if n not in reply.servers]:
            s = self.servers[name]
            s.slots = s.pipeline = 0
            if s.running == 0:
                del self.servers[name]
        waiting = {s.name: s.waiting for s in self.servers.values()}
        self.metrics.backlog(len(self.queue) + sum(waiting.values()),
                             {s.name: s.running - waiting[s.name]
                              for s in self.servers.values()})

    async def _ask_loop(self) -> None:
        while True:
            for s in list(self.servers.values()):
                if (self.queue or s.running) and not s.asking:
                    asyncio.get_running_loop().create_task(self._ask(s))
            await asyncio.sleep(self.interval)

    async def _ask(self, s: _Server) -> None:
        s.asking = True
        s.running_at_ask = s.running
        sent = time.monotonic()
        try:
            # a task waiting at the node (pipelined) takes the place of one of ours when it
            # starts: the server's claim counts what runs, not what waits
            lease = await asyncio.wait_for(s.handle.lease.remote(s.name, self.user,
                                                                 s.running - s.waiting,
                                                                 len(self.queue), self.token),
                                           ASK_TIMEOUT_INTERVALS * self.interval)
        except (TimeoutError, ray.exceptions.RayError):
            return  # the old lease runs out on its own
        else:
            s.slots = lease.slots
            s.pipeline = lease.pipeline
            s.expires = sent + lease.ttl
        finally:
            s.asking = False
            self._pump()

    def _fail_queued(self, kind: type[Exception], message: str, batch: str | None = None) -> int:
        """Fail the queued tasks — every one, or those of one bulk submission — and return
        how many (counted as withdrawn for :class:`TaskWithdrawnError`, else as failed)."""
        failing = [t for t in self.queue if batch is None or t.batch == batch]
        self.queue = deque(t for t in self.queue if batch is not None and t.batch != batch)
        # one exception object per task: raising one object many times would chain every
        # raise's traceback onto it (quadratic time; 200 tasks took 5 s to drop)
        if kind is TaskWithdrawnError:
            self.withdrawn += len(failing)
        else:
            self.failed += len(failing)
        for task in failing:
            if not task.result.done():
                task.result.set_exception(kind(message))
        return len(failing)


def _outside_any_call(step: Any) -> None:
    """Run ``step`` outside the context of the actor call running now (see :meth:`_watch`'s
    caller): the tasks it launches are nobody's children."""
    contextvars.Context().run(step)


def _put_ended(ended: asyncio.Queue[tuple[int, asyncio.Future[Any]]], index: int,
               future: asyncio.Future[Any]) -> None:
    ended.put_nowait((index, future))


RemoteTenantQueue: Any = ray.remote(TenantQueue)

__all__ = ["AllocatorGoneError", "QueueStatus", "RemoteTenantQueue", "ShapeError",
           "TaskCancelledError", "TaskWithdrawnError", "TenantQueue", "TenantRefusedError"]
