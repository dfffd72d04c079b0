"""The client's side of delegated slots: launch a tenant's tasks from the caller's process into
slots its queue delegated (:mod:`psdsf_dist.admission.direct_slots`, which decides).

A :class:`DirectLauncher` lives in the process that opened the tenant's queue (the driver).
``TenantFunction.remote`` first offers the call here: with a free delegated slot the task is
launched at once, an ordinary Ray task with the tenant's shape on the slot's node, and its own
``ObjectRef`` goes to the caller; with none it goes through the queue as before.  A bulk
submission (``map``) waits here for slots instead: its tasks need no ref when submitted, so
each is launched the moment a slot frees, and its results come back as the tasks end; its short
calls run several to a Ray task (:mod:`psdsf_dist.admission.chunks` sizes the chunks).

Threads share one lock: the caller's (single calls, bulk submissions), Ray's that run the
callbacks of the tasks' futures (a task's end frees its slot, and the same thread launches the
next waiting bulk task into it: no hop through another thread), and an *exchange* loop that
sends :meth:`DirectSlots.report` to the queue (:meth:`~psdsf_dist.runtime.tenant_queue.
TenantQueue.exchange`) at least once per lease interval while it holds slots or has work
waiting, and at once when a call found no slot or a bulk submission arrived; slots it brings
back take waiting bulk tasks at once.

Retries.  A task launched here is retried by Ray (``max_retries``, the user's) with a soft
affinity to its node: on the node while it lives — the slot stays held — and elsewhere once
it died, where the allocator's leases do not cover that one run.  Its ref stays the caller's.

Blocking.  The task's body gets its slot's id (:data:`~psdsf_dist.runtime.tenant_worker.
SLOT_KEYWORD`), so that its notices when it blocks in ``ray.get`` name the slot to free.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeVar

import ray

from psdsf_dist.admission.chunks import CallTimes, chunk_size
from psdsf_dist.admission.direct_slots import (
    DirectOutcome,
    DirectSlots,
    SlotGrant,
    exchange_timeout,
)
from psdsf_dist.admission.tenant_queue_state import AllocatorGoneError
from psdsf_dist.runtime.clock import WallClock
from psdsf_dist.runtime.handles import QueueHandle
from psdsf_dist.runtime.task_runner import PlacedKey, RemoteFunction, RemoteTask, placed_on
from psdsf_dist.runtime.tenant_worker import SLOT_KEYWORD, CallOutcome, ChunkResult, as_task_outcome

T = TypeVar("T")


@dataclass(frozen=True)
class Chunked:
    """A function whose bulk calls run several to a Ray task (:mod:`psdsf_dist.admission.
    chunks`): its chunk body (:func:`~psdsf_dist.runtime.tenant_worker.tenant_chunk`) with
    the function's options, and its calls' measured run time."""

    function: RemoteFunction[ChunkResult]
    times: CallTimes


@dataclass
class Pending:
    """A bulk submission's task waiting in the client for a slot."""

    function: tuple[RemoteFunction[object], int, int]
    """((remote function, options), max_retries, num_returns)."""
    args: tuple[object, ...]
    done: Callable[[bool, object], None]
    """Called once when the task ended: (True, its value — :class:`Refs` of a task with
    several returns) or (False, its error, or the one that kept it from running)."""
    batch: str
    submitted: float
    chunked: Chunked | None = None
    """Set: it runs in a chunk with the calls of the same function waiting behind it."""
    withdrawn: bool = False
    """Its batch was withdrawn while it was in a running chunk: if the chunk does not run it,
    it does not wait again."""


@dataclass(frozen=True)
class Refs:
    """The refs of a bulk task with several returns (``ray.get`` them for its values)."""

    refs: list[ray.ObjectRef[object]]


class DirectLauncher:
    """Launches a tenant's tasks into delegated slots (module docstring)."""

    def __init__(self, queue: QueueHandle, interval: float,
                 clock: WallClock | None = None) -> None:
        self.queue = queue
        self.interval = interval
        self.clock = clock or WallClock(0.0)  # time.time(): slots expire by the wall clock
        self.slots = DirectSlots(interval)
        self.lock = threading.Condition()
        self.pending: deque[Pending] = deque()
        self.placed: dict[PlacedKey, RemoteTask[object]] = {}
        self.placed_chunks: dict[PlacedKey, RemoteTask[ChunkResult]] = {}
        self.live: dict[str, int] = {}
        """A launched task's Ray task id -> its slot (to cancel it, :meth:`cancel`)."""
        self.cancelling: set[str] = set()
        self.in_chunks: dict[int, list[Pending]] = {}
        """A running chunk's slot -> its calls."""
        self.stopped = False
        self.wake = False
        self.exchanges = threading.Thread(target=self._exchange_loop, daemon=True,
                                          name="psdsf-exchange")
        self.exchanges.start()

    # -- launching ----------------------------------------------------------------------------
    def try_launch(self, function: RemoteFunction[object], max_retries: int,
                   num_returns: int, args: tuple[object, ...],
                   kwargs: dict[str, object]) -> list[ray.ObjectRef[object]] | None:
        """Launch one call into a free slot; its refs, or None: no free slot (the caller sends
        it through the queue; the next exchange asks for more)."""
        with self.lock:
            grant = self.slots.take(self.clock.now())
            if grant is None:
                if self.slots.gone is None:
                    self.slots.turned_away += 1
                    self._wake_exchange()
                return None
        return self._launch(grant, function, max_retries, num_returns, args, kwargs, None)

    def submit_many(self, function: RemoteFunction[object], max_retries: int,
                    num_returns: int, calls: list[tuple[object, ...]], batch: str,
                    done: Callable[[int, bool, object], None],
                    chunked: list[Chunked | None] | None = None) -> None:
        """Queue a bulk submission's tasks here; ``done(index, ok, value)`` once each ends
        (:class:`Pending`); those ``chunked`` names (by index) run in chunks."""
        now = self.clock.now()
        with self.lock:
            if self.slots.gone is not None:
                error = AllocatorGoneError(self.slots.gone)
                for index in range(len(calls)):
                    done(index, False, error)
                return
            for index, args in enumerate(calls):
                self.pending.append(Pending((function, max_retries, num_returns), args,
                                            _bind(done, index), batch, now,
                                            None if chunked is None else chunked[index]))
            self.slots.queued = len(self.pending)
            self._wake_exchange()
        self._launch_pending()

    def drop(self, batch: str) -> int:
        """Withdraw the tasks of ``batch`` still waiting here; how many.  Those in running
        chunks are withdrawn if their chunk does not run them (:meth:`_chunk_ended`)."""
        with self.lock:
            for task in itertools.chain.from_iterable(self.in_chunks.values()):
                task.withdrawn = task.withdrawn or task.batch == batch
            kept = deque(p for p in self.pending if p.batch != batch)
            dropped = len(self.pending) - len(kept)
            self.pending = kept
            self.slots.queued = len(kept)
            self.slots.withdrawn(dropped)
            self._wake_exchange()
        return dropped

    def _launch(self, grant: SlotGrant, function: RemoteFunction[object], max_retries: int,
                num_returns: int, args: tuple[object, ...], kwargs: dict[str, object],
                done: Callable[[bool, object], None] | None) -> list[ray.ObjectRef[object]]:
        """Launch one call into ``grant``'s slot; its refs.  A launch Ray refuses (e.g.
        arguments it cannot serialize) is the caller's error: raised, or given to ``done``
        (then no refs)."""
        try:
            out = self._submit(self.placed, grant, function, max_retries, num_returns, args,
                               kwargs)
        except Exception as err:
            self._free(grant.slot, DirectOutcome.FAILED)
            if done is None:
                raise
            done(False, err)
            return []
        refs = out if isinstance(out, list) else [out]
        refs[-1].future().add_done_callback(
            lambda future: self._ended(grant.slot, refs, future, done))
        return refs

    def _launch_chunk(self, grant: SlotGrant, tasks: list[Pending], now: float) -> None:
        """Launch waiting bulk calls of one function as one Ray task into ``grant``'s slot
        (:mod:`psdsf_dist.admission.chunks`) at ``now``."""
        chunked = tasks[0].chunked
        assert chunked is not None
        with self.lock:
            self.in_chunks[grant.slot] = tasks
        try:
            ref = self._submit(self.placed_chunks, grant, chunked.function,
                               tasks[0].function[1], 1, ([task.args for task in tasks],), {})
        except Exception as err:
            with self.lock:
                self.in_chunks.pop(grant.slot, None)
            self._free(grant.slot, DirectOutcome.FAILED, tasks, now)
            for task in tasks:
                task.done(False, err)
            return
        assert not isinstance(ref, list)  # launched with one return
        ref.future().add_done_callback(
            lambda future: self._chunk_ended(grant.slot, ref, tasks, chunked, now, future))

    def _submit(self, cache: dict[PlacedKey, RemoteTask[T]], grant: SlotGrant,
                function: RemoteFunction[T], max_retries: int, num_returns: int,
                args: tuple[object, ...], kwargs: dict[str, object],
                ) -> ray.ObjectRef[T] | list[ray.ObjectRef[object]]:
        """One Ray task of ``function`` in ``grant``'s slot, with a soft affinity to its node
        and Ray's retries (module docstring, "Retries"), placed once per node in ``cache``;
        its ref (a list of them for several returns), known as live."""
        placed = placed_on(cache, function, grant.node, soft=True,
                           max_retries=max_retries, num_returns=num_returns)
        out = placed.remote(*args, **{**kwargs, SLOT_KEYWORD: grant.slot})
        first = out[0] if isinstance(out, list) else out
        with self.lock:
            self.live[first.task_id().hex()] = grant.slot
        return out

    def _ended(self, slot: int, refs: list[ray.ObjectRef[object]], future: Future[object],
               done: Callable[[bool, object], None] | None) -> None:
        """A task's last ref is ready (a thread of Ray's): free its slot, tell its caller."""
        error = future.exception()
        self._free(slot, self._outcome(refs[0].task_id().hex(), error))
        if done is not None:
            if len(refs) > 1:
                done(True, Refs(refs))
            elif error is None:
                done(True, future.result())
            else:
                done(False, error)
        self._launch_pending()

    def _chunk_ended(self, slot: int, ref: ray.ObjectRef[ChunkResult], tasks: list[Pending],
                     chunked: Chunked, launched: float, future: Future[ChunkResult]) -> None:
        """A chunk ended (a thread of Ray's): note its calls' time, give the calls it did not
        run back to wait (first in line; withdrawn if their batch was, failed if the queue is
        gone), free its slot, tell each call's caller its outcome (a call's own error is its
        alone)."""
        error = future.exception()
        outcome = self._outcome(ref.task_id().hex(), error)
        outcomes: list[CallOutcome] = []
        ran = tasks
        with self.lock:
            self.in_chunks.pop(slot, None)
            if error is None:
                outcomes, seconds = future.result()
                ran = tasks[:len(outcomes)]
                chunked.times.measured(len(ran), seconds)
                back = [task for task in tasks[len(ran):] if not task.withdrawn]
                self.slots.withdrawn(len(tasks) - len(ran) - len(back))
                self.pending.extendleft(reversed(back))
                self.slots.queued = len(self.pending)
                if self.slots.gone is not None:
                    self._fail_pending(self.slots.gone)
        self._free(slot, outcome, ran, launched)
        if error is None:
            for task, call in zip(ran, outcomes, strict=True):
                task.done(*as_task_outcome(call))
        else:
            for task in tasks:
                task.done(False, error)
        self._launch_pending()

    def _outcome(self, ray_task: str, error: BaseException | None) -> DirectOutcome:
        """How the Ray task ``ray_task`` (its id) ended, given its error (None: its value); it
        is no longer live."""
        with self.lock:
            self.live.pop(ray_task, None)
            cancelled = ray_task in self.cancelling
            self.cancelling.discard(ray_task)
        if error is None or (isinstance(error, ray.exceptions.RayTaskError)
                             and not isinstance(error, ray.exceptions.TaskCancelledError)):
            return DirectOutcome.CANCELLED if cancelled else DirectOutcome.COMPLETED
        if cancelled or isinstance(error, ray.exceptions.TaskCancelledError):
            return DirectOutcome.CANCELLED
        return DirectOutcome.FAILED

    def _free(self, slot: int, outcome: DirectOutcome, ran: list[Pending] | None = None,
              launched: float = 0.0) -> None:
        """The task in ``slot`` ended with ``outcome``; a chunk's further calls that ``ran``
        (launched at ``launched``) count as tasks too (:meth:`DirectSlots.ended`)."""
        more = [] if ran is None else [launched - task.submitted for task in ran[1:]]
        with self.lock:
            self.slots.ended(slot, outcome, self.clock.now(), more)

    def cancel(self, ref: ray.ObjectRef[T], force: bool) -> bool:
        """Cancel the task behind ``ref`` if it is one launched here (Ray's own cancel);
        whether it was."""
        ray_task = ref.task_id().hex()
        with self.lock:
            if ray_task not in self.live:
                return False
            self.cancelling.add(ray_task)
        ray.cancel(ref, force=force)
        return True

    # -- bulk submissions and the exchanges ----------------------------------------------------
    def _launch_pending(self) -> None:
        """Launch waiting bulk tasks into the free slots (from whichever thread freed or got
        them: the caller's, Ray's that saw a task end, the exchanges')."""
        while True:
            with self.lock:
                if self.stopped or not self.pending:
                    return
                now = self.clock.now()
                tasks = self._next_tasks()
                grant = self.slots.take(now, now - tasks[0].submitted)
                if grant is None:
                    return
                for _ in tasks:
                    self.pending.popleft()
                self.slots.queued = len(self.pending)
            if tasks[0].chunked is not None:
                self._launch_chunk(grant, tasks, now)
            else:
                function, max_retries, num_returns = tasks[0].function
                self._launch(grant, function, max_retries, num_returns, tasks[0].args, {},
                             tasks[0].done)

    def _next_tasks(self) -> list[Pending]:
        """(Lock held.)  The waiting tasks the next launch runs: the first, and if it runs
        in chunks, the calls of its function behind it, as many as :func:`~psdsf_dist.
        admission.chunks.chunk_size` says."""
        first = self.pending[0]
        chunked = first.chunked
        if chunked is None:
            return [first]
        size = chunk_size(len(self.pending), self.slots.held(), chunked.times.seconds)
        return list(itertools.takewhile(lambda task: task.chunked is chunked,
                                        itertools.islice(self.pending, size)))

    def _wake_exchange(self) -> None:
        """(Lock held.)  Exchange now, not at the end of the interval."""
        self.wake = True
        self.lock.notify_all()

    def _exchange_loop(self) -> None:
        while ray.is_initialized():
            with self.lock:
                deadline = self.clock.now() + self.interval
                while not self.stopped and not self.wake and (
                        self.slots.idle() or self.clock.now() < deadline):
                    self.lock.wait(None if self.slots.idle() else
                                   max(deadline - self.clock.now(), 0.0))
                if self.stopped:
                    return
                self.wake = False
                report = self.slots.report(self.clock.now())
            try:
                reply = ray.get(self.queue.exchange.remote(report),
                                timeout=exchange_timeout(self.interval))
            except Exception as err:  # Ray's errors, or Ray shut down under this thread
                reply = None
                gone = f"the tenant's queue did not answer ({type(err).__name__})"
            with self.lock:
                if reply is not None:
                    self.slots.granted(reply, self.clock.now())
                elif self.slots.gone is None:
                    self.slots.gone = gone
                if self.slots.gone is not None:  # nothing more to exchange
                    self._fail_pending(self.slots.gone)
                    return
            self._launch_pending()

    def _fail_pending(self, why: str) -> None:
        """(Lock held.)  The queue is gone: what waits here fails, one line."""
        failing, self.pending = self.pending, deque()
        self.slots.queued = 0
        for task in failing:
            task.done(False, AllocatorGoneError(why))

    def flush(self) -> None:
        """One exchange now, without waiting for slots (before reading the queue's counts)."""
        with self.lock:
            report = self.slots.report(self.clock.now())
        reply = ray.get(self.queue.exchange.remote(report, False),
                        timeout=exchange_timeout(self.interval))
        with self.lock:
            self.slots.granted(reply, self.clock.now())
        self._launch_pending()

    def close(self, why: str) -> None:
        """Stop launching; what waits here fails with ``why``."""
        with self.lock:
            self.stopped = True
            if self.slots.gone is None:
                self.slots.gone = why
            self._fail_pending(why)
            self.lock.notify_all()


def _bind(done: Callable[[int, bool, object], None],
          index: int) -> Callable[[bool, object], None]:
    def bound(ok: bool, value: object) -> None:
        done(index, ok, value)
    return bound

