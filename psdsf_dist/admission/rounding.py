"""Whole tasks from a fractional column: credit rounding (pure).

The allocation gives user n ``x[n]`` tasks on this server, usually not a whole number; a task
is whole.  Every step (one lease interval, ``elapsed`` periods long) :func:`round_column` gives
each user ``floor(x[n])`` tasks — the floors always fit, since ``sum_n x[n] d[n] <= c`` — and
hands the capacity the floors leave over to extra tasks, one per user at the most, to the
users it is **owed** to, in order of their credit: the task-periods the user is owed so far,
``sum (x[n] - t[n]) * elapsed`` over past steps, plus what this step would add without the
extra.  A user that gets its extra pays ``(1 - frac) * elapsed`` of credit, one that does not
earns ``frac * elapsed``; a user whose credit is spent (due <= 0) gets no extra even if it
fits, so a lone user with ``x = 2.5`` runs 3 and 2 tasks in turn, not 3 because the third fits.

Why it meets ``x`` on average: the credit is exactly the running difference between the
task-periods ``x`` asks for and those granted, and the users most behind go first.  With equal
demands this is the chairman-assignment problem (Tijdeman 1980): as long as the leftover
capacity holds ``sum frac`` extra tasks, the largest-credit-first order keeps every credit in
``(-1, 1)`` task-periods — over any window the tasks granted to n differ from ``x[n]`` times its
length by less than two task-periods, whatever its length (``tests/admission``, hypothesis).
With unequal demands an extra may not fit where the fractions say it should (``x = 1.5`` tasks
of 0.6 CPU on one CPU: no whole schedule runs more than one), an integrality gap no rounding
closes; credits are then clamped to ``[-CREDIT_LIMIT, CREDIT_LIMIT]`` so that a user the
capacity cannot serve does not starve the others later, and the gap shows as a bounded, stated
deficit instead of a growing debt.

The targets are the most tasks each user should run here concurrently; the leases
(:mod:`.leases`) make sure running tasks never exceed the capacity while targets move.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

CREDIT_LIMIT = 2.0
"""The largest credit (task-periods) a user keeps, owed or ahead."""
WHOLE_TOL = 1e-9
"""``x`` within this of a whole number counts as that number (the solver's round-off)."""
FIT_TOL = 1e-9
"""Relative slack when fitting a task into the leftover capacity (round-off in the sums)."""


@dataclass(frozen=True)
class Rounded:
    """One step's whole-task targets and the credits after it."""

    targets: IntArray
    credit: FloatArray


def most_that_fit(demand: FloatArray, room: FloatArray, capacity: FloatArray) -> int:
    """The most tasks of ``demand`` that fit in ``room``, to round-off relative to the capacity
    (0 if none; a zero demand: none either — a task asking for nothing is refused when its
    shape is checked).  Resources the task does not use do not count."""
    used = demand > 0
    if not np.any(used):
        return 0
    slack = FIT_TOL * np.maximum(capacity[used], 1.0)
    k = np.floor((room[used] + slack) / demand[used])
    return max(int(np.min(k)), 0)


def round_column(x: FloatArray, demand: FloatArray, capacity: FloatArray, credit: FloatArray,
                 elapsed: float) -> Rounded:
    """One step of ``elapsed`` periods when every target is granted: :func:`whole_targets`,
    then :func:`charge` with them (see the module docstring).

    ``x``: N tasks per user on this server; ``demand``: N x M per-task demand; ``capacity``: M;
    ``credit``: N, from the previous step (zeros at first).
    """
    targets = whole_targets(x, demand, capacity, credit, elapsed)
    return Rounded(targets, charge(credit, x, targets, elapsed))


def whole_targets(x: FloatArray, demand: FloatArray, capacity: FloatArray, credit: FloatArray,
                  elapsed: float) -> IntArray:
    """Floors, plus one extra task for the users owed one that fit, largest credit first."""
    x = np.maximum(np.asarray(x, dtype=float), 0.0)
    base = np.floor(x + WHOLE_TOL)
    frac = np.where(x - base > WHOLE_TOL, x - base, 0.0)
    room = capacity - base @ demand
    due = credit + frac * elapsed
    extra = np.zeros(len(x))
    # an extra goes to users owed something (due > 0), largest credit first, ties by index (a
    # step is a function of its inputs)
    owed = np.flatnonzero((frac > 0) & (due > WHOLE_TOL * elapsed))
    for n in sorted(owed, key=lambda n: (-due[n], n)):
        if most_that_fit(demand[n], room, capacity) >= 1:
            extra[n] = 1.0
            room = room - demand[n]
    return (base + extra).astype(np.int64)


def charge(credit: FloatArray, x: FloatArray, granted: npt.NDArray[np.integer] | FloatArray,
           elapsed: float) -> FloatArray:
    """Credits after a step of ``elapsed`` periods in which each user could run ``granted``
    tasks (its target, or less when the leases had no room yet: the user stays owed)."""
    x = np.maximum(np.asarray(x, dtype=float), 0.0)
    out: FloatArray = np.clip(credit + (x - np.asarray(granted, dtype=float)) * elapsed,
                              -CREDIT_LIMIT, CREDIT_LIMIT)
    return out
