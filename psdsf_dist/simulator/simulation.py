"""Deterministic in-process simulation of the protocol: a simulated clock and an in-memory
transport around the protocol's own servers (no Ray, no wall clock).

Every present server is a :class:`~psdsf_dist.protocol.node.ServerNode` — the code the Ray
actors run — woken at the times it asks for on a :class:`~psdsf_dist.simulator.clock.SimClock`.
The transport delivers each message ``delay`` seconds after it was sent (at once, in line, when the
delay is 0: as between two servers hosted by one actor) and drops it with probability
``loss``.  Churn goes through the protocol's membership table
(:class:`~psdsf_dist.protocol.membership.ChurnState`), as in the coordinator: each scenario event
makes a new table that every server adopts at the event's time; a failed server stops (its column
expires from the others' totals), a joining one starts as a new incarnation with a few seed peers
(superseding its earlier incarnation's column wherever it is heard).  Everything random comes from
the run's seed — each server's own stream and the transport's — so a run is a function of its
inputs.

Once per period, at ``t = r T`` after the events due by then and before any server acts at
that instant, the run is observed (:func:`~psdsf_dist.protocol.convergence.observe`) and
per-event convergence is judged as in a run on Ray
(:func:`~psdsf_dist.protocol.convergence.event_convergence`).

Gossip models
    ``scuttlebutt`` (the default up to ``AUTO_SNAPSHOT_ABOVE`` servers): the protocol itself,
    message by message.  Its memory grows like K^2 (every server knows every origin).
    ``snapshot``: a model for cluster scale (K = 12,583): once per period, all at the same
    instant, every server runs the same update step on the true totals as they stood
    ``1 + round(delay / T)`` observations earlier (the hard case: everyone on one stale
    snapshot), with message counts and bytes estimated from the protocol's encoding.  A
    server's step is the lock-step round of :mod:`psdsf_dist.simulator.lockstep`
    (:func:`~psdsf_dist.simulator.lockstep.update_on_snapshot`), the one the rule studies run
    without a clock.  Servers of one class in identical states get one computation (exact for
    a deterministic rule).  Servers whose class acts in its own slot (the class rule with few
    classes, :attr:`~psdsf_dist.protocol.node.ServerNode.slot`) update at their slot instants
    instead, on the columns as they stood ``delay`` seconds before (with no delay, as they
    stand: the earlier slots' moves included, which is what slots assume of gossip).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.solver import ServerClasses
from psdsf_dist.model.events import Event, at_each_instant
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.protocol.classes import MAX_SLOTS
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.convergence import (
    Observation,
    Traffic,
    event_convergence,
    observe,
)
from psdsf_dist.protocol.distance import forget
from psdsf_dist.protocol.gossip import (
    COLUMN_HEADER_BYTES,
    COLUMN_VALUE_BYTES,
    DELTA_ENTRY_BYTES,
    DIGEST_ENTRY_BYTES,
    MESSAGE_HEADER_BYTES,
)
from psdsf_dist.protocol.membership import ChurnState
from psdsf_dist.protocol.node import Message, ServerNode, seed_peers, server_seed
from psdsf_dist.protocol.outcome import ProtocolOutcome
from psdsf_dist.protocol.transport import Transport
from psdsf_dist.protocol.update_rule import RuleState, UpdateRule
from psdsf_dist.simulator.clock import SimClock
from psdsf_dist.simulator.lockstep import ClassSums, Snapshot, update_on_snapshot

FloatArray = npt.NDArray[np.float64]
GossipModel = Literal["auto", "scuttlebutt", "snapshot"]

AUTO_SNAPSHOT_ABOVE = 2000

# same-instant order: scenario events, then server wake-ups, then message deliveries
_EVENT, _WAKE, _DELIVERY = 0, 1, 2


@dataclass(frozen=True)
class SimConfig:
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    rounds: int = 300
    """Periods to simulate (one observation each)."""
    gossip: GossipModel = "auto"
    stop_after_hold: int | None = None
    """Stop early once the last event has passed and the certificate has held this many
    rounds in a row (for experiments; None = always run ``rounds``)."""
    memoize: bool = True
    """Snapshot model: compute the update once per class of identical servers in identical
    states (bit-identical to computing each; off to time the per-server cost)."""

    def check(self) -> None:
        self.protocol.check()
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")


@dataclass(frozen=True)
class SimulationResult(ProtocolOutcome):
    config: SimConfig
    gossip: str
    seconds: float

    @property
    def protocol(self) -> ProtocolConfig:
        return self.config.protocol

    @property
    def seconds_per_round(self) -> float:
        return self.seconds / max(len(self.trace), 1)


@dataclass
class Simulator:
    """One simulation run; use :func:`simulate`."""

    scenario: Scenario
    config: SimConfig
    rule: UpdateRule | None = None
    progress: Callable[[Observation], None] | None = None

    def __post_init__(self) -> None:
        self.config.check()
        cfg = self.config.protocol
        self.scenario.check_mode(cfg.mode)
        self._rule: UpdateRule = self.rule if self.rule is not None else cfg.make_rule()
        self.churn, self.events = ChurnState.start(self.scenario)
        full = self.churn.full
        model = self.config.gossip
        if model == "auto":
            model = "snapshot" if full.num_servers > AUTO_SNAPSHOT_ABOVE else "scuttlebutt"
        self.model: str = model
        self.clock = SimClock()
        self.transport = Transport(cfg)
        self.table = self.churn.table()
        self.nodes: dict[str, ServerNode] = {}
        """The live servers by name."""
        self.by_origin: dict[str, ServerNode] = {}
        self.incarnations: dict[str, int] = {}
        self._sent = {name: (0, 0) for name in full.server_names}
        self.traffic = Traffic(np.zeros(full.num_servers), np.zeros(full.num_servers))
        """Messages and bytes each server sent in the latest round."""
        # snapshot model: whole allocations of the latest observations, a shared initial state
        self._history: deque[FloatArray] = deque(
            maxlen=round(cfg.delay / cfg.period) + 3)
        self._initial: RuleState = self._rule.initial_state(full.num_users)
        self._memo: dict[tuple[int, int, int, bytes], tuple[FloatArray, RuleState]] = {}
        self._stale: dict[int, Snapshot] = {}
        self._by_class: dict[int, ClassSums] = {}
        self._slot_seen: deque[tuple[float, Snapshot]] = deque(
            maxlen=(round(cfg.delay / cfg.period) + 2) * MAX_SLOTS)
        self._index = {name: i for i, name in enumerate(full.server_names)}
        names = self.churn.present_servers()
        for name in names:
            self._start(name, 0.0, [n for n in names if n != name], everyone=True)
        self._history.append(self.allocation())

    # -- servers ------------------------------------------------------------------------------
    def _start(self, name: str, now: float, others: list[str], *, everyone: bool) -> None:
        cfg = self.config.protocol
        incarnation = self.incarnations.get(name, -1) + 1
        self.incarnations[name] = incarnation
        node = ServerNode(name, incarnation, self.table, cfg, self._rule)
        if self.model == "snapshot":
            node.state = self._initial  # shared, so identical servers stay recognisable
            self.clock.at(now, _WAKE, partial(self._snapshot_start, node))
        else:
            origins = [self.nodes[o].origin if o in self.nodes else o for o in others]
            node.introduce(seed_peers(origins, server_seed(cfg.seed, name, incarnation),
                                      everyone=everyone), now)
            self._schedule(node, node.first_wake(now))
        self.nodes[name] = node
        self.by_origin[node.origin] = node

    def _schedule(self, node: ServerNode, at: float) -> None:
        self.clock.at(at, _WAKE, partial(self._wake, node))

    def _wake(self, node: ServerNode) -> None:
        if self.nodes.get(node.name) is not node:
            return  # failed, or an earlier incarnation
        now = self.clock.now
        woke = node.wake(now)
        for peer, syn in woke.exchanges:
            self._send(peer, syn, now)
        self._schedule(node, woke.next_at)

    # -- transport ----------------------------------------------------------------------------
    def _send(self, to: str, message: Message, now: float) -> None:
        if self.transport.lost():
            return
        if self.transport.delay > 0:
            self.clock.at(now + self.transport.delay, _DELIVERY,
                          partial(self._deliver, to, message))
        else:
            self._deliver(to, message)

    def _deliver(self, to: str, message: Message) -> None:
        node = self.by_origin.get(to)
        if node is None or self.nodes.get(node.name) is not node:
            return  # a failed server, or an old incarnation: the message is lost
        now = self.clock.now
        reply = node.receive(message, now)
        if reply is not None:
            self._send(message.sender, reply, now)

    # -- churn --------------------------------------------------------------------------------
    def _apply(self, events: Sequence[Event]) -> None:
        """Apply the events of one instant (in file order) as one change
        (:meth:`ChurnState.apply_together`)."""
        now = self.clock.now
        change = self.churn.apply_together(events, now, from_scenario=True)
        for server in change.failed:
            node = self.nodes.pop(server, None)  # its tasks are lost, no goodbye
            if node is not None:
                self.by_origin.pop(node.origin, None)
        self.table = self.churn.table()
        for node in self.nodes.values():
            node.adopt(self.table, now)
        self._memo.clear()
        self._class_of = ServerClasses.of(self.churn.current()).member_class
        for server in change.joined:
            others = [n for n in self.churn.present_servers() if n != server]
            self._start(server, now, others, everyone=False)

    # -- snapshot model -----------------------------------------------------------------------
    def _snapshot_start(self, node: ServerNode) -> None:
        # a server joining mid-run updates with the others: at the next period boundary, or
        # at its class's next slot instant
        T = self.config.protocol.period
        phase = 0.0 if node.slot is None else node.slot
        self.clock.at((math.ceil(self.clock.now / T - phase - 1e-9) + phase) * T, _WAKE,
                      partial(self._snapshot_round_of, node))

    def _snapshot_round_of(self, node: ServerNode) -> None:
        if self.nodes.get(node.name) is not node:
            return
        self._snapshot_update(node)
        # the next instant at its phase (its class's slot may have moved with the classes)
        T = self.config.protocol.period
        phase = 0.0 if node.slot is None else node.slot
        self.clock.at((math.floor(self.clock.now / T - phase + 1e-9) + 1 + phase) * T, _WAKE,
                      partial(self._snapshot_round_of, node))

    def _snapshot(self, back: int) -> Snapshot:
        """The observation ``back`` rounds into the history, as every server reads it:
        computed once per round, not once per server."""
        seen = self._stale.get(back)
        if seen is None:
            seen = Snapshot.of(self._history[max(back, 0)],
                               self._history[back - 1] if back >= 1 else None)
            self._stale[back] = seen
        return seen

    def _slot_snapshot(self) -> Snapshot:
        """The columns as a class acting in its slot now reads them: as they stood ``delay``
        seconds ago (the latest slot's moves included when the delay is 0, the premise of
        slots).  The columns change only at slot instants, so that is the allocation found
        at the first of them at or after ``now - delay``, before anything moved there;
        recorded once per instant, before the first member acts."""
        now = self.clock.now
        if not self._slot_seen or self._slot_seen[-1][0] < now:
            self._slot_seen.append((now, Snapshot.of(self.allocation(), None)))
        since = now - self.config.protocol.delay - 1e-9 * self.config.protocol.period
        return next(seen for at, seen in self._slot_seen if at >= since)

    def _class_sums(self, seen: Snapshot, node: ServerNode) -> ClassSums:
        """The classes as ``seen`` shows them (every server shares one table, hence one class
        map, at an instant): summed once per snapshot."""
        key = id(seen)
        by_class = self._by_class.get(key)
        if by_class is None:
            up = np.flatnonzero(self.churn.servers_present).astype(np.int64)
            by_class = ClassSums.of(node.classes, seen.columns[:, up], up)
            self._by_class[key] = by_class
        return by_class

    def _snapshot_update(self, node: ServerNode) -> None:
        cfg = self.config.protocol
        now = self.clock.now
        if node.slot is None:  # everyone at once, on the observation 1 + delay rounds old
            lag = 1 + round(cfg.delay / cfg.period)
            seen = self._snapshot(len(self._history) - lag)
        else:  # its class in its slot, on the columns as they stand (slotted class rule)
            lag = 1
            seen = self._slot_snapshot()
        i = self._index[node.name]
        column = node.column
        key = (int(self._class_of[i]), id(seen), id(node.state),
               column.tobytes() + seen.columns[:, i].tobytes())
        hit = self._memo.get(key) if self.config.memoize else None
        if hit is None:
            klass = None
            if node.slot is not None:
                klass = self._class_sums(seen, node).knowledge(i, column, seen.columns[:, i])
            hit = update_on_snapshot(self._rule, node.state, node.view, column, seen, i,
                                     staleness=lag - 1, klass=klass,
                                     where=f"server {node.name} at t={now:g}")
            if self.config.memoize:
                self._memo[key] = hit
        new, node.state = hit
        node.gossip.set_column(new, now)
        node.rounds += 1

    def _estimate_traffic(self, changed: npt.NDArray[np.bool_]) -> None:
        """Protocol cost without running it (snapshot model): one digest exchange per peer,
        every changed column and every heartbeat reaching every server once."""
        up = self.churn.servers_present
        live = int(up.sum())
        F = self.config.protocol.fanout * self.config.protocol.gossip_rate
        X = self._history[-1]
        digests = 2 * F * (MESSAGE_HEADER_BYTES + DIGEST_ENTRY_BYTES * live)
        nnz = np.count_nonzero(X[:, up], axis=0)
        columns = float(np.sum((COLUMN_HEADER_BYTES + COLUMN_VALUE_BYTES * nnz) * changed[up]))
        heartbeats = DELTA_ENTRY_BYTES * live + F * MESSAGE_HEADER_BYTES
        self.traffic.messages[:] = np.where(up, 3 * F, 0)
        self.traffic.bytes[:] = np.where(up, digests + heartbeats + columns, 0)

    # -- observing ----------------------------------------------------------------------------
    def allocation(self) -> FloatArray:
        """Every live server's current column (absent servers: zeros), N x K."""
        full = self.churn.full
        X = np.zeros((full.num_users, full.num_servers))
        for i, name in enumerate(full.server_names):
            node = self.nodes.get(name)
            if node is not None:
                col = node.column
                X[: len(col), i] = col[: full.num_users]
        return X

    def _count_traffic(self) -> None:
        for i, name in enumerate(self.churn.full.server_names):
            node = self.nodes.get(name)
            sent = (0, 0) if node is None else (node.traffic.messages, node.traffic.bytes)
            before = self._sent.get(name, (0, 0))
            if node is not None and sent[0] < before[0]:
                before = (0, 0)  # a new incarnation counts from zero
            self.traffic.messages[i] = sent[0] - before[0]
            self.traffic.bytes[i] = sent[1] - before[1]
            self._sent[name] = sent

    def run(self) -> SimulationResult:
        cfg = self.config.protocol
        T = cfg.period
        for batch in at_each_instant(self.events):
            self.clock.at(batch[0].at, _EVENT, partial(self._apply, batch))
        trace: list[Observation] = []
        started = time.perf_counter()
        previous: FloatArray | None = None
        forget()  # the distance to fair of this run depends on this run alone: deterministic
        for r in range(1, self.config.rounds + 1):
            t0 = time.perf_counter()
            self._class_of = ServerClasses.of(self.churn.current()).member_class
            self._memo.clear()
            self._stale.clear()
            self._by_class.clear()
            self.clock.run_until(r * T, through_priority=_EVENT)
            X = self.allocation()
            if self.model == "snapshot":
                changed = np.any(X != self._history[-1], axis=0) if X.shape == \
                    self._history[-1].shape else np.ones(X.shape[1], dtype=bool)
                self._history.append(X)
                self._estimate_traffic(changed)
            else:
                self._history.append(X)
                self._count_traffic()
            rec = observe(self.churn.current(), X, self.churn.servers_present, round=r - 1,
                          time=r * T, mode=cfg.mode, rtol=cfg.rtol, traffic=self.traffic,
                          previous_totals=previous, seconds=time.perf_counter() - t0)
            previous = X.sum(axis=1)
            trace.append(rec)
            if self.progress is not None:
                self.progress(rec)
            if self._settled(trace):
                break
        seconds = time.perf_counter() - started
        outcomes = event_convergence(self.churn.history, trace, T, hold=cfg.hold)
        return SimulationResult(self.churn.current(), self.allocation(), tuple(trace),
                                tuple(outcomes), self.config, self.model, seconds)

    def _settled(self, trace: list[Observation]) -> bool:
        hold = self.config.stop_after_hold
        if hold is None or len(trace) < hold:
            return False
        last_event = max((e.at for e in self.events), default=0.0)
        if trace[-hold].time < last_event:
            return False
        return all(rec.holds for rec in trace[-hold:])


def simulate(
    scenario: Scenario,
    config: SimConfig | None = None,
    *,
    rule: UpdateRule | None = None,
    progress: Callable[[Observation], None] | None = None,
) -> SimulationResult:
    """Run a simulation (see the module docstring)."""
    return Simulator(scenario, config or SimConfig(), rule, progress).run()
