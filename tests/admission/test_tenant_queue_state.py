"""A tenant queue's decisions without Ray: launches into leases, slots given back by blocked
tasks, actors in free slots, cancel, retries, withdrawal, the allocator gone."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from psdsf_dist.admission.direct_slots import DirectOutcome, DirectSlots
from psdsf_dist.admission.tenant_queue_state import (
    PIPELINE_HISTORY,
    AllocatorGoneError,
    Ask,
    CancelAction,
    Launch,
    Outcome,
    Signal,
    TaskCancelledError,
    TaskWithdrawnError,
    TenantQueueState,
    TenantRefusedError,
)

PERIOD = 1.0
TTL = 100.0


def state_with(servers: dict[str, int], pipeline: int = 0,
               task_seconds: float = 0.1) -> TenantQueueState:
    """A state whose servers ``name -> slots`` (on nodes ``n-<name>``) have leases now, after
    tasks of ``task_seconds`` each ran there."""
    s = TenantQueueState("u", PERIOD, 0.0)
    s.report_answered(0.0, 0, {name: f"n-{name}" for name in servers}, None)
    for name, slots in servers.items():
        s.servers[name].durations.extend([task_seconds] * PIPELINE_HISTORY)
        s.ask_sent(name)
        s.ask_answered(name, 0.0, (slots, pipeline, TTL), 0.0)
    return s


def submit(s: TenantQueueState, count: int, now: float = 1.0, **kw: object) -> list[Launch]:
    ids = [s.new_task(3, now, **kw) for _ in range(count)]  # type: ignore[arg-type]
    launches, _ = s.submit(ids, now)
    return launches


def test_tasks_fill_the_open_slots_in_order_the_largest_first() -> None:
    s = state_with({"a": 1, "b": 2})
    launches = submit(s, 5)
    assert [(x.task, x.server) for x in launches] == [(0, "b"), (1, "a"), (2, "b")]
    assert list(s.queue) == [3, 4] and s.admitted == 3
    end = s.ended(1, Signal.DONE, 2.0)
    assert end.ended is not None and end.ended.outcome is Outcome.COMPLETED
    assert [(x.task, x.server) for x in end.launches] == [(3, "a")]  # the freed slot


def test_no_lease_no_launch_and_an_expired_lease_stops_launching() -> None:
    s = TenantQueueState("u", PERIOD, 0.0)
    assert submit(s, 2) == [] and len(s.queue) == 2
    s = state_with({"a": 2})
    assert s.pump(TTL + 1.0) == []


def test_work_after_a_lease_ran_out_asks_at_once() -> None:
    s = state_with({"a": 1, "b": 1})
    assert s.asks_urgent(TTL + 1.0) == []  # nothing queued: nothing to ask for
    assert submit(s, 1, now=TTL + 1.0) == [] and s.asks_urgent(TTL + 1.0) == ["a", "b"]
    s.ask_sent("a")
    assert s.asks_urgent(TTL + 1.0) == ["b"]  # one ask in flight per server
    (launch,) = s.ask_answered("a", TTL + 1.0, (1, 0, TTL), TTL + 1.0)
    assert launch.server == "a" and s.asks_urgent(TTL + 1.0) == []


def test_an_ask_claims_the_running_tasks_not_the_one_waiting_for_a_slot_of_ours() -> None:
    s = state_with({"a": 2}, pipeline=1)
    first = submit(s, 2, now=1.0)
    (piped,) = submit(s, 1, now=4.0)  # waits at the node for a slot of ours
    assert [x.server for x in first] == ["a", "a"] and piped.server == "a"
    assert s.ask_sent("a") == Ask(running=2, queued=0)
    s.ask_answered("a", 5.0, (2, 1, TTL), 5.0)
    s.ended(first[0].task, Signal.DONE, 6.0)  # the pipelined one takes its slot
    assert s.ask_sent("a") == Ask(running=2, queued=0)


def test_a_preempted_task_is_its_users_youngest_preemptible_one_and_runs_again() -> None:
    s = state_with({"a": 4})
    ids = [s.new_task(3, 1.0 + k, preemptible=k != 3) for k in range(4)]  # the last one: not
    for task_id in ids:
        s.submit([task_id], 1.0 + task_id)
    assert s.servers["a"].running == 4
    # the server's answer: 2 slots, and two to stop — the youngest preemptible ones (the
    # youngest of all is not preemptible)
    s.ask_sent("a")
    assert s.preempt("a", 2) == [ids[2], ids[1]]
    s.ask_answered("a", 5.0, (2, 0, TTL), 5.0)
    assert s.preempt("a", 2) == []  # asked again while they stop: nothing more
    assert s.preempt("a", 3) == [ids[0]]
    # an interrupted one is queued again at the head; one that ended with its value completed
    end = s.ended(ids[2], Signal.LOST, 10.0)
    assert end.preempted and end.ended is None and not end.retried and s.preempted == 1
    assert s.queue[0] == ids[2] and s.tasks[ids[2]].attempts == 0  # not a retry
    done = s.ended(ids[1], Signal.DONE, 10.0)
    assert done.ended is not None and done.ended.outcome is Outcome.COMPLETED
    assert done.launches == []  # ids[0] and ids[3] still hold the 2 slots
    # cancelled by its caller while being stopped: cancelled, not queued again
    s.cancel(ids[0])
    gone = s.ended(ids[0], Signal.LOST, 10.0)
    assert gone.ended is not None and gone.ended.outcome is Outcome.CANCELLED
    assert s.failed == 0 and s.retried == 0 and s.accounted()
    # the requeued task is launched again like any other, when there is room (2 slots: ids[3]
    # and it)
    assert [x.task for x in gone.launches] == [ids[2]]


def test_a_pipelined_task_waits_at_the_node_and_an_actor_never_takes_it() -> None:
    s = state_with({"a": 1}, pipeline=1)
    assert len(submit(s, 1)) == 1
    actor = s.new_task(0, 1.0, actor=True)
    assert s.submit([actor], 1.0)[0] == []  # the slot is taken; the pipeline is not for it
    assert s.servers["a"].waiting == 0
    s.queue.clear()
    del s.tasks[actor]
    s.submitted -= 1
    assert len(submit(s, 1)) == 1 and s.servers["a"].waiting == 1


def test_behind_long_tasks_nothing_waits_at_a_full_node() -> None:
    """Pipelining only pays for short tasks: behind long ones the waiting task would idle
    while a slot frees elsewhere."""
    s = state_with({"a": 2}, pipeline=1, task_seconds=10 * PERIOD)
    assert len(submit(s, 3)) == 2 and s.servers["a"].waiting == 0 and len(s.queue) == 1
    fresh = TenantQueueState("u", PERIOD, 0.0)  # no history yet: no pipelining either
    fresh.report_answered(0.0, 0, {"a": "n-a"}, None)
    fresh.ask_sent("a")
    fresh.ask_answered("a", 0.0, (2, 1, TTL), 0.0)
    assert len(submit(fresh, 3)) == 2


def test_no_task_waits_at_a_full_node_while_another_has_a_free_slot() -> None:
    s = state_with({"a": 1, "b": 1}, pipeline=1)
    s.ask_sent("b")
    s.ask_answered("b", 0.0, (1, 0, TTL), 0.0)  # b lets nothing wait at its node
    launches = submit(s, 4)
    assert [x.server for x in launches] == ["a", "b", "a"]  # only the last one waits
    assert [s.servers[n].waiting for n in "ab"] == [1, 0] and len(s.queue) == 1


def test_a_blocked_task_gives_its_slot_back_until_it_resumes() -> None:
    s = state_with({"a": 1})
    (parent,) = submit(s, 1)
    assert submit(s, 1) == []  # its child waits: the one slot is the parent's
    (child,) = s.blocked(parent.task, 1.5)  # the parent waits for it: the child takes the slot
    assert s.blocked_tasks == 1 and s.servers["a"].running == 1
    assert s.blocked(parent.task, 1.6) == []  # told twice: nothing more
    assert submit(s, 1) == []  # the slot is the child's now
    s.resumed(parent.task)  # the parent takes its slot back, beyond the lease for a moment
    assert s.blocked_tasks == 0 and s.servers["a"].running == 2
    assert s.ended(child.task, Signal.DONE, 2.0).launches == []  # still one too many
    assert len(s.ended(parent.task, Signal.DONE, 2.1).launches) == 1
    assert s.servers["a"].running == 1


def test_a_task_that_ends_blocked_frees_its_slot_once() -> None:
    s = state_with({"a": 2})
    first, _ = submit(s, 2)
    s.blocked(first.task, 1.5)
    s.ended(first.task, Signal.DONE, 2.0)  # its end overtook its resume
    s.resumed(first.task)  # the late resume of a task that ended: nothing
    assert s.servers["a"].running == 1 and s.blocked_tasks == 0
    assert s.blocked(99, 2.0) == [] and s.blocked_tasks == 0  # unknown: nothing
    assert s.preempt("a", 1) == []  # the one left is not preemptible


def test_cancel_withdraws_a_queued_task_and_interrupts_a_running_one() -> None:
    s = state_with({"a": 1})
    (running,) = submit(s, 1)
    queued = s.new_task(3, 1.0)
    s.submit([queued], 1.0)
    action, ended = s.cancel(queued)
    assert action is CancelAction.WITHDRAWN and ended is not None
    assert isinstance(ended.error, TaskCancelledError) and queued not in s.queue
    assert s.cancel(queued) == (CancelAction.NONE, None)
    assert s.cancel(running.task)[0] is CancelAction.INTERRUPT
    end = s.ended(running.task, Signal.LOST, 2.0)  # Ray's cancellation: never retried
    assert end.ended is not None and end.ended.outcome is Outcome.CANCELLED
    assert not end.retried and s.cancelled == 2 and s.accounted()


def test_a_lost_task_is_retried_at_the_head_then_fails() -> None:
    s = state_with({"a": 1})
    task = s.new_task(1, 0.0)
    assert len(s.submit([task], 0.0)[0]) == 1
    submit(s, 1)
    end = s.ended(task, Signal.LOST, 1.0)
    assert end.retried and end.ended is None and end.launches == []  # the lease is taken away
    assert s.queue[0] == task
    s.ask_sent("a")
    (again,) = s.ask_answered("a", 1.0, (1, 0, TTL), 1.0)
    assert again.task == task
    end = s.ended(task, Signal.LOST, 2.0)
    assert end.ended is not None and end.ended.outcome is Outcome.FAILED and s.retried == 1


def test_withdraw_refuse_and_gone_end_what_is_queued() -> None:
    s = state_with({"a": 0})
    submit(s, 2, batch="x")
    submit(s, 1, batch="y")
    out = s.withdraw(TaskWithdrawnError("stop"), "x")
    assert [e.outcome for e in out] == [Outcome.WITHDRAWN] * 2
    assert out[0].error is not out[1].error  # one exception object per task
    assert len(s.queue) == 1
    refused = s.report_answered(1.0, 1, {"a": "n-a"}, "weight: bad")
    assert [e.outcome for e in refused] == [Outcome.FAILED]
    assert isinstance(refused[0].error, TenantRefusedError)
    submit(s, 1)
    assert s.report_failed(1.0 + PERIOD, "r", dead=False, why="TimeoutError") == []
    gone = s.report_failed(2.0, "r", dead=True, why="ActorDiedError")
    assert isinstance(gone[0].error, AllocatorGoneError) and "is gone" in (s.gone or "")
    assert s.accounted() and s.failed == 2 and s.withdrawn == 2


def test_the_backlog_lingers_once_idle_and_a_vanished_server_goes_when_empty() -> None:
    s = state_with({"a": 1, "b": 1})
    (x, y) = submit(s, 2)
    assert s.report_backlog(1.0) == 2
    s.report_answered(1.0, 2, {"a": "n-a", "b": "n-b"}, None)
    s.ended(x.task, Signal.DONE, 1.0)
    s.ended(y.task, Signal.DONE, 1.0)
    assert s.report_backlog(1.5) == 2  # idle for less than IDLE_LINGER_PERIODS
    assert s.report_backlog(1.5 + PERIOD) == 0
    (z,) = submit(s, 1, now=3.0)
    s.report_answered(3.0, 1, {"a": "n-a"}, None)  # one server left the table
    kept = z.server
    assert (kept in s.servers) == (kept == "a" or s.servers[kept].running > 0)
    assert "b" not in s.servers or s.servers["b"].slots == 0


@dataclass
class Model:
    """What a test expects: every task's outcome, once."""

    outcomes: dict[int, Outcome] = field(default_factory=dict)
    launched: set[int] = field(default_factory=set)
    cancelled_queued: set[int] = field(default_factory=set)


def exchange(s: TenantQueueState, client: DirectSlots, now: float) -> list[Launch]:
    """One exchange as the queue makes it (without the wait): the client's report, slots
    granted, the reply taken."""
    report = client.report(now)
    launches, _ = s.direct_report(report, now)
    s.grant(report.wanted, now)
    client.granted(s.direct_reply(now, 0.0), now)
    return launches


def test_slots_are_delegated_only_when_free_and_nothing_is_queued() -> None:
    s = state_with({"a": 2, "b": 1})
    assert submit(s, 2)  # two tasks in a's two slots
    launched = s.grant(5, 1.0)
    assert [(x.server, x.node) for x in launched] == [("b", "n-b")]  # the one free slot
    assert s.servers["b"].running == 1 and s.backlog() == 3
    s.ended(0, Signal.DONE, 1.5)
    submit(s, 3, 1.6)  # one takes the freed slot, two wait: nothing is delegated
    assert len(s.queue) == 2 and s.grant(5, 1.7) == []
    reply = s.direct_reply(1.7, 100.0)
    assert [(g.slot, g.server, g.expires) for g in reply.granted] == [(2, "b", 100.0 + TTL)]
    assert s.accounted()


def test_the_clients_tasks_count_as_the_queues_and_its_waiting_ones_as_backlog() -> None:
    s = state_with({"a": 2})
    client = DirectSlots(0.25)
    client.turned_away = 2
    exchange(s, client, 1.0)
    assert len(client.slots) == 2 and s.delegated_per_server() == {"a": 2}
    first, second = client.take(1.0), client.take(1.0)
    assert first is not None and second is not None and client.take(1.0) is None
    client.queued = 7
    exchange(s, client, 1.1)
    assert s.client_queued == 7 and s.backlog() == 9 and s.admitted == 2
    assert s.ask_sent("a").queued == 7
    client.ended(first.slot, DirectOutcome.COMPLETED, 1.2)
    client.ended(second.slot, DirectOutcome.FAILED, 1.2)
    client.queued = 0
    exchange(s, client, 1.3)
    assert (s.submitted, s.completed, s.failed) == (2, 1, 1) and s.accounted()
    assert s.servers["a"].durations[-1] == 1.2 - 1.0


def test_a_lease_that_shrinks_revokes_the_slots_held_beyond_it() -> None:
    s = state_with({"a": 3})
    client = DirectSlots(0.25)
    client.turned_away = 3
    exchange(s, client, 1.0)
    held = [client.take(1.0) for _ in range(3)]
    assert all(h is not None for h in held)
    s.ask_sent("a")
    s.ask_answered("a", 1.1, (1, 0, TTL), 1.1)  # the share fell to one task
    exchange(s, client, 1.2)
    assert len(s.revoked) == 2 and sum(x.revoked for x in client.slots.values()) == 2
    for h in held:
        assert h is not None
        client.ended(h.slot, DirectOutcome.COMPLETED, 1.3)
    assert client.take(1.3) is not None  # the one slot not revoked
    exchange(s, client, 1.4)
    assert s.servers["a"].running == 1 and not s.revoked and len(client.slots) == 1


def test_a_delegated_slot_whose_task_blocks_gives_its_slot_back() -> None:
    s = state_with({"a": 1})
    client = DirectSlots(0.25)
    client.turned_away = 1
    exchange(s, client, 1.0)
    grant = client.take(1.0)
    assert grant is not None
    assert submit(s, 1, 1.1) == []  # the lease's one slot is the client's
    assert [x.server for x in s.slot_blocked(grant.slot, "t1", 1.2)] == ["a"]  # its child
    s.slot_resumed(grant.slot, "t0")  # a late notice of an earlier task in the slot
    assert s.servers["a"].running == 1
    s.slot_resumed(grant.slot, "t1")
    assert s.servers["a"].running == 2  # beyond the lease for a moment, as Ray does


EVENT = st.one_of(
    st.tuples(st.just("submit"), st.integers(1, 4), st.booleans(), st.integers(0, 2)),
    st.tuples(st.just("actor"), st.just(1), st.just(False), st.just(0)),
    st.tuples(st.just("end"), st.integers(0, 50), st.sampled_from(list(Signal)), st.just(0)),
    st.tuples(st.just("cancel"), st.integers(0, 50), st.just(False), st.just(0)),
    st.tuples(st.just("lease"), st.integers(0, 2), st.integers(0, 3), st.integers(0, 1)),
    st.tuples(st.just("withdraw"), st.integers(0, 1), st.just(False), st.just(0)),
    st.tuples(st.just("servers"), st.integers(0, 7), st.just(False), st.just(0)),
    st.tuples(st.just("preempt"), st.integers(0, 2), st.integers(0, 3), st.just(0)),
    st.tuples(st.just("block"), st.integers(0, 50), st.booleans(), st.just(0)),
    st.tuples(st.just("exchange"), st.integers(0, 4), st.integers(0, 3), st.just(0)),
    st.tuples(st.just("direct"), st.integers(0, 3), st.just(False), st.just(0)),
    st.tuples(st.just("direct_end"), st.integers(0, 50), st.sampled_from(list(DirectOutcome)),
              st.integers(0, 3)),
)


@given(st.lists(EVENT, max_size=60))
def test_never_more_running_than_leased_and_no_task_lost(events: list[tuple]) -> None:  # type: ignore[type-arg]
    names = ["s0", "s1", "s2"]
    s = TenantQueueState("u", PERIOD, 0.0)
    s.report_answered(0.0, 0, {n: f"n-{n}" for n in names}, None)
    model = Model()
    leased: dict[str, int] = {n: 0 for n in names}
    now = 0.0
    client = DirectSlots(0.25)
    direct: Counter[DirectOutcome] = Counter()
    """Outcomes of the tasks the client ran, as it reported them."""
    slots: set[int] = set()
    """Every slot ever delegated (ids the queue's tasks do not use)."""

    def record(launches: list[Launch]) -> None:
        for x in launches:
            assert x.task not in model.outcomes and x.task not in model.cancelled_queued
            model.launched.add(x.task)
        # never more running in a lease than it allows when it is launched into
        for name in {x.server for x in launches}:
            srv = s.servers[name]
            assert srv.running <= srv.slots + srv.pipeline

    for kind, a, b, c in events:
        now += 0.01
        if kind == "submit":
            ids = [s.new_task(1, now, batch=str(c), preemptible=c == 1) for _ in range(a)]
            record(s.submit(ids, now)[0])
        elif kind == "actor":
            record(s.submit([s.new_task(0, now, actor=True)], now)[0])
        elif kind == "end":
            live = sorted(t.id for t in s.tasks.values()
                          if t.server is not None and not t.delegated)
            if live:
                task = live[a % len(live)]
                decision = s.ended(task, b, now)
                if decision.ended is not None:
                    model.outcomes[task] = decision.ended.outcome
                else:  # queued again
                    model.launched.discard(task)
                record(decision.launches)
        elif kind == "cancel":
            live = sorted(t.id for t in s.tasks.values() if not t.delegated)
            if live:
                task = live[a % len(live)]
                action, ended = s.cancel(task)
                if action is CancelAction.WITHDRAWN:
                    assert ended is not None and task not in model.launched
                    model.outcomes[task] = Outcome.CANCELLED
                    model.cancelled_queued.add(task)
        elif kind == "lease":
            name = names[a]
            if name in s.servers and not s.servers[name].asking:
                s.ask_sent(name)
                if c:  # answered at once, else it stays in flight until a later lease event
                    record(s.ask_answered(name, now, (b, 1, TTL), now))
                    leased[name] = b
            elif name in s.servers:
                record(s.ask_answered(name, now, (b, 0, TTL), now))
                leased[name] = b
        elif kind == "preempt":
            name = names[a]
            for task_id in s.preempt(name, b):
                task = s.tasks[task_id]
                assert task.preemptible and task.server == name and not task.blocked
        elif kind == "block":
            live = sorted(s.tasks)
            if live:
                task = live[a % len(live)]
                if b:
                    record(s.blocked(task, now))
                else:
                    s.resumed(task)
        elif kind == "withdraw":
            error = TaskWithdrawnError("w") if a else AllocatorGoneError("g")
            for e in s.withdraw(error, None if a == 0 else "1"):
                model.outcomes[e.task] = e.outcome
        elif kind == "servers":
            kept = {n: f"n-{n}" for i, n in enumerate(names) if a >> i & 1}
            for e in s.report_answered(now, s.backlog(), kept, None):
                model.outcomes[e.task] = e.outcome
        elif kind == "exchange":  # the client wants a slots more, has b tasks waiting
            client.turned_away += a
            client.queued = b
            before = s.delegated_per_server()
            report = client.report(now)
            for _slot, outcome, _seconds in report.ended:
                direct[outcome] += 1
            record(s.direct_report(report, now)[0])
            granted = s.grant(report.wanted, now)
            for x in granted:
                srv = s.servers[x.server]
                assert srv.running <= srv.slots + srv.pipeline and x.task not in s.queue
            assert not granted or not s.queue  # queued tasks come first
            slots.update(x.task for x in granted)
            assert len(granted) <= max(report.wanted - sum(before.values()), 0)
            client.granted(s.direct_reply(now, 0.0), now)
        elif kind == "direct":
            for _ in range(a):
                grant = client.take(now)
                if grant is not None:  # only into a slot the queue holds for the client
                    assert grant.slot in s.tasks and s.tasks[grant.slot].delegated
                    assert grant.slot not in s.revoked
        elif kind == "direct_end":
            busy = sorted(i for i, x in client.slots.items() if x.busy)
            if busy:
                client.ended(busy[a % len(busy)], b, now, [0.0] * c)  # c more calls ran
        # invariants after every event
        for srv in s.servers.values():
            ours = sum(1 for t in s.tasks.values() if t.server == srv.name and not t.blocked)
            assert srv.running == ours
            assert set(srv.launched_at) == {t.id for t in s.tasks.values()
                                            if t.server == srv.name}
            assert 0 <= srv.waiting <= srv.running
        assert all(t.server is not None for t in s.tasks.values() if t.blocked)
        assert not any(t.blocked and t.actor for t in s.tasks.values())
        assert set(s.queue) == {t.id for t in s.tasks.values() if t.server is None}
        assert not set(s.tasks) & set(model.outcomes)
        assert s.accounted()
        assert set(client.slots) <= {t.id for t in s.tasks.values() if t.delegated}
    # every task submitted is queued, running or ended with exactly one outcome
    assert set(s.tasks) - slots | set(model.outcomes) == set(range(s._next_id)) - slots
    assert sum(1 for o in model.outcomes.values() if o is Outcome.COMPLETED) \
        == s.completed - direct[DirectOutcome.COMPLETED]
    assert sum(1 for o in model.outcomes.values() if o is Outcome.WITHDRAWN) == s.withdrawn
    assert sum(1 for o in model.outcomes.values() if o is Outcome.FAILED) \
        == s.failed - direct[DirectOutcome.FAILED]
    running_cancelled = sum(1 for t in s.tasks.values() if t.cancelled)
    assert sum(1 for o in model.outcomes.values() if o is Outcome.CANCELLED) \
        == s.cancelled - running_cancelled - direct[DirectOutcome.CANCELLED]
