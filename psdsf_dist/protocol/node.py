"""What one server does, without transport: the update rule on gossiped totals, and gossip.

A :class:`ServerCore` is the state a server actor holds — its view of the scenario (from the
coordinator's :class:`~psdsf_dist.protocol.membership.Table`), the update rule's state and a
:class:`~psdsf_dist.protocol.gossip.GossipState` — and the steps of its loop, each a plain function
of the time passed in.  The server actor only moves messages and sleeps; the same steps as in
:mod:`psdsf_dist.simulator.simulation`: expire silent peers, run the rule on the gossiped totals
(with the holder counts and the staleness gossip reports), publish the column, start push-pull
exchanges (syn -> ack -> ack2) with random peers.  What the rule is given is what the simulator's
gossip model gives it: membership size, holder counts, the servers that raised / lowered each
user in their latest changes (``RunConfig.signed_moves``), the staleness of the others' columns
in rounds, and totals that include the server's own current column.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from psdsf_dist.protocol.config import TOMBSTONE_PERIODS, RunConfig
from psdsf_dist.protocol.gossip import Delta, Digest, GossipState
from psdsf_dist.protocol.membership import Table
from psdsf_dist.protocol.update_rule import (
    RuleState,
    ServerView,
    UpdateRule,
    feasible_column,
    is_feasible_column,
    make_rule,
    resize_state,
    server_view,
    staleness_rounds,
)
from psdsf_dist.simulator.simulation import FeasibilityError

FloatArray = npt.NDArray[np.float64]

INCARNATION_MARK = "#"
TIMED_ROUNDS = 64  # durations of the latest rounds a server keeps for its reports


def origin_name(server: str, incarnation: int) -> str:
    """The gossip origin of one incarnation of a server: a restarted server is a new origin,
    so that the column of its crashed predecessor expires from everyone's totals."""
    return server if incarnation == 0 else f"{server}{INCARNATION_MARK}{incarnation}"


def server_of(origin: str) -> str:
    return origin.split(INCARNATION_MARK, 1)[0]


def incarnation_of(origin: str) -> int:
    """The incarnation an origin name stands for (``origin_name`` inverted)."""
    _, mark, number = origin.partition(INCARNATION_MARK)
    return int(number) if mark and number.isdigit() else 0


Syn = tuple[Digest, Delta]
Ack = tuple[Delta, Digest]


@dataclass
class Traffic:
    """Messages and bytes this server has sent since it started (monotone counters)."""

    messages: int = 0
    bytes: int = 0

    def sent(self, size: int) -> None:
        self.messages += 1
        self.bytes += size


@dataclass
class ServerCore:
    name: str
    incarnation: int
    table: Table
    config: RunConfig
    rule: UpdateRule = field(init=False)
    state: RuleState = field(init=False)
    gossip: GossipState = field(init=False)
    view: ServerView = field(init=False)
    traffic: Traffic = field(default_factory=Traffic)
    rounds: int = 0
    round_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=TIMED_ROUNDS))
    """Wall-clock seconds the update rule took in each of the latest rounds, oldest first."""
    staleness_seconds: float | None = None
    """Median age of the other servers' columns in the totals at the latest round."""

    def __post_init__(self) -> None:
        self.rule = make_rule(self.config.rule)
        n = self.table.scenario.num_users
        self.state = self.rule.initial_state(n)
        self.gossip = GossipState(origin_name(self.name, self.incarnation), n,
                                  ttl=self.config.ttl,
                                  tombstone_ttl=TOMBSTONE_PERIODS * self.config.period)
        self.view = self._view(self.table)

    @property
    def origin(self) -> str:
        return self.gossip.origin

    @property
    def column(self) -> FloatArray:
        return self.gossip.column

    def _view(self, table: Table) -> ServerView:
        i = table.server_index(self.name)
        return server_view(table.scenario, i, self.config.mode, None,
                           int(table.servers_present.sum()))

    # -- membership and churn -----------------------------------------------------------------
    def introduce(self, origins: list[str], now: float) -> None:
        """Peers handed out by the coordinator (known to exist, columns not heard yet)."""
        for o in origins:
            if o != self.origin:
                self.gossip.introduce(o, now)

    def adopt(self, table: Table, now: float) -> bool:
        """Take a newer table: rebuild the view, grow for new users, and drop at once what no
        longer fits (a user left, a demand grew).  Returns whether anything changed."""
        if table.epoch <= self.table.epoch:
            return False
        n = table.scenario.num_users
        if n > self.gossip.num_users:
            self.gossip.resize(n)
            self.state = resize_state(self.state, n)
        self.table = table
        self.view = self._view(table)
        col = feasible_column(self.view, self.gossip.column)
        self._check(col, now)
        self.gossip.set_column(col, now)
        return True

    # -- one update -----------------------------------------------------------------------------
    def update(self, now: float) -> FloatArray:
        """Expire silent peers, run the update rule on the gossiped totals, publish the column."""
        g = self.gossip
        g.expire(now)
        age = g.median_age(now)
        view = replace(self.view, num_servers=len(g.members()),
                       holders=np.asarray(g.holders(), dtype=float),
                       staleness=staleness_rounds(age, self.config.period))
        if self.config.signed_moves:  # as the simulator's gossip model gives them
            view = replace(view, raising=g.raising().astype(float),
                           lowering=g.lowering().astype(float))
        began = time.perf_counter()
        new, self.state = self.rule.update(self.state, view, g.totals(), g.column)
        self.round_seconds.append(time.perf_counter() - began)
        self.staleness_seconds = age
        new = np.asarray(new, dtype=float)
        self._check(new, now)
        g.set_column(new, now)
        self.rounds += 1
        return new

    def leave(self, now: float) -> None:
        """Leave gracefully: a tombstone tells everyone to stop counting this column."""
        self.gossip.leave(now)

    def _check(self, column: FloatArray, now: float) -> None:
        if not is_feasible_column(self.view, column):
            raise FeasibilityError(f"server {self.name} at t={now:g}: column exceeds a capacity "
                                   "or gives tasks to an ineligible user")

    # -- gossip ---------------------------------------------------------------------------------
    def peers(self, rng: np.random.Generator, seeds: list[str]) -> list[str]:
        """Up to ``fanout`` random live peers (origins); the coordinator's list when gossip
        knows no one yet."""
        members = [o for o in self.gossip.members() if o != self.origin]
        if not members:
            members = [o for o in seeds if o != self.origin]
        if not members:
            return []
        k = min(self.config.fanout, len(members))
        return [members[int(j)] for j in rng.choice(len(members), size=k, replace=False)]

    def syn(self) -> Syn:
        """The first message of an exchange this server starts: its digest and own entry."""
        g = self.gossip
        msg = (g.digest(), Delta(self.origin, (g.own_entry(),)))
        self.traffic.sent(msg[0].size_bytes() + msg[1].size_bytes())
        return msg

    def on_syn(self, syn: Syn, now: float) -> Ack:
        digest, delta = syn
        self.gossip.merge(delta, now)
        ack = (self.gossip.delta_for(digest), self.gossip.digest())
        self.traffic.sent(ack[0].size_bytes() + ack[1].size_bytes())
        return ack

    def on_ack(self, ack: Ack, now: float) -> Delta:
        delta, digest = ack
        self.gossip.merge(delta, now)
        ack2 = self.gossip.delta_for(digest)
        self.traffic.sent(ack2.size_bytes())
        return ack2

    def on_ack2(self, ack2: Delta, now: float) -> None:
        self.gossip.merge(ack2, now)


def next_wait(rng: np.random.Generator, config: RunConfig) -> float:
    """Seconds until the next gossip round: ``period / gossip_rate``, jittered."""
    base = config.period / config.gossip_rate
    return base * (1.0 + config.jitter * (float(rng.random()) - 0.5))


def server_seed(config: RunConfig, name: str, incarnation: int) -> int:
    """A seed per server incarnation, stable across processes (no Python string hashing)."""
    h = 0
    for ch in name:
        h = (h * 131 + ord(ch)) % (2**31 - 1)
    return int((config.seed * 1_000_003 + h * 7919 + incarnation) % (2**63 - 1))


def initial_phase(rng: np.random.Generator, config: RunConfig) -> float:
    """Servers start at random phases within one period: they do not act in lock-step."""
    return float(rng.random()) * config.period if config.jitter > 0 else 0.0
