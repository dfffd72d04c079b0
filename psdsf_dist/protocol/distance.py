"""Distance to fair: how far the users' totals are from their PS-DSF totals, relatively.

``distance(X) = max_n |x[n] - x*[n]| / x*[n]`` over the users with ``x*[n] > 0``, where ``x`` are
the row sums of the current allocation and ``x*`` the totals of the certified PS-DSF allocation
of the scenario as it stands (:func:`psdsf_dist.core.solver.solve`, Theorem 1 in RDM, Theorem 2
in TDM).  A user with ``x*[n] = 0`` (absent, or eligible nowhere) counts 0 while it holds nothing
(below ``DUST`` of the largest fair total) and 1 — wholly off — while it still holds tasks.

Why this and not the certificate residual.  The residual (:mod:`psdsf_dist.core.certificate`) is
the test of exactness, but it measures bottleneck conditions — relative gaps of ``V`` between
consumers of a saturated resource, or unused capacity — not tasks: it has no fixed relation to
how many tasks a user misses (issue 16 measured sequential sweeps whose totals were within 1 %
long before their residual fell below 1e-2).  What a user feels is its total against the total
the allocator promises, which is exactly this number: "within 1 %" means every user's total is
within 1 % of its PS-DSF total, the measure of issue 16, computed online without waiting for the
run to end to learn its final values.

Why it is right.  It is 0 exactly when every total equals its PS-DSF total, in particular at the
solver's allocation; it is scale-free and, scaling every column of a PS-DSF allocation by
``s``, equals ``|1 - s|``.  In TDM the PS-DSF totals are unique (the Eisenberg-Gale optimum is
strictly concave in the totals: :mod:`psdsf_dist.core.eisenberg_gale`), so the distance is 0 at
*every* PS-DSF allocation.  In RDM they need not be (``/work/shared/spec/PSDSF.md``: about 5 % of
random instances have several with different totals); where the run settles on another one the
certificate holds while the distance stays positive — the residual stays the test of exactness,
the distance the measure of how far users are from what the solver would give them.

Cost.  ``x*`` depends on the scenario only, not on the allocation: it is solved once per
scenario (after each event), cached by the scenario's content (:func:`fair_totals`), and every
observation then pays one N x K row sum.  The solve is the centralised solver's
(``experiments/results/core.md``: 3.6 ms for the paper's cluster, 0.77 s for 10,000 Google
servers and 100 users).  If it cannot certify within ``SOLVE_SECONDS`` the distance is unknown
(None), never a guess.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.solver import solve
from psdsf_dist.errors import SolverError
from psdsf_dist.model.scenario import Mode, Scenario

FloatArray = npt.NDArray[np.float64]

DUST = 1e-9
"""A total below this share of the largest fair total counts as nothing."""
SOLVE_SECONDS = 120.0
"""Time budget of one reference solve; past it the distance is reported as unknown."""
CACHE_SIZE = 16
"""Scenarios whose fair totals are kept (a run revisits few: one per event)."""

THRESHOLDS = (0.05, 0.01, 0.001)
"""Distances reported per event ("within 5 % / 1 % / 0.1 % after R rounds")."""

_cache: OrderedDict[bytes, FloatArray | None] = OrderedDict()


def scenario_key(scenario: Scenario, mode: Mode) -> bytes:
    """A digest of everything the PS-DSF allocation depends on (two equal scenarios built
    separately, as the drivers build one per observation, share it)."""
    h = hashlib.blake2b(digest_size=20)
    h.update(mode.encode())
    for a in (scenario.capacity, scenario.demand, scenario.weight, scenario.placement,
              scenario.max_tasks, scenario.gamma):
        arr = np.ascontiguousarray(a)
        h.update(str(arr.shape).encode())
        h.update(arr.tobytes())
    return h.digest()


def fair_totals(scenario: Scenario, mode: Mode) -> FloatArray | None:
    """The users' totals at the solver's PS-DSF allocation (None: not certified in time)."""
    key = scenario_key(scenario, mode)
    if key in _cache:
        _cache.move_to_end(key)
        return _cache[key]
    try:
        totals: FloatArray | None = solve(scenario, mode, time_limit=SOLVE_SECONDS).totals
    except SolverError:
        totals = None
    _cache[key] = totals
    while len(_cache) > CACHE_SIZE:
        _cache.popitem(last=False)
    return totals


def relative_gap(totals: FloatArray, fair: FloatArray) -> float:
    """``max_n |x[n] - x*[n]| / x*[n]`` (see the module docstring for users with ``x* = 0``)."""
    x = np.asarray(totals, dtype=float)
    ref = np.asarray(fair, dtype=float)
    if x.shape != ref.shape:
        raise ValueError(f"totals must have shape {ref.shape}, got {x.shape}")
    if not np.all(np.isfinite(x)):
        return float("inf")
    floor = DUST * max(float(ref.max(initial=0.0)), 1.0)
    pos = ref > floor
    gap = np.abs(x[pos] - ref[pos]) / ref[pos]
    stray = (~pos) & (np.abs(x) > floor)
    return max(float(gap.max(initial=0.0)), 1.0 if stray.any() else 0.0)


def distance_to_fair(scenario: Scenario, allocation: FloatArray, mode: Mode) -> float | None:
    """The distance of an N x K allocation from the scenario's PS-DSF totals (None: unknown)."""
    fair = fair_totals(scenario, mode)
    if fair is None:
        return None
    return relative_gap(np.asarray(allocation, dtype=float).sum(axis=1), fair)
