"""Settings of one run on Ray (plain data, shipped to every actor): the protocol's settings
(:class:`~psdsf_dist.protocol.config.ProtocolConfig`, the same as the simulator's) and what
only a run on Ray has — its clock, time scale, actor packing, restarts and call timeouts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from psdsf_dist.protocol.config import ProtocolConfig

ClockKind = Literal["real", "manual"]


@dataclass(frozen=True)
class RunConfig:
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    time_scale: float = 1.0
    """Wall-clock seconds per second of the scenario's event times: an event ``at: 100`` fires
    ``100 * time_scale`` seconds after the start (compress a scenario together with the
    period)."""
    clock: ClockKind = "real"
    """``manual``: time only moves when the coordinator is told to advance it (paced runs,
    tests)."""
    max_restarts: int = 3
    """How many times Ray restarts a crashed server actor (-1: always)."""
    servers_per_actor: int = 1
    """Servers hosted by one actor process (1: one actor per server, the default).  More saves
    memory and start-up on a small machine; a crash then takes all of them down together."""
    rpc_timeout_periods: float = 4.0
    """A call to a peer or a server that takes longer than this many periods is given up."""

    def check(self) -> None:
        self.protocol.check()
        if not (self.time_scale > 0 and math.isfinite(self.time_scale)):
            raise ValueError(f"time scale must be a positive number, got {self.time_scale}")
        if self.clock not in ("real", "manual"):
            raise ValueError(f"clock must be real or manual, got {self.clock!r}")
        if self.servers_per_actor < 1:
            raise ValueError(f"servers per actor must be >= 1, got {self.servers_per_actor}")

    @property
    def period(self) -> float:
        return self.protocol.period

    @property
    def rpc_timeout(self) -> float:
        return self.rpc_timeout_periods * self.protocol.period
