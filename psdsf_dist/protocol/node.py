"""One server of the protocol, as a state machine: what it does when it wakes, and when a
message reaches it.  Every driver runs this code; none has a copy of any step.

A :class:`ServerNode` holds one server's view of the scenario (from the membership
:class:`~psdsf_dist.protocol.membership.Table` it adopted), the update rule's state, a
:class:`~psdsf_dist.protocol.gossip.GossipState`, and its own random stream (seeded by the run's
seed, its name and its incarnation).  The driver owns the clock and the transport:

* it calls :meth:`ServerNode.first_wake` once, then :meth:`ServerNode.wake` at each time the
  previous wake asked for.  A wake is a gossip round: every ``gossip_rate``-th one first runs the
  update rule on the gossiped totals and publishes the new column; every one starts a push-pull
  exchange with ``fanout`` random live peers, i.e. returns a :class:`Syn` per peer for the
  transport to deliver;
* it hands every message that reaches the server to :meth:`ServerNode.receive`, and sends the
  reply (if any) back to the message's sender: :class:`Syn` -> :class:`Ack` -> :class:`Ack2`.

Wake-ups are scheduled on absolute times, so the period does not drift with the work done, and
a server that fell more than a period behind skips what it missed.  Each wait is
``(T / gossip_rate) * (1 + jitter * (u - 1/2))`` and the first wake comes at a random phase
within a period; with jitter 0 every server wakes at the same instants (lock-step).

What the rule is given (:func:`knowledge_view`): membership size, how many servers hold each
user, how many raised and lowered it in their latest changes, by how many rounds beyond one
the others' columns lag, and totals that include the server's own current column.  Every
column the server adopts is checked against its capacities on the spot
(:class:`~psdsf_dist.errors.FeasibilityError` otherwise).

With the class rule (:class:`~psdsf_dist.protocol.update_rule.ClassRule`) a server also knows
its class of identical servers (:mod:`psdsf_dist.protocol.classes`, from its table).  With few
classes the server's updates come at its class's slot of every period (``slot``), on the grid
``anchor + n T`` whatever the jitter of the gossip rounds in between, and the rule is given the
class's size and its members' columns summed from what gossip carries, with totals in which
every other class stands at the column it took in its latest slot
(:func:`~psdsf_dist.protocol.classes.slot_knowledge`); without a slot, or when the heartbeats
show that another class acted at its own phase (classes not taking turns), the rule is given
nothing of the class (it then runs ``split``).  Half a slot before its slot a slotted server
also *pulls*: one exchange with a random live member of the class whose slot comes just before
its own (:meth:`ServerNode.pull`), so that it acts on that class's new column — and, by the same
pull one slot earlier, on the classes' before it — whatever random gossip brought by then
(``docs/class_rule.md``).  That wake-up does nothing else.

A restarted server is a new *incarnation* with a new gossip origin (``s3#1``): its crashed
predecessor's column is never revived, and stops counting wherever the new one is heard
(:mod:`psdsf_dist.protocol.gossip`, "Incarnations").
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from psdsf_dist.errors import FeasibilityError
from psdsf_dist.protocol.classes import (
    ClassKnowledge,
    ClassMap,
    previous_class,
    slot_knowledge,
    slot_of,
)
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.gossip import (
    Delta,
    Digest,
    GossipState,
    origin_name,
    server_of,
)
from psdsf_dist.protocol.membership import Table
from psdsf_dist.protocol.update_rule import (
    RuleState,
    ServerView,
    UpdateRule,
    feasible_column,
    is_feasible_column,
    server_view,
    staleness_rounds,
    uses_classes,
)

FloatArray = npt.NDArray[np.float64]

TIMED_ROUNDS = 64  # durations of the latest updates a server keeps for its reports
SEED_PEERS = 8  # peers handed to a server joining or restarting (a starting cluster: all)
SLOT_MIN_EXCHANGES = 16
"""Class slots need gossip to carry a class's change within a slot: only with at least this
many exchanges started per period (``gossip_rate * fanout``; the defaults' 4 x 4).  With
fewer, the slotted best response acts on stale columns and swings (measured in
``docs/class_rule.md``), so servers keep random phases and the class rule its ``split``
step."""
PULL_BEFORE_SLOT = 0.5
"""A slotted member pulls from a member of the class acting just before its own this many
slots before its own slot: after that class has acted (half a slot of slack for a late
actor, the guard's tolerance) and early enough for the reply to arrive before the slot."""


def slots_carry(cfg: ProtocolConfig, num_classes: int) -> bool:
    """Whether gossip under ``cfg`` carries a class's change to the class acting next within
    one slot (``T / num_classes``), the premise of class slots: enough exchanges per period
    (:data:`SLOT_MIN_EXCHANGES`) and a transport delay shorter than a slot.  A message held a
    slot or more reaches the next class after its slot: every class then acts on the others'
    columns of a period before, the classes' best responses answer each other's old moves,
    and the run swings (the paper cluster's four classes on totals one period old: no
    certificate within 30 rounds of any event, against ``split``'s 13 / 3 / 11, measured in
    ``docs/class_rule.md``).  Without slots the class rule is ``split``."""
    return (cfg.gossip_rate * cfg.fanout >= SLOT_MIN_EXCHANGES
            and cfg.delay < cfg.period / max(num_classes, 1))


def server_seed(seed: int, name: str, incarnation: int) -> int:
    """A seed per server incarnation, stable across processes (no Python string hashing)."""
    h = 0
    for ch in name:
        h = (h * 131 + ord(ch)) % (2**31 - 1)
    return int((seed * 1_000_003 + h * 7919 + incarnation) % (2**63 - 1))


def seed_peers(others: list[str], seed: int, *, everyone: bool) -> list[str]:
    """The peers a starting server is introduced to: all of ``others`` when the whole cluster
    starts together (in their order), else ``SEED_PEERS`` of them at random."""
    if everyone:
        return list(others)
    rng = np.random.default_rng(seed)
    return [others[int(j)] for j in rng.permutation(len(others))[:SEED_PEERS]]


# -- messages -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Syn:
    """First message of an exchange: the starter's digest and its own (freshest) entry."""

    digest: Digest
    delta: Delta

    @property
    def sender(self) -> str:
        return self.digest.sender

    def size_bytes(self) -> int:
        return self.digest.size_bytes() + self.delta.size_bytes()


@dataclass(frozen=True)
class Ack:
    """The peer's answer: what the starter lacks, and the peer's digest."""

    delta: Delta
    digest: Digest

    @property
    def sender(self) -> str:
        return self.digest.sender

    def size_bytes(self) -> int:
        return self.delta.size_bytes() + self.digest.size_bytes()


@dataclass(frozen=True)
class Ack2:
    """The exchange's last message: what the peer lacks."""

    delta: Delta

    @property
    def sender(self) -> str:
        return self.delta.sender

    def size_bytes(self) -> int:
        return self.delta.size_bytes()


Message = Syn | Ack | Ack2


# -- the update step ----------------------------------------------------------------------------
def knowledge_view(view: ServerView, *, members: int, holders: npt.NDArray[np.generic],
                   raising: npt.NDArray[np.generic] | None,
                   lowering: npt.NDArray[np.generic] | None, staleness: float,
                   klass: ClassKnowledge | None = None) -> ServerView:
    """The view with what gossip (or a model of it) says now: membership size, holders per
    user, servers that raised / lowered each user in their latest changes, by how many
    rounds beyond one the others' columns lag, and (for the class rule) the classes."""
    return replace(
        view, num_servers=members, holders=np.asarray(holders, dtype=float),
        raising=None if raising is None else np.asarray(raising, dtype=float),
        lowering=None if lowering is None else np.asarray(lowering, dtype=float),
        staleness=float(staleness), klass=klass)


def checked_update(rule: UpdateRule, state: RuleState, view: ServerView, totals: FloatArray,
                   column: FloatArray, where: str) -> tuple[FloatArray, RuleState]:
    """One application of the update rule; the new column must fit the server."""
    new, state = rule.update(state, view, totals, column)
    new = np.asarray(new, dtype=float)
    check_column(view, new, where)
    return new, state


def check_column(view: ServerView, column: FloatArray, where: str) -> None:
    if not is_feasible_column(view, column):
        raise FeasibilityError(f"{where}: column exceeds a capacity or gives tasks to an "
                               "ineligible user")


@dataclass(frozen=True)
class Wake:
    """What a wake-up produced: the exchanges to start and when to wake next."""

    exchanges: tuple[tuple[str, Syn], ...]
    """(peer origin, message) per exchange started."""
    next_at: float
    updated: bool


@dataclass
class Traffic:
    """Messages and bytes this server has sent since it started (monotone counters)."""

    messages: int = 0
    bytes: int = 0

    def sent(self, size: int) -> None:
        self.messages += 1
        self.bytes += size


@dataclass
class ServerNode:
    name: str
    incarnation: int
    table: Table
    config: ProtocolConfig
    rule: UpdateRule
    """Shared by the servers of one driver: rules are stateless (their state is per server)."""
    rng: np.random.Generator = field(init=False)
    state: RuleState = field(init=False)
    gossip: GossipState = field(init=False)
    view: ServerView = field(init=False)
    traffic: Traffic = field(default_factory=Traffic)
    rounds: int = 0
    """Updates done."""
    wakes: int = 0
    target: float = 0.0
    """The time of the current (or next) wake-up."""
    round_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=TIMED_ROUNDS))
    """Wall-clock seconds the update rule took in each of the latest updates, oldest first."""
    staleness_seconds: float | None = None
    """Median age of the other servers' columns in the totals at the latest update."""
    seeds: list[str] = field(default_factory=list)
    """The peers it was introduced to: whom to gossip with while it knows no live member."""
    classes: ClassMap = field(init=False)
    """The classes of identical servers in its table."""
    slot: float | None = field(init=False)
    """Phase (fraction of a period) of its class's updates; None: a random phase."""
    anchor: float = 0.0
    """Time of its first update; slotted updates come at ``anchor + n T``."""
    pull_from: int | None = field(init=False)
    """The class acting in the slot before its own, which it pulls from before its slot
    (slotted only; None: no slot, or its class is the only one)."""
    pull_at: float | None = None
    """Time of its next pre-slot pull."""

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(server_seed(self.config.seed, self.name,
                                                     self.incarnation))
        n = self.table.scenario.num_users
        self.state = self.rule.initial_state(n)
        self.gossip = GossipState(origin_name(self.name, self.incarnation), n,
                                  ttl=self.config.ttl, tombstone_ttl=self.config.tombstone_ttl)
        self.view = self._view(self.table)
        self._classes(self.table)

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

    def _classes(self, table: Table) -> None:
        """Its classes and slot from ``table``: slots only for the class rule."""
        self.classes = table.classes
        i = table.server_index(self.name)
        cfg = self.config
        self.slot = slot_of(self.classes, i) \
            if uses_classes(self.rule) and slots_carry(cfg, self.classes.num_classes) else None
        self.pull_from = None if self.slot is None else previous_class(self.classes, i)

    def _where(self, now: float) -> str:
        return f"server {self.name} at t={now:g}"

    # -- membership and churn -------------------------------------------------------------------
    def introduce(self, origins: list[str], now: float) -> None:
        """Peers known to exist (columns not heard yet): a starting server's membership."""
        for o in origins:
            if o != self.origin:
                self.gossip.introduce(o, now)
                self.seeds.append(o)

    def adopt(self, table: Table, now: float) -> bool:
        """Take a newer table: rebuild the view, grow for new users, and drop at once what no
        longer fits (a user left, a demand grew).  Returns whether anything changed."""
        if table.epoch <= self.table.epoch:
            return False
        n = table.scenario.num_users
        if n > self.gossip.num_users:  # (gossip may have grown already: a peer's column)
            self.gossip.resize(n)
        if n > self.table.scenario.num_users:
            self.state = self.state.selected(np.arange(n))
        self.table = table
        self.view = self._view(table)
        self._classes(table)
        if self.slot is not None:  # move its updates (later, never earlier) to its class's slot
            T = self.config.period
            self.anchor += (self.slot * T - self.anchor) % T
        self.pull_at = self._next_pull(now)
        col = feasible_column(self.view, self.gossip.column)
        check_column(self.view, col, self._where(now))
        self.gossip.set_column(col, now)
        return True

    # -- the loop ---------------------------------------------------------------------------------
    def first_wake(self, now: float) -> float:
        """When to wake first: at its class's slot of the period (slotted class rule), else at
        a random phase within one period (now, in lock-step)."""
        T = self.config.period
        phase = float(self.rng.random()) * T if self.config.jitter > 0 else 0.0
        if self.slot is not None:  # the next instant n T + slot T of the cluster's grid
            phase = (self.slot - now / T) % 1.0 * T
        self.target = self.anchor = now + phase
        self.pull_at = self._next_pull(now)
        return self._next_at()

    def _next_pull(self, after: float) -> float | None:
        """The first pre-slot pull at or after ``after``: ``PULL_BEFORE_SLOT`` of a slot before
        each slotted update (``anchor + n T``)."""
        if self.slot is None or self.pull_from is None:
            return None
        T = self.config.period
        first = self.anchor - PULL_BEFORE_SLOT * T / max(self.classes.num_classes, 1)
        return first + max(math.ceil((after - first) / T), 0) * T

    def _next_at(self) -> float:
        return self.target if self.pull_at is None else min(self.target, self.pull_at)

    def wake(self, now: float) -> Wake:
        """One gossip round (the update if one is due, then exchanges with random peers), or,
        when it is the time of the pre-slot pull, that pull alone."""
        if self.pull_at is not None and self.pull_at <= now < self.target:
            self.pull_at = self._next_pull(self.pull_at + 0.5 * self.config.period)
            return Wake(self.pull(), self._next_at(), False)
        cfg = self.config
        updated = self.wakes % cfg.gossip_rate == 0
        if updated:
            self.update(now)
        exchanges = self.exchanges()
        self.wakes += 1
        wait = (cfg.period / cfg.gossip_rate) * (1.0 + cfg.jitter * (float(self.rng.random())
                                                                     - 0.5))
        self.target = max(self.target + wait, now - cfg.period)
        if self.slot is not None and self.wakes % cfg.gossip_rate == 0:
            # slotted: updates on the grid, whatever the jitter of the gossip rounds between
            self.target = max(self.anchor + (self.wakes // cfg.gossip_rate) * cfg.period,
                              now - cfg.period)
        if self.pull_at is not None and self.pull_at < now:  # missed (a late wake): skipped
            self.pull_at = self._next_pull(now)
        return Wake(exchanges, self._next_at(), updated)

    def update(self, now: float) -> FloatArray:
        """Expire silent peers, run the update rule on the gossiped totals, publish the column.

        A server that heard of users its table does not name yet (a peer adopted a newer
        table first: the tables reach the servers at different times) holds its column until
        its own copy arrives: its view and rule state are the old table's size, and the
        column it holds fits (the new users get nothing here yet)."""
        g = self.gossip
        g.expire(now)
        if g.num_users > self.table.scenario.num_users:
            g.set_column(g.column, now)  # a heartbeat: it is alive, waiting for the table
            return g.column
        age = g.median_age(now)
        klass, totals = None, g.totals()
        if self.slot is not None:  # its class's slot: the class acts as one (class rule)
            index = self.table.server_indices
            # a server this table does not know yet is left out until the table names it
            counted = ((index.get(server_of(o)), c, at) for o, c, at in g.counted())
            known = slot_knowledge(self.classes, self.table.server_index(self.name), g.column,
                                   ((i, c, at) for i, c, at in counted if i is not None),
                                   totals, now, self.config.period)
            if known is not None:
                klass, totals = known
        view = knowledge_view(self.view, members=len(g.members()), holders=g.holders(),
                              raising=g.raising(), lowering=g.lowering(),
                              staleness=staleness_rounds(age, self.config.period), klass=klass)
        began = time.perf_counter()
        new, self.state = checked_update(self.rule, self.state, view, totals, g.column,
                                         self._where(now))
        self.round_seconds.append(time.perf_counter() - began)
        self.staleness_seconds = age
        g.set_column(new, now)
        self.rounds += 1
        return new

    def leave(self, now: float) -> tuple[tuple[str, Syn], ...]:
        """Leave gracefully: a tombstone, and one more round of exchanges to spread it."""
        self.gossip.leave(now)
        return self.exchanges()

    # -- gossip -----------------------------------------------------------------------------------
    def exchanges(self) -> tuple[tuple[str, Syn], ...]:
        """A syn for each of up to ``fanout`` random live peers."""
        members = [o for o in self.gossip.members() if o != self.origin]
        if not members:
            members = self.seeds
        if not members:
            return ()
        k = min(self.config.fanout, len(members))
        chosen = self.rng.choice(len(members), size=k, replace=False)
        return self._syns([members[int(j)] for j in chosen])

    def pull(self) -> tuple[tuple[str, Syn], ...]:
        """The pre-slot pull: one exchange with a random live member of the class acting just
        before its own (:attr:`pull_from`), whose reply brings that class's new column — and,
        as that member pulled the same way before its own slot, the latest columns of the
        classes before it.  Nothing if it knows no live member of that class."""
        index = self.table.server_indices
        member = self.classes.member_class
        peers = [o for o in self.gossip.members() if o != self.origin
                 and (i := index.get(server_of(o))) is not None and member[i] == self.pull_from]
        if not peers:
            return ()
        return self._syns([peers[int(self.rng.integers(len(peers)))]])

    def _syns(self, peers: list[str]) -> tuple[tuple[str, Syn], ...]:
        g = self.gossip
        out = []
        for peer in peers:
            syn = Syn(g.digest(), Delta(self.origin, (g.own_entry(),)))
            self.traffic.sent(syn.size_bytes())
            out.append((peer, syn))
        return tuple(out)

    def receive(self, message: Message, now: float) -> Message | None:
        """Merge what a message brings; the reply to send back to its sender, if any."""
        g = self.gossip
        reply: Message | None
        if isinstance(message, Syn):
            g.merge(message.delta, now)
            reply = Ack(g.delta_for(message.digest), g.digest())
        elif isinstance(message, Ack):
            g.merge(message.delta, now)
            reply = Ack2(g.delta_for(message.digest))
        else:
            g.merge(message.delta, now)
            return None
        self.traffic.sent(reply.size_bytes())
        return reply
