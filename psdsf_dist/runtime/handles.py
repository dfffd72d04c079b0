"""Typed handles on the run's actors: the server actors, the coordinator, a tenant's queue.

Ray's ``ActorHandle`` describes no method of its actor (every attribute goes through its
``__getattr__``), so a call such as ``handle.lease.remote(...)`` is checked against nothing.
Here each actor's handle is described for the type checker as a subclass of ``ActorHandle``
whose attributes are the actor's remote methods, each derived from the actor's own method by
:func:`remote_method`: the same parameters (names, defaults, keywords), and the method's
result as an ``ObjectRef`` (an async generator method, by :func:`streaming_method`: the refs
of its items as Ray streams them).  A caller is thereby checked against the method it calls,
and the description cannot drift from the actor: it *is* the actor's signatures.

At run time nothing here wraps anything: :data:`ServerHandle`, :data:`CoordinatorHandle` and
:data:`QueueHandle` are Ray's ``ActorHandle``, a typed handle is the one Ray returned, and the
functions below make the one Ray call they name and give its result its type.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Concatenate, Literal, ParamSpec, Protocol, TypeVar, cast

import ray
from ray.actor import ActorHandle

from psdsf_dist.runtime.names import NAMESPACE

P = ParamSpec("P")
Q = ParamSpec("Q")
R = TypeVar("R")
A = TypeVar("A")
A_co = TypeVar("A_co", covariant=True)
H = TypeVar("H")
Y = TypeVar("Y")


class RemoteMethod(Protocol[P, R]):
    """A remote method of an actor handle: ``.remote(...)`` takes the method's arguments and
    returns the ``ObjectRef`` of its result."""

    def remote(self, *args: P.args, **kwargs: P.kwargs) -> ray.ObjectRef[R]: ...

    def options(self, *, num_returns: int) -> RemoteReturns[P, R]: ...


class RemoteReturns(Protocol[P, R]):
    """A remote method called with Ray's ``num_returns``: one ``ObjectRef`` of its result for
    1, else a list of that many, one per item of the sequence it returns."""

    def remote(self, *args: P.args,
               **kwargs: P.kwargs) -> ray.ObjectRef[R] | list[ray.ObjectRef[object]]: ...


class StreamingMethod(Protocol[P, Y]):
    """A remote method that is an async generator, called as a Ray streaming generator:
    ``.options(num_returns="streaming").remote(...)`` takes the method's arguments."""

    def options(self, *, num_returns: Literal["streaming"]) -> StreamingCall[P, Y]: ...


class StreamingCall(Protocol[P, Y]):
    """A streaming call's method: ``.remote(...)`` starts it and returns its stream of refs."""

    def remote(self, *args: P.args, **kwargs: P.kwargs) -> RefStream[Y]: ...


class RefStream(Protocol[Y]):
    """Ray's ``ObjectRefGenerator`` of a streaming call: ``next`` gives the ref of the next
    item the method yields (waiting for it), and raises ``StopIteration`` after the last."""

    def __next__(self) -> ray.ObjectRef[Y]: ...


class RayCall(Protocol[A_co]):
    """Ray's ``__ray_call__`` of every actor: ``.remote(fn, *args)`` runs ``fn(actor, *args)``
    in the actor's process."""

    def remote(self, fn: Callable[Concatenate[A_co, Q], R], *args: Q.args,
               **kwargs: Q.kwargs) -> ray.ObjectRef[R]: ...


class ActorFactory(Protocol[P, H]):
    """An actor class made remote by Ray (``ray.remote(cls)``): ``.options(...)`` as Ray's,
    and ``.remote(...)`` takes the class's constructor arguments and returns a typed handle."""

    def options(self, **options: object) -> ActorFactory[P, H]: ...

    def remote(self, *args: P.args, **kwargs: P.kwargs) -> H: ...


def actor_class(cls: Callable[P, object], handle: type[H]) -> ActorFactory[P, H]:
    """``ray.remote(cls)``, whose actors' handles are ``handle`` (one of this module's)."""
    return cast("ActorFactory[P, H]", ray.remote(cls))


def named_actor(name: str, kind: type[H]) -> H:
    """The run's actor named ``name`` (in the run's namespace), as a ``kind`` handle;
    :class:`ValueError` if Ray knows no such actor."""
    return cast(H, ray.get_actor(name, namespace=NAMESPACE))


def this_actor(kind: type[H]) -> H:
    """The handle of the actor this code runs in, as a ``kind`` handle."""
    return cast(H, ray.get_runtime_context().current_actor)


if TYPE_CHECKING:
    from psdsf_dist.runtime.coordinator import Coordinator
    from psdsf_dist.runtime.server_actor import ServerActor
    from psdsf_dist.runtime.tenant_queue import TenantQueue

    def remote_method(method: Callable[Concatenate[A, P], Awaitable[R]]) -> RemoteMethod[P, R]:
        """The remote method of a handle on ``method``'s actor (for the type checker)."""
        ...

    def streaming_method(
            method: Callable[Concatenate[A, P], AsyncIterator[Y]]) -> StreamingMethod[P, Y]:
        """The remote async generator method of a handle on ``method``'s actor (for the type
        checker)."""
        ...

    class Handle(ActorHandle[A]):
        """What every actor's handle offers (Ray's built-in methods)."""

        __ray_ready__: RemoteMethod[[], bool]
        """True once the actor is constructed; raises once it is dead."""
        __ray_call__: RayCall[A]
        __ray_terminate__: RemoteMethod[[], None]
        """End the actor after the calls already sent to it."""

    class ServerHandle(Handle[ServerActor]):
        start = remote_method(ServerActor.start)
        adopt = remote_method(ServerActor.adopt)
        leave = remote_method(ServerActor.leave)
        advance_to = remote_method(ServerActor.advance_to)
        lease = remote_method(ServerActor.lease)
        unmanaged = remote_method(ServerActor.unmanaged)
        release = remote_method(ServerActor.release)
        report = remote_method(ServerActor.report)
        status = remote_method(ServerActor.status)
        keep_notes = remote_method(ServerActor.keep_notes)
        keep_journal = remote_method(ServerActor.keep_journal)
        state = remote_method(ServerActor.state)
        deliver_batch = remote_method(ServerActor.deliver_batch)

    class CoordinatorHandle(Handle[Coordinator]):
        start = remote_method(Coordinator.start)
        resume = remote_method(Coordinator.resume)
        stop = remote_method(Coordinator.stop)
        advance = remote_method(Coordinator.advance)
        apply = remote_method(Coordinator.apply)
        tenant_connect = remote_method(Coordinator.tenant_connect)
        tenant_info = remote_method(Coordinator.tenant_info)
        tenant_report = remote_method(Coordinator.tenant_report)
        tenant_leave = remote_method(Coordinator.tenant_leave)
        serve_metrics = remote_method(Coordinator.serve_metrics)
        run_config = remote_method(Coordinator.run_config)
        status = remote_method(Coordinator.status)
        observations_json = remote_method(Coordinator.observations_json)
        result = remote_method(Coordinator.result)
        allocation = remote_method(Coordinator.allocation)
        user_totals = remote_method(Coordinator.user_totals)
        user_allocation = remote_method(Coordinator.user_allocation)
        handles = remote_method(Coordinator.handles)

    class QueueHandle(Handle[TenantQueue]):
        start = remote_method(TenantQueue.start)
        register = remote_method(TenantQueue.register)
        submit = remote_method(TenantQueue.submit)
        submit_many = streaming_method(TenantQueue.submit_many)
        create_actor = remote_method(TenantQueue.create_actor)
        cancel = remote_method(TenantQueue.cancel)
        task_blocked = remote_method(TenantQueue.task_blocked)
        task_resumed = remote_method(TenantQueue.task_resumed)
        exchange = remote_method(TenantQueue.exchange)
        drop = remote_method(TenantQueue.drop)
        status = remote_method(TenantQueue.status)
        close = remote_method(TenantQueue.close)
else:
    Handle = ServerHandle = CoordinatorHandle = QueueHandle = ActorHandle
