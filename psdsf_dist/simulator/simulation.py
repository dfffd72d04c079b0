"""Deterministic in-process simulation of asynchronous PS-DSF (no Ray, no wall clock).

K servers each keep their own state — a :class:`~psdsf_dist.protocol.gossip.GossipState` and the
update rule's per-user state — and act every ``period`` seconds of a simulated clock
(:mod:`psdsf_dist.simulator.clock`): estimate the user totals from gossip, run the update rule
(:mod:`psdsf_dist.protocol.update_rule`) on them, publish the new column, and start ``fanout``
push-pull exchanges with random peers.  Messages take ``delay`` seconds and are lost with
probability ``loss``.  Servers act in lock-step (all at ``k T``, the worst case: everyone on the
same stale totals) or at random phases with per-tick jitter.  Scenario events
(:mod:`psdsf_dist.model.events`) are applied at their times.  Everything random comes from one
seeded generator, so a run is a function of its inputs.

After every round (at ``(r + 1) T``) the *true* allocation — every server's current column — is
checked with the PS-DSF certificate (relative tolerance ``rtol``, 1e-3 by default) on the
scenario as it stands (absent users and failed servers removed).  Every column a server adopts is
checked against its capacities on the spot: a violation raises :class:`FeasibilityError`.

Gossip models
    ``scuttlebutt``: the real protocol, one :class:`GossipState` per server.  Its memory grows
    like K^2 (every server knows every origin's version), fine up to a few thousand servers.
    ``snapshot``: for cluster scale (K = 12,583): every server acts on the true totals as they
    were ``staleness`` rounds earlier (``1 + round(delay / T)``), taken
    as the hard case (all servers on the same stale snapshot) — with message counts and bytes
    estimated from the protocol's encoding (one digest exchange per peer plus every changed
    column and every heartbeat reaching every server once).  ``auto`` picks scuttlebutt up to
    ``AUTO_SNAPSHOT_ABOVE`` servers.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.certificate import certificate
from psdsf_dist.core.report import utilization
from psdsf_dist.core.solver import ServerClasses
from psdsf_dist.errors import PsdsfError
from psdsf_dist.model.events import (
    Event,
    ServerFails,
    ServerJoins,
    SetDemand,
    SetWeight,
    Universe,
    UserJoins,
    UserLeaves,
    universe,
)
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.protocol.gossip import (
    COLUMN_HEADER_BYTES,
    COLUMN_VALUE_BYTES,
    DELTA_ENTRY_BYTES,
    DIGEST_ENTRY_BYTES,
    MESSAGE_HEADER_BYTES,
    Delta,
    Digest,
    GossipState,
)
from psdsf_dist.protocol.update_rule import (
    DEFAULT_RULE,
    RuleState,
    ServerView,
    UpdateRule,
    feasible_column,
    is_feasible_column,
    make_rule,
    server_view,
    staleness_rounds,
)
from psdsf_dist.simulator.clock import SimClock

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
GossipModel = Literal["auto", "scuttlebutt", "snapshot"]

CONVERGENCE_RTOL = 1e-3
AUTO_SNAPSHOT_ABOVE = 2000
TTL_PERIODS = 8.0  # a server silent for this many periods stops counting
TOMBSTONE_PERIODS = 64.0

# same-instant order: scenario events, then server ticks, then message deliveries
_EVENT, _TICK, _DELIVERY = 0, 1, 2


HELD = 1e-12  # a change (or entry) above this counts its server as moving (holding) a user


class FeasibilityError(PsdsfError, AssertionError):
    """A server adopted a column exceeding one of its capacities."""


@dataclass(frozen=True)
class SimConfig:
    rounds: int = 300
    period: float = 1.0
    lockstep: bool = True
    jitter: float = 0.0
    """Seconds; ticks land uniformly within +-jitter/2 of their phase (not in lock-step)."""
    delay: float = 1.0
    """Seconds a message is in flight."""
    loss: float = 0.0
    fanout: int = 1
    gossip_rate: int = 1
    """Exchanges each server starts per period (at its update and evenly in between)."""
    seed: int = 0
    rule: str = DEFAULT_RULE
    rule_params: tuple[tuple[str, float], ...] = ()
    mode: Mode = "rdm"
    rtol: float = CONVERGENCE_RTOL
    gossip: GossipModel = "auto"
    hold: int = 1
    """Rounds in a row the certificate must hold before a phase (the start, or what follows an
    event) counts as converged; a run of holds that the next event cuts short still counts."""
    stop_after_hold: int | None = None
    """Stop early once the last event has passed and the certificate has held this many
    rounds in a row (for experiments; None = always run ``rounds``)."""
    memoize: bool = True
    """Snapshot model: compute a pure rule once per class of identical servers in identical
    states (bit-identical to computing each; off to time the per-server cost)."""
    ttl_periods: float = TTL_PERIODS
    signed_moves: bool = True
    """Gossip carries the sign of each server's latest change per user, and the rule sees
    how many servers raised / lowered each user (off: holder counts only)."""

    def check(self) -> None:
        if self.rounds < 1:
            raise ValueError("rounds must be >= 1")
        if not self.period > 0 or not math.isfinite(self.period):
            raise ValueError("period must be a positive number of seconds")
        if not 0 <= self.jitter < self.period:
            raise ValueError("jitter must be in [0, period)")
        if not 0 <= self.delay < math.inf:
            raise ValueError("delay must be >= 0 seconds")
        if not 0 <= self.loss < 1:
            raise ValueError("loss must be in [0, 1)")
        if self.fanout < 1:
            raise ValueError("fanout must be >= 1")
        if self.gossip_rate < 1:
            raise ValueError("gossip rate must be >= 1 exchange round per period")
        if not self.rtol > 0:
            raise ValueError("rtol must be > 0")
        if self.hold < 1:
            raise ValueError("hold must be >= 1 round")


@dataclass(frozen=True)
class RoundRecord:
    round: int
    time: float
    residual: float
    holds: bool
    max_relative_change: float
    utilization: float
    """Mean over present servers and their resources of the fraction in use."""
    messages: float
    """Messages sent per present server in this round (mean)."""
    bytes: float
    """Bytes sent per present server in this round (mean)."""
    max_bytes: float
    """Bytes sent by the busiest server in this round."""
    seconds: float
    """Wall-clock seconds the simulator spent on this round."""

    def to_json(self) -> dict[str, Any]:
        return {
            "round": self.round, "time": self.time, "residual": self.residual,
            "holds": self.holds, "max_relative_change": self.max_relative_change,
            "utilization": self.utilization, "messages": self.messages, "bytes": self.bytes,
            "max_bytes": self.max_bytes, "seconds": self.seconds,
        }


@dataclass(frozen=True)
class EventOutcome:
    """When the certificate first held for good after an event (``None``: it never did)."""

    description: str
    at: float
    round: int
    converged_round: int | None
    rounds_to_converge: int | None
    """``converged_round - round + 1``: 1 means it held after the first round of updates."""

    def to_json(self) -> dict[str, Any]:
        return {"event": self.description, "at": self.at, "round": self.round,
                "converged_round": self.converged_round,
                "rounds_to_converge": self.rounds_to_converge}


@dataclass(frozen=True)
class SimulationResult:
    scenario: Scenario
    """The scenario as it stands at the end (absent users and failed servers ineligible)."""
    allocation: FloatArray
    trace: tuple[RoundRecord, ...]
    events: tuple[EventOutcome, ...]
    config: SimConfig
    gossip: str
    seconds: float

    @property
    def seconds_per_round(self) -> float:
        return self.seconds / max(len(self.trace), 1)


@dataclass
class _Server:
    index: int
    origin: str
    phase: float
    gossip: GossipState | None
    state: RuleState
    seed_peer: str | None = None
    up: bool = True


@dataclass
class _Accounting:
    messages: FloatArray
    bytes: FloatArray

    def add(self, server: int, size: int) -> None:
        self.messages[server] += 1
        self.bytes[server] += size


@dataclass
class Simulator:
    """One simulation run; use :func:`simulate`."""

    scenario: Scenario
    config: SimConfig
    rule: UpdateRule | None = None
    progress: Callable[[RoundRecord], None] | None = None
    _u: Universe = field(init=False)

    def __post_init__(self) -> None:
        self.config.check()
        self.scenario.check_mode(self.config.mode)
        self._u = universe(self.scenario)
        self._rule: UpdateRule = (
            self.rule if self.rule is not None
            else make_rule(self.config.rule, **dict(self.config.rule_params))
        )
        full = self._u.scenario
        self.rng = np.random.default_rng(self.config.seed)
        self.K, self.N = full.num_servers, full.num_users
        self.demand = np.array(full.demand, dtype=float)
        self.weight = np.array(full.weight, dtype=float)
        self.users_active = self._u.users_present.copy()
        self.servers_up = self._u.servers_present.copy()
        model = self.config.gossip
        if model == "auto":
            model = "snapshot" if self.K > AUTO_SNAPSHOT_ABOVE else "scuttlebutt"
        self.model: str = model
        self.X = np.zeros((self.N, self.K))
        self.clock = SimClock()
        T = self.config.period
        phases = (np.zeros(self.K) if self.config.lockstep
                  else self.rng.uniform(0.0, T, size=self.K))
        # one shared (immutable) initial state, so that identical servers stay recognisable
        self._initial_state = self._rule.initial_state(self.N)
        self.servers: list[_Server] = []
        self.by_origin: dict[str, int] = {}
        for i in range(self.K):
            srv = _Server(i, self._origin(i, 0), float(phases[i]), None,
                          self._initial_state, up=bool(self.servers_up[i]))
            self.servers.append(srv)
        self.generation = np.zeros(self.K, dtype=int)
        self.current = self._current_scenario()
        self.class_of = ServerClasses.of(self.current).member_class
        self._memo: dict[tuple[int, int, int, bytes], tuple[FloatArray, RuleState]] = {}
        self.views: dict[int, ServerView] = {}
        self.acct = _Accounting(np.zeros(self.K), np.zeros(self.K))
        self.totals_history: list[FloatArray] = [np.zeros(self.N)]
        self.holders_history: list[FloatArray] = [np.zeros(self.N)]
        # whole allocations of the last few rounds: the snapshot's own columns and its changes
        self.allocation_history: deque[FloatArray] = deque(
            [self.X.copy()], maxlen=round(self.config.delay / self.config.period) + 3
        )
        self.changed_columns = np.zeros(self.K, dtype=bool)
        for up in np.flatnonzero(self.servers_up):
            self._start_server(int(up), 0.0, bootstrap=False)

    # -- set-up -----------------------------------------------------------------------------
    def _origin(self, i: int, generation: int) -> str:
        name = self._u.scenario.server_names[i]
        return name if generation == 0 else f"{name}#{generation}"

    def _current_scenario(self) -> Scenario:
        full = self._u.scenario
        placement = full.placement & self.users_active[:, None] & self.servers_up[None, :]
        return full.replace_users(demand=self.demand, weight=self.weight, placement=placement)

    def _view(self, i: int) -> ServerView:
        v = self.views.get(i)
        if v is None:
            v = server_view(self.current, i, self.config.mode, None, int(self.servers_up.sum()))
            self.views[i] = v
        return v

    def _start_server(self, i: int, now: float, *, bootstrap: bool) -> None:
        srv = self.servers[i]
        srv.up = True
        srv.state = self._initial_state
        if self.model == "scuttlebutt":
            T = self.config.period
            srv.gossip = GossipState(srv.origin, self.N, ttl=self.config.ttl_periods * T,
                                     tombstone_ttl=TOMBSTONE_PERIODS * T)
            if bootstrap:
                live = [int(j) for j in np.flatnonzero(self.servers_up) if j != i]
                if live:
                    srv.seed_peer = self.servers[live[int(self.rng.integers(len(live)))]].origin
            else:
                # a cluster that starts together knows its members (empty columns)
                for j in np.flatnonzero(self.servers_up):
                    if j != i:
                        srv.gossip.introduce(self.servers[int(j)].origin, now)
                srv.seed_peer = None
        self.by_origin[srv.origin] = i
        k = max(math.ceil((now - srv.phase) / self.config.period - 1e-9), 0)
        self._schedule_tick(i, k, srv.origin)

    def _schedule_tick(self, i: int, k: int, origin: str) -> None:
        """Tick number k of server i: at ``phase + k T``, plus jitter when not in lock-step."""
        srv = self.servers[i]
        t = srv.phase + k * self.config.period
        if not self.config.lockstep and self.config.jitter > 0:
            t += float(self.rng.uniform(-0.5, 0.5)) * self.config.jitter
        self.clock.at(t, _TICK, partial(self._tick, i, k, origin))

    # -- server behaviour -------------------------------------------------------------------
    def _tick(self, i: int, k: int, origin: str) -> None:
        srv = self.servers[i]
        if not srv.up or srv.origin != origin:
            return  # failed, or an earlier incarnation's schedule
        now = self.clock.now
        column = self.X[:, i]
        if srv.gossip is not None:
            srv.gossip.expire(now)
            totals = srv.gossip.totals()
            lag = staleness_rounds(srv.gossip.median_age(now), self.config.period)
            view = _with_knowledge(self._view(i), len(srv.gossip.members()),
                                   srv.gossip.holders(), lag)
            if self.config.signed_moves:
                # servers that raised / lowered each user in their latest changes heard of
                view = replace(view, raising=srv.gossip.raising().astype(float),
                               lowering=srv.gossip.lowering().astype(float))
            new, srv.state = self._update(i, view, totals, column, srv.state)
        else:
            totals, holders, stale, moved = self._snapshot()
            if stale is not None and stale.shape == self.X.shape:
                # the server knows its own current column: only the others' are stale
                totals = totals - stale[:, i] + column
                stale_own = stale[:, i].tobytes()
            else:
                stale_own = b""
            # Servers of one class holding the same column and the same state object, acting
            # on the same snapshot, get the same answer from a pure rule: compute it once.
            key = (int(self.class_of[i]), id(holders), id(srv.state), column.tobytes() + stale_own)
            hit = self._memo.get(key) if self.config.memoize else None
            if hit is None:
                base = self._view(i)
                view = _with_knowledge(base, base.num_servers, holders,
                                       round(self.config.delay / self.config.period))
                if moved is not None and moved.shape[0] == self.N:
                    # servers that raised / lowered each user in the changes the snapshot shows
                    view = replace(view, raising=(moved > HELD).sum(axis=1).astype(float),
                                   lowering=(moved < -HELD).sum(axis=1).astype(float))
                hit = self._update(i, view, totals, column, srv.state)
                if self.config.memoize:
                    self._memo[key] = hit
            new, srv.state = hit
        self.changed_columns[i] |= not np.array_equal(new, column)
        self.X[:, i] = new
        if srv.gossip is not None:
            srv.gossip.set_column(new, now)
            self._start_exchanges(srv, now)
            # extra anti-entropy between updates (gossip faster than the update period)
            g = self.config.gossip_rate
            for j in range(1, g):
                self.clock.at(now + j * self.config.period / g, _TICK,
                              partial(self._gossip_only, i, origin))
        self._schedule_tick(i, k + 1, origin)

    def _gossip_only(self, i: int, origin: str) -> None:
        srv = self.servers[i]
        if srv.up and srv.origin == origin and srv.gossip is not None:
            self._start_exchanges(srv, self.clock.now)

    def _update(self, i: int, view: ServerView, totals: FloatArray, column: FloatArray,
                state: RuleState) -> tuple[FloatArray, RuleState]:
        new, state = self._rule.update(state, view, totals, column)
        new = np.asarray(new, dtype=float)
        self._assert_feasible(i, view, new)
        return new, state

    def _assert_feasible(self, i: int, view: ServerView, column: FloatArray) -> None:
        if not is_feasible_column(view, column):
            name = self._u.scenario.server_names[i]
            raise FeasibilityError(
                f"server {name} at t={self.clock.now:g}: column exceeds a capacity or gives tasks "
                "to an ineligible user"
            )

    def _snapshot(
        self,
    ) -> tuple[FloatArray, FloatArray, FloatArray | None, FloatArray | None]:
        """What the snapshot shows, ``1 + round(delay / T)`` rounds ago: totals, holder counts,
        the allocation, and its change over the round before (None where history is short or
        the cluster changed shape)."""
        staleness = 1 + round(self.config.delay / self.config.period)
        at = max(len(self.totals_history) - staleness, 0)
        hist = self.allocation_history
        back = len(hist) - staleness
        stale = hist[back] if back >= 0 else None
        moved = None
        if back >= 1 and hist[back].shape == hist[back - 1].shape:
            moved = hist[back] - hist[back - 1]
        return self.totals_history[at], self.holders_history[at], stale, moved

    # -- gossip transport -------------------------------------------------------------------
    def _peers(self, srv: _Server) -> list[str]:
        assert srv.gossip is not None
        members = [o for o in srv.gossip.members() if o != srv.origin]
        if not members and srv.seed_peer is not None:
            members = [srv.seed_peer]
        return members

    def _start_exchanges(self, srv: _Server, now: float) -> None:
        peers = self._peers(srv)
        if not peers:
            return
        k = min(self.config.fanout, len(peers))
        chosen = self.rng.choice(len(peers), size=k, replace=False)
        assert srv.gossip is not None
        syn = (srv.gossip.digest(), Delta(srv.origin, (srv.gossip.own_entry(),)))
        for c in chosen:
            self._send(srv.index, peers[int(c)], ("syn", syn), now)

    def _send(self, sender: int, to: str, message: tuple[str, Any], now: float) -> None:
        kind, body = message
        size = _message_size(kind, body)
        self.acct.add(sender, size)
        if self.config.loss > 0 and self.rng.random() < self.config.loss:
            return
        self.clock.at(now + self.config.delay, _DELIVERY, lambda: self._deliver(to, message))

    def _deliver(self, to: str, message: tuple[str, Any]) -> None:
        i = self.by_origin.get(to)
        if i is None:
            return
        srv = self.servers[i]
        if not srv.up or srv.origin != to or srv.gossip is None:
            return  # a failed server, or an old incarnation: the message is lost
        now = self.clock.now
        kind, body = message
        g = srv.gossip
        if kind == "syn":
            digest: Digest = body[0]
            g.merge(body[1], now)
            self._send(i, digest.sender, ("ack", (g.delta_for(digest), g.digest())), now)
        elif kind == "ack":
            delta, digest = body
            g.merge(delta, now)
            self._send(i, digest.sender, ("ack2", g.delta_for(digest)), now)
        else:
            g.merge(body, now)

    # -- scenario events --------------------------------------------------------------------
    def _apply(self, event: Event) -> None:
        full = self._u.scenario
        now = self.clock.now
        if isinstance(event, UserLeaves):
            n = full.user_names.index(event.user)
            self.users_active[n] = False
            self.X[n, :] = 0.0  # the user's tasks end with it
        elif isinstance(event, UserJoins):
            self.users_active[full.user_names.index(event.user)] = True
        elif isinstance(event, SetDemand):
            n = full.user_names.index(event.user)
            self.demand[n] = [event.demand.get(r, 0.0) for r in full.resources]
        elif isinstance(event, SetWeight):
            self.weight[full.user_names.index(event.user)] = event.weight
        elif isinstance(event, ServerFails):
            i = full.server_names.index(event.server)
            self.servers_up[i] = False
            self.servers[i].up = False
            self.X[:, i] = 0.0  # its tasks are lost with it
        elif isinstance(event, ServerJoins):
            i = full.server_names.index(event.server)
            self.servers_up[i] = True
            self.generation[i] += 1
            srv = self.servers[i]
            srv.origin = self._origin(i, int(self.generation[i]))
        self.current = self._current_scenario()
        self.views.clear()
        self._memo.clear()
        self.class_of = ServerClasses.of(self.current).member_class
        # what no longer fits (a demand grew, a user left) is preempted at once
        for j in np.flatnonzero(self.servers_up):
            col = self.X[:, j]
            if col.any():
                view = self._view(int(j))
                self.X[:, j] = feasible_column(view, col)
                self._assert_feasible(int(j), view, self.X[:, j])
        if isinstance(event, ServerJoins):
            self._start_server(full.server_names.index(event.server), now, bootstrap=True)

    # -- running ----------------------------------------------------------------------------
    def run(self) -> SimulationResult:
        cfg = self.config
        T = cfg.period
        for e in self._u.events:
            self.clock.at(e.at, _EVENT, partial(self._apply, e))
        trace: list[RoundRecord] = []
        started = time.perf_counter()
        prev_totals = self.X.sum(axis=1)
        for r in range(cfg.rounds):
            t0 = time.perf_counter()
            self.acct.messages[:] = 0
            self.acct.bytes[:] = 0
            self.changed_columns[:] = False
            self._memo.clear()
            self.clock.run_until((r + 1) * T)
            totals = self.X.sum(axis=1)
            self.totals_history.append(totals)
            self.holders_history.append((self.X > 0).sum(axis=1).astype(float))
            self.allocation_history.append(self.X.copy())
            if len(self.totals_history) > 64:
                del self.totals_history[0]
                del self.holders_history[0]
            # explain=True: the residual must not depend on whether words are wanted
            cert = certificate(self.current, self.X, mode=cfg.mode, rtol=cfg.rtol, explain=True)
            up = self.servers_up
            live = max(int(up.sum()), 1)
            if self.model == "snapshot":
                self._estimate_traffic()
            util = utilization(self.current, self.X)[up]
            has = self.current.capacity[up] > 0
            with np.errstate(divide="ignore", invalid="ignore"):
                change = np.abs(totals - prev_totals) / np.maximum(
                    np.maximum(np.abs(prev_totals), np.abs(totals)), 1e-12)
            prev_totals = totals
            rec = RoundRecord(
                round=r, time=(r + 1) * T, residual=cert.residual, holds=cert.holds,
                max_relative_change=float(change.max(initial=0.0)),
                utilization=float(util[has].mean()) if has.any() else 0.0,
                messages=float(self.acct.messages.sum() / live),
                bytes=float(self.acct.bytes.sum() / live),
                max_bytes=float(self.acct.bytes.max(initial=0.0)),
                seconds=time.perf_counter() - t0,
            )
            trace.append(rec)
            if self.progress is not None:
                self.progress(rec)
            if self._settled(trace):
                break
        seconds = time.perf_counter() - started
        outcomes = converged_rounds(self._u.events, [rec.holds for rec in trace], T,
                                    hold=cfg.hold)
        return SimulationResult(self.current, self.X.copy(), tuple(trace), outcomes, cfg,
                                self.model, seconds)

    def _settled(self, trace: list[RoundRecord]) -> bool:
        hold = self.config.stop_after_hold
        if hold is None or len(trace) < hold:
            return False
        last_event = max((e.at for e in self._u.events), default=0.0)
        if trace[-hold].round < math.floor(last_event / self.config.period + 1e-9):
            return False
        return all(rec.holds for rec in trace[-hold:])

    def _estimate_traffic(self) -> None:
        """Protocol cost without running it (snapshot model): see the module docstring."""
        up = np.flatnonzero(self.servers_up)
        live = len(up)
        F = self.config.fanout
        digests = 2 * F * (MESSAGE_HEADER_BYTES + DIGEST_ENTRY_BYTES * live)
        nnz = np.count_nonzero(self.X[:, up], axis=0)
        columns = float(np.sum((COLUMN_HEADER_BYTES + COLUMN_VALUE_BYTES * nnz)
                               * self.changed_columns[up]))
        heartbeats = DELTA_ENTRY_BYTES * live + F * MESSAGE_HEADER_BYTES
        self.acct.messages[up] = 3 * F
        self.acct.bytes[up] = digests + heartbeats + columns


def _with_knowledge(view: ServerView, members: int, holders: npt.NDArray[Any],
                    staleness: float) -> ServerView:
    """The view with what gossip says now: membership size, holders per user, and by how many
    rounds beyond one the others' columns lag."""
    return replace(view, num_servers=members, holders=np.asarray(holders, dtype=float),
                   staleness=float(staleness))


def _message_size(kind: str, body: Any) -> int:
    if kind in ("syn", "ack"):
        delta, digest = body
        return int(delta.size_bytes() + digest.size_bytes())
    assert isinstance(body, Delta)
    return body.size_bytes()


def final_run_of_holds(holds: Sequence[bool], hold: int, *, open_ended: bool) -> int | None:
    """Index from which every entry of ``holds`` is true, or None if the last is false — or if
    ``open_ended`` (no later event has cut the run short) and that run is shorter than ``hold``.
    Shared by the simulator and the Ray runtime's convergence bookkeeping."""
    start = len(holds)
    while start > 0 and holds[start - 1]:
        start -= 1
    if start == len(holds) or (open_ended and len(holds) - start < hold):
        return None
    return start


def converged_rounds(events: tuple[Event, ...], holds: list[bool],
                     period: float, *, hold: int = 1) -> tuple[EventOutcome, ...]:
    """Per event (and the start), the first round from which the certificate held until the
    next event's round, or to the end of the run if that is at least ``hold`` rounds (a run
    that ends just after the certificate first holds has not shown that it stays)."""
    starts: list[tuple[str, float, int]] = [("start", 0.0, 0)]
    for e in events:
        rnd = math.floor(e.at / period + 1e-9)
        if rnd < len(holds):  # events after the run are not reported
            starts.append((e.describe(), e.at, rnd))
    out: list[EventOutcome] = []
    R = len(holds)
    for j, (desc, at, rnd) in enumerate(starts):
        end = R
        for _d, _a, later in starts[j + 1 :]:
            if later > rnd:
                end = min(later, R)
                break
        settled = final_run_of_holds(holds[rnd:end], hold, open_ended=end == R)
        found = None if settled is None else rnd + settled
        out.append(EventOutcome(desc, at, rnd, found,
                                None if found is None else found - rnd + 1))
    return tuple(out)


def simulate(
    scenario: Scenario,
    config: SimConfig | None = None,
    *,
    rule: UpdateRule | None = None,
    progress: Callable[[RoundRecord], None] | None = None,
) -> SimulationResult:
    """Run a simulation (see the module docstring)."""
    return Simulator(scenario, config or SimConfig(), rule, progress).run()
