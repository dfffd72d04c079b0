"""Every allocation policy by name: ``allocate(scenario, policy, mode) -> Allocation``.

``psdsf`` is the certified exact solver (:func:`psdsf_dist.core.solver.solve`); the others are the
baselines of :mod:`drf`, :mod:`drfh`, :mod:`tsf`, :mod:`tsf_er`, :mod:`tsf_er_baselines`,
:mod:`mnw` and :mod:`cru`; the
whole-task schedulers (integer tasks, ``Allocation.whole``) are :mod:`whole_task_policies`,
``rrr-psdsf`` seeded by ``allocate``'s ``seed``.  Only the policies of :func:`models_external`
(``tsf-er``, ``drf-alpha-er``, ``tsf-alpha-er``, ``drf-er``, ``mnw``, ``cru``) model the external
resources of a scenario; every other policy
allocates as if they did not exist (as the mechanisms are defined), so its use of them may
exceed their capacity.  Likewise only the AMF family (:mod:`amf`) reads users' per-server task
counts and task groups.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.certificate import Certificate
from psdsf_dist.core.solver import solve
from psdsf_dist.errors import PsdsfError
from psdsf_dist.model.defaults import DEFAULT_MODE, DEFAULT_SEED
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies.amf import amf, task_group_view
from psdsf_dist.policies.cru import cautious_relative_utilitarian
from psdsf_dist.policies.drf import drf, per_server_drf
from psdsf_dist.policies.drfh import drfh
from psdsf_dist.policies.mnw import max_nash_welfare
from psdsf_dist.policies.progressive import Filling
from psdsf_dist.policies.tsf import tsf
from psdsf_dist.policies.tsf_er import tsf_er
from psdsf_dist.policies.tsf_er_baselines import drf_alpha_er, drf_er, tsf_alpha_er
from psdsf_dist.policies.whole_task_policies import whole_task_allocation

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Solved:
    """What a policy's function returns: the N x K allocation and how it was found."""

    allocation: FloatArray
    lp_solves: int = 0
    certificate: Certificate | None = None


PolicyFunction = Callable[[Scenario, str, Mode, int], Solved]
"""``(scenario, policy name, mode, seed) -> Solved``: the name lets one function serve a family
(the whole-task schedulers, AMF); the seed is read only by a policy registered ``seeded``."""


@dataclass(frozen=True)
class Policy:
    """One registry entry: a policy's name, what it does, its function and its capabilities."""

    name: str
    description: str
    function: PolicyFunction
    whole: bool = False
    """Integer tasks (``Allocation.whole``); otherwise fluid (divisible) tasks."""
    seeded: bool = False
    """Draws random numbers: ``allocate``'s ``seed`` selects them (the others are deterministic)."""
    external: bool = False
    """Models the scenario's external resources; the others allocate as if they did not exist."""
    task_groups: bool = False
    """Reads users' per-server task counts and task groups."""
    pooled: bool = False
    """Ignores server boundaries (task equivalents): per-server feasibility is not claimed."""
    certified: bool = False
    """Returns its own optimality certificate."""
    distributed: bool = False
    """Computed by the distributed protocol under churn events (``simulate``, ``observe``,
    ``run``); every policy is recomputed per phase by :mod:`~psdsf_dist.policies.timeline`."""

    def capabilities(self) -> tuple[str, ...]:
        """The capability names that hold, in the order of :data:`CAPABILITIES`."""
        return tuple(c for c in CAPABILITIES if getattr(self, c))


CAPABILITIES: tuple[str, ...] = ("whole", "seeded", "external", "task_groups", "pooled",
                                 "certified", "distributed")


class DuplicatePolicyError(PsdsfError, ValueError):
    """A second registry entry under a name already taken."""

    def __init__(self, name: str) -> None:
        super().__init__(f"policy {name!r} is already registered")


_REGISTRY: dict[str, Policy] = {}


def register(policy: Policy) -> Policy:
    """Add one entry; a name already taken is refused (:class:`DuplicatePolicyError`), so two
    policies can never answer to the same name."""
    if policy.name in _REGISTRY:
        raise DuplicatePolicyError(policy.name)
    _REGISTRY[policy.name] = policy
    return policy


# -- the policies' functions -------------------------------------------------------------------

def _psdsf(scenario: Scenario, policy: str, mode: Mode, seed: int) -> Solved:
    sol = solve(scenario, mode)
    return Solved(sol.allocation, certificate=sol.certificate)


def _whole_tasks(scenario: Scenario, policy: str, mode: Mode, seed: int) -> Solved:
    return Solved(whole_task_allocation(scenario, policy, mode, seed=seed).astype(float))


def _mnw(scenario: Scenario, policy: str, mode: Mode, seed: int) -> Solved:
    return Solved(max_nash_welfare(scenario, mode).allocation)


def _cru(scenario: Scenario, policy: str, mode: Mode, seed: int) -> Solved:
    result = cautious_relative_utilitarian(scenario, mode)
    return Solved(result.allocation, result.lp_solves)


def _per_server_drf(scenario: Scenario, policy: str, mode: Mode, seed: int) -> Solved:
    return Solved(per_server_drf(scenario, mode))


def _drf(scenario: Scenario, policy: str, mode: Mode, seed: int) -> Solved:
    X, filling = drf(scenario)
    return Solved(X, filling.lp_solves)


def _drfh(scenario: Scenario, policy: str, mode: Mode, seed: int) -> Solved:
    X, filling = drfh(scenario, mode, respect_placement=policy == "drfh")
    return Solved(X, filling.lp_solves)


def _tsf(scenario: Scenario, policy: str, mode: Mode, seed: int) -> Solved:
    X, filling = tsf(scenario, mode, respect_placement=policy == "cdrf")
    return Solved(X, filling.lp_solves)


def _filled(fill: Callable[[Scenario, Mode], tuple[FloatArray, Filling]]) -> PolicyFunction:
    def run(scenario: Scenario, policy: str, mode: Mode, seed: int) -> Solved:
        X, filling = fill(scenario, mode)
        return Solved(X, filling.lp_solves)

    return run


def _amf(scenario: Scenario, policy: str, mode: Mode, seed: int) -> Solved:
    X, filling = amf(scenario, mode, policy)
    return Solved(X, filling.lp_solves)


# -- the registry: one line per policy, in the order commands list them --------------------------

register(Policy("psdsf", "per-server dominant share fairness (certified exact solve)", _psdsf, certified=True, distributed=True))  # noqa: E501
register(Policy("drf", "DRF on all servers pooled into one machine (task equivalents per server)", _drf, pooled=True))  # noqa: E501
register(Policy("per-server-drf", "each server runs DRF alone, no coordination", _per_server_drf))
register(Policy("drfh", "max-min global dominant share, pooled over each user's eligible servers", _drfh))  # noqa: E501
register(Policy("c-drfh", "max-min global dominant share, pooled over all servers", _drfh))
register(Policy("tsf", "max-min task share, tasks alone on the cluster counted ignoring placement", _tsf))  # noqa: E501
register(Policy("cdrf", "max-min task share, tasks alone on the cluster counted respecting placement", _tsf))  # noqa: E501
register(Policy("tsf-er", "TSF with the external resources (task share over servers and external)", _filled(tsf_er), external=True))  # noqa: E501
register(Policy("drf-alpha-er", "DRFH on servers each reserved an equal part of the external resources (DRF-eq)", _filled(drf_alpha_er), external=True))  # noqa: E501
register(Policy("tsf-alpha-er", "TSF on servers each reserved an equal part of the external resources (TSF-eq)", _filled(tsf_alpha_er), external=True))  # noqa: E501
register(Policy("drf-er", "max-min dominant share, external resources pooled (their split chosen freely)", _filled(drf_er), external=True))  # noqa: E501
register(Policy("drfh-first-fit", "whole tasks: lowest DRFH global dominant share first, first server it fits", _whole_tasks, whole=True))  # noqa: E501
register(Policy("drfh-best-fit", "whole tasks: lowest DRFH global dominant share first, best-fit server H", _whole_tasks, whole=True))  # noqa: E501
register(Policy("psdsf-pf", "whole tasks: progressive filling, pair of smallest PS-DSF share x/(phi gamma)", _whole_tasks, whole=True))  # noqa: E501
register(Policy("rpsdsf", "whole tasks: progressive filling by PS-DSF share on residual capacities", _whole_tasks, whole=True))  # noqa: E501
register(Policy("rrr-psdsf", "whole tasks: servers in a new random order each round (seeded), PS-DSF user", _whole_tasks, whole=True, seeded=True))  # noqa: E501
register(Policy("bf-drf", "whole tasks: lowest pooled DRF dominant share first, best-fit server H", _whole_tasks, whole=True))  # noqa: E501
register(Policy("amf", "aggregate max-min fairness across servers, tasks bound to one server (Guan ch. 4)", _amf, task_groups=True))  # noqa: E501
register(Policy("amf-si", "AMF with per-server sharing-incentive floors (SIG-AMF, Guan 4.4.4)", _amf, task_groups=True))  # noqa: E501
register(Policy("gamf", "AMF with task groups runnable on any of several servers (Guan ch. 5)", _amf, task_groups=True))  # noqa: E501
register(Policy("gamf-si", "GAMF with the sharing-incentive floor (SIG-GAMF, Guan 5.3.4)", _amf, task_groups=True))  # noqa: E501
register(Policy("mnw", "max Nash welfare: max sum phi log x over servers and external (conic program)", _mnw, external=True))  # noqa: E501
register(Policy("cru", "cautious relative utilitarian: max sum x / eta over the EF and SI allocations (LP)", _cru, external=True))  # noqa: E501

REGISTRY: Mapping[str, Policy] = MappingProxyType(_REGISTRY)
"""Every policy by name (read-only; add one with :func:`register`)."""
POLICIES: tuple[str, ...] = tuple(_REGISTRY)
DESCRIPTIONS: Mapping[str, str] = MappingProxyType(
    {p.name: p.description for p in _REGISTRY.values()})
EXTERNAL_POLICIES: tuple[str, ...] = tuple(p.name for p in _REGISTRY.values() if p.external)
DEFAULT_POLICY = "psdsf"


def describe(policy: str) -> str:
    """The registry's one-line description of ``policy`` (:class:`UnknownPolicyError` if none)."""
    return lookup(policy).description


def lookup(policy: str) -> Policy:
    """The registry entry of ``policy``; :class:`UnknownPolicyError` if there is none."""
    try:
        return _REGISTRY[policy]
    except KeyError:
        raise UnknownPolicyError(policy) from None


class UnknownPolicyError(PsdsfError, ValueError):
    """A policy name that is not in :data:`POLICIES`."""

    def __init__(self, policy: str) -> None:
        super().__init__(f"unknown policy {policy!r} (choose from {', '.join(_REGISTRY)})")


@dataclass(frozen=True)
class Allocation:
    """The outcome of one policy on one scenario."""

    policy: str
    mode: Mode
    allocation: FloatArray  # N x K tasks (pooled DRF: task equivalents)
    seconds: float
    lp_solves: int = 0
    pooled: bool = False  # server boundaries ignored: per-server feasibility is not claimed
    certificate: Certificate | None = None  # psdsf only: its own certificate
    whole: bool = False  # integer tasks (the whole-task policies)

    @property
    def totals(self) -> FloatArray:
        return np.asarray(self.allocation.sum(axis=1))


def models_external(policy: str) -> bool:
    """Whether the policy takes the scenario's external resources into account."""
    return lookup(policy).external


def without_external(scenario: Scenario) -> Scenario:
    """The scenario with its external resources removed (what non-TSF-ER policies see)."""
    if not scenario.external_resources:
        return scenario
    return dataclasses.replace(
        scenario,
        external_resources=(),
        external_capacity=np.zeros(0),
        external_demand=np.zeros((scenario.num_users, 0)),
    )


def policy_view(scenario: Scenario, policy: str) -> Scenario:
    """The scenario as the policy models it: external resources only for those of
    :data:`EXTERNAL_POLICIES`, task
    groups only for the AMF family (:func:`psdsf_dist.policies.amf.task_group_view`)."""
    env = scenario if models_external(policy) else without_external(scenario)
    return task_group_view(env, policy)


def allocate(
    scenario: Scenario, policy: str, mode: Mode = DEFAULT_MODE, *, seed: int = DEFAULT_SEED
) -> Allocation:
    """Run one policy (``seed``: of ``rrr-psdsf``'s server draws; the other policies are
    deterministic). Raises :class:`UnknownPolicyError`, ScenarioError or SolverError."""
    entry = lookup(policy)
    mode = scenario.check_mode(mode)
    t0 = time.perf_counter()
    out = entry.function(scenario, policy, mode, seed)
    return Allocation(policy, mode, out.allocation, time.perf_counter() - t0, out.lp_solves,
                      pooled=entry.pooled, certificate=out.certificate, whole=entry.whole)


# -- the registry as documentation ---------------------------------------------------------------

DOC_BEGIN = ("<!-- policy registry: generated by `python -m psdsf_dist.policies "
             "docs/policies.md`; do not edit by hand -->")
DOC_END = "<!-- end of the policy registry -->"


def registry_markdown() -> str:
    """The registry as a markdown table: name, what the policy does, its capabilities."""
    rows = ["| policy | what it does | tasks | capabilities |", "|---|---|---|---|"]
    for p in _REGISTRY.values():
        capabilities = ", ".join(c for c in p.capabilities() if c != "whole") or "-"
        rows.append(f"| `{p.name}` | {p.description} | {'whole' if p.whole else 'fluid'} "
                    f"| {capabilities} |")
    return "\n".join(rows)


def with_registry(document: str) -> str:
    """``document`` with the text between :data:`DOC_BEGIN` and :data:`DOC_END` replaced by
    :func:`registry_markdown` (:class:`ValueError` if the markers are missing)."""
    begin, end = document.find(DOC_BEGIN), document.find(DOC_END)
    if begin < 0 or end < begin:
        raise ValueError("the registry markers are missing")
    return f"{document[:begin]}{DOC_BEGIN}\n{registry_markdown()}\n{document[end:]}"

