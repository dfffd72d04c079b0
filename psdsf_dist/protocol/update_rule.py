"""Per-server update rules for asynchronous PS-DSF.

Every T seconds a server replaces its column (tasks per user) by a function of what it alone
has: its capacities, its own column, the users' demands, weights and caps, the per-user totals
it has heard through gossip (possibly stale), the gossiped counts of servers holding, raising and
lowering each user, and a little per-user state of its own (:class:`SplitState`).  Every rule
returns a feasible column whatever its inputs — an exact water-fill
(:func:`~psdsf_dist.core.server_procedure.server_procedure`), a convex step between two
feasible columns, and a final projection that only guards round-off — and a server whose column
is its best response to the true totals does not move, so the fixed points of every rule are
exactly the PS-DSF allocations.  The rules differ in how they get there when many servers act
at once on stale totals.

``best-response``
    The server procedure at the gossiped totals.  At fixed water levels it sets user n to
    ``w[n,i] L[i] - (x[n] - X[n,i])``: it corrects n's whole error by itself.  If k servers hold
    n and act on one snapshot, n's total moves by k times its error: for k >= 2 it overshoots,
    and the paper cluster (70 servers holding users 1 and 2) flips with period 2 forever.

``damped`` (``a``)
    ``X + a (BR - X)``.  Stable only for ``a < 2 / (k + 1)`` with the largest k, so slow for
    every other user.  Kept, with best response, as the baseline of the studies.

``split`` (the default)
    Predictive water-filling: the server values n at the total predicted if ``gain[n]`` servers
    make the same move, i.e. moves n by ``(w L' - x[n]) / gain[n]``.  If the gain is the number
    of servers really moving n, n's new total is the *average* of its servers' targets instead
    of their sum.  Linearised around a PS-DSF allocation with the structure fixed (who holds
    whom, one level per server), the relative errors of the totals then evolve by ``P Q``, the
    two halves of a random walk on the bipartite user-server graph; the walk has detailed
    balance, so ``P Q`` has real eigenvalues in [0, 1]: no oscillation, geometric convergence
    at the walk's spectral gap.  Under-estimating the movers by more than 2x brings the
    period-2 mode back; over-estimating only slows convergence.  So the rule's work is counting
    the movers, from what gossip tells it:

    - *Signed counts.*  The gain is the number of servers whose latest change moved n the way
      this server's last change did (``ServerView.raising`` / ``lowering``); a move below
      ``SECANT_MIN_CHANGE`` of the total has no side and takes the holder count (otherwise
      round-off grows 100x per round at a fixed point).
    - *Shared correction or local move.*  The server checks whether n's total followed its own
      last move: ``ratio = (the others' change) / (own change) + 1``.  A decrease the total did
      not follow (``ratio < THRESHOLD``) is n leaving this server while the other holders
      refill it, not a shared correction: the gain is cut by ``FACTOR`` per round (down to 1)
      and restored when the total follows again.  A geometric cut is what keeps the period-2
      mode away: a wrongly cut gain is restored after one round.
    - *Gossip delay.*  When the other columns lag d more rounds (``ServerView.staleness``),
      their matching moves of those rounds are missing from the totals: the server adds
      ``(gain - 1)`` times its own last d changes, compares its secant with its own change of d
      rounds earlier, uses holder counts (signed counts two rounds old count the wrong side of
      an oscillation), and restores a cut gain to the ratio it observed, capped by the holders.
    - *Plateau exit.*  A lone user this server has lowered at gain 1 for ``EXIT_AFTER`` rounds
      in a row on a marginal server (its entry below the user's average share), while the total
      fell by less than ``THRESHOLD`` of what was drained, is valued at a total higher by the
      amount drained so far, doubled every further round — the price-taker's extrapolation —
      so it leaves in a few rounds instead of at the rate of its level gap.  Only while the
      drain is steady (the latest decrease at least 1/``STEADY`` of the streak's mean): the
      geometrically fading tail of a converging drain is no plateau, and extrapolating it
      pushes the server off the fixed point it is reaching.  Nothing moves at a fixed point,
      so nothing changes there.

    Every step is a water-fill at some totals (feasible) and is inert at a fixed point.

``class``
    With few classes of identical servers, the classes act in ordered slots of the period and
    each member takes ``1/k`` of its class's best response (pooled capacity, the class's
    totals), with a plateau exit for a user leaving the class while the others refill it;
    otherwise ``split`` itself (:class:`ClassRule`).

**Caps under staleness.**  Per-server capacities hold by construction; a user's global cap
``max_tasks`` is shared by every server, and servers acting at once on stale totals would each
fill the headroom they see.  So every rule raises a capped
user by at most this server's part of the headroom (:func:`cap_raise_limit`: its share of the
user's tasks-alone, less its own raises the totals do not show yet).  On one shared snapshot
the cap then holds exactly; on totals of uneven age the excess is small and reported.

The rules are explained for users in ``docs/design.md``; measured figures are in
``docs/results.md`` (regenerated by ``python -m experiments run rule_study``), and the variants
measured and dropped in ``experiments/notes/rule_variants.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.server_procedure import server_procedure
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.protocol.classes import ClassKnowledge

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

SECANT_MIN_CHANGE = 1e-9
"""A change below this fraction of a user's total is no change (no side, no secant)."""
THRESHOLD = 0.5
"""``split``: a decrease the total followed by less than this fraction is a local move."""
FACTOR = 0.1
"""``split``: the cut of a local mover's gain per round."""
EXIT_AFTER = 6
"""``split``: rounds of draining at gain 1 before the plateau exit extrapolates."""
MAX_EXITS = 1
"""``split``: the plateau exit fires only when at most this many users of a column qualify."""
STEADY = 4.0
"""``split``: the plateau exit fires only while the latest decrease is at least 1/STEADY of the
streak's mean decrease (a steady drain, not the fading tail of a converging one)."""
MAX_STALENESS = 3
"""Rounds of own changes a server remembers to compensate gossip delay."""
FEASIBILITY_RTOL = 1e-9
"""Relative slack when checking a column against its capacities."""


def staleness_rounds(age: float | None, period: float) -> float:
    """Rounds by which the other servers' columns lag beyond the usual one, from their median
    gossip age in seconds (:meth:`psdsf_dist.protocol.gossip.GossipState.median_age`); 0 if none
    heard."""
    return 0.0 if age is None else max(age / period - 1.0, 0.0)


@dataclass(frozen=True)
class ServerView:
    """What one server knows that changes only on churn."""

    capacity: FloatArray
    """(M,) its capacities (TDM: ignored)."""
    consumption: FloatArray
    """(N, M) per-task consumption here (``scenario.consumption(i, mode)``)."""
    gamma: FloatArray
    """(N,) tasks each user could run alone here; 0 = not eligible (or currently absent)."""
    weight: FloatArray
    """(N,) user weights."""
    max_tasks: FloatArray
    """(N,) finite backlogs (``inf`` = unlimited)."""
    mode: Mode
    num_servers: int
    """Current membership size as this server knows it (bounds estimates of k)."""
    holders: FloatArray | None = None
    """(N,) optional, changes every round: how many servers hold tasks of each user, counted
    over the columns this server has heard of (its own current column included)."""
    raising: FloatArray | None = None
    """(N,) optional, changes every round: how many servers' latest column change raised each
    user (gossip: compare the two latest versions of each column, or let the origin attach the
    sign of its change to each entry)."""
    lowering: FloatArray | None = None
    """(N,) optional: likewise, how many servers' latest change lowered each user."""
    staleness: float = 0.0
    """Optional: by how many rounds, beyond the usual one, the other servers' columns in the
    totals lag behind (gossip delay).  Rounded, at most :data:`MAX_STALENESS`."""
    cap_share: FloatArray | None = None
    """(N,) this server's part of each user's tasks-alone over the present servers,
    ``gamma[n, i] / sum_j gamma[n, j]``: the most of a user's headroom below its cap it takes in
    one step (see :func:`best_response`).  None: no bound (all of the headroom)."""
    klass: ClassKnowledge | None = None
    """Optional: what the server knows about its class of identical servers (the class rule
    uses it; the other rules ignore it)."""

    @property
    def num_users(self) -> int:
        return len(self.gamma)


class RuleState(Protocol):
    """A rule's per-server state: immutable, and able to follow the user list as it changes."""

    def selected(self, users: IntArray) -> RuleState:
        """The state for the users ``users`` of this one's list, in that order (the user list
        as it grows: ``arange(n)``; as some users leave: the indices of those who stay).  An
        index outside this state's list (past its end, or -1) is a user that starts fresh."""
        ...


@dataclass(frozen=True)
class NoState:
    """The state of a memoryless rule."""

    def selected(self, users: IntArray) -> NoState:
        return self


def _pick(values: FloatArray, users: IntArray, fill: float) -> FloatArray:
    """``values`` of ``users``; ``fill`` for an index outside them (a fresh user)."""
    known = (users >= 0) & (users < len(values))
    out = np.full(len(users), fill)
    out[known] = values[users[known]]
    return out


@dataclass(frozen=True)
class SplitState:
    """What ``split`` remembers per user between two updates of one server."""

    gain: FloatArray
    """The gain used at the last update (NaN: none yet)."""
    last_totals: FloatArray
    """The totals the last update saw (NaN: none yet)."""
    last_column: FloatArray
    """The column the last update started from (NaN: none yet)."""
    changes: tuple[FloatArray, ...]
    """Own changes, most recent first, ``MAX_STALENESS + 1`` of them."""
    draining: FloatArray
    """Rounds in a row the user was lowered at gain 1 (plateau exit)."""
    drained: FloatArray
    """What those rounds took off the user here."""
    sagged: FloatArray
    """How far the user's total fell over them."""

    @classmethod
    def start(cls, num_users: int) -> SplitState:
        nan, zero = np.full(num_users, np.nan), np.zeros(num_users)
        return cls(nan, nan.copy(), nan.copy(),
                   tuple(zero.copy() for _ in range(MAX_STALENESS + 1)),
                   zero.copy(), zero.copy(), zero.copy())

    def selected(self, users: IntArray) -> SplitState:
        u = users
        return SplitState(
            _pick(self.gain, u, math.nan), _pick(self.last_totals, u, math.nan),
            _pick(self.last_column, u, math.nan), tuple(_pick(c, u, 0.0) for c in self.changes),
            _pick(self.draining, u, 0.0), _pick(self.drained, u, 0.0),
            _pick(self.sagged, u, 0.0))


class UpdateRule(Protocol):
    @property
    def name(self) -> str: ...

    def initial_state(self, num_users: int) -> RuleState: ...

    def update(
        self, state: RuleState, view: ServerView, totals: FloatArray, column: FloatArray
    ) -> tuple[FloatArray, RuleState]: ...


def server_view(
    scenario: Scenario,
    server: int,
    mode: Mode,
    active_users: BoolArray | None = None,
    num_servers: int | None = None,
) -> ServerView:
    """The view of ``server`` in ``scenario``; ``active_users`` absent get gamma 0.  Servers
    absent from a churn table are left out of its scenario's placement (gamma 0), so they add
    nothing to a user's tasks alone (``Scenario.tasks_alone``), the denominator of the
    server's headroom share."""
    alone = scenario.tasks_alone
    gamma = np.array(scenario.gamma[:, server], dtype=float)
    if active_users is not None:
        gamma = np.where(np.asarray(active_users, dtype=bool), gamma, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(alone > 0, np.minimum(gamma / alone, 1.0), 0.0)
    capacity = scenario.server_capacity(mode)[server]
    return ServerView(
        capacity=np.array(capacity, dtype=float),
        consumption=np.array(scenario.consumption(server, mode), dtype=float),
        gamma=gamma,
        weight=np.array(scenario.weight, dtype=float),
        max_tasks=np.array(scenario.max_tasks, dtype=float),
        mode=mode,
        num_servers=scenario.num_servers if num_servers is None else int(num_servers),
        cap_share=share,
    )


def is_feasible_column(
    view: ServerView, column: FloatArray, rtol: float = FEASIBILITY_RTOL
) -> bool:
    """Whether a column respects the server's capacities (to ``rtol``) and eligibility."""
    if np.any(column < -rtol) or np.any((view.gamma <= 0) & (column > 0)):
        return False
    if view.mode == "tdm":
        with np.errstate(divide="ignore", invalid="ignore"):
            used = float(np.sum(np.where(view.gamma > 0, column / view.gamma, 0.0)))
        return used <= 1.0 + rtol
    use = view.consumption.T @ column
    return bool(np.all(use <= view.capacity * (1.0 + rtol) + 1e-300))


def feasible_column(view: ServerView, column: FloatArray) -> FloatArray:
    """Project a column into the server's feasible set: no negatives, nothing on ineligible
    users, and scaled down uniformly if any capacity would be exceeded."""
    raw = np.asarray(column, dtype=float)
    # A non-finite amount is corrupt input, not a quantity: it counts as nothing.
    col = np.where((view.gamma > 0) & np.isfinite(raw), np.maximum(raw, 0.0), 0.0)
    if view.mode == "tdm":
        with np.errstate(divide="ignore", invalid="ignore"):
            used = float(np.sum(np.where(view.gamma > 0, col / view.gamma, 0.0)))
        scale = used
    else:
        used_r = view.consumption.T @ col
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(
                view.capacity > 0, used_r / view.capacity, np.where(used_r > 0, np.inf, 0.0)
            )
        scale = float(ratio.max(initial=0.0))
    if scale > 1.0:
        col = col / scale if math.isfinite(scale) else np.zeros_like(col)
    return col


def cap_raise_limit(share: FloatArray, max_tasks: FloatArray, totals: FloatArray,
                    raised: FloatArray | None = None) -> FloatArray:
    """How far one server may raise each user in one step so that the servers stay within the
    user's cap together: ``share * (cap - x0) - raised``, where ``raised`` is what this server
    has raised the user by since the totals it sees were current and ``x0 = totals - raised``
    the total then.

    Why: if every server i moving user n takes at most ``share[i]`` of the headroom at the
    totals it sees, with ``sum_i share[i] <= 1`` (each server's part of n's tasks-alone over
    the present servers), and counts its own raises made since those totals against that same
    budget, then the raises of all servers acting on one snapshot x0 add up to at most
    ``cap - x0``: the total never crosses the cap.  With one shared snapshot (lock-step, at any
    fixed staleness) that is a guarantee; when servers see totals of different ages it bounds
    what each takes, and what remains is reported (``Observation.cap_excess``).  Unlimited
    users (``inf`` cap) are not bounded."""
    spent = np.zeros_like(totals) if raised is None else np.maximum(raised, 0.0)
    before = totals - spent
    with np.errstate(invalid="ignore"):  # inf * 0: an unlimited user, no bound
        budget = np.where(np.isfinite(max_tasks),
                          share * np.maximum(max_tasks - before, 0.0) - spent, np.inf)
    return np.maximum(budget, 0.0)


def best_response(
    view: ServerView, totals: FloatArray, column: FloatArray,
    gain: FloatArray | float | None = None, raised: FloatArray | None = None,
) -> FloatArray:
    """The server procedure on a view (exact water-fill; always feasible).  ``raised``: what
    this server raised each user by since the totals were current (see
    :func:`cap_raise_limit`)."""
    col = feasible_column(view, column)
    # Totals can never be below what this server itself holds.
    tot = np.maximum(np.where(np.isfinite(totals), totals, 0.0), col)
    new = server_procedure(
        view.capacity,
        view.consumption,
        view.gamma,
        view.weight,
        tot,
        col,
        view.max_tasks,
        mode=view.mode,
        gain=gain,
        max_raise=None if view.cap_share is None else cap_raise_limit(
            view.cap_share, view.max_tasks, tot, raised),
    )
    # The water-fill is exact and feasible; the projection only guards against round-off and
    # overflow on degenerate inputs (e.g. subnormal capacities), so the promise holds always.
    return feasible_column(view, new)


@dataclass(frozen=True)
class BestResponse:
    """The plain server procedure (oscillates in lock-step; kept as the baseline)."""

    name: str = "best-response"

    def initial_state(self, num_users: int) -> NoState:
        return NoState()

    def update(
        self, state: RuleState, view: ServerView, totals: FloatArray, column: FloatArray
    ) -> tuple[FloatArray, RuleState]:
        return best_response(view, totals, column), state


@dataclass(frozen=True)
class Damped:
    """Uniform damping ``X + a (BR - X)``: a convex combination of two feasible columns."""

    a: float = 0.5
    name: str = "damped"

    def __post_init__(self) -> None:
        if not 0.0 < self.a <= 1.0:
            raise ValueError(f"damping a must be in (0, 1], got {self.a}")

    def initial_state(self, num_users: int) -> NoState:
        return NoState()

    def update(
        self, state: RuleState, view: ServerView, totals: FloatArray, column: FloatArray
    ) -> tuple[FloatArray, RuleState]:
        col = feasible_column(view, column)
        target = best_response(view, totals, col)
        return feasible_column(view, col + self.a * (target - col)), state


@dataclass(frozen=True)
class SplitGain:
    """Predictive water-filling that counts the movers and tells shared corrections from local
    moves (the module docstring says how and why)."""

    name: str = "split"

    def initial_state(self, num_users: int) -> SplitState:
        return SplitState.start(num_users)

    def update(
        self, state: RuleState, view: ServerView, totals: FloatArray, column: FloatArray
    ) -> tuple[FloatArray, RuleState]:
        if not isinstance(state, SplitState):
            raise TypeError(f"split needs a SplitState, got {type(state).__name__}")
        col = feasible_column(view, column)
        tot = np.maximum(np.where(np.isfinite(totals), totals, 0.0), col)
        d = int(min(max(round(view.staleness), 0), MAX_STALENESS))
        history = state.changes
        holders = np.ones(view.num_users) if view.holders is None else view.holders
        k = np.clip(holders, 1.0, max(view.num_servers, 1))
        reference = history[d]  # what this server did when the others made the moves now seen
        signed = view.raising is not None and view.lowering is not None and d == 0
        d_own = col - state.last_column
        d_others = tot - state.last_totals - d_own
        measurable = (
            np.isfinite(d_others)
            & np.isfinite(d_own)
            & (np.abs(reference) > SECANT_MIN_CHANGE * np.maximum(tot, 1e-300))
        )
        if signed:
            assert view.raising is not None and view.lowering is not None
            same = np.where(reference > 0, view.raising, view.lowering)
            same = np.where(measurable, same, holders)  # a round-off move has no side
            k = np.clip(same, 1.0, max(view.num_servers, 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = d_others / np.where(measurable, reference, 1.0) + 1.0
        gain = np.where(np.isfinite(state.gain), np.minimum(state.gain, k), k)
        opposed = measurable & (ratio < THRESHOLD)
        if signed:
            opposed &= reference < 0  # with signed counts only leaving needs the cut
        restore = k
        if not signed and d > 0:
            restore = np.clip(np.where(measurable, ratio, k), 1.0, k)
        gain = np.where(opposed, np.maximum(1.0, gain * FACTOR),
                        np.where(measurable, restore, gain))
        gain = np.where(view.gamma > 0, gain, 1.0)
        pending = np.sum(history[:d], axis=0) if d else np.zeros_like(col)
        predicted = np.maximum(tot + (gain - 1.0) * pending, col)
        # plateau exit: the streak of rounds lowering at gain 1 with other holders present, what
        # it drained and how far the total fell (up to the first extrapolated round)
        draining = measurable & (reference < 0) & (state.gain <= 1.0) & (holders > 1)
        streak = np.where(draining, state.draining + 1.0, 0.0)
        drained = np.where(draining, state.drained - reference, 0.0)
        sagged = np.where(
            draining,
            state.sagged - np.where(streak <= EXIT_AFTER, reference + d_others, 0.0),
            0.0,
        )
        followed = (streak == EXIT_AFTER) & (sagged > THRESHOLD * drained)
        streak = np.where(followed, 0.0, streak)
        steady = -reference * streak * STEADY >= drained
        boosted = (streak >= EXIT_AFTER) & (col * holders < tot) & steady
        if np.count_nonzero(boosted) > MAX_EXITS:
            boosted[:] = False
        boost = drained * np.exp2(np.minimum(streak - EXIT_AFTER, 30.0))
        predicted = np.where(boosted, predicted + boost, predicted)
        new = best_response(view, predicted, col, gain=gain,
                            raised=np.sum(np.maximum(history[:d], 0.0), axis=0) if d else None)
        return new, SplitState(gain, tot, col, (new - col, *history[:MAX_STALENESS]),
                               streak, drained, sagged)


def class_view(view: ServerView) -> ServerView:
    """The view of a member's class acting as one server of ``k = klass.size`` members:
    capacities, ``gamma`` and the share of a capped user's headroom ``k`` times a member's
    (per-task consumption unchanged)."""
    kn = view.klass
    assert kn is not None
    k = max(kn.size, 1)
    return replace(
        view,
        capacity=view.capacity * k,
        gamma=view.gamma * k,
        cap_share=None if view.cap_share is None else np.minimum(view.cap_share * k, 1.0),
        klass=None,
    )


@dataclass(frozen=True)
class SlotState:
    """What a member remembers between two of its class's slots, per user, in class units
    (the slotted step's swap exit; see :class:`ClassRule`)."""

    last_totals: FloatArray
    """The class's totals at its last slot, before its move (NaN: none yet)."""
    last_change: FloatArray
    """The class's own change at its last slot."""
    streak: FloatArray
    """Slots in a row in which the class lowered the user and the total did not follow."""
    drained: FloatArray
    """What those slots took off the user in this class."""
    base: FloatArray
    """The user's total when the streak began."""
    fired: FloatArray
    """Slots in a row the swap exit fired in this streak."""

    @classmethod
    def start(cls, num_users: int) -> SlotState:
        zero = np.zeros(num_users)
        return cls(np.full(num_users, np.nan), zero, zero, zero, zero, zero)

    def selected(self, users: IntArray) -> SlotState:
        u = users
        return SlotState(_pick(self.last_totals, u, math.nan), _pick(self.last_change, u, 0.0),
                         _pick(self.streak, u, 0.0), _pick(self.drained, u, 0.0),
                         _pick(self.base, u, 0.0), _pick(self.fired, u, 0.0))


@dataclass(frozen=True)
class ClassState:
    """The class rule's state: ``split``'s (the step without a slot) and the slotted step's."""

    split: RuleState
    slot: SlotState

    def selected(self, users: IntArray) -> ClassState:
        return ClassState(self.split.selected(users), self.slot.selected(users))


SWAP_SHARE = 0.01
"""Slotted swap exit: a streak counts once it has drained at least this share of the user's
total (the slow geometric tails near a fixed point drain less)."""
SWAP_STEP = 0.006
"""Slotted swap exit: the extrapolation adds at most this share of the user's total to one
slot's cut (a cut the other classes refill only in the next period shows in the totals, and
two classes taking the user over on totals a slot stale may both refill it: at 0.008 that
overshoot reached 1.1 % of the total on Google K = 100 seed 2 in the runtime setting;
``docs/class_rule.md``)."""


def swap_exit(slot: SlotState, totals: FloatArray, own: FloatArray, plain: FloatArray,
              eligible: BoolArray) -> tuple[FloatArray, SlotState]:
    """The slotted step's plateau exit: how much higher than ``totals`` the class values each
    user (0: not at all), and the state for the next slot.

    ``totals`` the class's totals now (its own column ``own`` included), ``plain`` the plain
    best response's column.  A user counts as leaving the class on a plateau when, for
    ``EXIT_AFTER`` slots in a row, the class lowered it by a measurable amount and the total
    followed by less than ``THRESHOLD`` of the cut, both at each slot and over the streak
    (``|total - total at the start| <= THRESHOLD x drained``): the other classes refill what
    it sheds, as in a swap of the user to another class at the rate of the level gap.  The
    streak must have drained at least ``SWAP_SHARE`` of the total and still be steady (the
    latest cut at least 1/``STEADY`` of the streak's mean), and only one user of the column
    may qualify (``MAX_EXITS``; several at once are the class re-levelling).  If the plain
    step lowers it again, the user is valued at a total higher by what the streak drained,
    doubled every further slot it fires, at most ``SWAP_STEP`` of the total."""
    d_own = slot.last_change
    d_tot = totals - slot.last_totals
    measurable = np.isfinite(d_tot) & (np.abs(d_own) > SECANT_MIN_CHANGE
                                       * np.maximum(totals, 1e-300))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(measurable, d_tot / np.where(measurable, d_own, 1.0), 1.0)
    lowered = measurable & (d_own < 0) & (ratio < THRESHOLD)
    going = lowered & (slot.streak > 0)
    streak = np.where(lowered, np.where(going, slot.streak, 0.0) + 1.0, 0.0)
    drained = np.where(lowered, np.where(going, slot.drained, 0.0) - d_own, 0.0)
    base = np.where(going, slot.base, np.where(lowered, slot.last_totals, 0.0))
    fired = np.where(going, slot.fired, 0.0)
    boosted = (
        (streak >= EXIT_AFTER)
        & (-d_own * streak * STEADY >= drained)
        & (np.abs(totals - base) <= THRESHOLD * drained)
        & (drained >= SWAP_SHARE * totals)
        & (plain < own)
        & eligible
    )
    if np.count_nonzero(boosted) > MAX_EXITS:
        boosted[:] = False
    boost = np.minimum(drained * np.exp2(np.minimum(fired, 30.0)), SWAP_STEP * totals)
    boost = np.where(boosted, boost, 0.0)
    fired = np.where(boosted, fired + 1.0, 0.0)
    return boost, SlotState(totals, np.zeros_like(totals), streak, drained, base, fired)


@dataclass(frozen=True)
class ClassRule:
    """Identical servers act as one, in their class's slot; otherwise ``split``.

    When the driver tells a member that its class acts in its own slot of the period
    (``view.klass`` set: :func:`~psdsf_dist.protocol.classes.slot_of`, the classes in turn),
    the member of a class of ``k`` (:mod:`psdsf_dist.protocol.classes`) computes the best
    response of its class — the water-fill on the class's pooled capacity (``k`` times its
    own) against the class's current totals — and keeps ``1/k`` of it.  The class's column is
    taken as ``k`` times the member's own (the class-constant state the rule keeps), and the
    rest of each user's total as what the member hears of the servers outside its class
    (``totals - klass.column_sum``; the driver counts every other class at the column it took
    in its latest slot: :func:`~psdsf_dist.protocol.classes.slot_knowledge`).  With identical
    inputs every member computes the same column, so after one update the class moves as one
    player, and with the classes in turn each sees the others' latest columns: sequential
    sweeps over classes, which is what the best response is right for.  A server alone in
    its class is a class of one: the same step, its own capacities.

    *Swap exit.*  A user swapping from this class to another moves at the rate of the gap
    between the two classes' water levels: each slot this class cuts it to its level, the
    other refills it to its own, and the user's total hardly moves (Google mix K = 1,000 seed
    0: 0.65 tasks a sweep for 16 sweeps, the total 4 % high throughout;
    ``docs/class_rule.md``).  The plain step then gets a price-taker's extrapolation, as
    ``split``'s plateau exit: a user the class has lowered for several slots while the total
    stood still is valued at a higher total (:func:`swap_exit`), so the class sheds it faster.
    The values are a water-fill's inputs, so the column stays feasible; nothing moves at a
    fixed point, so no streak starts there and the step is the plain best response.

    Without a slot (``view.klass`` None: more classes than slots, gossip too slow for slots,
    or classes seen acting at once — a driver that runs every server together, a cluster too
    loaded to keep its slots) the rule *is* ``split``, step for step: the
    same call with the same inputs and ``split`` state (:attr:`ClassState.split`), so
    wherever the classes do not act in turn the class rule behaves exactly as the default
    rule did.  (Running ``split`` once per class, with the movers counted in classes, was
    measured and dropped: ``experiments/notes/rule_variants.md``.)  The slotted step keeps
    only its swap-exit streaks (:attr:`ClassState.slot`, started afresh by every step
    without a slot), so the ``split`` state carries over unchanged when a server's slot comes
    or goes with the membership.

    *Feasible at any staleness.*  Whatever the inputs — stale totals, a wrong member count, a
    member that disagrees with the others, any streak state — the water-fill returns a column
    feasible for the merged server, i.e. within ``k`` times the member's capacities and only
    on users eligible on it (the same users as on the member); ``1/k`` of it is within the
    member's own capacities.  The final projection on the member's view only guards
    round-off.

    *Fixed points.*  A class-constant allocation is PS-DSF iff the merged one is (every
    virtual dominant share on the merged server is the members' scaled by ``1/k``: the
    per-server condition is the same).  The best response is inert exactly at a PS-DSF best
    response of the merged server at the true totals, and ``split`` exactly at a PS-DSF
    allocation.  The swap exit fires only after a measurable cut of the class's own, so at a
    resting allocation the slotted step is the plain best response: the fixed points are the
    PS-DSF allocations (slotted: those in which identical servers hold identical columns —
    every PS-DSF allocation's totals have one).
    """

    inner: UpdateRule = field(default_factory=SplitGain)
    name: str = "class"

    def initial_state(self, num_users: int) -> ClassState:
        return ClassState(self.inner.initial_state(num_users), SlotState.start(num_users))

    def update(
        self, state: RuleState, view: ServerView, totals: FloatArray, column: FloatArray
    ) -> tuple[FloatArray, RuleState]:
        if not isinstance(state, ClassState):
            raise TypeError(f"class needs a ClassState, got {type(state).__name__}")
        kn = view.klass
        if kn is None:
            new, inner = self.inner.update(state.split, view, totals, column)
            return new, ClassState(inner, SlotState.start(view.num_users))
        k = max(kn.size, 1)  # a server its own table counts as absent is still itself
        col = feasible_column(view, column)
        merged = class_view(view)
        own = k * col
        outside = np.maximum(np.where(np.isfinite(totals), totals, 0.0) - kn.column_sum, 0.0)
        tot = outside + own
        new = best_response(merged, tot, own)
        boost, slot = swap_exit(state.slot, tot, own, new, view.gamma > 0)
        if np.any(boost > 0):
            new = best_response(merged, tot + boost, own)
        new = np.asarray(new, dtype=float)
        slot = replace(slot, last_change=new - own)
        return feasible_column(view, new / k), ClassState(state.split, slot)


def uses_classes(rule: UpdateRule) -> bool:
    """Whether the drivers must tell ``rule`` about the server's class (``ServerView.klass``)."""
    return isinstance(rule, ClassRule)


RuleFactory = Callable[..., UpdateRule]

_FACTORIES: dict[str, RuleFactory] = {
    "best-response": BestResponse,
    "damped": Damped,
    "split": SplitGain,
    "class": ClassRule,
}
RULES: tuple[str, ...] = tuple(_FACTORIES)
DEFAULT_RULE = "class"


def make_rule(name: str = DEFAULT_RULE, **params: float) -> UpdateRule:
    """Build a rule by name; ``params`` are its numeric parameters (``a`` for damped)."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        choices = ", ".join(RULES)
        raise ValueError(f"unknown update rule {name!r}; choose one of {choices}") from None
    try:
        return factory(**params)
    except TypeError as err:
        raise ValueError(f"rule {name!r}: bad parameters {sorted(params)}: {err}") from None
