"""The Ray side of a tenant's queue: launch what its state decided, watch each launched task or
actor until it ends, and tell the state how it ended.

A :class:`TaskRunner` belongs to one :class:`~psdsf_dist.runtime.tenant_queue.TenantQueue` and
shares its :class:`~psdsf_dist.admission.tenant_queue_state.TenantQueueState`: the state decides
(which task, where, retried or ended), the runner makes the Ray calls and hands the callers
their values or errors.  Nothing here decides anything.

* A task is an ordinary Ray task with the tenant's shape, ``max_retries=0`` (retries are the
  state's, so that a retried task goes back to the queue) and a hard affinity to its lease's
  node.  The launch runs outside the context of the actor call that happens to trigger it:
  Ray counts a task launched in a call as that call's child, and cancelling the call would
  cancel it.
* A watcher awaits the task's refs: a value or the task's own ``RayTaskError`` is the
  caller's result (``DONE``); ``TaskCancelledError`` (its caller's cancel, or a preemption)
  and system failures are ``LOST`` — the state retries, re-queues or ends it.
* An actor is created with ``max_restarts=0`` and watched until it dies (``__ray_ready__``
  once a period): it holds its slot while it lives.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from psdsf_dist.admission.tenant_queue_state import (
    CancelAction,
    Ended,
    Launch,
    Outcome,
    Signal,
    TenantQueueState,
)
from psdsf_dist.observability.tenant_metrics import TenantMetrics
from psdsf_dist.runtime.clock import Clock
from psdsf_dist.runtime.names import actor_key

if TYPE_CHECKING:
    from psdsf_dist.runtime.handles import Handle

L = TypeVar("L")
L_co = TypeVar("L_co", covariant=True)
T = TypeVar("T")

PlacedKey = tuple[int, str, bool, int, int]
"""A placed function's key: (the registered pair's id, node, soft, max_retries, num_returns)."""


class Launcher(Protocol):
    """A Ray remote function or actor class with its options set: ``remote`` launches it (a
    task's ref, a list of them for several returns, or an actor's handle)."""

    def remote(self, *args: object, **kwargs: object) -> object: ...


class Configurable(Protocol[L_co]):
    """A Ray remote function or actor class: ``options`` sets its options."""

    def options(self, **options: object) -> L_co: ...


Registered = tuple[Configurable[Launcher], dict[str, object]]
"""A remote function (or actor class) as a tenant's client registers it with its queue, with
its options (the tenant's shape, passed options)."""


class RemoteTask(Protocol[T]):
    """A Ray remote function of a task body that returns ``T``, with its options set:
    ``remote`` launches one task — the ref of its value, or with several returns a list of
    refs, one per item of the value."""

    def remote(self, *args: object,
               **kwargs: object) -> ray.ObjectRef[T] | list[ray.ObjectRef[object]]: ...


RemoteFunction = tuple[Configurable[RemoteTask[T]], dict[str, object]]
"""A Ray remote function and its options (the tenant's shape, passed options), as the client
registers it with its queue and launches it into delegated slots (a :data:`Registered`)."""


def remote_function(body: Callable[..., T]) -> Configurable[RemoteTask[T]]:
    """``ray.remote(body)``.  Ray's stubs type a remote function by the body's positional
    parameters, up to ten, and its ``remote`` by them; a task body here takes its user's
    parameters and the slot keyword, so it is described by :class:`RemoteTask` instead."""
    return cast("Configurable[RemoteTask[T]]", ray.remote(body))


@dataclass
class TaskCall:
    """What the queue holds of a task for Ray (its bookkeeping is the state's)."""

    function: Registered
    args: tuple[object, ...]
    kwargs: dict[str, object]
    result: asyncio.Future[object]
    num_returns: int = 1
    actor: bool = False
    refs: list[ray.ObjectRef[object]] | None = None
    """The launched Ray task's returns (``num_returns`` of them; None while queued, and for an
    actor)."""
    ray_task: str | None = None
    """The launched Ray task's id (hex; None while queued, and for an actor)."""


def placed_on(cache: dict[PlacedKey, L], function: tuple[Configurable[L], dict[str, object]],
              node: str, *, soft: bool, max_retries: int, num_returns: int) -> L:
    """A Ray remote function with its options (the tenant's shape, passed options) and an
    affinity to ``node`` (``soft``: elsewhere only once the node is gone), made once per
    node and kind in ``cache`` (Ray's options wrapper is not free to build)."""
    key = (id(function), node, soft, max_retries, num_returns)
    placed = cache.get(key)
    if placed is None:
        remote, options = function
        placed = remote.options(
            **options, max_retries=max_retries, num_returns=num_returns,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=soft))
        cache[key] = placed
    return placed


class TaskRunner:
    """Launches and watches a queue's tasks (module docstring)."""

    def __init__(self, state: TenantQueueState, clock: Clock, metrics: TenantMetrics,
                 period: float) -> None:
        self.state = state
        self.clock = clock
        self.metrics = metrics
        self.period = period
        self.tasks: dict[int, TaskCall] = {}
        self.placed: dict[PlacedKey, Launcher] = {}
        self.ray_tasks: dict[str, int] = {}
        """A launched task's Ray task id -> its task id (its blocking notices name the former)."""
        self.actors: dict[str, Handle[object]] = {}
        """The tenant's live actors: actor id -> handle (the queue owns them)."""
        self.watchers: set[asyncio.Task[None]] = set()
        self.closed = False
        self.freed = asyncio.Event()
        """Set whenever a launched task ends (its slot may be free)."""

    def hold(self, task: asyncio.Task[None]) -> None:
        """Keep a reference to ``task`` until it ends (the loop keeps only weak ones)."""
        self.watchers.add(task)
        task.add_done_callback(self.watchers.discard)

    def settle(self, ended: list[Ended]) -> None:
        """Give the callers of tasks the queue ended their errors."""
        for end in ended:
            task = self.tasks.pop(end.task)
            if end.error is not None and not task.result.done():
                task.result.set_exception(end.error)

    def cancel(self, task_id: int, *, force: bool) -> None:
        """Withdraw ``task_id`` if queued, else interrupt it (``force``: kill its worker)."""
        action, ended = self.state.cancel(task_id)
        if action is CancelAction.WITHDRAWN and ended is not None:
            self.settle([ended])
        elif action is CancelAction.INTERRUPT:
            task = self.tasks[task_id]
            if task.refs is not None:
                ray.cancel(task.refs[0], force=force)

    def interrupt(self, ids: list[int]) -> None:
        """Interrupt launched tasks as ``ray.cancel`` does (their watchers see them end)."""
        for task_id in ids:
            task = self.tasks.get(task_id)
            if task is not None and task.refs is not None:
                ray.cancel(task.refs[0])

    def kill_actors(self) -> None:
        """End the tenant's live actors (they end with the tenant)."""
        for handle in self.actors.values():
            ray.kill(handle, no_restart=True)

    def launch_all(self, launches: list[Launch]) -> None:
        """Launch what the state decided, outside the context of the current call (module
        docstring)."""
        contextvars.Context().run(self._launch_all, launches)

    def _placed(self, function: Registered, node: str, num_returns: int = 1) -> Launcher:
        """The function with hard affinity to ``node`` and no Ray retries (the state's)."""
        return placed_on(self.placed, function, node, soft=False, max_retries=0,
                         num_returns=num_returns)

    def _launch_all(self, launches: list[Launch]) -> None:
        loop = asyncio.get_running_loop()
        for launch in launches:
            task = self.tasks[launch.task]
            try:
                if task.actor:
                    remote_class, options = task.function
                    handle = remote_class.options(
                        **options, max_restarts=0,
                        scheduling_strategy=NodeAffinitySchedulingStrategy(launch.node,
                                                                           soft=False),
                    ).remote(*task.args, **task.kwargs)
                    watch = self._watch_actor(launch, cast("Handle[object]", handle))
                else:
                    out = self._placed(task.function, launch.node, task.num_returns).remote(
                        *task.args, **task.kwargs)
                    refs = cast(list[ray.ObjectRef[object]],
                                out if task.num_returns > 1 else [out])
                    task.refs = refs
                    task.ray_task = refs[0].task_id().hex()
                    self.ray_tasks[task.ray_task] = launch.task
                    watch = self._watch(launch, refs)
            except Exception as err:  # e.g. arguments Ray cannot serialize: the caller's error
                self.tasks.pop(launch.task)
                if not task.result.done():
                    task.result.set_exception(err)
                decision = self.state.ended(launch.task, Signal.LAUNCH_FAILED,
                                            self.clock.now())
                self._launch_all(decision.launches)
                continue
            self.metrics.admitted(launch.server, launch.waited)
            self.hold(loop.create_task(watch, context=contextvars.Context()))

    async def _watch_actor(self, launch: Launch, handle: Handle[object]) -> None:
        """Hand the actor out once constructed, then hold its slot until it ends (its
        ``__ray_ready__`` raises once it is dead; asked once a period)."""
        task = self.tasks[launch.task]
        key = actor_key(handle)
        signal = Signal.FAILED
        error: Exception | None = None
        try:
            await handle.__ray_ready__.remote()
            self.actors[key] = handle
            if not task.result.done():
                task.result.set_result(handle)
            signal = Signal.DONE  # constructed: whenever it ends, it completed
            while True:
                await self.clock.sleep(self.period)
                await handle.__ray_ready__.remote()
        except ray.exceptions.RayError as err:  # it ended (killed, its constructor raised, ...)
            error = err
        finally:
            self.actors.pop(key, None)
            self._ended(launch, signal, error)

    async def _watch(self, launch: Launch, refs: list[ray.ObjectRef[object]]) -> None:
        task = self.tasks[launch.task]
        value: object = None
        error: Exception | None = None
        try:
            values = [await ref for ref in refs]
            value = values[0] if task.num_returns == 1 else tuple(values)
            signal = Signal.DONE
        except ray.exceptions.TaskCancelledError as err:
            # interrupted (its caller's cancel, or preempted); Ray raises it as a RayTaskError
            # too, which is not the task's own error
            error, signal = err, Signal.LOST
        except ray.exceptions.RayTaskError as err:  # the task's own code raised
            error, signal = err, Signal.DONE
        except ray.exceptions.RayError as err:
            # lost to the system (node or worker died, node gone before it started), or
            # cancelled by its caller
            error, signal = err, Signal.LOST
        self._ended(launch, signal, error, value)

    def _ended(self, launch: Launch, signal: Signal, error: Exception | None,
               value: object = None) -> None:
        ray_task = self.tasks[launch.task].ray_task
        if ray_task is not None:
            self.ray_tasks.pop(ray_task, None)
        decision = self.state.ended(launch.task, signal, self.clock.now())
        self.freed.set()
        if decision.retried:
            self.metrics.retried(launch.server)
        if decision.preempted:
            self.metrics.preempted(launch.server)
        if decision.retried or decision.preempted:
            self.tasks[launch.task].refs = None
            self.tasks[launch.task].ray_task = None
        if decision.ended is not None:
            task = self.tasks.pop(launch.task)
            if decision.ended.outcome is Outcome.COMPLETED:
                self.metrics.completed(launch.server)
            if not task.result.done():
                if error is not None:
                    task.result.set_exception(error)
                else:
                    task.result.set_result(value)
        self._launch_all(decision.launches)
        if self.closed:
            self.metrics.flush()  # the report loop that flushes is gone
