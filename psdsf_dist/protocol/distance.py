"""Distance to fair: how far the users' totals are from those of a PS-DSF allocation.

``distance(X) = min_c max_n |x[n] - c[n]| / c[n]`` over a set of certified PS-DSF totals ``c``
of the scenario as it stands (Theorem 1 in RDM, Theorem 2 in TDM), where ``x`` are the row sums
of the current allocation.  A user with ``c[n] = 0`` (absent, or eligible nowhere) counts 0 while
it holds nothing (below ``DUST`` of the largest total of ``c``) and 1 — wholly off — while it
still holds tasks.

What it bounds.  Every ``c`` is the totals of an allocation whose certificate holds (the solver
never returns an uncertified one), so the distance is an upper bound on the distance of the
current totals to the *nearest* PS-DSF allocation: "within 1 %" means every user's total is
within 1 % of what it gets at some PS-DSF allocation, never a claim closer than that.  It is 0
at every allocation of the set, in particular at the solver's, and scale-free (scaling every
column of a PS-DSF allocation by ``s`` gives ``|1 - s|`` when the set holds only that one).

The set.  RDM PS-DSF is not unique (on the Google 2011 mix the protocol often settles on an
exact PS-DSF allocation whose totals differ from the solver's by percents for most users), so
one reference is not enough: a run at an exact PS-DSF allocation would read percents off
forever.  The set therefore holds (1) the solver's cold
allocation (:func:`psdsf_dist.core.solver.solve`), solved once per scenario, and (2) warm
solves from the run's own allocation (``solve(start=X)``: exact sweeps from there, landing on the
PS-DSF allocation next to it), taken when the certificate residual says the run is close
(``<= WARM_RESIDUAL``) yet no allocation of the set is within ``WARM_GAP``, at most once every
``WARM_EVERY`` observations; and (3) the run's own totals, without a solve, once its allocation
certifies to the solver's own tolerance (``DEFAULT_RTOL``): it then is a PS-DSF allocation.
(3) matters because a warm solve starts each class of identical servers from the mean of its
members' columns: where the run split a class unevenly the mean is another allocation, and the
sweeps from it can land on another PS-DSF allocation, so that an exactly converged run would
read as off by per cents.  A warm solve from a nearly converged state takes a few sweeps
(figures: ``experiments/notes/design_measurements.md``).  In TDM the PS-DSF totals are unique (the
Eisenberg-Gale optimum is strictly concave in the totals: :mod:`psdsf_dist.core.eisenberg_gale`)
and the cold solve alone makes the distance exact.

Why not the certificate residual alone.  The residual (:mod:`psdsf_dist.core.certificate`) is
the test of exactness, but it measures bottleneck conditions — relative gaps of ``V`` between
consumers of a saturated resource, or unused capacity — not tasks, and has no fixed relation to
how many tasks a user misses (sequential sweeps can have every total within 1 % of a PS-DSF
allocation long before their residual falls below 1e-2: the distance-to-fair study in
``experiments/results/``).  What a user feels is its total against what a fair allocation gives
it: this number.

Cost.  Per observation one N-vector gap per allocation of the set; a cold solve after each event
(``experiments/results/core.md`` times them) and now and then a warm one.  A solve that does
not certify within its budget adds nothing; with an empty set the distance is unknown (None),
never a guess.

Scope.  The set is kept per process, so a run's distances depend on the warm solves of the
observations before them: the simulator clears it (:func:`forget`) when a run starts, so that a
run is deterministic; a coordinator keeps it for its lifetime (a longer memory only sharpens the
bound).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.certificate import DEFAULT_RTOL
from psdsf_dist.core.solver import solve
from psdsf_dist.errors import SolverError
from psdsf_dist.model.scenario import Mode, Scenario

FloatArray = npt.NDArray[np.float64]

DUST = 1e-9
"""A total below this share of the largest fair total counts as nothing."""
SOLVE_SECONDS = 120.0
"""Time budget of the cold solve of a scenario."""
WARM_SECONDS = 10.0
"""Time budget of one warm solve (from the run's allocation)."""
WARM_RESIDUAL = 1e-2
"""A warm solve is tried only when the certificate residual is at most this."""
WARM_GAP = 1e-3
"""... and no allocation of the set is within this distance already."""
WARM_EVERY = 5
"""... and at most once every this many observations of the scenario."""
MAX_CANDIDATES = 8
"""PS-DSF totals kept per scenario (the first, the cold solve's, always stays)."""
CACHE_SIZE = 16
"""Scenarios whose sets are kept (a run revisits few: one per event)."""

THRESHOLDS = (0.05, 0.01, 0.001)
"""Distances reported per event ("within 5 % / 1 % / 0.1 % after R rounds")."""


@dataclass
class _Known:
    """The certified PS-DSF totals known for one scenario."""

    candidates: list[FloatArray] = field(default_factory=list)
    since_warm: int = WARM_EVERY


_cache: OrderedDict[bytes, _Known] = OrderedDict()


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


def _known(scenario: Scenario, mode: Mode) -> _Known:
    key = scenario_key(scenario, mode)
    if key in _cache:
        _cache.move_to_end(key)
        return _cache[key]
    known = _Known()
    with contextlib.suppress(SolverError):  # an empty set: the distance is unknown
        known.candidates.append(solve(scenario, mode, time_limit=SOLVE_SECONDS).totals)
    _cache[key] = known
    while len(_cache) > CACHE_SIZE:
        _cache.popitem(last=False)
    return known


def fair_totals(scenario: Scenario, mode: Mode) -> FloatArray | None:
    """The users' totals at the solver's (cold) PS-DSF allocation (None: not certified)."""
    known = _known(scenario, mode)
    return known.candidates[0] if known.candidates else None


def forget() -> None:
    """Drop every known PS-DSF totals.  The set is kept per process and only sharpens the
    bound; a study that wants each run's distance to depend on that run alone (not on what an
    earlier run of the same scenario found) calls this between runs."""
    _cache.clear()


def known_totals(scenario: Scenario, mode: Mode) -> tuple[FloatArray, ...]:
    """Every certified PS-DSF totals known for the scenario (the cold solve's first)."""
    return tuple(_known(scenario, mode).candidates)


def relative_gap(totals: FloatArray, fair: FloatArray) -> float:
    """``max_n |x[n] - c[n]| / c[n]`` (see the module docstring for users with ``c = 0``)."""
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


def distance_to_fair(scenario: Scenario, allocation: FloatArray, mode: Mode,
                     residual: float | None = None) -> float | None:
    """The distance of an N x K allocation to the nearest known PS-DSF totals (None: none
    known).  ``residual``: the allocation's certificate residual, which may trigger a warm
    solve from it (see the module docstring)."""
    known = _known(scenario, mode)
    X = np.asarray(allocation, dtype=float)
    x = X.sum(axis=1)
    best = min((relative_gap(x, c) for c in known.candidates), default=None)
    known.since_warm += 1
    # the residual does not depend on the tolerance it was checked at (certificate.py): at
    # most DEFAULT_RTOL means the certificate holds to the solver's own tolerance
    if residual is not None and residual <= DEFAULT_RTOL and np.all(np.isfinite(X)):
        if best is None or best > WARM_GAP:  # not a near copy of one known (round-off moves)
            _add(known, x)
        return 0.0
    if (residual is not None and residual <= WARM_RESIDUAL and np.all(np.isfinite(X))
            and (best is None or best > WARM_GAP) and known.since_warm >= WARM_EVERY):
        known.since_warm = 0
        try:
            found = solve(scenario, mode, start=X, time_limit=WARM_SECONDS).totals
        except SolverError:
            return best
        _add(known, found)
        gap = relative_gap(x, found)
        best = gap if best is None else min(best, gap)
    return best


def _add(known: _Known, totals: FloatArray) -> None:
    """Remember certified PS-DSF totals (the oldest after the cold solve's makes room)."""
    if len(known.candidates) >= MAX_CANDIDATES:
        del known.candidates[1]
    known.candidates.append(np.array(totals, dtype=float))
