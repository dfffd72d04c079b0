"""Scuttlebutt-style anti-entropy of server columns: pure, transport-free, clock injected.

Every server owns one *column* (its tasks per user) and gossips it; every server estimates the
users' global totals as the sum of the latest columns it has heard of.  One :class:`GossipState`
is one server's knowledge; messages are plain frozen values, so the simulator and a networked
runtime move them the same way.

Versions
    An origin keeps two counters.  ``heartbeat`` grows every time it acts (so a live but
    converged server is not mistaken for a dead one); ``column_version`` grows only when its
    column changes (so an unchanged column is never re-sent).  Knowledge of an origin is the
    pair (largest heartbeat heard, column of the largest column_version heard).  Both parts merge
    by ``max``, hence merging is idempotent, commutative and associative: duplicated, reordered
    or lost-then-resent messages always end in the same state.

Reconciliation (push-pull, three messages per exchange)
    A sends its :class:`Digest` (origin -> (heartbeat, column_version)); B answers with a
    :class:`Delta` of the entries where it knows more than A, plus its own digest; A answers with
    the entries B lacks.  A's first message also carries A's own entry (the freshest news, and
    small), which saves a hop for it.  An entry carries the column only if the peer's
    column_version is older, so the traffic follows what changed, not K x N.

Membership
    A server that leaves gracefully publishes a *tombstone* (its column becomes empty, flagged
    ``left``); tombstones are forgotten ``tombstone_ttl`` seconds after they were learnt, longer
    than any message can be in flight.  A server that falls silent (crash, partition) is
    *expired* by each peer on its own: if its heartbeat has not grown for ``ttl`` seconds of the
    peer's clock, its column stops counting; a newer heartbeat revives it.  Time is always passed
    in (``now``), never read from a clock.

Incarnations
    A server that restarts after a crash gossips under a new origin, ``name#k`` (``name`` for
    incarnation 0), so that its predecessor's column is never revived by a late message.  The
    predecessor is dead, and both columns stand for the same capacities: counting the old one
    until it expires (``ttl``, several periods) would count that server twice and push every
    other server's update off.  So an origin is *superseded* as soon as any newer incarnation
    of its server is heard of (an entry or an introduction): it becomes a tombstone at once,
    and any entry of it that arrives later is kept as a tombstone.  Whether an origin counts is
    thus a function of the set of origins heard (not of their order), and merging stays
    idempotent and commutative.

Users
    The user universe can grow (new users appended): columns of different lengths merge, the
    shorter being zero-padded.

Message size (bytes), a documented estimate of a compact binary encoding
    * a message header: ``MESSAGE_HEADER_BYTES`` (sender id, kind, length);
    * a digest entry: origin id (4) + heartbeat (8) + column_version (8) = ``DIGEST_ENTRY_BYTES``;
    * a delta entry: the same 20 bytes plus a flags byte and the origin's timestamp of the
      heartbeat (8), and, when it carries the column, 4 bytes of length plus 12 bytes (user
      index 4 + float64 8) per non-zero entry of the column — columns are sparse (a server holds
      few users), so this is smaller than 8 N.

Signed moves
    An entry also carries the sign of the origin's latest change of each user (+1 raised, -1
    lowered, 0 unchanged), part of the versioned content: a column that stops changing is
    published once more with all signs 0.  A server thus counts, per user, how many servers
    (itself included) raised and lowered it in their latest updates (:meth:`GossipState.raising`,
    :meth:`GossipState.lowering`) — what the ``split`` update rule needs to tell servers pulling a
    user the same way from servers pulling it the other way.  A peer could compare the two
    latest versions it heard instead, but it may have missed versions in between; the origin
    alone knows its latest change.  Size: ``SIGN_ENTRY_BYTES`` (user index 4 + sign 1) per
    non-zero sign.

Age
    Every heartbeat carries the origin's clock reading (``heartbeat_at``; servers' clocks are
    assumed synchronised far better than the period, e.g. by NTP), so a server can tell how old
    its picture of the others is (:meth:`GossipState.ages`) — update rules use it to compensate
    for gossip delay.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

MESSAGE_HEADER_BYTES = 16
DIGEST_ENTRY_BYTES = 20
DELTA_ENTRY_BYTES = 29
COLUMN_HEADER_BYTES = 4
COLUMN_VALUE_BYTES = 12
SIGN_ENTRY_BYTES = 5

INCARNATION_MARK = "#"

MOVE_THRESHOLD = 1e-12
"""A change of an entry by more than this (tasks) counts as a move (same as a held entry)."""

# Running totals are rebuilt from the columns when read after this many incremental updates,
# so that floating-point drift of ``totals += new - old`` cannot accumulate.
REBUILD_EVERY = 4096


def origin_name(server: str, incarnation: int) -> str:
    """The gossip origin of one incarnation of a server."""
    return server if incarnation == 0 else f"{server}{INCARNATION_MARK}{incarnation}"


def server_of(origin: str) -> str:
    return origin.split(INCARNATION_MARK, 1)[0]


def incarnation_of(origin: str) -> int:
    """The incarnation an origin name stands for (``origin_name`` inverted)."""
    _, mark, number = origin.partition(INCARNATION_MARK)
    return int(number) if mark and number.isdigit() else 0


@dataclass(frozen=True)
class Entry:
    """What one message says about one origin."""

    origin: str
    heartbeat: int
    column_version: int
    column: FloatArray | None
    """The origin's column at ``column_version``; ``None`` when the sender knew the receiver
    already had it (a heartbeat-only entry)."""
    left: bool = False
    """The origin left the cluster (tombstone): its column counts as empty."""
    nonzero: int = -1
    """Non-zero entries of ``column`` (counted when not given)."""
    heartbeat_at: float = math.nan
    """The origin's clock when it emitted ``heartbeat``."""
    moves: FloatArray | None = None
    """With ``column``: per user the sign of the origin's latest change (+1, -1, 0); ``None``
    = no signs (all 0)."""
    signs: int = -1
    """Non-zero entries of ``moves`` (counted when not given)."""

    def size_bytes(self) -> int:
        size = DELTA_ENTRY_BYTES
        if self.column is not None:
            nnz = self.nonzero if self.nonzero >= 0 else int(np.count_nonzero(self.column))
            size += COLUMN_HEADER_BYTES + COLUMN_VALUE_BYTES * nnz
            if self.moves is not None:
                signs = self.signs if self.signs >= 0 else int(np.count_nonzero(self.moves))
                size += SIGN_ENTRY_BYTES * signs
        return size


@dataclass(frozen=True)
class Digest:
    """origin -> (heartbeat, column_version) as known by ``sender``."""

    sender: str
    versions: Mapping[str, tuple[int, int]]

    def size_bytes(self) -> int:
        return MESSAGE_HEADER_BYTES + DIGEST_ENTRY_BYTES * len(self.versions)


@dataclass(frozen=True)
class Delta:
    """Entries ``sender`` knows and the receiver (per its digest) lacks."""

    sender: str
    entries: tuple[Entry, ...]

    def size_bytes(self) -> int:
        return MESSAGE_HEADER_BYTES + sum(e.size_bytes() for e in self.entries)


_EMPTY = np.zeros(0)
_EMPTY.setflags(write=False)


@dataclass
class _Known:
    heartbeat: int
    column_version: int
    column: FloatArray
    left: bool
    heard_at: float  # local time the heartbeat last grew
    expired: bool = False
    nonzero: int = 0
    heartbeat_at: float = math.nan  # the origin's clock at its heartbeat
    moves: FloatArray = field(default_factory=lambda: _EMPTY)  # signs of the latest change
    signs: int = 0  # non-zero entries of moves
    superseded: bool = False  # a newer incarnation of its server was heard of (see _hear_of)

    @property
    def counted(self) -> bool:
        """Whether its column counts in the totals: neither left nor expired."""
        return not self.left and not self.expired


def _frozen(column: FloatArray) -> FloatArray:
    if isinstance(column, np.ndarray) and not column.flags.writeable and column.dtype == float:
        return column  # already an immutable column: share it
    out = np.array(column, dtype=float, copy=True)
    out.setflags(write=False)
    return out


@dataclass
class GossipState:
    """One server's gossip state: its own column and what it knows of everyone else's."""

    origin: str
    num_users: int
    ttl: float = math.inf
    """Seconds without a new heartbeat after which an origin stops counting."""
    tombstone_ttl: float = math.inf
    """Seconds after which a tombstone is forgotten."""
    _known: dict[str, _Known] = field(default_factory=dict, repr=False)
    _totals: FloatArray = field(default_factory=lambda: np.zeros(0), repr=False)
    _counts: tuple[IntArray, IntArray, IntArray] | None = field(default=None, repr=False)
    """(holders, raising, lowering) of the counted origins, made when read after a change."""
    _updates: int = 0
    _digest_cache: dict[str, tuple[int, int]] | None = field(default=None, repr=False)
    _newest: dict[str, int] = field(default_factory=dict, repr=False)
    """server -> the newest incarnation heard of (kept after its tombstones are forgotten)."""

    def __post_init__(self) -> None:
        self._totals = np.zeros(self.num_users)
        if self.origin not in self._known:
            self._known[self.origin] = _Known(0, 0, _frozen(np.zeros(self.num_users)), False, 0.0)
        self._newest[server_of(self.origin)] = incarnation_of(self.origin)

    # -- own column -----------------------------------------------------------------------
    @property
    def column(self) -> FloatArray:
        return self._padded(self._known[self.origin].column)

    def set_column(self, column: FloatArray, now: float) -> None:
        """Publish this server's column (a heartbeat; a new column_version if it changed)."""
        me = self._known[self.origin]
        col = np.asarray(column, dtype=float)
        if len(col) > self.num_users:
            self.resize(len(col))
        me.heartbeat += 1
        me.heard_at = me.heartbeat_at = now
        old = self._padded(me.column)
        new = self._padded(col)
        change = new - old
        moves = np.where(change > MOVE_THRESHOLD, 1.0,
                         np.where(change < -MOVE_THRESHOLD, -1.0, 0.0))
        old_moves = self._padded(me.moves)
        if me.left or not np.array_equal(old, new) or not np.array_equal(old_moves, moves):
            me.column_version = me.heartbeat
            self._count(old, new, not me.counted, False)
            me.column = _frozen(new)
            me.signs = int(np.count_nonzero(moves))
            me.moves = _frozen(moves) if me.signs else _EMPTY
            me.nonzero = int(np.count_nonzero(new))
            me.left = False
            me.expired = False
        self._versioned(self.origin, me)

    def heartbeat(self, now: float) -> None:
        """Show liveness without changing the column."""
        me = self._known[self.origin]
        me.heartbeat += 1
        me.heard_at = me.heartbeat_at = now
        self._versioned(self.origin, me)

    def leave(self, now: float) -> None:
        """Publish a tombstone: this server leaves, its column stops counting everywhere."""
        self._digest_cache = None
        me = self._known[self.origin]
        me.heartbeat += 1
        me.column_version = me.heartbeat
        self._count(self._padded(me.column), np.zeros(self.num_users), not me.counted, True)
        me.column = _frozen(np.zeros(self.num_users))
        me.moves = _EMPTY
        me.signs = 0
        me.nonzero = 0
        me.left = True
        me.heard_at = me.heartbeat_at = now

    def introduce(self, origin: str, now: float) -> None:
        """Learn that ``origin`` exists (e.g. from a membership list at start-up), as it is
        before its first update: heartbeat 0, empty column.  A no-op if already known."""
        if origin not in self._known:
            superseded = self._hear_of(origin, now)
            k = self._known[origin] = _Known(0, 0, _EMPTY, superseded, now,
                                             superseded=superseded)
            self._versioned(origin, k)

    # -- knowledge --------------------------------------------------------------------------
    def resize(self, num_users: int) -> None:
        """Grow the user universe (appended users start at 0 tasks everywhere)."""
        if num_users > self.num_users:
            extra = num_users - self.num_users
            self._totals = np.concatenate([self._totals, np.zeros(extra)])
            self._counts = None
            self.num_users = num_users

    def totals(self) -> FloatArray:
        """Per-user totals: the sum of the columns of every counted origin (self included)."""
        if self._updates >= REBUILD_EVERY:
            # rebuilt when read, after the latest change is complete (a rebuild inside a
            # change would read the changing origin's old column)
            self._rebuild()
        return self._totals.copy()

    def holders(self) -> npt.NDArray[np.int64]:
        """Per user, how many counted origins (self included) hold some of its tasks."""
        return self._counted_signs()[0].copy()

    def raising(self) -> npt.NDArray[np.int64]:
        """Per user, how many counted origins (self included) raised it in their latest
        change."""
        return self._counted_signs()[1].copy()

    def lowering(self) -> npt.NDArray[np.int64]:
        """Per user, how many counted origins (self included) lowered it in their latest
        change."""
        return self._counted_signs()[2].copy()

    def members(self) -> list[str]:
        """Origins currently counted as live (not left, not expired), self included."""
        return [o for o, k in self._known.items() if k.counted]

    def ages(self, now: float) -> FloatArray:
        """Seconds since each other counted origin emitted the heartbeat this server knows."""
        out = [now - k.heartbeat_at for o, k in self._known.items()
               if o != self.origin and k.counted and math.isfinite(k.heartbeat_at)]
        return np.array(out, dtype=float)

    def median_age(self, now: float) -> float | None:
        """Median of :meth:`ages` (None when no other origin is heard), clamped at 0: the wall
        clocks of different nodes may disagree by a little."""
        ages = self.ages(now)
        return max(float(np.median(ages)), 0.0) if len(ages) else None

    def known_column(self, origin: str) -> FloatArray | None:
        k = self._known.get(origin)
        return None if k is None else self._padded(k.column)

    def counted(self) -> list[tuple[str, FloatArray, float]]:
        """The counted origins (self included) with their columns and the origin's clock at
        its latest heartbeat heard (NaN: none): what the totals sum."""
        return [(o, self._padded(k.column), k.heartbeat_at) for o, k in self._known.items()
                if k.counted]

    def versions(self) -> dict[str, tuple[int, int, bool]]:
        """origin -> (heartbeat, column_version, left): the merge-relevant state."""
        return {o: (k.heartbeat, k.column_version, k.left) for o, k in self._known.items()}

    # -- reconciliation ---------------------------------------------------------------------
    def digest(self) -> Digest:
        return Digest(self.origin, self._versions().copy())

    def _versions(self) -> dict[str, tuple[int, int]]:
        """origin -> (heartbeat, column_version), kept in step with ``_known`` (same order:
        updated in place, new origins appended, rebuilt after a removal)."""
        if self._digest_cache is None:
            self._digest_cache = {o: (k.heartbeat, k.column_version)
                                  for o, k in self._known.items()}
        return self._digest_cache

    def _versioned(self, origin: str, k: _Known) -> None:
        """Keep the versions cache in step after ``origin``'s versions changed (or it was
        appended to ``_known``)."""
        if self._digest_cache is not None:
            self._digest_cache[origin] = (k.heartbeat, k.column_version)

    def own_entry(self) -> Entry:
        """This server's own entry with its column (to piggyback on an exchange it starts)."""
        me = self._known[self.origin]
        return Entry(self.origin, me.heartbeat, me.column_version, me.column, me.left,
                     me.nonzero, me.heartbeat_at, me.moves if me.signs else None, me.signs)

    def delta_for(self, digest: Digest) -> Delta:
        """The entries the digest's sender lacks; the column only where its copy is older."""
        peer = digest.versions
        get = peer.get
        known = self._known
        out: list[Entry] = []
        # the usual case, nothing new about an origin, sorted out in one pass
        for o in [o for o, v in self._versions().items() if get(o) != v]:
            hb, cv = get(o, (-1, -1))
            k = known[o]
            if k.heartbeat > hb or k.column_version > cv:
                fresh = k.column_version > cv
                out.append(
                    Entry(o, k.heartbeat, k.column_version,
                          k.column if fresh else None, k.left, k.nonzero,
                          k.heartbeat_at, k.moves if fresh and k.signs else None, k.signs)
                )
        return Delta(self.origin, tuple(out))

    def merge(self, delta: Delta | Iterable[Entry], now: float) -> int:
        """Apply entries; returns how many changed this state. Idempotent and commutative."""
        entries = delta.entries if isinstance(delta, Delta) else tuple(delta)
        changed = 0
        for e in entries:
            if e.origin == self.origin:
                continue  # nobody knows this server better than itself
            k = self._known.get(e.origin)
            # an origin's name is parsed once, when it is first heard of (the hot path)
            superseded = self._hear_of(e.origin, now) if k is None else k.superseded
            if k is None:
                if e.column is None:
                    # a heartbeat for a column never seen: remember the heartbeat only
                    k = _Known(e.heartbeat, -1, _EMPTY, superseded, now, superseded=superseded)
                    self._known[e.origin] = k
                    self._versioned(e.origin, k)
                    changed += 1
                    continue
                k = _Known(-1, -1, _EMPTY, True, now, superseded=superseded)
                self._known[e.origin] = k
            touched = False
            if e.heartbeat > k.heartbeat:
                k.heartbeat = e.heartbeat
                k.heartbeat_at = e.heartbeat_at
                k.heard_at = now
                touched = True
            if e.column is not None and e.column_version > k.column_version:
                col = _frozen(e.column)
                if len(col) > self.num_users:
                    self.resize(len(col))
                moves = _EMPTY if e.moves is None else _frozen(e.moves)
                left = e.left or superseded
                self._count(self._padded(k.column), self._padded(col), not k.counted,
                            left or k.expired)
                k.column_version = e.column_version
                k.column = col
                k.moves = moves
                k.signs = (0 if e.moves is None else e.signs if e.signs >= 0
                           else int(np.count_nonzero(moves)))
                k.nonzero = e.nonzero if e.nonzero >= 0 else int(np.count_nonzero(col))
                k.left = left
                touched = True
            if touched and k.expired and not k.left:
                # a newer heartbeat revives an expired origin
                k.expired = False
                self._add(self._padded(k.column), 1)
            if touched:
                self._versioned(e.origin, k)
                changed += 1
        return changed

    def expire(self, now: float) -> list[str]:
        """Stop counting silent origins; forget old tombstones. Returns the origins dropped."""
        dropped: list[str] = []
        for o, k in list(self._known.items()):
            if o == self.origin:
                continue
            if k.left:
                if now - k.heard_at >= self.tombstone_ttl:
                    del self._known[o]
                    self._digest_cache = None
                continue
            if not k.expired and now - k.heard_at >= self.ttl:
                k.expired = True
                self._add(self._padded(k.column), -1)
                dropped.append(o)
        return dropped

    # -- internals --------------------------------------------------------------------------
    def _hear_of(self, origin: str, now: float) -> bool:
        """Note that ``origin``, not known yet, exists: if it is its server's newest
        incarnation so far, every older one is marked superseded and, if still counted, becomes
        a tombstone now.  Returns whether ``origin`` itself is superseded (a newer incarnation
        of its server was heard of before)."""
        server, incarnation = server_of(origin), incarnation_of(origin)
        newest = self._newest.get(server, -1)
        if incarnation < newest:
            return True
        if incarnation > newest:
            self._newest[server] = incarnation
            if newest >= 0:
                for o, k in self._known.items():
                    if (o != self.origin and server_of(o) == server
                            and incarnation_of(o) < incarnation):
                        k.superseded = True
                        if not k.left:
                            if not k.expired:
                                self._add(self._padded(k.column), -1)
                            k.left, k.expired, k.heard_at = True, False, now
                            self._digest_cache = None
        return False

    def _padded(self, column: FloatArray) -> FloatArray:
        if len(column) == self.num_users:
            return column
        out = np.zeros(self.num_users)
        out[: len(column)] = column[: self.num_users]
        return out

    def _count(self, old: FloatArray, new: FloatArray, old_excluded: bool,
               new_excluded: bool) -> None:
        """One origin's column (or its moves, or whether it counts) changed from ``old`` to
        ``new``: the totals follow (the column counts unless excluded)."""
        self._counts = None  # moves or holders may have changed even if the column did not
        if not old_excluded:
            self._add(old, -1)
        if not new_excluded:
            self._add(new, 1)
        self._updates += 1

    def _add(self, column: FloatArray, sign: int) -> None:
        """Add (sign 1) or remove (sign -1) one origin's column from the totals, in place:
        merging is the hot path.  The per-user counts are made again when next read."""
        if sign > 0:
            self._totals += column
        else:
            self._totals -= column
        self._counts = None

    def _counted_signs(self) -> tuple[IntArray, IntArray, IntArray]:
        """(holders, raising, lowering) over the counted origins: made from their columns and
        signs when first read after a change (servers read them once per update, while a
        column arrives with every message)."""
        if self._counts is None:
            n = self.num_users
            live = [k for k in self._known.values() if k.counted]
            cols = [self._padded(k.column) for k in live if k.nonzero]
            holders = (np.array(cols) > 0).sum(axis=0) if cols else np.zeros(n, np.int64)
            signs = [self._padded(k.moves) for k in live if k.signs]
            moves = np.array(signs) if signs else np.zeros((0, n))
            self._counts = (holders.astype(np.int64), (moves > 0).sum(axis=0).astype(np.int64),
                            (moves < 0).sum(axis=0).astype(np.int64))
        return self._counts

    def _rebuild(self) -> None:
        self._updates = 0
        self._totals = np.zeros(self.num_users)
        for k in self._known.values():
            if k.counted:
                self._add(self._padded(k.column), 1)
