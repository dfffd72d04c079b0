"""The protocol's settings: one type, one set of defaults, for every driver.

:class:`ProtocolConfig` is what a server needs to know to take part in the protocol — how often it
updates and gossips, how it spreads its wake-ups, which update rule it runs, how long silence
lasts before a peer stops counting — plus what the transport injects (message delay and loss)
and how convergence is judged (certificate tolerance, hold).  The simulator
(:class:`~psdsf_dist.simulator.simulation.SimConfig`) and the Ray runtime
(:class:`~psdsf_dist.runtime.settings.RunConfig`) each wrap one, next to settings only they
have, so ``simulate`` and ``run`` mean the same thing by every protocol option.

The defaults are the ones that converged in the gossip study on the paper cluster and on
Google-mix clusters: random phases with a jitter of 0.2 periods, four gossip rounds per period
with four peers each; fewer peers or gossip rounds leave the totals too stale (figures:
``docs/results.md``, regenerated in ``experiments/results/sim_gossip.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from psdsf_dist.model.defaults import DEFAULT_MODE, DEFAULT_SEED
from psdsf_dist.model.scenario import Mode
from psdsf_dist.protocol.update_rule import DEFAULT_RULE, UpdateRule, make_rule

CONVERGENCE_RTOL = 1e-3
"""Relative tolerance of the PS-DSF certificate when judging convergence."""
DEFAULT_HOLD = 10
"""Rounds in a row the certificate must hold before an event counts as converged."""
TTL_PERIODS = 8.0
"""A server silent for this many periods stops counting in the others' totals."""
TOMBSTONE_PERIODS = 64.0
"""How long a departed server's tombstone is remembered (so its column is not revived)."""


@dataclass(frozen=True)
class ProtocolConfig:
    period: float = 1.0
    """Seconds between two updates of a server (T)."""
    jitter: float = 0.2
    """Spread of the wake-ups, as a fraction of the wait: each wait is ``(T / gossip_rate) *
    (1 + jitter * (u - 1/2))``, u uniform in [0, 1), and servers start at random phases.  0 is
    lock-step: every server wakes at the same instants (the hard case: all act on the same
    stale totals)."""
    delay: float = 0.0
    """Seconds the transport holds each message before delivering it (on Ray, on top of Ray's
    own latency)."""
    loss: float = 0.0
    """Probability that the transport drops a message."""
    fanout: int = 4
    """Peers a server starts a push-pull exchange with at each gossip round."""
    gossip_rate: int = 4
    """Gossip rounds per period: one at the update, the others evenly in between."""
    rule: str = DEFAULT_RULE
    rule_params: tuple[tuple[str, float], ...] = ()
    """Numeric parameters of the rule, e.g. ``(("a", 0.5),)`` for ``damped``."""
    mode: Mode = DEFAULT_MODE
    seed: int = DEFAULT_SEED
    """Seeds every server's own random stream (phases, jitter, peers) and the transport's."""
    rtol: float = CONVERGENCE_RTOL
    hold: int = DEFAULT_HOLD
    """Rounds (observations, one per period) in a row the certificate must hold before an
    event, or the start, counts as converged, unless the next event comes first: a single
    holding round may flicker off again."""
    ttl_periods: float = TTL_PERIODS

    def check(self) -> None:
        """Raise ValueError naming the first bad setting."""
        if not (self.period > 0 and math.isfinite(self.period)):
            raise ValueError(f"period must be a positive number of seconds, got {self.period}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be in [0, 1) of a period, got {self.jitter}")
        if not (self.delay >= 0 and math.isfinite(self.delay)):
            raise ValueError(f"delay must be a finite number of seconds >= 0, got {self.delay}")
        if not 0 <= self.loss < 1:
            raise ValueError(f"loss must be in [0, 1), got {self.loss}")
        if self.fanout < 1:
            raise ValueError(f"fanout must be >= 1, got {self.fanout}")
        if self.gossip_rate < 1:
            raise ValueError(f"gossip rate must be >= 1 round per period, got "
                             f"{self.gossip_rate}")
        if self.mode not in ("rdm", "tdm"):
            raise ValueError(f"mode must be rdm or tdm, got {self.mode!r}")
        if not self.rtol > 0:
            raise ValueError(f"rtol must be > 0, got {self.rtol}")
        if self.hold < 1:
            raise ValueError(f"hold must be >= 1 round, got {self.hold}")
        if not self.ttl_periods > 1:
            raise ValueError(f"ttl must be > 1 period, got {self.ttl_periods}")
        self.make_rule()

    @property
    def lockstep(self) -> bool:
        return self.jitter == 0

    @property
    def ttl(self) -> float:
        return self.ttl_periods * self.period

    @property
    def tombstone_ttl(self) -> float:
        return TOMBSTONE_PERIODS * self.period

    def make_rule(self) -> UpdateRule:
        return make_rule(self.rule, **dict(self.rule_params))
