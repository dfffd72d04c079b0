"""The values of a tenant's bulk submission (``TenantFunction.map``), as an iterator: from the
stream of the queue's ``submit_many`` (:class:`TaskResults`), or from the client's own launches
into delegated slots (:class:`DirectTaskResults`, :mod:`psdsf_dist.runtime.direct_launcher`).

A task's error is raised when its value is reached, and the iterator goes on after it (as
``multiprocessing.Pool.imap`` does); closing it early withdraws what has not started.

The values come back from Ray as any values: the queue and the launcher run every function of
the tenant alike.  An iterator's value type is the declared function's, set by the
:class:`~psdsf_dist.runtime.tenant_function.TenantFunction` that makes it.
"""

from __future__ import annotations

import queue as thread_queue
from collections.abc import Iterator
from types import TracebackType
from typing import TypeVar, cast

import ray

from psdsf_dist.runtime.direct_launcher import Chunked, DirectLauncher, Refs
from psdsf_dist.runtime.handles import QueueHandle, RefStream
from psdsf_dist.runtime.task_runner import RemoteFunction
from psdsf_dist.runtime.tenant_queue import CONNECT_TIMEOUT

V_co = TypeVar("V_co", covariant=True)

StreamItem = list[tuple[int, bool, object]]
"""An item of the queue's stream (``TenantQueue.submit_many``): ``(index, ok, value or
error)`` of each of the batch's tasks that ended since the last item."""


class TaskResults(Iterator[V_co]):
    """The values of a bulk submission (``TenantFunction.map``), as an iterator."""

    def __init__(self, queue: QueueHandle | None, stream: RefStream[StreamItem] | None, batch: str,
                 count: int, *, ordered: bool) -> None:
        self._queue = queue
        self._stream = stream
        self._batch = batch
        self._ordered = ordered
        self._left = count
        self._ready: dict[int, tuple[bool, object]] = {}
        self._next_index = 0
        self.count = count
        """How many tasks were submitted."""

    def __iter__(self) -> TaskResults[V_co]:
        return self

    def __next__(self) -> V_co:
        if self._ordered:
            while self._next_index not in self._ready:
                self._receive()
            ok, value = self._ready.pop(self._next_index)
            self._next_index += 1
        else:
            while not self._ready:
                self._receive()
            ok, value = self._ready.pop(next(iter(self._ready)))
        if not ok:
            assert isinstance(value, BaseException)  # a task's error, or why it did not run
            raise value
        return cast(V_co, value)  # the declared function's value (module docstring)

    def _receive(self) -> None:
        if self._left == 0 or self._stream is None:
            raise StopIteration
        chunk = ray.get(next(self._stream))
        self._left -= len(chunk)
        for index, ok, value in chunk:
            self._ready[index] = (ok, value)

    def close(self) -> None:
        """Withdraw the tasks that have not started (those running finish unread)."""
        if self._left and self._stream is not None and self._queue is not None:
            self._left = 0
            self._ready.clear()
            ray.get(self._queue.drop.remote(self._batch), timeout=CONNECT_TIMEOUT)

    def __enter__(self) -> TaskResults[V_co]:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


class DirectTaskResults(TaskResults[V_co]):
    """The values of a bulk submission whose tasks the client launches itself into delegated
    slots (:mod:`psdsf_dist.runtime.direct_launcher`) as they free."""

    def __init__(self, direct: DirectLauncher, function: RemoteFunction[object], retries: int,
                 num_returns: int, items: list[tuple[object, ...]], batch: str, *,
                 ordered: bool, chunked: list[Chunked | None] | None = None) -> None:
        super().__init__(None, None, batch, len(items), ordered=ordered)
        self._direct = direct
        self._ended: thread_queue.SimpleQueue[tuple[int, bool, object]] = \
            thread_queue.SimpleQueue()
        if items:
            direct.submit_many(function, retries, num_returns, items, batch, self._done,
                               chunked)

    def _done(self, index: int, ok: bool, value: object) -> None:
        self._ended.put((index, ok, value))

    def _receive(self) -> None:
        if self._left == 0:
            raise StopIteration
        index, ok, value = self._ended.get()
        self._left -= 1
        if isinstance(value, Refs):  # several returns: their values, or the error
            try:
                value = tuple(ray.get(value.refs))
            except ray.exceptions.RayError as err:
                ok, value = False, err
        self._ready[index] = (ok, value)

    def close(self) -> None:
        if self._left:
            self._left = 0
            self._ready.clear()
            self._direct.drop(self._batch)
