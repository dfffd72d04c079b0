"""Run a policy on a cluster's server classes: each class of identical servers as one server.

Large clusters come in few configurations (the 12,583 machines of Google's 2011 trace are 10),
but the LP baselines have one variable per (user, server) pair: DRFH on 12,583 machines and
100 users is an LP of ~10^6 variables solved once per round of progressive filling.  For the
policies in :data:`CLASS_INVARIANT` the answer is the same on the *merged* cluster, where a class
of ``k`` identical servers (same capacity and same ``gamma`` for every user,
:class:`~psdsf_dist.core.solver.ServerClasses`) is one server of ``k`` times the capacity and
``gamma``; the merged allocation spread evenly over the members is returned.

Why it is exact:

* the LP policies (DRF, DRFH, C-DRFH, TSF, CDRF, TSF-ER) are the leximin of ``x[n] / scale[n]``
  over the feasible set (:mod:`psdsf_dist.policies.progressive`).  That set is convex and
  symmetric under permuting the members of a class, and ``scale`` depends only on sums over
  servers, which merging keeps (pooled capacities, ``sum_i gamma[n, i]``).  Averaging an optimal
  allocation over the permutations of each class keeps it feasible and keeps every total, and
  a class-constant allocation fits each member iff its class sum fits the merged server (the
  constraints are linear per server).  So the achievable totals, hence the leximin totals,
  are the same;
* per-server DRF is each server's own DRF, which is homogeneous of degree one in the server's
  capacity: the merged server gets ``k`` times a member's allocation;
* MNW maximises ``sum_n phi[n] log x[n]``, strictly concave in the totals, over the same kind
  of convex, permutation-symmetric feasible set (the external resources and backlogs bound
  totals only): its totals are unique, and averaging an optimum over each class's permutations
  gives a class-constant optimum, which is the merged cluster's;
* PS-DSF's conditions (the paper's Theorem 1) compare levels ``x[n] / (phi[n] gamma[n, i])``
  within one server; spread evenly, a member's allocation satisfies them iff the merged one
  does (the exact solver already solves classes as one, :mod:`psdsf_dist.core.solver`).

A policy not in :data:`CLASS_INVARIANT` (a whole-task policy, say: ``k`` servers do not pack
like one server of ``k`` times the size) is refused with :class:`NotClassInvariantError`.
"""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.solver import ServerClasses
from psdsf_dist.errors import PsdsfError
from psdsf_dist.model.arrays import frozen
from psdsf_dist.model.defaults import DEFAULT_MODE
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies.registry import Allocation, allocate

FloatArray = npt.NDArray[np.float64]

CLASS_INVARIANT: frozenset[str] = frozenset(
    {"psdsf", "drf", "per-server-drf", "drfh", "c-drfh", "tsf", "cdrf", "tsf-er", "mnw"})
"""Policies whose user totals are the same on the merged cluster (see the module docstring)."""


class NotClassInvariantError(PsdsfError, ValueError):
    """The policy's answer may change when a class of servers is merged into one."""

    def __init__(self, policy: str) -> None:
        super().__init__(f"policy {policy!r} is not known to be class-invariant (choose from "
                         f"{', '.join(sorted(CLASS_INVARIANT))})")


def merge_classes(scenario: Scenario) -> tuple[Scenario, ServerClasses]:
    """The merged cluster (one server per class, named after its first member's class) and the
    classes.  Capacities, ``gamma`` and the demand-based ``gamma`` scale with the class size;
    placement is the representative's (identical ``gamma`` implies identical eligibility)."""
    classes = ServerClasses.of(scenario)
    rep = classes.representative
    k = classes.count
    names = _class_names(scenario, rep)
    merged = Scenario(
        resources=scenario.resources,
        server_names=names,
        server_class=names,
        server_labels=tuple(scenario.server_labels[i] for i in rep.tolist()),
        user_names=scenario.user_names,
        capacity=frozen(scenario.capacity[rep] * k[:, None]),
        demand=scenario.demand,
        weight=scenario.weight,
        placement=frozen(scenario.placement[:, rep]),
        gamma=frozen(scenario.gamma[:, rep] * k[None, :]),
        demand_gamma=frozen(scenario.demand_gamma[:, rep] * k[None, :]),
        max_tasks=scenario.max_tasks,
        gamma_given=frozen(scenario.gamma_given[:, rep] * k[None, :]),
        placement_rules=scenario.placement_rules,
        external_resources=scenario.external_resources,
        external_capacity=scenario.external_capacity,
        external_demand=scenario.external_demand,
    )
    return merged, classes


def expand(classes: ServerClasses, merged_allocation: FloatArray) -> FloatArray:
    """N x K: each class's allocation spread evenly over its members."""
    per_member = merged_allocation / classes.count[None, :]
    return np.asarray(per_member[:, classes.member_class])


def allocate_by_class(scenario: Scenario, policy: str, mode: Mode = DEFAULT_MODE) -> Allocation:
    """:func:`~psdsf_dist.policies.registry.allocate` on the merged cluster, expanded to the
    scenario's servers.  ``seconds`` includes the merging.  PS-DSF's certificate is the merged
    allocation's (the same condition, see the module docstring)."""
    if policy not in CLASS_INVARIANT:
        raise NotClassInvariantError(policy)
    t0 = time.perf_counter()
    merged, classes = merge_classes(scenario)
    out = allocate(merged, policy, mode)
    X = expand(classes, out.allocation)
    return Allocation(policy, out.mode, X, time.perf_counter() - t0, out.lp_solves,
                      pooled=out.pooled, certificate=out.certificate)


def _class_names(scenario: Scenario, rep: npt.NDArray[np.int64]) -> tuple[str, ...]:
    """The class name of each representative, made unique (two named classes may be identical,
    and one named class may hold servers that differ)."""
    out: list[str] = []
    seen: dict[str, int] = {}
    for i in rep.tolist():
        base = scenario.server_class[i]
        j = seen.get(base, 0)
        seen[base] = j + 1
        out.append(base if j == 0 else f"{base}#{j + 1}")
    return tuple(out)
