"""A tenant queue's decisions, without Ray: events in, decisions out (pure).

The tenant's queue actor (:mod:`psdsf_dist.runtime.tenant_queue`) does the Ray calls — it
launches tasks and actors, watches their refs, asks the servers for leases and reports to the
coordinator — and tells a :class:`TenantQueueState` what happened.  The state decides
everything else and answers with what to do:

* which queued task to launch next, and where (:meth:`TenantQueueState.pump`): in order, into
  the server with the most free slots; only when every lease is full, to wait at a node whose
  lease allows it (pipelining), so no task waits at a node while a later one starts
  elsewhere; an actor only into a free slot (it holds the slot while it lives);
* a task that blocks (its code waits in ``ray.get`` / ``ray.wait`` for other work,
  :meth:`TenantQueueState.blocked`) gives its slot back while it waits, as Ray gives back its
  CPU, and takes it back when it resumes (:meth:`TenantQueueState.resumed`), even beyond the
  lease for a moment, as Ray does: a tree of tasks that wait for their children holds no slot
  while it waits, so it never deadlocks where the lease has a slot;
* how a task ended (:meth:`TenantQueueState.ended`): its value or its own error is
  *completed*; a system failure re-queues it at the head up to its ``max_retries`` (and takes
  the lease's slots away until the next answer), else it *failed*; a cancelled one is
  *cancelled*, whatever its ref then says;
* cancelling (:meth:`TenantQueueState.cancel`): a queued task is withdrawn at once and never
  launched; a running one is to be interrupted by the caller of this method;
* preemption (:meth:`TenantQueueState.preempt`, :mod:`.preemption`): which of the user's
  preemptible tasks on a server to interrupt when the server asks; one so stopped is queued
  again at the head (counted in ``preempted``, not as a retry, a failure or a cancel);
* withdrawal of what is queued (:meth:`TenantQueueState.withdraw`) — a bulk submission's
  caller stopped reading, the coordinator refused the user, the allocator is gone, the queue
  closed — each with its error;
* the backlog to report (lingering once idle), and when the allocator counts as gone;
* slots delegated to the client (:mod:`.direct_slots`): granted only from free slots of the
  leases while nothing waits in the queue (:meth:`TenantQueueState.grant`), counted as tasks
  running on their servers, revoked when a lease shrinks below what the user holds there
  (:meth:`TenantQueueState.revocations`), and the client's reports of the tasks it ran in them
  counted as the queue's own (:meth:`TenantQueueState.direct_report`).

No task is lost: every submitted task is, at any time, queued, running (maybe blocked) or
has ended exactly once with one :class:`Outcome` — ``completed``, ``cancelled``,
``withdrawn`` or ``failed`` (with the error saying why) — and the counters add up
(:meth:`TenantQueueState.accounted`).  Never more tasks are launched on a server than its
open slots allow, and each server's ``running`` counts exactly its live tasks that are not
blocked.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from psdsf_dist.admission.direct_slots import (
    DirectOutcome,
    DirectReply,
    DirectReport,
    SlotGrant,
)
from psdsf_dist.admission.tenants import IDLE_LINGER_PERIODS
from psdsf_dist.errors import PsdsfError

ALLOCATOR_SILENCE_PERIODS = 30.0
"""A coordinator that has not answered a report for this long is taken for gone (one that
Ray reports dead is taken for gone at once).  Long: a loaded coordinator answers late."""


PIPELINE_HISTORY = 4
"""Tasks whose durations decide whether pipelining pays on a server
(:meth:`ServerSlots.short_tasks`)."""
PIPELINE_TASK_PERIODS = 1.0
"""Pipelining pays for tasks of at most this many periods (median): it hides a launch gap that
matters to short tasks only; behind a task of minutes the waiting one would idle while slots
free elsewhere."""


class AllocatorGoneError(PsdsfError, RuntimeError):
    """The allocator's coordinator stopped answering: queued tasks cannot be placed."""


class TenantRefusedError(PsdsfError, RuntimeError):
    """The coordinator refused the tenant's demand or weight (one line saying why)."""


class TaskWithdrawnError(PsdsfError, RuntimeError):
    """A task of a bulk submission withdrawn before it started (its caller closed the results)."""


class TaskCancelledError(PsdsfError, RuntimeError):
    """A task cancelled by its caller (``ray.cancel`` or :meth:`Tenant.cancel`): withdrawn
    from the queue if it had not started, else interrupted as Ray cancels a task."""


class Outcome(enum.Enum):
    """How a task ended (exactly one per task)."""

    COMPLETED = "completed"
    """Its value or its own code's error is the caller's result."""
    CANCELLED = "cancelled"
    WITHDRAWN = "withdrawn"
    FAILED = "failed"


class Signal(enum.Enum):
    """What the watcher of a launched task saw."""

    DONE = "done"
    """A value, or an error raised by the task's own code (an actor: it ended after its
    constructor returned)."""
    LOST = "lost"
    """A system failure (node or worker died, node gone before it started) or Ray's
    cancellation: retried up to the task's ``max_retries`` unless cancelled."""
    FAILED = "failed"
    """An error that no retry mends (an actor whose constructor raised or that died before
    it was constructed): failed, the lease untouched."""
    LAUNCH_FAILED = "launch_failed"
    """Ray refused the launch (e.g. arguments it cannot serialize)."""


class CancelAction(enum.Enum):
    NONE = "none"
    """Not the queue's any more, or cancelled already: nothing to do."""
    WITHDRAWN = "withdrawn"
    """It was queued: taken out, it never starts (its error is in :class:`Ended`)."""
    INTERRUPT = "interrupt"
    """It runs: the caller cancels its Ray task."""


@dataclass
class ServerSlots:
    """One server's lease as the queue sees it, and the user's tasks launched there."""

    name: str
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
    launched_at: dict[int, float] = field(default_factory=dict)
    """When each of the ``running`` tasks was launched, by task id."""
    durations: deque[float] = field(default_factory=lambda: deque(maxlen=PIPELINE_HISTORY))
    """Launch-to-end seconds of the user's last tasks here."""
    short_seconds: float = 0.0
    """A median task duration up to this pipelines (:meth:`short_tasks`)."""

    def short_tasks(self) -> bool:
        """Whether pipelining pays here: the user's last :data:`PIPELINE_HISTORY` tasks here
        took at most :attr:`short_seconds` (median).  A task sent to wait at a full node waits
        for one of the user's own to end: behind long tasks it would wait long while a slot
        frees elsewhere, and the launch gap it hides is a small part of a long task anyway."""
        if len(self.durations) < PIPELINE_HISTORY:
            return False
        ordered = sorted(self.durations)
        return ordered[len(ordered) // 2] <= self.short_seconds

    def allowed(self, now: float) -> int:
        """Tasks the lease lets run here now, pipelined ones included (only while the user's
        tasks here are short); 0 once it ran out."""
        if now >= self.expires:
            return 0
        return self.slots + (self.pipeline if self.short_tasks() else 0)

    def open_slots(self, now: float) -> int:
        """Tasks that may be launched here now, a pipelined one included (only while the
        user's tasks here are short)."""
        allowed = self.allowed(now)
        if allowed == 0:
            return 0
        if self.asking:
            # the server is deciding with ``running_at_ask``: replacing tasks that finish
            # meanwhile keeps within the claim it records (max(new slots, running_at_ask))
            return max(min(allowed, self.running_at_ask) - self.running, 0)
        return max(allowed - self.running, 0)

    def free_slots(self, now: float) -> int:
        """Slots of the lease nobody runs in (no pipelining)."""
        return max(self.slots - self.running, 0) if now < self.expires and not self.asking \
            else 0

    def launched(self, task_id: int, now: float) -> None:
        if self.running >= self.slots:
            self.waiting += 1  # the pipeline's task: it waits at the node
        self.running += 1
        self.launched_at[task_id] = now

    def ended(self, task_id: int, now: float, *, blocked: bool = False,
              timed: bool = True) -> None:
        """A task here ended (``blocked``: it had given its slot back already; ``timed``: its
        duration counts for :meth:`short_tasks` — not a delegated slot's)."""
        if not blocked:
            self.released()
        launched = self.launched_at.pop(task_id, None)
        if launched is not None and timed:
            self.durations.append(now - launched)

    def released(self) -> None:
        """A task here gave its slot back (it ended, or blocked)."""
        self.running = max(self.running - 1, 0)
        if self.waiting:
            self.waiting -= 1  # a waiting task took the slot (or was the one that ended)


@dataclass
class QueuedTask:
    """What the state knows of one task (the actor keeps its function, arguments, refs)."""

    id: int
    max_retries: int
    submitted: float
    batch: str | None = None
    actor: bool = False
    attempts: int = 0
    server: str | None = None
    """Where it runs (None while queued)."""
    blocked: bool = False
    """It waits in ``ray.get`` / ``ray.wait``: its slot is given back until it resumes."""
    cancelled: bool = False
    preemptible: bool = False
    """Its user lets the allocator stop it to make room (run again later from the start)."""
    preempting: bool = False
    """Being stopped to make room: however it ends (unless with its value), it is queued
    again."""
    delegated: bool = False
    """Not a task: a slot delegated to the client (:mod:`.direct_slots`), which runs its own
    tasks in it; it ends when the client gives it back."""


@dataclass(frozen=True)
class Ask:
    """What an ask for a lease tells the server (:meth:`TenantQueueState.ask_sent`)."""

    running: int
    """The claim: tasks running there (not those waiting at the node for a slot of ours)."""
    queued: int
    """Tasks queued, waiting for any slot."""


@dataclass(frozen=True)
class Launch:
    """Launch task ``task`` on ``server``'s node."""

    task: int
    server: str
    node: str
    waited: float
    """Seconds from submission to this launch."""


@dataclass(frozen=True)
class Ended:
    """Task ``task`` ended with ``outcome``; ``error`` is the caller's when the queue, not the
    task, ended it (withdrawn, cancelled while queued, the allocator gone, refused)."""

    task: int
    outcome: Outcome
    error: PsdsfError | None = None
    server: str | None = None


@dataclass(frozen=True)
class EndDecision:
    """The answer to :meth:`TenantQueueState.ended`."""

    ended: Ended | None
    """None: re-queued for another attempt."""
    retried: bool
    launches: list[Launch]
    preempted: bool = False
    """Stopped to make room and queued again (not a retry: its attempts are not counted)."""


@dataclass
class TenantQueueState:
    """One tenant queue's bookkeeping (see the module docstring).  ``period`` is the
    allocator's; times are the caller's monotonic clock."""

    user: str
    period: float
    now: float
    queue: deque[int] = field(default_factory=deque)
    tasks: dict[int, QueuedTask] = field(default_factory=dict)
    """Every task queued or running."""
    servers: dict[str, ServerSlots] = field(default_factory=dict)
    submitted: int = 0
    admitted: int = 0
    completed: int = 0
    retried: int = 0
    failed: int = 0
    withdrawn: int = 0
    cancelled: int = 0
    preempted: int = 0
    gone: str | None = None
    last_answer: float = 0.0
    idle_since: float | None = None
    reported: int = 0
    client_queued: int = 0
    """Tasks waiting in the client for a delegated slot (its last report): backlog too."""
    revoked: set[int] = field(default_factory=set)
    """Delegated slots revoked and not yet given back."""
    direct_running: int = 0
    """Tasks the client launched into delegated slots that have not ended (its reports)."""
    blockers: dict[int, str] = field(default_factory=dict)
    """A delegated slot whose task blocks -> that task's Ray task id."""
    _next_id: int = 0

    def __post_init__(self) -> None:
        self.last_answer = self.now
        self.idle_since = self.now

    # -- the caller's side --------------------------------------------------------------------
    def new_task(self, max_retries: int, now: float, *, batch: str | None = None,
                 actor: bool = False, preemptible: bool = False) -> int:
        """Register a task (not yet queued: :meth:`submit` queues it) and return its id."""
        task = QueuedTask(self._next_id, max_retries, now, batch, actor,
                          preemptible=preemptible and not actor)
        self._next_id += 1
        self.tasks[task.id] = task
        self.submitted += 1
        return task.id

    def submit(self, ids: list[int], now: float) -> tuple[list[Launch], bool]:
        """Queue the tasks ``ids`` (from :meth:`new_task`), in order.  Returns the launches
        and whether the queue was idle (report at once: a late user should not wait a period
        to join)."""
        self.queue.extend(ids)
        return self.pump(now), self._woke()

    def _woke(self) -> bool:
        """Work arrived: whether the queue was idle until now (it is not any more)."""
        woke = self.idle_since is not None
        self.idle_since = None
        return woke

    def blocked(self, task_id: int, now: float) -> list[Launch]:
        """Task ``task_id`` blocks in ``ray.get`` / ``ray.wait``: its slot is free while it
        waits (what it waits for may need it); launch what now fits.  A task unknown or not
        running (it ended meanwhile), or blocked already, changes nothing."""
        task = self.tasks.get(task_id)
        server = None if task is None else self.servers.get(task.server or "")
        if task is None or server is None or task.blocked or task.actor:
            return []
        task.blocked = True
        server.released()
        return self.pump(now)

    def resumed(self, task_id: int) -> None:
        """Task ``task_id`` resumes: it takes its slot back, beyond the lease if the slot was
        taken meanwhile (nothing more is launched there until the tasks fit again)."""
        task = self.tasks.get(task_id)
        server = None if task is None else self.servers.get(task.server or "")
        if task is None or not task.blocked:
            return
        task.blocked = False
        if server is not None:
            server.running += 1

    def slot_blocked(self, slot: int, ray_task: str, now: float) -> list[Launch]:
        """The task ``ray_task`` the client launched into delegated ``slot`` blocks: as
        :meth:`blocked` (the slot's one task at a time blocks it)."""
        if slot in self.blockers or slot not in self.tasks:
            return []
        self.blockers[slot] = ray_task
        return self.blocked(slot, now)

    def slot_resumed(self, slot: int, ray_task: str) -> None:
        """The task ``ray_task`` in delegated ``slot`` resumes — only the one that blocked
        it: a late notice from an earlier task in the slot changes nothing."""
        if self.blockers.get(slot) == ray_task:
            del self.blockers[slot]
            self.resumed(slot)

    @property
    def blocked_tasks(self) -> int:
        """Tasks blocked now (their slots given back)."""
        return sum(1 for t in self.tasks.values() if t.blocked)

    def cancel(self, task_id: int) -> tuple[CancelAction, Ended | None]:
        """Cancel a task: withdrawn if queued (it never starts), else to be interrupted."""
        task = self.tasks.get(task_id)
        if task is None or task.cancelled:
            return CancelAction.NONE, None
        task.cancelled = True
        self.cancelled += 1
        if task.server is None:
            self.queue.remove(task_id)
            del self.tasks[task_id]
            return CancelAction.WITHDRAWN, Ended(task_id, Outcome.CANCELLED, TaskCancelledError(
                f"user {self.user!r}: task cancelled by its caller before it started"))
        return CancelAction.INTERRUPT, None

    def withdraw(self, error: PsdsfError, batch: str | None = None) -> list[Ended]:
        """End the queued tasks — every one, or those of one bulk submission — with ``error``
        (:class:`TaskWithdrawnError`: withdrawn, else failed)."""
        failing = [i for i in self.queue if batch is None or self.tasks[i].batch == batch]
        if not failing:
            return []
        kept = set(failing)
        self.queue = deque(i for i in self.queue if i not in kept)
        outcome = Outcome.WITHDRAWN if isinstance(error, TaskWithdrawnError) else Outcome.FAILED
        if outcome is Outcome.WITHDRAWN:
            self.withdrawn += len(failing)
        else:
            self.failed += len(failing)
        for i in failing:
            del self.tasks[i]
        # one exception object per task: raising one object many times would chain every
        # raise's traceback onto it (time quadratic in the tasks dropped)
        return [Ended(i, outcome, type(error)(*error.args)) for i in failing]

    def close(self) -> list[Ended]:
        """The tenant is done: every later submission fails, what is queued is dropped."""
        self.gone = f"tenant {self.user!r} closed its queue"
        return self.withdraw(AllocatorGoneError(self.gone))

    # -- placing tasks ------------------------------------------------------------------------
    def pump(self, now: float) -> list[Launch]:
        """Launch queued tasks into the open slots, in order: into the server with the most
        free slots, then — all full — into one whose lease lets a task wait at the node."""
        launches: list[Launch] = []
        while self.queue:
            task = self.tasks[self.queue[0]]
            if task.actor:  # an actor takes a slot of its own, never a pipeline's
                best = max(self.servers.values(), key=lambda s: s.free_slots(now), default=None)
                if best is None or best.free_slots(now) <= 0:
                    break
            else:
                best = self._open_server(now)
                if best is None:
                    break
            self.queue.popleft()
            launches.append(self._launch(task, best, now))
        return launches

    def _open_server(self, now: float) -> ServerSlots | None:
        """Where the next task goes: the server with the most free slots, else — all full —
        one whose lease lets a task wait at the node; None: no open slot.  A free slot comes
        before a pipelined one: a task sent to wait at a full node while another has room
        would start after later tasks sent there."""
        best = max(self.servers.values(),
                   key=lambda s: (s.free_slots(now), s.open_slots(now)), default=None)
        return None if best is None or best.open_slots(now) <= 0 else best

    def _launch(self, task: QueuedTask, server: ServerSlots, now: float) -> Launch:
        task.server = server.name
        server.launched(task.id, now)
        self.admitted += 1
        return Launch(task.id, server.name, server.node, now - task.submitted)

    # -- slots delegated to the client -----------------------------------------------------
    def delegated_slots(self) -> list[QueuedTask]:
        return [t for t in self.tasks.values() if t.delegated]

    def delegated_per_server(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.delegated_slots():
            out[t.server or ""] = out.get(t.server or "", 0) + 1
        return out

    def grant(self, wanted: int, now: float) -> list[Launch]:
        """Delegate open slots to the client, up to ``wanted`` held in all — only while no
        task waits in the queue (those come first, in order); as :meth:`pump` places a task,
        a pipelined slot (a task waiting at the node, where the lease allows it) last."""
        held = len(self.delegated_slots())
        out: list[Launch] = []
        while not self.queue and held + len(out) < wanted:
            best = self._open_server(now)
            if best is None:
                break
            slot = QueuedTask(self._next_id, 0, now, delegated=True, server=best.name)
            self._next_id += 1
            self.tasks[slot.id] = slot
            best.launched(slot.id, now)
            out.append(Launch(slot.id, best.name, best.node, 0.0))
        return out

    def direct_reply(self, now: float, origin: float) -> DirectReply:
        """The answer to the client's exchange: every slot it holds (new ones too) with its
        lease's expiry (``origin``: the wall-clock time this state's clock reads 0), the
        slots it holds beyond its leases (:meth:`revocations`), and whether the queue is
        gone."""
        revoked = self.revocations(now)
        grants = tuple(SlotGrant(t.id, t.server, self.servers[t.server].node,
                                 origin + self.servers[t.server].expires)
                       for t in self.delegated_slots()
                       if t.server is not None and t.server in self.servers)
        return DirectReply(grants, tuple(revoked), self.gone)

    def revocations(self, now: float) -> list[int]:
        """Delegated slots to revoke now: on each server where the user holds more than its
        lease allows (it shrank, ran out, or the server went), as many as it holds too many,
        beyond those revoked already."""
        out: list[int] = []
        for s in self.servers.values():
            allowed = s.allowed(now)
            slots = [t.id for t in self.tasks.values()
                     if t.delegated and t.server == s.name and t.id not in self.revoked]
            over = s.running - allowed - sum(
                1 for i in self.revoked if self.tasks[i].server == s.name
                and not self.tasks[i].blocked)
            for i in slots[:max(over, 0)]:
                self.revoked.add(i)
                out.append(i)
        return out

    def direct_report(self, report: DirectReport, now: float) -> tuple[list[Launch], bool]:
        """The client's report (:class:`~.direct_slots.DirectReport`): count the tasks it ran
        as the queue's own, take its slots back, note its waiting tasks.  Returns what now
        fits in the queue and whether the queue was idle (as :meth:`submit`)."""
        self.submitted += len(report.launched)
        self.admitted += len(report.launched)
        self.direct_running += len(report.launched)
        for slot_id, outcome, seconds in report.ended:
            self.direct_running -= 1
            if outcome is DirectOutcome.COMPLETED:
                self.completed += 1
            elif outcome is DirectOutcome.CANCELLED:
                self.cancelled += 1
            else:
                self.failed += 1
            slot = self.tasks.get(slot_id)
            server = None if slot is None else self.servers.get(slot.server or "")
            if server is not None:
                server.durations.append(seconds)
        self.submitted += report.withdrawn
        self.withdrawn += report.withdrawn
        busy = dict(report.ages)
        for slot in self.delegated_slots():
            server = self.servers.get(slot.server or "")
            if server is not None and slot.id in server.launched_at:
                # a held slot's "launch" is its current task's (the youngest are preempted first)
                server.launched_at[slot.id] = now - busy.get(slot.id, 0.0)
        for slot_id in report.returned:
            slot = self.tasks.pop(slot_id, None)
            self.revoked.discard(slot_id)
            self.blockers.pop(slot_id, None)
            server = None if slot is None else self.servers.get(slot.server or "")
            if slot is not None and server is not None:
                server.ended(slot_id, now, blocked=slot.blocked, timed=False)
        self.client_queued = report.queued
        return self.pump(now), report.queued > 0 and self._woke()

    def ended(self, task_id: int, signal: Signal, now: float) -> EndDecision:
        """A launched task ended: decide its outcome (or its retry), free its slot, and
        launch what now fits."""
        task = self.tasks[task_id]
        server = self.servers.get(task.server or "")
        if server is not None:
            server.ended(task_id, now, blocked=task.blocked)
        task.blocked = False
        result: Ended | None
        retried = False
        if task.preempting and not task.cancelled and signal is not Signal.DONE \
                and signal is not Signal.LAUNCH_FAILED:
            task.preempting = False
            task.server = None
            self.preempted += 1
            self.queue.appendleft(task_id)
            return EndDecision(None, False, self.pump(now), preempted=True)
        task.preempting = False
        if signal is Signal.LAUNCH_FAILED and not task.cancelled:
            self.admitted -= 1  # it never ran
            self.failed += 1
            result = Ended(task_id, Outcome.FAILED, server=task.server)
        elif task.cancelled:
            result = Ended(task_id, Outcome.CANCELLED, server=task.server)
        elif signal is Signal.DONE:
            self.completed += 1
            result = Ended(task_id, Outcome.COMPLETED, server=task.server)
        elif signal is Signal.FAILED:
            self.failed += 1
            result = Ended(task_id, Outcome.FAILED, server=task.server)
        else:
            if server is not None:
                server.slots = server.pipeline = 0  # nothing more there until the next lease
            if task.attempts < task.max_retries and self.gone is None:
                task.attempts += 1
                self.retried += 1
                retried = True
                task.server = None
                self.queue.appendleft(task_id)
                result = None
            else:
                self.failed += 1
                result = Ended(task_id, Outcome.FAILED, server=task.server)
        if result is not None:
            del self.tasks[task_id]
        return EndDecision(result, retried, self.pump(now))

    # -- leases -------------------------------------------------------------------------------
    def asks_due(self) -> list[str]:
        """Servers to ask for a lease now: those with tasks running, or all when work is
        queued (none whose ask is in flight)."""
        return [s.name for s in self.servers.values()
                if (self.queue or self.client_queued or s.running) and not s.asking]

    def asks_urgent(self, now: float) -> list[str]:
        """Servers to ask at once, not at the next round of asks: work is queued and their
        lease has run out (a queue idle for a lease's lifetime has none left; its next task
        would otherwise wait up to an interval for its first slot)."""
        if not self.queue and not self.client_queued:
            return []
        return [s.name for s in self.servers.values() if not s.asking and now >= s.expires]

    def ask_sent(self, name: str) -> Ask:
        """An ask leaves for ``name``: the claim to send (tasks running there, not those
        waiting at the node: a waiting one takes the place of one of ours when it starts)
        and the queue's length."""
        s = self.servers[name]
        s.asking = True
        s.running_at_ask = s.running
        return Ask(s.running - s.waiting, len(self.queue) + self.client_queued)

    def ask_answered(self, name: str, sent: float, lease: tuple[int, int, float] | None,
                     now: float) -> list[Launch]:
        """The ask sent at ``sent`` was answered (``lease``: slots, pipeline, ttl) or given
        up (None: the old lease runs out on its own); launch what now fits."""
        s = self.servers.get(name)
        if s is not None:
            s.asking = False
            if lease is not None:
                s.slots, s.pipeline, ttl = lease
                s.expires = sent + ttl
        return self.pump(now)

    def preempt(self, name: str, count: int) -> list[int]:
        """The server ``name`` asks to stop ``count`` of this user's tasks there
        (:mod:`~psdsf_dist.admission.preemption`): the ids of the tasks to interrupt now —
        its youngest preemptible ones, beyond those it is stopping already and beyond the
        youngest ``waiting`` (the pipelined one has not started: it holds nothing); never a
        blocked one (its slot is given back already)."""
        s = self.servers.get(name)
        if s is None or count <= 0:
            return []
        young = sorted(s.launched_at, key=lambda i: (-s.launched_at[i], -i))[s.waiting:]
        stopping = sum(1 for i in young if self.tasks[i].preempting)
        out: list[int] = []
        for i in young:
            if len(out) >= count - stopping:
                break
            task = self.tasks[i]
            if task.preemptible and not (task.preempting or task.cancelled or task.blocked):
                task.preempting = True
                out.append(i)
        return out

    # -- reports ------------------------------------------------------------------------------
    def backlog(self) -> int:
        """Tasks queued (here and in the client) and running (delegated slots included)."""
        return len(self.queue) + self.client_queued + sum(
            s.running for s in self.servers.values())

    def report_backlog(self, now: float) -> int:
        """The backlog to report: what is queued and running, or — idle for less than
        ``IDLE_LINGER_PERIODS`` — the last one reported (a burst may follow)."""
        backlog = self.backlog()
        if backlog == 0 and self.idle_since is None:
            self.idle_since = now
        if backlog == 0 and self.idle_since is not None \
                and now - self.idle_since < IDLE_LINGER_PERIODS * self.period:
            return self.reported
        return backlog

    def report_answered(self, now: float, backlog: int, servers: dict[str, str],
                        error: str | None) -> list[Ended]:
        """The coordinator answered a report of ``backlog``: ``servers`` (name -> node) exist,
        ``error`` refuses the user (its queued tasks fail)."""
        self.last_answer = now
        self.reported = backlog
        refused: list[Ended] = []
        if error is not None:
            refused = self.withdraw(TenantRefusedError(f"user {self.user!r}: {error}"))
        for name, node in servers.items():
            s = self.servers.get(name)
            if s is None or s.node != node:
                self.servers[name] = ServerSlots(
                    name, node, running=0 if s is None else s.running,
                    launched_at={} if s is None else s.launched_at,
                    short_seconds=PIPELINE_TASK_PERIODS * self.period)
        for name in [n for n in self.servers if n not in servers]:
            s = self.servers[name]
            s.slots = s.pipeline = 0
            if s.running == 0:
                del self.servers[name]
        return refused

    def report_failed(self, now: float, run_id: str, dead: bool, why: str) -> list[Ended]:
        """A report got no answer (``dead``: Ray says the coordinator died; ``why``: the
        error's name): after ``ALLOCATOR_SILENCE_PERIODS`` of silence, or at once if dead,
        the allocator is gone and what is queued fails."""
        silence = ALLOCATOR_SILENCE_PERIODS * self.period
        if not dead and now - self.last_answer <= silence:
            return []
        how = "is gone" if dead else f"has not answered for {silence:g} s"
        self.gone = (f"the allocator of run {run_id!r} {how} ({why}); queued tasks cannot be "
                     "placed")
        return self.withdraw(AllocatorGoneError(self.gone))

    # -- invariants ---------------------------------------------------------------------------
    def accounted(self) -> bool:
        """Every submitted task is queued, running or ended once (the counters add up)."""
        live = sum(1 for t in self.tasks.values() if not t.delegated) + self.direct_running
        ended = self.completed + self.cancelled + self.withdrawn + self.failed
        # a cancelled task that runs is counted cancelled already
        running_cancelled = sum(1 for t in self.tasks.values() if t.cancelled)
        return self.submitted == live + ended - running_cancelled


__all__ = ["ALLOCATOR_SILENCE_PERIODS", "AllocatorGoneError", "CancelAction", "EndDecision",
           "Ended", "Launch", "Outcome", "QueuedTask", "ServerSlots", "Signal",
           "TaskCancelledError", "TaskWithdrawnError", "TenantQueueState", "TenantRefusedError"]
