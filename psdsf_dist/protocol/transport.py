"""The transport's decisions, shared by both drivers: whether a message is lost, and how long it
is held.

Each message is dropped with probability ``loss`` and otherwise delivered ``delay`` seconds after
it was sent (:class:`~psdsf_dist.protocol.config.ProtocolConfig`).  The losses are drawn from one
stream seeded like a server's (:func:`~psdsf_dist.protocol.node.server_seed` of the run's seed
and :data:`TRANSPORT_STREAM`), so a simulated run and a paced run with one actor (which sends its
messages in the same order) lose the same messages.  The simulator holds a message on its
simulated clock, a server actor on its clock; how they wait is theirs, what happens is this.
"""

from __future__ import annotations

import numpy as np

from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.node import server_seed

TRANSPORT_STREAM = "transport"
"""The name the transport's random stream is seeded under (as a server's is under its name)."""


class Transport:
    """Loss draws and the delay of one driver's transport (a simulation, or one server actor)."""

    def __init__(self, config: ProtocolConfig) -> None:
        self.loss = config.loss
        self.delay = config.delay
        self._rng = np.random.default_rng(server_seed(config.seed, TRANSPORT_STREAM, 0))

    def lost(self) -> bool:
        """Whether the next message sent is dropped (a draw only when ``loss`` > 0, so a run
        without loss draws nothing from the stream)."""
        return self.loss > 0 and bool(self._rng.random() < self.loss)
