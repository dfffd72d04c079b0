"""The deterministic simulator: the protocol's servers on a simulated clock, with an in-memory
transport that injects message delay and loss (:mod:`.simulation`)."""

from psdsf_dist.simulator.simulation import (
    SimConfig,
    SimulationResult,
    simulate,
)

__all__ = ["SimConfig", "SimulationResult", "simulate"]
