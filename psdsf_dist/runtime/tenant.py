"""The tenant's client: connect to a running allocator as a user and submit Ray tasks that run
by the PS-DSF allocation.

    import ray
    from psdsf_dist.runtime.tenant import Tenant

    ray.init(address="auto")
    alice = Tenant.connect("alice", weight=2)          # run "default", started by psdsf-dist run

    @alice.remote(num_cpus=2, memory=4 * 2**30)
    def work(x):
        return x * x

    refs = [work.remote(i) for i in range(1000)]       # ObjectRefs, as with plain Ray
    print(sum(ray.get(refs)))
    print(sum(work.map(range(1000))))                  # the same in one message (below)
    alice.close()                                      # or let the driver exit

The run's scenario must say ``servers: from-ray`` and ``tenants: true``
(``cluster_configs/tenants.yaml``).  A user's **task shape** (Ray's ``num_cpus``, ``num_gpus``,
``memory``, ``resources``) is its per-task demand; one user has one shape — a function with
another shape is refused with :class:`~psdsf_dist.admission.shapes.ShapeError` (connect a
second user for it).  Options are checked when the function is declared, so a shape no node can
hold, a resource the allocator does not share, or an option it does not take (placement is the
allocator's) fails at once, in one line.  ``max_retries`` (default 3) counts re-runs after a
system failure; the weight comes from the call, else from the cluster's configuration, else 1.

Tasks go through the user's queue (:mod:`psdsf_dist.runtime.tenant_queue`), an actor the driver
owns: the driver exiting drops them and releases the user's share.  As in Ray: ``ray.get`` and
``ray.wait`` on the refs, errors naming the user's function, ``num_returns``, ``ray.cancel``
(:meth:`Tenant.cancel` for ``force=True``), large arguments through the object store, and
tasks submitted from inside a task of the same user (a task waiting in ``ray.get`` gives its
slot back, as Ray gives back its CPU: no deadlock).
``@tenant.actor(...)`` declares actors admitted against the same share (``docs/tenants.md``).

Bulk submissions.  ``.remote`` that goes through the queue is one Ray actor call per task, each
taking some of the queue's CPU: a burst of them keeps the queue busy receiving, and its running
tasks wait meanwhile.
``work.map(xs)`` (like the builtin ``map``: one call per item of ``zip(*iterables)``) sends
them all in one message and returns an iterator of their values in input order;
``work.map_unordered(xs)`` yields them as they finish.  A task's error is raised when its value
is reached (the iterator goes on after it, as ``multiprocessing.Pool.imap`` does); closing the
iterator early (``close()``, or a ``with`` block) withdraws what has not started.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Generic, Literal, ParamSpec, TypeVar, cast, overload

import ray
from ray.actor import ActorHandle
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from psdsf_dist.admission.identity import TOKEN_ENV, TenantAuthError
from psdsf_dist.admission.leases import LEASE_INTERVALS_PER_PERIOD
from psdsf_dist.admission.shapes import (
    ACTOR_PASSED_OPTIONS,
    ShapeError,
    TaskShape,
    check_actor_options,
    check_fits_somewhere,
    check_options,
    check_user,
    check_weight,
    task_shape,
)
from psdsf_dist.runtime.direct_launcher import DirectLauncher
from psdsf_dist.runtime.handles import CoordinatorHandle, QueueHandle, named_actor
from psdsf_dist.runtime.messages import QueueStatus, TenantInfo
from psdsf_dist.runtime.names import DEFAULT_RUN_ID, RunNameError, check_run_name, coordinator_name
from psdsf_dist.runtime.tenant_function import (
    DeclareFunction,
    DeclareMulti,
    DeclareSingle,
    MultiReturnFunction,
    SeveralReturns,
    SingleReturnFunction,
    TenantFunction,
    boxed,
    register,
)
from psdsf_dist.runtime.tenant_queue import CONNECT_TIMEOUT, AllocatorGoneError, RemoteTenantQueue

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class TenantActorClass(Generic[T]):
    """An actor class whose actors are admitted by the tenant's share (``@tenant.actor``)."""

    def __init__(self, cls: type[T], queue: QueueHandle,
                 options: Mapping[str, object]) -> None:
        passed = {k: v for k, v in options.items() if k in ACTOR_PASSED_OPTIONS}
        shape = task_shape(options)
        self._queue = queue
        self._key = register(queue, (ray.remote(cls),
                                     {**shape.ray_options(), **passed}))
        self.__name__ = getattr(cls, "__name__", "actor")
        self.__doc__ = cls.__doc__

    def remote(self, *args: object, **kwargs: object) -> ActorHandle[T]:
        """Create one actor: waits until the tenant's share admits it and it is constructed,
        then returns its handle (its constructor's error is raised here).  The queue returns
        it as any value (it creates the actors of every class of the tenant); it is the
        handle of an actor of this class."""
        handle = ray.get(self._queue.create_actor.remote(self._key, boxed(args, kwargs)))
        return cast("ActorHandle[T]", handle)


class Tenant:
    """One user's connection to the allocator (see the module docstring)."""

    def __init__(self, user: str, run_id: str, info: TenantInfo, weight: float | None,
                 coordinator: CoordinatorHandle) -> None:
        self.user = user
        self.run_id = run_id
        self.info = info
        self.weight = weight
        self.coordinator = coordinator
        self.shape: TaskShape | None = None
        self.queue: QueueHandle | None = None
        self.direct: DirectLauncher | None = None
        """Launches this client's tasks into slots its queue delegates (opened with it)."""

    @classmethod
    def connect(cls, user: str, *, weight: float | None = None,
                run_id: str = DEFAULT_RUN_ID, token: str | None = None) -> Tenant:
        """Connect to the allocator of ``run_id`` in the Ray cluster the driver is connected to
        (``ray.init`` first).  Raises :class:`AllocatorGoneError` when no such run answers.

        ``token``: the user's token from the operator (default: ``$PSDSF_TENANT_TOKEN``),
        needed in a run with a tenant policy for a tenant it declares; raises
        :class:`TenantAuthError` (one line) when the run refuses the connection.  ``weight``
        may lower the weight the operator gives the user, never raise it."""
        check_user(user)
        weight = check_weight(weight)
        try:
            check_run_name(run_id)
        except RunNameError as err:
            raise ShapeError(f"run_id: {err}") from None
        try:
            coordinator = named_actor(coordinator_name(run_id), CoordinatorHandle)
        except ValueError:
            raise AllocatorGoneError(f"no allocator run {run_id!r} in this Ray cluster (start one "
                                "with `psdsf-dist run <tenants scenario>`)") from None
        try:
            answer = ray.get(coordinator.tenant_connect.remote(
                user, token if token is not None else os.environ.get(TOKEN_ENV)),
                timeout=CONNECT_TIMEOUT)
        except ray.exceptions.GetTimeoutError:
            raise AllocatorGoneError(f"the allocator of run {run_id!r} did not answer within "
                                f"{CONNECT_TIMEOUT:g} s") from None
        if isinstance(answer, str):
            raise TenantAuthError(answer)
        return cls(user, run_id, answer, weight, coordinator)

    @overload
    def remote(self, function: Callable[P, Awaitable[R]], /) -> SingleReturnFunction[P, R]: ...

    @overload
    def remote(self, function: Callable[P, R], /) -> SingleReturnFunction[P, R]: ...

    @overload
    def remote(self, function: None = None, /, *, num_returns: Literal[1] = 1,
               **options: object) -> DeclareSingle: ...

    @overload
    def remote(self, function: None = None, /, *, num_returns: SeveralReturns,
               **options: object) -> DeclareMulti: ...

    @overload
    def remote(self, function: None = None, /, **options: object) -> DeclareFunction: ...

    def remote(self, function: Callable[..., object] | None = None, /,
               **options: object) -> object:
        """Declare a task: ``@tenant.remote`` or ``@tenant.remote(num_cpus=..., ...)``
        (:mod:`psdsf_dist.runtime.tenant_function`, "Types")."""
        if function is not None:
            return self._declare(function, {})

        def declare(f: Callable[P, object]) -> TenantFunction[P, object]:
            return self._declare(f, options)
        check_options(options)  # a bad option fails at the decorator line
        return declare

    def actor(self, **options: object) -> Callable[[type[T]], TenantActorClass[T]]:
        """Declare an actor class: ``@tenant.actor(num_cpus=..., ...)``.  Each actor is
        admitted against the user's share like a task that runs until the actor ends, with
        the user's one shape; ``ray.kill(handle)`` ends it and frees its slot."""
        check_actor_options(options)
        shape = task_shape(options)
        self._check_shape(shape)

        def declare(cls: type[T]) -> TenantActorClass[T]:
            queue = self._opened(shape)
            self.shape = shape
            return TenantActorClass(cls, queue, options)
        return declare

    def _check_shape(self, shape: TaskShape) -> None:
        if self.shape is not None and shape != self.shape:
            raise ShapeError(f"shape {shape.describe()}: user {self.user!r} already submits "
                             f"{self.shape.describe()} (one shape per user: connect another "
                             "user for this one)")
        check_fits_somewhere(shape, self.info.resources, self.info.capacity, self.info.servers)

    def _declare(self, function: Callable[P, object],
                 options: Mapping[str, object]) -> TenantFunction[P, object]:
        own = check_options(options)
        if inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function):
            raise ShapeError(f"{getattr(function, '__name__', 'task')}: generators are not "
                             "supported for a tenant's task (return a list, or use "
                             "num_returns=k)")
        shape = task_shape(options)
        self._check_shape(shape)
        queue = self._opened(shape)
        self.shape = shape
        kind = SingleReturnFunction if own.num_returns == 1 else MultiReturnFunction
        return kind(function, queue, self.direct, shape, options, own)

    def _opened(self, shape: TaskShape) -> QueueHandle:
        """The user's queue, opened now (for ``shape``) if it is not yet."""
        if self.queue is not None:
            return self.queue
        demand = {r: float(v) for r, v in zip(self.info.resources,
                                              shape.demand(self.info.resources), strict=True)}
        weight = self.weight if self.weight is not None else self.info.weight
        # beside the driver, owned by it (not detached): it goes when the driver goes
        here = ray.get_runtime_context().get_node_id()
        self.queue = queue = RemoteTenantQueue.options(
            num_cpus=0, max_concurrency=100_000,
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
        ).remote(self.run_id, self.user, demand, weight, self.info.period, self.info.token)
        ray.get(queue.start.remote(), timeout=CONNECT_TIMEOUT)
        self.direct = DirectLauncher(queue, self.info.period / LEASE_INTERVALS_PER_PERIOD)
        return queue

    def cancel(self, ref: ray.ObjectRef[T], *, force: bool = False) -> bool:
        """Cancel the task behind ``ref`` (one of its refs): a queued task is withdrawn and
        never starts; a running one is interrupted (``KeyboardInterrupt``), or with ``force``
        its worker is killed — ``ray.cancel(ref)`` does the former too, but Ray refuses
        ``force=True`` on a tenant's ref (the ref of an actor call).  ``ray.get(ref)`` then
        raises :class:`TaskCancelledError` or Ray's ``TaskCancelledError`` /
        ``WorkerCrashedError``.  Returns whether the task was still the queue's."""
        if self.queue is None:
            return False
        if self.direct is not None and self.direct.cancel(ref, force):
            return True
        found: bool = ray.get(self.queue.cancel.remote(ref.task_id().hex(), force),
                              timeout=CONNECT_TIMEOUT)
        return found

    def status(self) -> QueueStatus:
        """The queue's counts (queued, running and leased slots per server, ...)."""
        if self.queue is None:
            return QueueStatus(self.user, 0, {}, {}, 0, 0, 0, 0, 0, None)
        if self.direct is not None:
            self.direct.flush()  # the tasks it ran count in the queue's counts
        out: QueueStatus = ray.get(self.queue.status.remote(), timeout=CONNECT_TIMEOUT)
        return out

    def close(self) -> None:
        """Drop queued tasks, release the user's share and end its queue."""
        if self.queue is None:
            return
        if self.direct is not None:
            self.direct.close(f"tenant {self.user!r} closed its queue")
            self.direct = None
        try:
            ray.get(self.queue.close.remote(), timeout=CONNECT_TIMEOUT)
            # ends after the calls already sent to it, which fail with the closing message
            self.queue.__ray_terminate__.remote()
        except ray.exceptions.RayError:  # stuck or gone: ending it fails what it holds
            ray.kill(self.queue, no_restart=True)
        finally:
            self.queue = None
