"""What a run of the distributed protocol ends with, in the simulator or on Ray: one type, so
that ``simulate`` and ``run`` report, certify and render a run alike.

The simulator's :class:`~psdsf_dist.simulator.simulation.SimulationResult` and the runtime's
:class:`~psdsf_dist.runtime.messages.RunResult` extend it with what only each knows (the
simulator's gossip model and speed; the actors, restarts and processes of a run on Ray).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from psdsf_dist.model.scenario import Scenario
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.convergence import EventConvergence, Observation

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class ProtocolOutcome(ABC):
    scenario: Scenario
    """The scenario as it stands at the end (absent users and failed servers ineligible)."""
    allocation: FloatArray
    """The servers' columns at the end (users x servers)."""
    trace: tuple[Observation, ...]
    """One observation per period, oldest first."""
    events: tuple[EventConvergence, ...]
    """Per churn event (and fault): the rounds until the certificate held again."""

    @property
    @abstractmethod
    def protocol(self) -> ProtocolConfig:
        """The protocol's settings the run used."""
