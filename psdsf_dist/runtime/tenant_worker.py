"""A tenant's task and actor bodies as they run in a Ray worker: each marks itself running,
for its children (a task submitted from inside a running task of the same tenant borrows its
parent's slot: :mod:`psdsf_dist.runtime.tenant_queue`, "Nested tasks") and for its node's
server (a file mark, :mod:`psdsf_dist.runtime.running_marks`, so that the server does not count
it as work outside the allocator).

The bodies are pickled by value with the user's function; they reach this module's context
variable only through its module-level helpers, which are pickled by reference, so every task
in a worker sees the one variable.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from psdsf_dist.runtime.running_marks import mark_end, mark_start

_RUNNING: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "psdsf_tenant_task", default=None)
"""In a worker running a tenant's task: (its queue's actor id, its node id)."""


def tenant_task(function: Callable[..., Any], queue_id: str,
                user: str = "") -> Callable[..., Any]:
    """``function`` as the Ray task body of a tenant's task: the same name, signature and
    result, run with :data:`_RUNNING` set, so that a task it submits through the same
    tenant is known as its child (it borrows its slot: ``tenant_queue``, "Nested tasks")."""
    # the bodies are pickled by value: they reach the module's context variable only through
    # the module-level helpers (pickled by reference)
    if inspect.iscoroutinefunction(function):
        @functools.wraps(function)
        async def tenant_task_async(*args: Any, **kwargs: Any) -> Any:
            token, mark = _enter(queue_id, user)
            try:
                return await function(*args, **kwargs)
            finally:
                _leave(token, mark)
        return tenant_task_async

    @functools.wraps(function)
    def tenant_task_body(*args: Any, **kwargs: Any) -> Any:
        token, mark = _enter(queue_id, user)
        try:
            return function(*args, **kwargs)
        finally:
            _leave(token, mark)
    return tenant_task_body


def _enter(queue_id: str, user: str) -> tuple[contextvars.Token[tuple[str, str] | None],
                                               Path | None]:
    """Entering a task's body: it is known as running, to its children (``_RUNNING``) and to
    its node's server (a mark: :mod:`psdsf_dist.runtime.running_marks`)."""
    node = ray.get_runtime_context().get_node_id()
    return _RUNNING.set((queue_id, node)), (mark_start(node, user) if user else None)


def _leave(token: contextvars.Token[tuple[str, str] | None], mark: Path | None) -> None:
    _RUNNING.reset(token)
    mark_end(mark)


def marked_actor(cls: type, user: str) -> type:
    """``cls`` whose actors mark themselves running on their node when constructed
    (:mod:`psdsf_dist.runtime.running_marks`; the mark goes with the actor's process), so that
    its node's server does not count them as unmanaged work."""

    class Marked(cls):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            mark_start(ray.get_runtime_context().get_node_id(), user)
            super().__init__(*args, **kwargs)

    Marked.__name__ = cls.__name__
    Marked.__qualname__ = cls.__qualname__
    Marked.__doc__ = cls.__doc__
    return Marked


def running_in() -> tuple[str, str] | None:
    """In a worker running a tenant's task: (its queue's actor id, its node id); else None."""
    return _RUNNING.get()
