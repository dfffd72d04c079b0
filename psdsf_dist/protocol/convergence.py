"""Convergence bookkeeping of a run: observations of the certificate and churn events.

The coordinator observes the allocation once per period (the columns the servers report) and
records whether the PS-DSF certificate holds.  For every event (and the start) the
re-convergence time is the time from the event to the first observation from which the
certificate held until the next event, or until now if that is at least ``hold`` observations:
a flicker back off does not count as converged.  Rounds are that time divided by the period,
rounded up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from psdsf_dist.simulator.simulation import final_run_of_holds


@dataclass(frozen=True)
class Observation:
    round: int
    time: float
    """Run time (seconds since the start) of the observation."""
    residual: float
    holds: bool
    feasible: bool
    """Every column fits its server's capacities (under the table the server had)."""
    utilization: float
    messages: float
    """Messages sent per live server since the previous observation."""
    bytes: float
    """Bytes sent per live server since the previous observation."""
    servers: int
    """Servers that answered."""

    def to_json(self) -> dict[str, Any]:
        return {"round": self.round, "time": self.time, "residual": self.residual,
                "holds": self.holds, "feasible": self.feasible,
                "utilization": self.utilization, "messages": self.messages,
                "bytes": self.bytes, "servers": self.servers}


@dataclass(frozen=True)
class EventConvergence:
    description: str
    at: float
    converged_at: float | None
    """Run time of the first observation of the final run of holding ones (None: not yet)."""
    seconds: float | None
    rounds: int | None

    def to_json(self) -> dict[str, Any]:
        return {"event": self.description, "at": self.at, "converged_at": self.converged_at,
                "seconds": self.seconds, "rounds_to_converge": self.rounds}


def event_convergence(events: list[tuple[str, float]], observations: list[Observation],
                      period: float, hold: int = 1) -> list[EventConvergence]:
    """Per event (in time order, the start first), when the certificate held for good: until
    the next event, or (the last) for at least ``hold`` observations up to now."""
    marks = [("start", 0.0), *sorted(events, key=lambda e: e[1])]
    out: list[EventConvergence] = []
    for j, (desc, at) in enumerate(marks):
        end = marks[j + 1][1] if j + 1 < len(marks) else math.inf
        window = [o for o in observations if at <= o.time < end]
        settled = final_run_of_holds([o.holds for o in window], hold,
                                     open_ended=end == math.inf)
        found = None if settled is None else window[settled]
        if found is None:
            out.append(EventConvergence(desc, at, None, None, None))
        else:
            seconds = found.time - at
            out.append(EventConvergence(desc, at, found.time, seconds,
                                        max(math.ceil(seconds / period - 1e-9), 0)))
    return out
