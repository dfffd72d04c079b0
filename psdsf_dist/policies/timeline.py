"""A centralised policy over a scenario's churn: the exact allocation in every phase.

The papers compare a distributed PS-DSF, updated every T seconds, with baselines "precisely
found every second" (PS-DSF paper, section V; DRFH paper, section VI, Fig. 4).  A centralised
policy's allocation depends only on who is present and what they ask for, so between two
scenario events it is constant: computing it once per *phase* (the interval between events)
and reading it at each second is the same as solving every second, at a fraction of the cost.

The phases are the membership table's (:class:`~psdsf_dist.protocol.membership.ChurnState`,
the one the simulator and the coordinator use), so "who is present when" means the same here
as in a distributed run: an event at time t applies from t on, an absent user or failed server
is masked out of placement (so every policy gives it nothing).  :func:`at_times` reads the
allocation at given instants (the value of the phase holding each instant; an event at t is
already applied at t, as in the runs' observations).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from psdsf_dist.model.defaults import DEFAULT_MODE
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies.registry import Allocation, allocate
from psdsf_dist.protocol.membership import ChurnState

FloatArray = npt.NDArray[np.float64]
Allocator = Callable[[Scenario, str, Mode], Allocation]


@dataclass(frozen=True)
class Phase:
    """An interval ``[start, end)`` with no event inside, and the scenario as it stands then."""

    start: float
    end: float
    """Time of the next event (``inf`` for the last phase)."""
    scenario: Scenario
    """Every server and user of the run (fixed size); absent ones masked out of placement."""
    users_present: npt.NDArray[np.bool_]
    description: str
    """The event that opened the phase (``start`` for the first)."""


@dataclass(frozen=True)
class PhaseAllocation:
    phase: Phase
    allocation: Allocation


def phases(scenario: Scenario) -> tuple[Phase, ...]:
    """The scenario's phases in time order; events at one instant make one phase boundary.
    A phase is described by the changes in presence that opened it (``u4 leaves``), else by
    ``events at t=...`` (a demand or weight change, a server failing or joining)."""
    churn, events = ChurnState.start(scenario)
    out: list[Phase] = []
    start, description = 0.0, "start"
    j = 0
    while True:
        before = churn.users_present.copy()
        while j < len(events) and events[j].at <= start:
            churn.apply(events[j], events[j].at, from_scenario=True)
            j += 1
        if out:
            description = _changes(churn.full.user_names, before, churn.users_present, start)
        end = events[j].at if j < len(events) else math.inf
        out.append(Phase(start, end, churn.current(), churn.users_present.copy(), description))
        if j >= len(events):
            return tuple(out)
        start = end


def _changes(names: Sequence[str], before: npt.NDArray[np.bool_],
             after: npt.NDArray[np.bool_], at: float) -> str:
    words = [f"{names[n]} leaves" for n in np.flatnonzero(before & ~after).tolist()]
    words += [f"{names[n]} joins" for n in np.flatnonzero(~before & after).tolist()]
    return ", ".join(words) if words else f"events at t={at:g}"


def policy_timeline(scenario: Scenario, policy: str, mode: Mode = DEFAULT_MODE, *,
                    allocator: Allocator = allocate) -> tuple[PhaseAllocation, ...]:
    """The policy's exact allocation in every phase (one solve per phase).  ``allocator`` is
    :func:`~psdsf_dist.policies.registry.allocate` or a drop-in such as
    :func:`~psdsf_dist.policies.class_merge.allocate_by_class`."""
    out = []
    for ph in phases(scenario):
        out.append(PhaseAllocation(ph, allocator(ph.scenario, policy, mode)))
    return tuple(out)


def at_times(timeline: Sequence[PhaseAllocation], times: Sequence[float]) -> list[FloatArray]:
    """The allocation (N x K) in force at each instant (an instant before 0 reads the first
    phase)."""
    starts = [p.phase.start for p in timeline]
    out = []
    for t in times:
        k = max(bisect.bisect_right(starts, t) - 1, 0)
        out.append(timeline[k].allocation.allocation)
    return out
