"""Whole tasks from the fractional PS-DSF allocation: floor every entry, then fill greedily.

``solve --whole-tasks``.  A one-shot integer allocation of the whole cluster, not the credit
rounding over time that :mod:`psdsf_dist.admission.rounding` does for one server's column
(there a fractional target is met *on average* across lease intervals; here every user gets one
integer allocation, to run as it is).

Given the certified PS-DSF allocation ``X*`` (Theorem 1 in RDM, 2 in TDM, Khamse-Ashari et al.
2016) the rounding is

1. ``Y[n, i] = floor(X*[n, i])`` (up to round-off of the solver, ``ROUND_RTOL``);
2. progressive filling with the PS-DSF criterion from ``Y`` (``psdsf-pf`` of
   :mod:`.whole_task_policies` started at ``Y``): while some task fits, one more task for the
   pair of smallest virtual dominant share ``x[n] / (phi[n] gamma[n, i])``.

**Claims** (tested with hypothesis in ``tests/policies/test_psdsf_rounding.py``).  Let ``x*[n]``
be user n's fractional total, ``x[n]`` its rounded total and ``s[n]`` the number of servers where
``X*[n, i]`` is not a whole number (at most the servers n holds tasks on, hence at most its
eligible servers).

* *Feasible and integral*: ``Y <= X*`` entry by entry and the consumption of a server is
  increasing in every entry, so ``Y`` fits where ``X*`` does; step 2 places only tasks that fit,
  on eligible servers, within ``floor(max_tasks)`` (``sum_i Y[n, i] <= x*[n] <= max_tasks[n]``).
* *Bounded loss*: step 2 only adds, so ``x[n] >= sum_i Y[n, i] = x*[n] - sum_i frac(X*[n, i])``
  and each of the ``s[n]`` fractional parts is below 1: **``x[n] > x*[n] - s[n]``** when
  ``s[n] > 0``, ``x[n] >= x*[n]`` when ``s[n] = 0``.  Relative to its PS-DSF share a user loses
  less than one task per server it was split over.
* *The bound is tight for every integer allocation*, not only this one: a user alone with a
  task needing 1 unit on ``s`` servers of capacity ``1 - e`` has ``x* = s (1 - e)`` and no task
  fits anywhere: every integer allocation loses ``s (1 - e)`` -> ``s``.
* *Maximal*: the filling ends only when no user below its backlog has a task that fits anywhere.

No upper bound is claimed: capacity that the floors free is handed out greedily, so a user can
end above ``x*[n]`` (by at most what fits in the leftovers of the servers).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.solver import solve
from psdsf_dist.model.defaults import DEFAULT_MODE
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies.whole_task_policies import whole_task_allocation
from psdsf_dist.policies.whole_tasks import whole_caps

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

ROUND_RTOL = 1e-9
"""An entry within this relative distance below an integer is that integer (solver round-off)."""


@dataclass(frozen=True)
class RoundedAllocation:
    """The integer allocation, the fractional one it came from and the per-user loss bound."""

    allocation: IntArray  # N x K whole tasks
    fractional: FloatArray  # N x K, the certified PS-DSF allocation
    floor: IntArray  # N x K, step 1
    split: IntArray  # N: s[n], servers where X*[n, i] was not whole (the loss bound)
    seconds: float  # rounding only (the fractional solve not included)

    @property
    def totals(self) -> IntArray:
        return np.asarray(self.allocation.sum(axis=1))

    @property
    def loss(self) -> FloatArray:
        """N: ``x*[n] - x[n]`` (negative: the user gained); below ``split`` by the claim."""
        return np.asarray(self.fractional.sum(axis=1) - self.totals)


def floor_allocation(fractional: FloatArray, max_tasks: FloatArray) -> IntArray:
    """Step 1: every entry rounded down (an entry a round-off below an integer counts as it)."""
    X = np.maximum(np.asarray(fractional, dtype=float), 0.0)
    Y = np.floor(X * (1.0 + ROUND_RTOL) + ROUND_RTOL).astype(np.int64)
    limit = whole_caps(max_tasks)
    for n in np.flatnonzero(Y.sum(axis=1) > limit):  # round-off at a cap: drop the excess
        while Y[n].sum() > limit[n]:
            Y[n, int(np.argmax(Y[n]))] -= 1
    return np.asarray(Y, dtype=np.int64)


def round_psdsf(
    scenario: Scenario, mode: Mode = DEFAULT_MODE, fractional: FloatArray | None = None
) -> RoundedAllocation:
    """Whole tasks from the PS-DSF allocation (solved here unless ``fractional`` is given)."""
    mode = scenario.check_mode(mode)
    X_star = solve(scenario, mode).allocation if fractional is None else np.asarray(fractional)
    t0 = time.perf_counter()
    Y = floor_allocation(X_star, scenario.max_tasks)
    split = ((X_star - Y) > ROUND_RTOL * np.maximum(X_star, 1.0)).sum(axis=1).astype(np.int64)
    X = whole_task_allocation(scenario, "psdsf-pf", mode, start=Y)
    return RoundedAllocation(X, X_star, Y, split, time.perf_counter() - t0)
