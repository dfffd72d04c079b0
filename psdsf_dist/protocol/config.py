"""Settings of one distributed run (plain data, shipped to every actor)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from psdsf_dist.model.scenario import Mode
from psdsf_dist.protocol.update_rule import DEFAULT_RULE, make_rule

ClockKind = Literal["real", "manual"]

CONVERGENCE_RTOL = 1e-3
TTL_PERIODS = 8.0  # a server silent for this many periods stops counting in the others' totals
TOMBSTONE_PERIODS = 64.0


@dataclass(frozen=True)
class RunConfig:
    period: float = 1.0
    """Seconds between two updates of a server."""
    jitter: float = 0.2
    """Each wait is ``period * (1 + jitter * (u - 1/2))``, u uniform in [0, 1): servers drift
    apart instead of acting in lock-step."""
    fanout: int = 4
    """Peers a server starts a gossip exchange with at each gossip round.  With the default rate,
    2 peers are enough for the 120-server paper cluster to re-certify within ~10 rounds of each
    event, but on Google-mix clusters (K = 100, N = 100) they leave the totals too stale: 2 of
    5 certified within 300 rounds, against 4 of 5 with 4 peers, which serve the paper cluster
    as well (experiments/results/sim_gossip.md); 1 peer is too few even there.  Traffic
    grows with the fanout."""
    gossip_rate: int = 4
    """Gossip rounds per period (one at the update, the others evenly in between)."""
    rule: str = DEFAULT_RULE
    mode: Mode = "rdm"
    seed: int = 0
    rtol: float = CONVERGENCE_RTOL
    hold: int = 3
    """Observations in a row the certificate must hold before an event (or the start) counts as
    converged, unless the next event comes first: a single holding observation may flicker off
    again."""
    ttl_periods: float = TTL_PERIODS
    time_scale: float = 1.0
    """Wall-clock seconds per second of the scenario's event times: an event ``at: 100`` fires
    ``100 * time_scale`` seconds after the start (compress a scenario together with
    ``period``)."""
    clock: ClockKind = "real"
    """``manual``: time only moves when the coordinator is told to advance it (tests)."""
    max_restarts: int = 3
    """How many times Ray restarts a crashed server actor (-1: always)."""
    servers_per_actor: int = 1
    """Servers hosted by one actor process (1: one actor per server, the default).  More saves
    memory and start-up on a small machine; a crash then takes all of them down together."""
    signed_moves: bool = True
    """The rule sees how many servers raised / lowered each user in their latest changes (from
    gossip; off: holder counts only), as ``SimConfig.signed_moves``."""
    rpc_timeout_periods: float = 4.0
    """A call to a peer or a server that takes longer than this many periods is given up."""

    def check(self) -> None:
        if not (self.period > 0 and math.isfinite(self.period)):
            raise ValueError(f"period must be a positive number of seconds, got {self.period}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be in [0, 1) periods, got {self.jitter}")
        if self.fanout < 1:
            raise ValueError(f"fanout must be >= 1, got {self.fanout}")
        if self.gossip_rate < 1:
            raise ValueError(f"gossip rate must be >= 1, got {self.gossip_rate}")
        if self.mode not in ("rdm", "tdm"):
            raise ValueError(f"mode must be rdm or tdm, got {self.mode!r}")
        if not self.rtol > 0:
            raise ValueError(f"rtol must be > 0, got {self.rtol}")
        if self.hold < 1:
            raise ValueError(f"hold must be >= 1 observation, got {self.hold}")
        if not (self.time_scale > 0 and math.isfinite(self.time_scale)):
            raise ValueError(f"time scale must be a positive number, got {self.time_scale}")
        if self.clock not in ("real", "manual"):
            raise ValueError(f"clock must be real or manual, got {self.clock!r}")
        if self.servers_per_actor < 1:
            raise ValueError(f"servers per actor must be >= 1, got {self.servers_per_actor}")
        if not self.ttl_periods > 1:
            raise ValueError(f"ttl must be > 1 period, got {self.ttl_periods}")
        make_rule(self.rule)

    @property
    def ttl(self) -> float:
        return self.ttl_periods * self.period

    @property
    def rpc_timeout(self) -> float:
        return self.rpc_timeout_periods * self.period
