"""Observing a run: one record per period, and per event how long the servers took to
re-converge.  The simulator and the coordinator observe the same way (:func:`observe`) and
judge convergence the same way (:func:`event_convergence`).

Once per period (at ``t = r T``, after the events due by then and before any server acts at
that instant) the true allocation — every present server's current column — is checked with
the PS-DSF certificate on the scenario as it stands.  For every event (and the start) the
re-convergence time is the time from the event to the first observation from which the
certificate held until the next event, or until the end if that is at least ``hold``
observations: a flicker back off does not count as converged.  Rounds are that time divided by
the period, rounded up: 1 means the certificate held after the first round of updates.

Each observation also carries the distance to fair (:mod:`psdsf_dist.protocol.distance`: the
largest relative gap of a user's total to the nearest known PS-DSF totals), and each event the
rounds from which that distance stayed below 5 %, 1 % and 0.1 % (``THRESHOLDS``) by the same
rule: until the next event, or for at least ``hold`` observations if none came.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.certificate import certificate
from psdsf_dist.core.report import utilization
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.protocol.distance import THRESHOLDS, distance_to_fair

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


CAP_EXCESS_RTOL = 1e-9
"""A user's total above its cap by no more than this (relative) is round-off, not an excess."""


class ObservationJson(TypedDict):
    """An :class:`Observation` as JSON (:meth:`Observation.to_json`): its fields, the distance
    None where it is not finite."""

    round: int
    time: float
    residual: float
    holds: bool
    feasible: bool
    utilization: float
    max_relative_change: float
    messages: float
    bytes: float
    max_bytes: float
    servers: int
    seconds: float
    cap_excess: float
    distance: float | None


@dataclass(frozen=True)
class Observation:
    round: int
    time: float
    """Run time (seconds since the start) of the observation."""
    residual: float
    holds: bool
    """The certificate holds (and every server answered on the current table)."""
    feasible: bool
    """Every column fits its server's capacities (under the table the server had)."""
    utilization: float
    """Mean over present servers and their resources of the fraction in use."""
    max_relative_change: float
    """Largest relative change of a user's total since the previous observation."""
    messages: float
    """Messages sent per present server since the previous observation."""
    bytes: float
    """Bytes sent per present server since the previous observation."""
    max_bytes: float
    """Bytes sent by the busiest server since the previous observation."""
    servers: int
    """Servers whose columns were read."""
    seconds: float = 0.0
    """Wall-clock seconds the driver spent on this round."""
    cap_excess: float = 0.0
    """Largest relative excess of a user's total over its ``max_tasks`` (0: every cap held).
    The servers' headroom shares keep it 0 on one shared snapshot of the totals; gossip that
    reaches the servers at different ages can leave a transient excess, reported here."""
    distance: float | None = None
    """Largest relative gap of a user's total to its PS-DSF total (None: not known)."""

    def to_json(self) -> ObservationJson:
        return {"round": self.round, "time": self.time, "residual": self.residual,
                "holds": self.holds, "feasible": self.feasible,
                "utilization": self.utilization,
                "max_relative_change": self.max_relative_change, "messages": self.messages,
                "bytes": self.bytes, "max_bytes": self.max_bytes, "servers": self.servers,
                "seconds": self.seconds, "cap_excess": self.cap_excess,
                "distance": _finite_or_none(self.distance)}


def _finite_or_none(value: float | None) -> float | None:
    """JSON has no infinity."""
    return value if value is not None and math.isfinite(value) else None


@dataclass(frozen=True)
class Traffic:
    """Messages and bytes sent since the previous observation, per present server."""

    messages: FloatArray
    bytes: FloatArray


def observe(scenario: Scenario, allocation: FloatArray, servers_present: BoolArray, *,
            round: int, time: float, mode: Mode, rtol: float, traffic: Traffic,
            previous_totals: FloatArray | None, answered: bool = True, feasible: bool = True,
            seconds: float = 0.0) -> Observation:
    """The observation of one allocation (``answered``: every present server's column is
    current; a missing one keeps the certificate from counting as held)."""
    # explain=True: the residual must not depend on whether words are wanted
    cert = certificate(scenario, allocation, mode=mode, rtol=rtol, explain=True)
    up = np.asarray(servers_present, dtype=bool)
    util = utilization(scenario, allocation)[up]
    has = scenario.capacity[up] > 0
    totals = allocation.sum(axis=1)
    change = 0.0
    if previous_totals is not None and previous_totals.shape == totals.shape:
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.abs(totals - previous_totals) / np.maximum(
                np.maximum(np.abs(previous_totals), np.abs(totals)), 1e-12)
        change = float(rel.max(initial=0.0))
    live = max(int(up.sum()), 1)
    caps = np.asarray(scenario.max_tasks, dtype=float)
    capped = np.isfinite(caps) & (caps > 0)
    excess = float(np.max((totals[capped] - caps[capped]) / caps[capped], initial=0.0))
    return Observation(
        round=round, time=time, residual=float(cert.residual),
        holds=bool(cert.holds and answered), feasible=feasible,
        utilization=float(util[has].mean()) if has.any() else 0.0,
        max_relative_change=change,
        messages=float(traffic.messages.sum() / live), bytes=float(traffic.bytes.sum() / live),
        max_bytes=float(traffic.bytes.max(initial=0.0)), servers=int(up.sum()),
        seconds=seconds, cap_excess=max(excess, 0.0),
        distance=distance_to_fair(scenario, allocation, mode, cert.residual))


@dataclass(frozen=True)
class EventConvergence:
    description: str
    at: float
    converged_at: float | None
    """Run time of the first observation of the final run of holding ones (None: not yet)."""
    seconds: float | None
    rounds: int | None
    within: tuple[int | None, ...] = ()
    """Per threshold of ``THRESHOLDS``, the rounds from which the distance to fair stayed below
    it (None: not yet, or not known)."""

    def to_json(self) -> dict[str, Any]:
        return {"event": self.description, "at": self.at, "converged_at": self.converged_at,
                "seconds": self.seconds, "rounds_to_converge": self.rounds,
                "rounds_within": {f"{t:g}": r for t, r in zip(THRESHOLDS, self.within,
                                                               strict=False)}}


def final_run_of_holds(holds: Sequence[bool], hold: int, *, open_ended: bool) -> int | None:
    """Index from which every entry of ``holds`` is true, or None if the last is false — or if
    ``open_ended`` (no later event has cut the run short) and that run is shorter than
    ``hold``."""
    start = len(holds)
    while start > 0 and holds[start - 1]:
        start -= 1
    if start == len(holds) or (open_ended and len(holds) - start < hold):
        return None
    return start


def event_convergence(events: Sequence[tuple[str, float]], observations: Sequence[Observation],
                      period: float, hold: int = 1) -> list[EventConvergence]:
    """Per event (in time order, the start first), when the certificate held for good: until
    the next event, or (the last) for at least ``hold`` observations up to now.  An
    observation at an event's instant comes after it (see the module docstring)."""
    marks = _one_per_instant([("start", 0.0), *sorted(events, key=lambda e: e[1])])
    times = [o.time for o in observations]
    out: list[EventConvergence] = []
    for j, (desc, at) in enumerate(marks):
        end = marks[j + 1][1] if j + 1 < len(marks) else math.inf
        window = observations[bisect.bisect_left(times, at):bisect.bisect_left(times, end)]
        open_ended = end == math.inf
        within = tuple(
            None if (got := _settled(window, [o.distance is not None and o.distance < threshold
                                              for o in window], hold, open_ended)) is None
            else _rounds(got - at, period)
            for threshold in THRESHOLDS)
        found = _settled(window, [o.holds for o in window], hold, open_ended)
        if found is None:
            out.append(EventConvergence(desc, at, None, None, None, within))
        else:
            out.append(EventConvergence(desc, at, found, found - at,
                                        _rounds(found - at, period), within))
    return out


SHOWN_PER_INSTANT = 3
"""The most event descriptions one instant's convergence line names."""


def _one_per_instant(marks: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """Events at one instant are one change (nothing observes the state between them): one
    mark per instant, naming its first events and how many there were."""
    out: list[tuple[str, float]] = []
    count: list[int] = []
    for desc, at in marks:
        if out and out[-1][1] == at:
            count[-1] += 1
            if count[-1] <= SHOWN_PER_INSTANT:
                out[-1] = (f"{out[-1][0]}; {desc}", at)
        else:
            out.append((desc, at))
            count.append(1)
    return [(desc if n <= SHOWN_PER_INSTANT else f"{desc}; ... ({n} events)", at)
            for (desc, at), n in zip(out, count, strict=True)]


def _settled(window: Sequence[Observation], flags: list[bool], hold: int,
             open_ended: bool) -> float | None:
    """Time of the first observation of the final run of true ``flags`` (None: none yet)."""
    settled = final_run_of_holds(flags, hold, open_ended=open_ended)
    return None if settled is None else window[settled].time


def _rounds(seconds: float, period: float) -> int:
    return max(math.ceil(seconds / period - 1e-9), 0)
