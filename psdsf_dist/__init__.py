"""psdsf-dist: distributed, asynchronous PS-DSF multi-resource fair allocation."""

from psdsf_dist.core.certificate import Certificate, certificate
from psdsf_dist.core.server_procedure import server_procedure
from psdsf_dist.core.solver import Solution, solve
from psdsf_dist.errors import PsdsfError, ScenarioError, ScenarioWarning, SolverError
from psdsf_dist.model.scenario import Scenario, load_scenario

__all__ = [
    "Certificate",
    "PsdsfError",
    "Scenario",
    "ScenarioError",
    "ScenarioWarning",
    "Solution",
    "SolverError",
    "certificate",
    "load_scenario",
    "server_procedure",
    "solve",
]
__version__ = "0.1.0"
