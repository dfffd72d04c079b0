"""A tenant's declared remote function (``@tenant.remote``, :mod:`psdsf_dist.runtime.tenant`):
its calls go into a slot its queue delegated to this client when one is free, else through
the queue; a bulk submission (``map``) goes to the client's launcher or to the queue in one
message.  Also how a call's arguments travel (:func:`by_reference`) and how a declared
function or actor class is registered with the queue (:func:`register`).
"""

from __future__ import annotations

import inspect
import itertools
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import ray

from psdsf_dist.admission.chunks import CallTimes
from psdsf_dist.admission.shapes import DEFAULT_MAX_RETRIES, PASSED_OPTIONS, TaskShape
from psdsf_dist.admission.values import is_large
from psdsf_dist.runtime.direct_launcher import Chunked, DirectLauncher
from psdsf_dist.runtime.task_results import DirectTaskResults, TaskResults
from psdsf_dist.runtime.task_runner import RemoteFunction, remote_function
from psdsf_dist.runtime.tenant_queue import CONNECT_TIMEOUT
from psdsf_dist.runtime.tenant_worker import tenant_chunk, tenant_task


def by_reference(value: Any) -> Any:
    """``value``, or its ObjectRef in the object store if it is large
    (:mod:`psdsf_dist.admission.values`): Ray resolves a top-level ref for the task, so the
    task sees the value either way, and the queue never copies it."""
    return ray.put(value) if is_large(value) else value


def register(queue: Any, remote: Any, options: dict[str, Any]) -> str:
    """Register a Ray remote function or actor class and its options with the tenant's queue
    (once, when declared: calls then name it by the key returned)."""
    key = uuid.uuid4().hex
    ray.get(queue.register.remote(key, (remote, options)), timeout=CONNECT_TIMEOUT)
    return key


class TenantFunction:
    """A remote function submitted through a tenant's queue (``.remote`` as in Ray)."""

    def __init__(self, function: Callable[..., Any], queue: Any, user: str,
                 direct: DirectLauncher | None, shape: TaskShape,
                 options: dict[str, Any]) -> None:
        passed = {k: v for k, v in options.items() if k in PASSED_OPTIONS}
        self._queue = queue
        body = tenant_task(function, queue, user)
        self._function: RemoteFunction[object] = (remote_function(body),
                                                  {**shape.ray_options(), **passed})
        self._key = register(queue, *self._function)
        self._retries = int(options.get("max_retries", DEFAULT_MAX_RETRIES))
        self._num_returns = int(options.get("num_returns", 1))
        self._preemptible = bool(options.get("preemptible", False))
        # a preemptible task is run again by its queue under the caller's ref: never direct
        self._direct = None if self._preemptible else direct
        # a map's calls of a plain function with one value run in chunks (admission.chunks)
        self._chunked = None if self._num_returns != 1 or inspect.iscoroutinefunction(
            function) else Chunked((remote_function(tenant_chunk(function, queue, user)),
                                    self._function[1]), CallTimes())
        self.__name__ = getattr(function, "__name__", "task")
        self.__doc__ = function.__doc__

    def __getstate__(self) -> dict[str, Any]:
        """Pickled into a task (a nested submission): its calls go through the queue (the
        delegated slots are the driver's)."""
        return {**self.__dict__, "_direct": None}

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Launch one call into a slot delegated to this client, else queue it; its
        ObjectRef (``ray.get`` gives the value or raises the error), or ``num_returns`` of
        them."""
        if self._direct is not None:
            out = self._direct.try_launch(self._function, self._retries, self._num_returns,
                                          args, kwargs)
            if out is not None:
                return out if self._num_returns != 1 else out[0]
        call = [[by_reference(a) for a in args], {k: by_reference(v) for k, v in kwargs.items()}]
        submit = self._queue.submit
        if self._num_returns != 1:
            submit = submit.options(num_returns=self._num_returns)
        return submit.remote(self._key, call, self._retries, self._num_returns,
                             self._preemptible)

    def map(self, *iterables: Iterable[Any]) -> TaskResults:
        """Queue one call per item of ``zip(*iterables)`` in one message; their values in
        input order."""
        return self._bulk(iterables, ordered=True)

    def map_unordered(self, *iterables: Iterable[Any]) -> TaskResults:
        """As :meth:`map`, the values in the order the tasks finish."""
        return self._bulk(iterables, ordered=False)

    def _bulk(self, iterables: tuple[Iterable[Any], ...], *, ordered: bool) -> TaskResults:
        batch = f"{id(self):x}-{next(_BATCHES)}"
        if self._direct is not None:
            items = [tuple(args) for args in zip(*iterables, strict=False)]
            # a call with a large argument runs alone (admission.values)
            chunked = [None if any(is_large(a) for a in args) else self._chunked
                       for args in items]
            return DirectTaskResults(self._direct, self._function, self._retries,
                                     self._num_returns, items, batch, ordered=ordered,
                                     chunked=chunked)
        calls = [[[by_reference(a) for a in args], {}] for args in zip(*iterables, strict=False)]
        stream = None if not calls else self._queue.submit_many.options(
            num_returns="streaming").remote(self._key, calls, self._retries, batch,
                                            self._num_returns, self._preemptible)
        return TaskResults(self._queue, stream, batch, len(calls), ordered=ordered)


_BATCHES = itertools.count()
