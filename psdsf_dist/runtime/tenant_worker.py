"""A tenant's task bodies as they run in a Ray worker: a task tells its queue when it blocks.

Blocking.  Ray gives a task's CPU back while the task waits in ``ray.get`` / ``ray.wait`` for
other work, and takes it back when the task resumes: a tree of tasks that wait for their
children never deadlocks.  A tenant's slot is the allocator's, so while a tenant's task runs,
``ray.get`` and ``ray.wait`` in its worker first look whether what they wait for is there
(Ray's call with a timeout of 0), and only if not tell the task's queue that the task blocks
(:meth:`~psdsf_dist.runtime.tenant_queue.TenantQueue.task_blocked`) before waiting, and that it
resumes after (:meth:`~psdsf_dist.runtime.tenant_queue.TenantQueue.task_resumed`): the queue
gives the slot to the next queued task meanwhile (:meth:`~psdsf_dist.admission.
tenant_queue_state.TenantQueueState.blocked`).  Both notices are actor calls from the worker,
so they reach the queue in the order they were made.  The two functions are wrapped in the
``ray`` module of the worker once, when its first tenant task starts; outside a tenant's task
(no task running, another job's code in the process) the wrappers call Ray's own at once.
Waits Ray does not count as blocking (``await ref`` in an async task) are not reported either.

The bodies are pickled by value with the user's function; they reach this module's context
variable only through its module-level helpers, which are pickled by reference, so every task
in a worker sees the one variable.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, ParamSpec, TypeVar

import ray

from psdsf_dist.admission.chunks import chunk_full
from psdsf_dist.admission.values import known_bytes
from psdsf_dist.runtime.handles import QueueHandle

P = ParamSpec("P")
F = TypeVar("F", bound=Callable[..., object])

SLOT_KEYWORD = "_psdsf_slot"
"""The keyword argument that gives a task launched by its client (not by its queue) the
delegated slot it runs in (:mod:`psdsf_dist.runtime.direct_launcher`); the body takes it out
before calling the user's function."""

CallOutcome = tuple[Literal[True], object] | tuple[Literal[False], ray.exceptions.RayTaskError]
"""One call's outcome in a chunk: ``(True, its value)`` or ``(False, the RayTaskError Ray
would have made of its exception)``."""

ChunkResult = tuple[list[CallOutcome], float]
"""What a chunk's body returns: the outcome of each call it ran, in order, and their run time
in seconds (:func:`tenant_chunk`)."""


def as_task_outcome(call: CallOutcome) -> tuple[bool, object]:
    """A call's outcome from a chunk as its caller gets a task's: its value, or its error as
    ``ray.get`` raises a task's — also an instance of the class of the exception the call
    raised (Ray's ``as_instanceof_cause``, which has no annotations)."""
    if call[0]:
        return call
    return False, call[1].as_instanceof_cause()  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class RunningTask:
    """The tenant's task a worker runs now: its queue (an actor handle), its Ray task id and,
    launched by its client, its delegated slot."""

    queue: QueueHandle
    task: str
    slot: int | None = None


_RUNNING: contextvars.ContextVar[RunningTask | None] = contextvars.ContextVar(
    "psdsf_tenant_task", default=None)
"""In a worker running a tenant's task: that task (else None)."""


class RayWaits(NamedTuple):
    """Ray's own ``get`` and ``wait``."""

    get: Callable[..., object]
    wait: Callable[..., tuple[Sequence[object], Sequence[object]]]


_RAYS: list[RayWaits] = []
"""Ray's own ``get`` and ``wait`` (one entry), once this module has wrapped them."""


def tenant_task(function: Callable[P, object], queue: QueueHandle) -> Callable[P, object]:
    """``function`` as the Ray task body of a tenant's task: the same name, signature and
    result, run with :data:`_RUNNING` set, so that it tells ``queue`` when it blocks.  It also
    takes :data:`SLOT_KEYWORD` (in its signature for Ray, not in its type)."""
    # the bodies are pickled by value: they reach the module's context variable only through
    # the module-level helpers (pickled by reference)
    if inspect.iscoroutinefunction(function):
        @functools.wraps(function)
        async def tenant_task_async(*args: P.args, **kwargs: P.kwargs) -> object:
            token = _enter(queue, _slot(kwargs.pop(SLOT_KEYWORD, None)))
            try:
                return await function(*args, **kwargs)
            finally:
                _leave(token)
        return _signed(tenant_task_async, _with_slot(function))

    @functools.wraps(function)
    def tenant_task_body(*args: P.args, **kwargs: P.kwargs) -> object:
        token = _enter(queue, _slot(kwargs.pop(SLOT_KEYWORD, None)))
        try:
            return function(*args, **kwargs)
        finally:
            _leave(token)
    return _signed(tenant_task_body, _with_slot(function))


def tenant_chunk(function: Callable[..., object],
                 queue: QueueHandle) -> Callable[[list[tuple[object, ...]]], ChunkResult]:
    """``function`` as the Ray task body of a chunk of a bulk submission's calls
    (:mod:`psdsf_dist.admission.chunks`): it runs ``function(*args)`` for each ``args`` of
    its ``calls`` in turn, as :func:`tenant_task` runs one, until the chunk is full
    (:func:`~psdsf_dist.admission.chunks.chunk_full`), and returns the outcome of each call
    it ran — ``(True, value)``, or ``(False, the RayTaskError Ray would have made of its
    exception)``, so that one call's error ends only that call — and their run time in
    seconds.  It carries ``function``'s name, so Ray's task listings name the user's
    function."""
    name = f"{getattr(function, '__module__', '')}.{getattr(function, '__qualname__', 'task')}"

    @functools.wraps(function)
    def tenant_chunk_body(calls: list[tuple[object, ...]],
                          **kwargs: int | None) -> ChunkResult:
        token = _enter(queue, kwargs.pop(SLOT_KEYWORD, None))
        try:
            return _run_calls(function, name, calls)
        finally:
            _leave(token)
    # Ray checks a call's arguments against this (``wraps`` would show ``function``'s)
    return _signed(tenant_chunk_body, inspect.Signature([
        inspect.Parameter("calls", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        inspect.Parameter(SLOT_KEYWORD, inspect.Parameter.KEYWORD_ONLY, default=None)]))


def _run_calls(function: Callable[..., object], name: str,
               calls: list[tuple[object, ...]]) -> ChunkResult:
    """Run ``calls`` of ``function`` in turn until the chunk is full (:func:`tenant_chunk`).
    An exception of a call becomes its outcome; what is not an ``Exception`` (Ray's cancel
    interrupts with ``KeyboardInterrupt``, ``SystemExit``) ends the whole chunk, as it would
    end a task."""
    out: list[CallOutcome] = []
    start = time.perf_counter()
    value_bytes = 0
    for args in calls:
        if out and chunk_full(time.perf_counter() - start, value_bytes):
            break
        try:
            value = function(*args)
            value_bytes += known_bytes(value)
            out.append((True, value))
        except Exception as err:
            out.append((False, ray.exceptions.RayTaskError(  # type: ignore[no-untyped-call]
                name, traceback.format_exc(), err, proctitle=f"ray::{name.rsplit('.', 1)[-1]}")))
    return out, time.perf_counter() - start


def _signed(body: F, signature: inspect.Signature) -> F:
    """``body``, whose signature (as ``inspect.signature`` and so Ray read it) is
    ``signature``."""
    body.__signature__ = signature  # type: ignore[attr-defined]
    return body


def _with_slot(function: Callable[..., object]) -> inspect.Signature:
    """``function``'s signature with :data:`SLOT_KEYWORD` as one more keyword-only parameter
    (Ray checks a call's arguments against the body's signature)."""
    signature = inspect.signature(function)
    params = list(signature.parameters.values())
    at = next((i for i, p in enumerate(params) if p.kind is p.VAR_KEYWORD), len(params))
    params.insert(at, inspect.Parameter(SLOT_KEYWORD, inspect.Parameter.KEYWORD_ONLY,
                                        default=None))
    return signature.replace(parameters=params)


def _enter(queue: QueueHandle, slot: int | None) -> contextvars.Token[RunningTask | None]:
    """Entering a task's body: it is known as running to the wrapped ``ray.get`` /
    ``ray.wait`` (``_RUNNING``)."""
    _wrap_ray()
    running = RunningTask(queue, ray.get_runtime_context().get_task_id() or "", slot)
    return _RUNNING.set(running)


def _leave(token: contextvars.Token[RunningTask | None]) -> None:
    _RUNNING.reset(token)


def _slot(value: object) -> int | None:
    """The delegated slot a body was given as :data:`SLOT_KEYWORD` (None: launched by its
    queue).  Only the client's launcher passes it, always an ``int``."""
    return value if isinstance(value, int) else None


def _wrap_ray() -> None:
    """Wrap ``ray.get`` and ``ray.wait`` in this process (once).  The wrappers forward
    whatever Ray's take and return what they return; Ray's stubs type ``get`` and ``wait`` by
    their arguments, which a forwarding wrapper does not restate."""
    if not _RAYS:
        _RAYS.append(RayWaits(ray.get, ray.wait))
        ray.get = _get  # type: ignore[assignment]
        ray.wait = _wait  # type: ignore[assignment]


@contextlib.contextmanager
def _blocked(running: RunningTask) -> Iterator[None]:
    """Tell the task's queue that it blocks, and that it resumes when the block ends."""
    running.queue.task_blocked.remote(running.task, running.slot)
    try:
        yield
    finally:
        running.queue.task_resumed.remote(running.task, running.slot)


def _get(object_refs: object, *args: object, **kwargs: object) -> object:
    """``ray.get``, which gives a tenant's task's slot back while it waits (module docstring)."""
    get = _RAYS[0].get
    running = _RUNNING.get()
    if running is None or kwargs.get("timeout") == 0:
        return get(object_refs, *args, **kwargs)
    with contextlib.suppress(ray.exceptions.GetTimeoutError):
        return get(object_refs, *args, **{**kwargs, "timeout": 0})
    with _blocked(running):
        return get(object_refs, *args, **kwargs)


def _wait(ray_waitables: object, *args: object, num_returns: int = 1,
          **kwargs: object) -> object:
    """``ray.wait``, which gives a tenant's task's slot back while it waits (module docstring).
    ``num_returns`` (how many refs to wait for) is passed on to Ray's, whose default is 1 too."""
    wait = _RAYS[0].wait
    running = _RUNNING.get()
    if running is None or kwargs.get("timeout") == 0 or args:
        return wait(ray_waitables, *args, num_returns=num_returns, **kwargs)
    ready, rest = wait(ray_waitables, num_returns=num_returns, **{**kwargs, "timeout": 0})
    if not rest or len(ready) >= num_returns:
        return ready, rest
    with _blocked(running):
        return wait(ray_waitables, num_returns=num_returns, **kwargs)
