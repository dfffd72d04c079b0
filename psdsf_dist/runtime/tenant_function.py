"""A tenant's declared remote function (``@tenant.remote``, :mod:`psdsf_dist.runtime.tenant`):
its calls go into a slot its queue delegated to this client when one is free, else through
the queue; a bulk submission (``map``) goes to the client's launcher or to the queue in one
message.  Also how a call's arguments travel (:func:`by_reference`, :func:`boxed`) and how a
declared function or actor class is registered with the queue (:func:`register`).

Types.  A declared function keeps the user's function's parameters (``remote`` is checked
against them) and, declared with one return, its result: ``remote`` gives an
``ObjectRef`` of it and ``map`` its values (:class:`SingleReturnFunction`); with a literal
``num_returns`` of 2 to 10, ``remote`` gives a list of refs and ``map`` tuples
(:class:`MultiReturnFunction`); with any other ``num_returns`` (a variable), either
(:class:`TenantFunction`).  The value comes back through Ray as any value — the queue runs
every function of the tenant — and is given the declared type where it reaches the caller.
"""

from __future__ import annotations

import inspect
import itertools
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Generic, Literal, ParamSpec, Protocol, TypeVar, cast, overload

import ray

from psdsf_dist.admission.chunks import CallTimes
from psdsf_dist.admission.shapes import PASSED_OPTIONS, OwnOptions, TaskShape
from psdsf_dist.admission.values import is_large
from psdsf_dist.runtime.direct_launcher import Chunked, DirectLauncher
from psdsf_dist.runtime.handles import QueueHandle
from psdsf_dist.runtime.task_results import DirectTaskResults, TaskResults
from psdsf_dist.runtime.task_runner import Registered, RemoteFunction, remote_function
from psdsf_dist.runtime.tenant_queue import CONNECT_TIMEOUT
from psdsf_dist.runtime.tenant_worker import tenant_chunk, tenant_task

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
V = TypeVar("V")

SeveralReturns = Literal[2, 3, 4, 5, 6, 7, 8, 9, 10]
"""The ``num_returns`` a declaration can write for :class:`MultiReturnFunction`."""


def by_reference(value: V) -> V | ray.ObjectRef[V]:
    """``value``, or its ObjectRef in the object store if it is large
    (:mod:`psdsf_dist.admission.values`): Ray resolves a top-level ref for the task, so the
    task sees the value either way, and the queue never copies it."""
    return ray.put(value) if is_large(value) else value


def boxed(args: Iterable[object], kwargs: Mapping[str, object]) -> list[object]:
    """A call's arguments as the queue takes them: ``[args, kwargs]``, so that Ray does not
    resolve them in the queue (``tenant_queue.unboxed``), large ones by reference."""
    return [[by_reference(a) for a in args], {k: by_reference(v) for k, v in kwargs.items()}]


def register(queue: QueueHandle, function: Registered) -> str:
    """Register a Ray remote function or actor class and its options with the tenant's queue
    (once, when declared: calls then name it by the key returned)."""
    key = uuid.uuid4().hex
    ray.get(queue.register.remote(key, function), timeout=CONNECT_TIMEOUT)
    return key


class TenantFunction(Generic[P, R_co]):
    """A remote function submitted through a tenant's queue (``.remote`` as in Ray), whose
    ``remote`` gives the ref of its value — ``R_co`` — or, declared with ``num_returns=k``,
    a list of ``k`` refs; the subclasses say which (module docstring, "Types")."""

    def __init__(self, function: Callable[P, object], queue: QueueHandle,
                 direct: DirectLauncher | None, shape: TaskShape,
                 options: Mapping[str, object], own: OwnOptions) -> None:
        passed = {k: v for k, v in options.items() if k in PASSED_OPTIONS}
        self._queue = queue
        body = tenant_task(function, queue)
        self._function: RemoteFunction[object] = (remote_function(body),
                                                  {**shape.ray_options(), **passed})
        self._key = register(queue, self._function)
        self._retries = own.max_retries
        self._num_returns = own.num_returns
        self._preemptible = own.preemptible
        # a preemptible task is run again by its queue under the caller's ref: never direct
        self._direct = None if self._preemptible else direct
        # a map's calls of a plain function with one value run in chunks (admission.chunks)
        self._chunked = None if self._num_returns != 1 or inspect.iscoroutinefunction(
            function) else Chunked((remote_function(tenant_chunk(function, queue)),
                                    self._function[1]), CallTimes())
        self.__name__ = getattr(function, "__name__", "task")
        self.__doc__ = function.__doc__

    def __getstate__(self) -> dict[str, object]:
        """Pickled into a task (a nested submission): its calls go through the queue (the
        delegated slots are the driver's)."""
        return {**self.__dict__, "_direct": None}

    def remote(self, *args: P.args,
               **kwargs: P.kwargs) -> ray.ObjectRef[R_co] | list[ray.ObjectRef[object]]:
        """Launch one call into a slot delegated to this client, else queue it; its
        ObjectRef (``ray.get`` gives the value or raises the error), or ``num_returns`` of
        them."""
        refs = self._call(args, kwargs)
        return self._value_ref(refs[0]) if self._num_returns == 1 else refs

    def map(self, *iterables: Iterable[object]) -> TaskResults[R_co]:
        """Queue one call per item of ``zip(*iterables)`` in one message; their values in
        input order."""
        return self._bulk(iterables, ordered=True)

    def map_unordered(self, *iterables: Iterable[object]) -> TaskResults[R_co]:
        """As :meth:`map`, the values in the order the tasks finish."""
        return self._bulk(iterables, ordered=False)

    def _call(self, args: tuple[object, ...],
              kwargs: dict[str, object]) -> list[ray.ObjectRef[object]]:
        """One call's refs (``num_returns`` of them): launched into a delegated slot if one
        is free, else through the queue."""
        if self._direct is not None:
            refs = self._direct.try_launch(self._function, self._retries, self._num_returns,
                                           args, kwargs)
            if refs is not None:
                return refs
        submit = (self._key, boxed(args, kwargs), self._retries, self._num_returns,
                  self._preemptible)
        if self._num_returns == 1:
            return [self._queue.submit.remote(*submit)]
        out = self._queue.submit.options(num_returns=self._num_returns).remote(*submit)
        return out if isinstance(out, list) else [out]

    def _value_ref(self, ref: ray.ObjectRef[object]) -> ray.ObjectRef[R_co]:
        """``ref``, of a call with one return, as the ref of the declared function's value:
        Ray types what the queue or the task returns as any value, and it is what the
        function returned (awaited, for a coroutine function)."""
        return cast("ray.ObjectRef[R_co]", ref)

    def _bulk(self, iterables: tuple[Iterable[object], ...], *,
              ordered: bool) -> TaskResults[R_co]:
        batch = f"{id(self):x}-{next(_BATCHES)}"
        if self._direct is not None:
            items = [tuple(args) for args in zip(*iterables, strict=False)]
            # a call with a large argument runs alone (admission.values)
            chunked = [None if any(is_large(a) for a in args) else self._chunked
                       for args in items]
            return DirectTaskResults(self._direct, self._function, self._retries,
                                     self._num_returns, items, batch, ordered=ordered,
                                     chunked=chunked)
        calls = [boxed(args, {}) for args in zip(*iterables, strict=False)]
        stream = None if not calls else self._queue.submit_many.options(
            num_returns="streaming").remote(self._key, calls, self._retries, batch,
                                            self._num_returns, self._preemptible)
        return TaskResults(self._queue, stream, batch, len(calls), ordered=ordered)


class SingleReturnFunction(TenantFunction[P, R_co]):
    """A tenant's remote function declared with one return (the default): ``remote`` gives the
    ref of its value."""

    def remote(self, *args: P.args, **kwargs: P.kwargs) -> ray.ObjectRef[R_co]:
        """Launch one call into a slot delegated to this client, else queue it; its
        ObjectRef (``ray.get`` gives the value or raises the error)."""
        return self._value_ref(self._call(args, kwargs)[0])


class MultiReturnFunction(TenantFunction[P, tuple[object, ...]]):
    """A tenant's remote function declared with ``num_returns=k`` (k > 1): ``remote`` gives a
    list of ``k`` refs, and ``map`` the tuples of ``k`` values."""

    def remote(self, *args: P.args, **kwargs: P.kwargs) -> list[ray.ObjectRef[object]]:
        """Launch one call into a slot delegated to this client, else queue it; its
        ``num_returns`` ObjectRefs."""
        return self._call(args, kwargs)


_BATCHES = itertools.count()


class DeclareSingle(Protocol):
    """What ``@tenant.remote(...)`` with one return gives: it declares the function it
    decorates (the value of a coroutine function's task is what the coroutine returns)."""

    @overload
    def __call__(self, function: Callable[P, Awaitable[R]], /) -> SingleReturnFunction[P, R]:
        ...

    @overload
    def __call__(self, function: Callable[P, R], /) -> SingleReturnFunction[P, R]: ...


class DeclareMulti(Protocol):
    """What ``@tenant.remote(num_returns=k, ...)`` gives for a literal ``k`` > 1."""

    def __call__(self, function: Callable[P, object], /) -> MultiReturnFunction[P]: ...


class DeclareFunction(Protocol):
    """What ``@tenant.remote(...)`` gives when its ``num_returns`` is not written as a
    literal: one return or several."""

    def __call__(self, function: Callable[P, object], /) -> TenantFunction[P, object]: ...
