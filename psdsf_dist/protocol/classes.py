"""Classes of identical servers, and what one member knows about its class.

Servers with identical capacities and identical eligibility and ``gamma`` for every user form a
*class* (:class:`~psdsf_dist.core.solver.ServerClasses`, the solver's grouping).  The PS-DSF
allocations that give every member of a class the same column are exactly the PS-DSF
allocations of the merged cluster, where the class is one server of ``k`` times the capacity:
every virtual dominant share on it scales by the same ``1/k``, so the per-server condition is
unchanged (:mod:`psdsf_dist.policies.class_merge` relies on the same fact).  So the class
update rule (:class:`~psdsf_dist.protocol.update_rule.ClassRule`) lets every member run the
server procedure for its class and keep ``1/k`` of the result: the members act as one player.

Detection (:func:`server_classes`) reads only the membership table's scenario, in which absent
servers are eligible for nobody: a server that is down, or differs in any capacity or ``gamma``,
is simply in another class (alone, if nobody matches it).  Every server computes the same
classes from the same table.

Slots (:func:`slot_of`): classes act in turn, class ``c`` of ``C`` at phase ``c / C`` of every
period (all members at once), so that each class sees the others' latest columns — a
Gauss-Seidel order among classes.  That needs gossip to carry a class's change to the others
within one slot: slots are used while ``C <= MAX_SLOTS`` (slots of at least T / 10, about 1.5
times the median column delay of the default gossip, four rounds per period to four peers:
``docs/class_rule.md``); with more classes, slower gossip than the defaults or messages
held a slot or more (:func:`psdsf_dist.protocol.node.slots_carry`), every server keeps its
random phase and the class rule is ``split``.  Half a slot before its slot a member pulls from
a member of the class acting just before (:func:`previous_class`; :meth:`psdsf_dist.protocol.node.
ServerNode.pull`), so the latest slots' columns reach it whatever random gossip brought.

What a member acting in its slot is given (:func:`slot_knowledge`): its class's live member
count and its members' columns summed, and totals in which every *other* class stands at the
column it took in its latest slot.  Gossip does not carry a class's change to every server
within a slot on a large cluster: at K = 1,000 a member hears the previous class's new column
from a median 32 % of its members by its own slot (``docs/class_rule.md``), so plain sums mix
the class's new column with its old one.  But the members of a class act together and compute
(nearly) the same column, so one fresh member stands for all: each other class is counted as
its member count times the mean column of the members heard to have acted in its latest slot
(heartbeats within half a period of the class's newest).  At a resting allocation every member
of a class holds the class's column, so the totals are unchanged there: the fixed points stay
the PS-DSF allocations.  The heartbeats also tell whether the classes do take turns: if another
class acted within half a slot of this one's phase (a driver that runs every server at once, or
a cluster too loaded to keep its slots), the best response over classes acting at once would
swing, so :func:`slot_knowledge` returns None and the member takes the step without a slot.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.solver import ServerClasses
from psdsf_dist.model.scenario import Scenario

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

MAX_SLOTS = 10
"""Classes act in ordered slots of the period only up to this many classes (see the module
docstring); beyond, servers keep random phases."""


@dataclass(frozen=True)
class ClassMap:
    """The class of every server of a table (present ones; absent servers are alone)."""

    member_class: IntArray
    """(K,) class index of each server; classes are numbered in order of first member."""
    count: FloatArray
    """(C,) present members per class (0 for a class of absent servers)."""
    present: BoolArray
    """(K,) whether each server is present."""

    @property
    def num_classes(self) -> int:
        """Classes with at least one present member."""
        return int(np.count_nonzero(self.count > 0))

    def members(self, server: int) -> IntArray:
        """The present servers of ``server``'s class, itself included."""
        c = self.member_class[server]
        return np.flatnonzero((self.member_class == c) & self.present).astype(np.int64)

    @property
    def live(self) -> IntArray:
        """The classes with present members, in the order of their slots."""
        return np.flatnonzero(self.count > 0).astype(np.int64)

    def rank(self, server: int) -> int:
        """Rank of ``server``'s class among the classes with present members."""
        return int(np.searchsorted(self.live, self.member_class[server]))


def server_classes(scenario: Scenario, present: BoolArray | None = None) -> ClassMap:
    """Group the servers of ``scenario`` into classes of identical ones.  An absent server
    (``present`` False) is put in a class of its own, whatever it looks like."""
    K = scenario.num_servers
    up = np.ones(K, dtype=bool) if present is None else np.asarray(present, dtype=bool)
    base = ServerClasses.of(scenario).member_class
    # absent servers: a class per server, after the others
    cls = np.where(up, base, int(base.max(initial=-1)) + 1 + np.arange(K))
    _, first, inverse = np.unique(cls, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    member = rank[np.asarray(inverse).ravel()].astype(np.int64)
    count = np.bincount(member, weights=up.astype(float), minlength=len(order))
    return ClassMap(member, count.astype(float), up)


def slot_of(classes: ClassMap, server: int, max_slots: int = MAX_SLOTS) -> float | None:
    """The phase (fraction of a period) at which ``server``'s class acts, or None when there
    are more than ``max_slots`` classes (random phases)."""
    n = classes.num_classes
    if n > max_slots or not classes.present[server]:
        return None
    return classes.rank(server) / n


def previous_class(classes: ClassMap, server: int) -> int | None:
    """The class acting in the slot just before ``server``'s (the last one of the period for
    the first class): whom a member pulls from before its slot.  None when its class is the
    only one."""
    live = classes.live
    if len(live) < 2 or not classes.present[server]:
        return None
    return int(live[(classes.rank(server) - 1) % len(live)])


@dataclass(frozen=True)
class ClassKnowledge:
    """What one member knows about its class when the class acts in its slot (from gossip,
    or a model of it): ``size``, the class's live member count, and ``column_sum``, the sum
    of the columns of the members it counts (itself included, with its current column).  A
    driver gives it to the class rule only in the class's slot (:func:`slot_of`); without it
    the rule runs ``split``."""

    size: int
    column_sum: FloatArray


def slot_knowledge(classes: ClassMap, server: int, column: FloatArray,
                   counted: Iterable[tuple[int, FloatArray, float]], totals: FloatArray,
                   now: float, period: float) -> tuple[ClassKnowledge, FloatArray] | None:
    """What ``server`` knows when its class acts in its slot at time ``now``: its class
    (:class:`ClassKnowledge`, with ``column`` its current column) and the per-user totals with
    every other class at the column it took in its latest slot (module docstring).

    ``counted``: (table index, column, origin's clock at its latest heartbeat; NaN: none
    heard) of the servers the gossiped ``totals`` sum, its own among them or not.  A class
    none of whose members was heard keeps its plain sum.  None when another class acted
    within half a slot of ``now``'s phase: the classes are not taking turns."""
    ours = classes.member_class[server]
    seen = [(int(i), c, float(at)) for i, c, at in counted if i != server]
    if not seen:
        return ClassKnowledge(int(classes.count[ours]), np.array(column, dtype=float)), totals
    index = np.array([i for i, _, _ in seen])
    cols = np.array([c for _, c, _ in seen], dtype=float)
    heard = np.array([at for _, _, at in seen], dtype=float)
    member = classes.member_class[index]
    mine = member == ours
    column_sum = cols[mine].sum(axis=0) + column
    estimate = totals - cols[~mine].sum(axis=0)  # the own class's columns (any order)
    half_slot = 0.5 * period / max(classes.num_classes, 1)
    for c in np.unique(member[~mine]):
        sel = member == c
        at = heard[sel]
        known = np.isfinite(at)
        if not known.any():
            estimate = estimate + cols[sel].sum(axis=0)
            continue
        newest = float(at[known].max())
        lag = (now - newest) % period
        if min(lag, period - lag) < half_slot:
            return None  # class c acted at this class's phase: not in turn
        fresh = known & (at >= newest - 0.5 * period)
        estimate = estimate + np.count_nonzero(sel) * cols[sel][fresh].mean(axis=0)
    return ClassKnowledge(int(classes.count[ours]), column_sum), estimate
