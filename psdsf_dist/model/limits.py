"""How big a scenario may be, and which numbers it may state (checked before any work is done).

Sizes
    A scenario is refused, with one line naming the field and the limit, when it would make the
    allocator allocate or loop without bound: more servers (after expanding classes) than
    ``servers``, more users, resources or events than their limits, more user x server cells
    (the dense allocation matrix, 8 bytes each) than ``cells``, a file larger than
    ``file_bytes``, nesting deeper than ``depth`` (a scenario is a handful of levels deep), or
    YAML aliases that would add more than ``alias_nodes`` nodes once expanded.
    The limits are checked on the counts, before classes are expanded or matrices built, so a
    ``count: 1000000000`` costs nothing.  A command's own work is bounded the same way:
    cells times the rounds simulated, or times the allocations computed, is at most ``work``
    (:func:`check_work`).  To raise one, set ``PSDSF_LIMITS``, e.g.
    ``PSDSF_LIMITS="servers=5000000,cells=200000000"``.

Numbers
    Every amount, weight, ``gamma`` and cap is 0 or lies in ``[SMALLEST, LARGEST]``
    (``max_tasks`` may also be infinite).  Within that range every ratio the mechanism forms —
    tasks of a demand in a capacity (``gamma``), virtual dominant shares ``x / (phi * gamma)``,
    their products in the water-fill — stays between about 1e-45 and 1e45, far inside what a
    float holds (1e-308 to 1e308): nothing overflows to infinity, underflows to zero, or becomes
    NaN.  Outside it the answer could be silently wrong (a demand of 5e-324 is a zero
    ``gamma`` and its user "eligible nowhere"; weights of 1e-300 and 1e300 made NaN tasks), so
    such numbers are refused: rescale the unit instead (memory in GiB rather than bytes, ...).
    The solvers also need the task counts and the weights each to span at most :data:`SPAN`
    (:func:`check_span`): every number may be anywhere in the range, but not all at once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import Any

from psdsf_dist.errors import ScenarioError

LARGEST = 1e15
"""The largest finite number a scenario may state."""
SMALLEST = 1e-15
"""The smallest non-zero number a scenario may state."""
SPAN = 1e8
"""The most a scenario's task counts (tasks alone of every user on every server it may use,
finite ``max_tasks``) and its weights may each span (largest / smallest).  The solvers — the
certified PS-DSF solver's sweeps and exact solves, the baselines' linear and conic programs —
work to tolerances near 1e-9 of the largest quantity, so on a wider span a small user's share is
round-off: PS-DSF then fails to certify and an LP reports a model error."""
LIMITS_ENV = "PSDSF_LIMITS"
"""Environment variable raising (or lowering) the size limits: ``name=value,...``."""


@dataclass(frozen=True)
class Limits:
    """Size limits of one scenario (see the module docstring)."""

    servers: int = 1_000_000
    users: int = 100_000
    resources: int = 64
    events: int = 100_000
    cells: int = 50_000_000
    """Users x servers: the dense allocation is 8 bytes a cell (400 MB at the default)."""
    file_bytes: int = 64 * 2**20
    depth: int = 32
    work: int = 20_000_000
    """User x server cells times the rounds a command simulates (``simulate``, ``observe``) or
    times the allocations it computes (``properties``, ``compare``): what bounds a command's
    time (the time per cell-round: ``docs/input-limits.md``)."""
    alias_nodes: int = 1_000_000
    """Nodes YAML aliases may add to a document once expanded (ten levels of nine aliases
    would add 9^10)."""
    tasks: int = 5_000_000
    """Tasks of a job trace (``replay``): each is a duration in memory and an event of the
    simulation (bytes and time per task: ``docs/input-limits.md``)."""
    waiting_jobs: int = 200
    """Jobs with unstarted tasks at once in a ``replay``: every arrival and completion re-plans
    each of them.  Checked before the
    replay on a bound valid under every scheduler (``Workload.least_waiting``), then at every
    plan."""
    estimates: int = 4_000_000
    """Job estimates (a level or placement of one job) one scheduler's ``replay`` may make:
    what bounds its planning time (the time per estimate and the Facebook 2010 trace's needs:
    ``docs/input-limits.md``)."""
    policy_jobs: int = 2_000
    """Jobs of a trace ``replay --job-policies`` may take: each arrival and sub-job completion
    solves the policy over the active jobs (linear programs for most policies; the time per
    job: ``docs/input-limits.md``)."""
    protocol_updates: int = 1_000_000
    """Server updates ``replay --job-policies protocol`` may make (rounds x sites): every
    server updates once per period while any job is present (the time per update:
    ``docs/input-limits.md``)."""

    def check(self, what: str, count: int, fld: str) -> None:
        """Refuse ``count`` of ``what`` beyond its limit, naming ``fld``."""
        limit = int(getattr(self, what))
        if count > limit:
            raise ScenarioError(fld, f"{count:,} {what.replace('_', ' ')} is more than the "
                                     f"limit of {limit:,} (raise it with {LIMITS_ENV}="
                                     f"\"{what}=N\")")


def check_work(cells: int, times: int, fld: str, what: str) -> None:
    """Refuse a command that would process ``cells`` user x server cells ``times`` over
    (``what``: "rounds", "allocations") beyond the ``work`` limit, naming the option ``fld``."""
    limit = current_limits().work
    if cells * times > limit:
        raise ScenarioError(fld, f"{cells:,} user x server cells x {times:,} {what} is more "
                                 f"than the work limit of {limit:,} (ask for less, or raise it "
                                 f"with {LIMITS_ENV}=\"work=N\")")


def check_span(gamma: Any, max_tasks: Any, weight: Any) -> None:
    """Refuse a scenario whose task counts or weights span more than :data:`SPAN`, naming
    what spans too much."""
    import numpy as np

    tasks = np.concatenate([np.asarray(gamma, dtype=float).ravel(),
                            np.asarray(max_tasks, dtype=float).ravel()])
    for what, fld, values in (("tasks alone (gamma) and max_tasks", "users", tasks),
                              ("weights", "users", np.asarray(weight, dtype=float))):
        positive = values[(values > 0) & np.isfinite(values)]
        if positive.size and positive.max() > SPAN * positive.min():
            span = positive.max() / positive.min()
            raise ScenarioError(fld, f"the {what} span {span:.1e}, more than the {SPAN:g} the "
                                     "solvers hold (rescale units, or split the scenario)")


def current_limits() -> Limits:
    """The default limits, changed by ``PSDSF_LIMITS`` where it says so."""
    text = os.environ.get(LIMITS_ENV, "").strip()
    if not text:
        return Limits()
    names = {f.name for f in fields(Limits)}
    changes: dict[str, Any] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in names:
            raise ScenarioError("", f"{LIMITS_ENV}: {part.strip()!r} is not name=N with a name "
                                    f"among {', '.join(sorted(names))}")
        try:
            changes[name] = int(value.strip().replace("_", ""))
        except ValueError:
            raise ScenarioError("", f"{LIMITS_ENV}: {name} must be a whole number, got "
                                    f"{value.strip()!r}") from None
        if changes[name] < 1:
            raise ScenarioError("", f"{LIMITS_ENV}: {name} must be >= 1")
    return replace(Limits(), **changes)


def nesting_depth(value: Any, limit: int) -> int:
    """How deeply lists and mappings nest in ``value`` (iteratively: any depth is measured
    without recursion); stops counting past ``limit``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            deepest = max(deepest, depth)
            if depth > limit:
                return deepest
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest
