"""Fairness properties of an allocation, each checked exactly (LPs) or probed, with a witness.

Definitions follow the PS-DSF paper (sections II-A and III-B), extended to several servers:

* **feasible**: within every server's capacities (and the external resources, for TSF-ER),
  tasks only on eligible servers, no user above its backlog.
* **sharing incentive (SI)**: every user runs at least as many tasks as under the uniform split
  that gives it ``phi[n] / sum(phi)`` of every server (eligible or not) - and of every external
  resource -, capped by its backlog.
* **envy-freeness (EF)**: no user could run more tasks with another user's bundle scaled by
  ``phi[n] / phi[m]``.  Bundles are per server: at server i user m holds ``X[m, i] c[m, i, :]``,
  worth ``min_r`` of that over ``c[n, i, r]`` tasks to n if n may use server i (TDM: m's time
  there, ``X[m, i] / gamma[m, i]``, worth ``gamma[n, i]`` tasks per unit).  With external
  resources (TSF-ER) n is also limited by m's share of them (TSF-ER paper, eq. (1) and
  Definition 3; :mod:`bundles`).
* **Pareto optimality (PO)**: an LP - maximise the users' relative gains subject to feasibility
  and nobody losing; it holds when nothing can be gained.
* **bottleneck fairness (BF)**: when one resource r* is dominantly requested by every user at
  every eligible server, the amounts of r* the users hold are weighted max-min fair over the
  feasible set: no user can get more r* without someone holding no more (per weight) getting
  less.  Checked with one LP per user.  **single-resource fairness (SRF)** is the same test when
  the servers have only one resource.  Both are about server resources: where users demand
  external resources too (TSF-ER) they are not applicable.
* **strategy-proofness (SP)**: probed, not proven - seeded random misreports of one user's demand
  (each entry scaled by a factor in [0.5, 2], its external demand too where the scenario has
  external resources) or eligible servers (some flipped); the policy is
  rerun and the liar's *true* tasks are counted from the resources it received.  The best gain
  found is reported; a gain above the tolerance is a counterexample.

Pooled DRF (task equivalents, no per-server bundles) is checked on the pooled machine: its
feasibility and PO against the pooled capacity, EF with whole bundles ``x[m] D[m]``.

Whole-task policies (``Allocation.whole``) are judged among whole-task allocations where the
property has a whole-task meaning: feasibility also asks for integers; the uniform split of SI
gives ``floor(phi[n] / sum(phi) * gamma[n, i])`` whole tasks per server; a bundle is worth the
whole tasks it runs, per server; PO asks whether some *integer* allocation gives one user a
task more with nobody losing - first whether a task still fits anywhere, then, for at most
``WHOLE_PO_MAX_VARIABLES`` variables, an integer program (HiGHS, ``WHOLE_PO_SECONDS``) - and
undecided beyond; a liar's true tasks are the whole tasks its grants run.  BF and SRF keep the
divisible reference (max-min over divisible allocations), which whole tasks seldom meet: a NO
there measures the integrality gap, not a bug.  SP probes rerun the policy with the same seed.

Task counts and task groups (the AMF family; Guan thesis chapters 4-5) are checked as the thesis
defines the properties, which the definitions above become once a bound user can run only its
declared tasks: the feasible set is :func:`~psdsf_dist.policies.feasibility.group_model`'s
(feasible *and rational*, (4.1)-(4.2) / (5.1)-(5.3)) for feasibility, PO, BF and SRF; SI's
uniform split counts only the tasks the user could run within its groups on its share of every
server (the LP (5.22)-(5.23)); a bundle is worth to a bound user only what its groups can use
(:func:`~psdsf_dist.policies.feasibility.fit_to_groups`: for one-server groups the thesis's
``sum_j min(a[k, j], d[i, j])``; with groups at least as strict as the thesis's section 5.3.2,
which lets the user reuse the other's group split only); and strategy-proofness is probed with
the thesis's misreports too - task counts scaled, a task claimed where the user has none - the
liar's true tasks being what its true groups can use of what it got.  AMF's per-server sharing
incentive (4.3)-(4.4) implies this aggregate one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp

from psdsf_dist.errors import PsdsfError
from psdsf_dist.model.defaults import DEFAULT_MODE, DEFAULT_SEED
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.model.task_groups import TaskGroups
from psdsf_dist.policies import Allocation, allocate, policy_view
from psdsf_dist.policies.amf import static_share_tasks
from psdsf_dist.policies.bundles import bundle_values, external_values, split_tasks
from psdsf_dist.policies.feasibility import (
    LinearModel,
    fit_to_groups,
    group_model,
    pooled_model,
    task_model,
)
from psdsf_dist.policies.lp import solve_lp
from psdsf_dist.policies.whole_tasks import FillState, whole_caps

FloatArray = npt.NDArray[np.float64]

RTOL = 1e-6  # a property fails only by more than this (relative); LPs are accurate to ~1e-9
# Slack when requiring users to keep what they hold (round-off of the input).  Small: what the
# many users may lose within it can add up to a visible gain for one small user.
KEEP = 1e-12
DEFAULT_TRIALS = 20
DEMAND_FACTOR = 2.0  # demand misreports scale each entry by a factor in [1/2, 2]
WHOLE_PO_MAX_VARIABLES = 2000  # whole-task PO: largest integer program tried
WHOLE_PO_SECONDS = 10.0  # and its time limit
WHOLE_EPS = 1e-9  # whole tasks a bundle runs: floor(value + WHOLE_EPS)


@dataclass(frozen=True)
class PropertyCheck:
    """One property: holds (True/False) or not applicable (None), and why."""

    key: str
    name: str
    holds: bool | None
    detail: str
    witness: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "holds": self.holds, "detail": self.detail,
                "witness": self.witness}


@dataclass(frozen=True)
class PropertyReport:
    policy: str
    mode: Mode
    totals: FloatArray
    checks: tuple[PropertyCheck, ...] = field(default=())

    def get(self, key: str) -> PropertyCheck:
        for c in self.checks:
            if c.key == key:
                return c
        raise KeyError(key)

    def to_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "mode": self.mode,
                "properties": {c.key: c.to_json() for c in self.checks}}


PROPERTY_NAMES: dict[str, str] = {
    "feasible": "feasible",
    "si": "sharing incentive",
    "ef": "envy-freeness",
    "po": "Pareto optimality",
    "bf": "bottleneck fairness",
    "srf": "single-resource fairness",
    "sp": "strategy-proofness (probed)",
}


def check_properties(
    scenario: Scenario,
    policy: str,
    mode: Mode = DEFAULT_MODE,
    *,
    trials: int = DEFAULT_TRIALS,
    seed: int = DEFAULT_SEED,
    allocation: Allocation | None = None,
) -> PropertyReport:
    """Run the policy (unless given its allocation) and check every property."""
    env = policy_view(scenario, policy)
    alloc = allocation if allocation is not None else allocate(env, policy, mode, seed=seed)
    X = alloc.allocation
    whole = alloc.whole
    checks = [
        feasible(env, X, mode, pooled=alloc.pooled, whole=whole),
        sharing_incentive(env, X, whole=whole),
        envy_freeness(env, X, mode, pooled=alloc.pooled, whole=whole),
        pareto_optimality(env, X, mode, pooled=alloc.pooled, whole=whole),
        _divisible_note(bottleneck_fairness(env, X, mode, pooled=alloc.pooled), whole),
        _divisible_note(single_resource_fairness(env, X, mode, pooled=alloc.pooled), whole),
        strategy_proofness(env, policy, mode, X, trials=trials, seed=seed),
    ]
    return PropertyReport(policy, alloc.mode, alloc.totals, tuple(checks))


# ---------------------------------------------------------------------------------------------
# helpers


def _model(scenario: Scenario, mode: Mode, pooled: bool) -> LinearModel:
    if pooled:
        return pooled_model(scenario)
    if scenario.task_groups is not None:
        return group_model(scenario, mode, external=bool(scenario.external_resources)).model
    return task_model(scenario, mode, external=bool(scenario.external_resources))


def _user(scenario: Scenario, n: int) -> str:
    return scenario.user_names[n]


def _num(v: float) -> str:
    return f"{v:.6g}"


def _consumption(scenario: Scenario, mode: Mode) -> FloatArray:
    """K x N x M' per-task consumption, zero where ineligible."""
    cons = scenario.consumption_tensor(mode)
    return np.where((scenario.gamma.T > 0)[:, :, None], cons, 0.0)


# ---------------------------------------------------------------------------------------------
# feasibility and sharing incentive


def _divisible_note(check: PropertyCheck, whole: bool) -> PropertyCheck:
    if not whole or check.holds is None:
        return check
    return PropertyCheck(check.key, check.name, check.holds,
                         f"{check.detail} (reference: divisible allocations; whole tasks seldom "
                         "meet it)", check.witness)


def feasible(
    scenario: Scenario, X: FloatArray, mode: Mode, *, pooled: bool = False, whole: bool = False
) -> PropertyCheck:
    key, name = "feasible", PROPERTY_NAMES["feasible"]
    x = X.sum(axis=1)
    if whole and (np.abs(X - np.round(X)) > 1e-9).any():
        n, i = map(int, np.argwhere(np.abs(X - np.round(X)) > 1e-9)[0])
        return PropertyCheck(key, name, False, f"{_user(scenario, n)} has {_num(X[n, i])} tasks "
                             f"on {scenario.server_names[i]}, not a whole number",
                             {"user": _user(scenario, n), "server": scenario.server_names[i]})
    caps = scenario.max_tasks
    over_cap = np.flatnonzero(x > caps * (1 + RTOL) + 1e-12)
    if len(over_cap):
        n = int(over_cap[0])
        return PropertyCheck(key, name, False, f"{_user(scenario, n)} runs {_num(x[n])} tasks, "
                             f"above its backlog {_num(caps[n])}", {"user": _user(scenario, n)})
    if (X < -1e-12).any():
        n, i = map(int, np.argwhere(X < -1e-12)[0])
        return PropertyCheck(key, name, False, f"negative tasks for {_user(scenario, n)}",
                             {"user": _user(scenario, n), "server": scenario.server_names[i]})
    if pooled:
        use = x @ scenario.demand
        pool = scenario.capacity.sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(pool > 0, use / pool, np.where(use > 0, np.inf, 0.0))
        r = int(np.argmax(ratio))
        if ratio[r] > 1 + RTOL:
            return PropertyCheck(key, name, False, f"pooled {scenario.resources[r]} used "
                                 f"{100 * ratio[r]:.4g}% of the cluster", {"resource": r})
        return PropertyCheck(key, name, True, "within the pooled capacity (server boundaries "
                             "ignored by this policy)")
    stray = (scenario.gamma <= 0) & (X > 1e-12)
    if stray.any():
        n, i = map(int, np.argwhere(stray)[0])
        return PropertyCheck(key, name, False, f"{_user(scenario, n)} has tasks on ineligible "
                             f"server {scenario.server_names[i]}",
                             {"user": _user(scenario, n), "server": scenario.server_names[i]})
    model = task_model(scenario, mode, external=bool(scenario.external_resources))
    z = X[model.user, model.server]
    load = model.A @ z
    excess = load - model.b
    j = int(np.argmax(excess)) if len(excess) else 0
    if len(excess) and excess[j] > RTOL:
        return PropertyCheck(key, name, False, f"constraint {_row_name(scenario, mode, j)} at "
                             f"{_num(load[j])} of 1", {"constraint": _row_name(scenario, mode, j)})
    groups = scenario.task_groups
    if groups is not None:
        for n in np.flatnonzero(groups.bound).tolist():
            fit = fit_to_groups(scenario, n, X[n])
            if x[n] - fit > RTOL * max(x[n], 1.0):
                return PropertyCheck(key, name, False, f"{_user(scenario, n)} runs {_num(x[n])} "
                                     f"tasks, of which only {_num(fit)} fit its task counts and "
                                     "groups", {"user": _user(scenario, n), "tasks": float(x[n]),
                                                "fit_groups": fit})
        return PropertyCheck(key, name, True, "within every capacity, eligibility, backlog, task "
                             "count and group")
    ok = "within every capacity, eligibility and backlog"
    return PropertyCheck(key, name, True, ok + (", whole tasks" if whole else ""))


def _row_name(scenario: Scenario, mode: Mode, row: int) -> str:
    K = scenario.num_servers
    if mode == "tdm":
        if row < K:
            return f"{scenario.server_names[row]} time"
        row -= K
    else:
        M = scenario.num_resources
        if row < K * M:
            return f"{scenario.server_names[row // M]} {scenario.resources[row % M]}"
        row -= K * M
    return f"external {scenario.external_resources[row]}"


def uniform_split_tasks(scenario: Scenario, *, whole: bool = False) -> FloatArray:
    """N: tasks under the uniform split ``phi[n] / sum(phi)`` of everything, capped (whole:
    the whole tasks that share runs on each server, summed; with task groups, within them:
    :func:`~psdsf_dist.policies.amf.static_share_tasks` - for an unbound user the same
    ``phi[n] / sum(phi) * sum_i gamma[n, i]``)."""
    if whole:
        frac = scenario.weight / scenario.weight.sum()
        per_server = np.floor(frac[:, None] * scenario.gamma + WHOLE_EPS)
        return np.asarray(np.minimum(per_server.sum(axis=1), whole_caps(scenario.max_tasks)))
    return split_tasks(scenario, None if scenario.task_groups is None
                       else static_share_tasks(scenario))


def sharing_incentive(scenario: Scenario, X: FloatArray, *, whole: bool = False) -> PropertyCheck:
    key, name = "si", PROPERTY_NAMES["si"]
    x = X.sum(axis=1)
    floor = uniform_split_tasks(scenario, whole=whole)
    short = (floor - x) / np.maximum(floor, 1e-300)
    n = int(np.argmax(short))
    if short[n] > RTOL:
        return PropertyCheck(key, name, False, f"{_user(scenario, n)} runs {_num(x[n])} tasks, "
                             f"fewer than the {_num(floor[n])} of the uniform split",
                             {"user": _user(scenario, n), "tasks": float(x[n]),
                              "uniform_split": float(floor[n])})
    return PropertyCheck(key, name, True, "every user runs at least its uniform-split tasks")


# ---------------------------------------------------------------------------------------------
# envy-freeness


def envy_matrix(
    scenario: Scenario, X: FloatArray, mode: Mode, *, pooled: bool = False, whole: bool = False
) -> FloatArray:
    """N x N: ``U[n, m]`` = tasks n could run with m's bundle scaled by phi[n]/phi[m] (whole:
    the whole tasks it runs on each server, summed)."""
    N = scenario.num_users
    phi = scenario.weight
    ratio = phi[:, None] / phi[None, :]
    if pooled:
        D = scenario.demand
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(D[:, None, :] > 0, D[None, :, :] / D[:, None, :], np.inf).min(axis=2)
        return np.asarray(ratio * q * X.sum(axis=1)[None, :])
    if whole:  # per server: the whole tasks n runs with m's bundle there, summed
        U = np.zeros((N, N))
        gam = scenario.gamma
        if mode == "tdm":
            with np.errstate(divide="ignore", invalid="ignore"):
                time = np.where(gam > 0, X / np.where(gam > 0, gam, 1.0), 0.0)  # N x K
            per = ratio[:, :, None] * gam[:, None, :] * time[None, :, :]
            return np.asarray(np.floor(per + WHOLE_EPS).sum(axis=2))
        cons = _consumption(scenario, mode)  # K x N x M
        for i in range(scenario.num_servers):
            c = cons[i]  # N x M
            with np.errstate(divide="ignore", invalid="ignore"):
                # q[n, m] = min over r used by n of c[m, r] / c[n, r]
                q = np.where(c[:, None, :] > 0, c[None, :, :] / c[:, None, :],
                             np.inf).min(axis=2)
            q = np.where((gam[:, i] > 0)[:, None] & np.isfinite(q), q, 0.0)
            U += np.floor(ratio * q * X[:, i][None, :] + WHOLE_EPS)
        return U
    pn, pi = np.nonzero((scenario.gamma > 0) & (X != 0))
    value = bundle_values(scenario, mode, pn.astype(np.int64), pi.astype(np.int64))  # N x P
    held = sp.csr_matrix((X[pn, pi], (np.arange(len(pn)), pn)), shape=(len(pn), N))
    U = np.asarray(held.T @ value.T).T  # U[n, m] = sum over m's pairs of value * tasks
    ext = external_values(scenario)
    x = X.sum(axis=1)
    with np.errstate(invalid="ignore"):
        U = np.minimum(U, np.where(np.isfinite(ext), ext * x[None, :], np.inf))
    return np.asarray(ratio * U)


def bundle_tasks(scenario: Scenario, X: FloatArray, mode: Mode, n: int, m: int) -> FloatArray:
    """K: tasks user n could run on each server with m's bundle there, scaled by phi[n]/phi[m]
    (the per-server terms of :func:`envy_matrix`)."""
    ratio = scenario.weight[n] / scenario.weight[m]
    gam = scenario.gamma
    with np.errstate(divide="ignore", invalid="ignore"):
        if mode == "tdm":
            per = np.where((gam[m] > 0) & (gam[n] > 0), gam[n] * X[m] / gam[m], 0.0)
        else:
            cons = _consumption(scenario, mode)  # K x N x M
            cn, cm = cons[:, n, :], cons[:, m, :]
            q = np.where(cn > 0, cm / cn, np.inf).min(axis=1)
            per = np.where((gam[n] > 0) & np.isfinite(q), q * X[m], 0.0)
    return np.asarray(ratio * per)


def envy_freeness(
    scenario: Scenario, X: FloatArray, mode: Mode, *, pooled: bool = False, whole: bool = False
) -> PropertyCheck:
    key, name = "ef", PROPERTY_NAMES["ef"]
    x = X.sum(axis=1)
    U = np.minimum(envy_matrix(scenario, X, mode, pooled=pooled, whole=whole),
                   scenario.max_tasks[:, None])
    np.fill_diagonal(U, 0.0)
    groups = scenario.task_groups
    if groups is not None and not pooled:
        # a bound user can use another's bundle only within its own task counts and groups;
        # the plain value is an upper bound, so only pairs it flags need the exact one
        for n, m in np.argwhere((U > x[:, None] * (1 + RTOL)) & groups.bound[:, None]).tolist():
            U[n, m] = min(U[n, m], fit_to_groups(scenario, n, bundle_tasks(scenario, X, mode,
                                                                            n, m)))
    gain = (U - x[:, None]) / np.maximum(x[:, None], 1e-12)
    n, m = map(int, np.unravel_index(np.argmax(gain), gain.shape))
    if gain[n, m] > RTOL and U[n, m] - x[n] > 1e-9:
        return PropertyCheck(key, name, False, f"{_user(scenario, n)} ({_num(x[n])} tasks) could "
                             f"run {_num(U[n, m])} with {_user(scenario, m)}'s bundle",
                             {"user": _user(scenario, n), "envies": _user(scenario, m),
                              "tasks": float(x[n]), "with_bundle": float(U[n, m])})
    return PropertyCheck(key, name, True, "no user prefers another's weight-scaled bundle")


# ---------------------------------------------------------------------------------------------
# Pareto optimality


def pareto_optimality(
    scenario: Scenario, X: FloatArray, mode: Mode, *, pooled: bool = False, whole: bool = False
) -> PropertyCheck:
    key, name = "po", PROPERTY_NAMES["po"]
    if whole:
        return _whole_pareto_optimality(scenario, X, mode)
    model = _model(scenario, mode, pooled)
    if not model.num_variables:
        return PropertyCheck(key, name, True, "nothing can be allocated to anyone")
    T = model.totals
    x = X.sum(axis=1)
    N = scenario.num_users
    # gains relative to what the user holds, or to a thousandth of what it could run alone
    ref = np.maximum(x, 1e-3 * np.maximum(scenario.gamma.sum(axis=1), 1e-9))
    # maximise sum_n x'[n] / ref[n]  s.t. feasible, x' >= x, x' <= caps
    A_parts = [model.A, -sp.diags(1.0 / ref) @ T]
    b_parts = [model.b, -(x / ref) * (1 - KEEP)]
    finite = np.flatnonzero(np.isfinite(scenario.max_tasks))
    if len(finite):
        A_parts.append(T[finite])
        b_parts.append(scenario.max_tasks[finite])
    c = -np.asarray((sp.diags(1.0 / ref) @ T).sum(axis=0)).ravel()
    res = solve_lp(c, sp.vstack(A_parts, format="csr"), np.concatenate(b_parts))
    if res.status == "infeasible":
        return PropertyCheck(key, name, False, "the allocation itself is infeasible")
    if not res.optimal:
        return PropertyCheck(key, name, None, f"LP failed: {res.message}")
    better = np.asarray(T @ res.x)
    gain = (better - x) / ref
    n = int(np.argmax(gain))
    if gain[n] > RTOL:
        return PropertyCheck(key, name, False, f"{_user(scenario, n)} could run "
                             f"{_num(better[n])} instead of {_num(x[n])} tasks with nobody "
                             "running fewer", {"user": _user(scenario, n), "tasks": float(x[n]),
                                               "improved": float(better[n]),
                                               "totals": [float(v) for v in better[:N]]})
    return PropertyCheck(key, name, True, "no user can gain without another losing")


def _whole_pareto_optimality(scenario: Scenario, X: FloatArray, mode: Mode) -> PropertyCheck:
    """PO among whole-task allocations: a task that still fits, else an integer program."""
    key, name = "po", PROPERTY_NAMES["po"]
    Xi = np.round(X).astype(np.int64)
    state = FillState(scenario, mode, Xi)
    if state.fit.any():
        n, i = map(int, np.argwhere(state.fit)[0])
        return PropertyCheck(key, name, False, f"a task of {_user(scenario, n)} still fits on "
                             f"{scenario.server_names[i]}", {"user": _user(scenario, n),
                                                             "server": scenario.server_names[i]})
    model = task_model(scenario, mode)
    P = model.num_variables
    if P > WHOLE_PO_MAX_VARIABLES:
        return PropertyCheck(key, name, None, f"no task fits anywhere; undecided beyond that "
                             f"({P} task variables, the integer program is tried up to "
                             f"{WHOLE_PO_MAX_VARIABLES})")
    T = model.totals
    x = Xi.sum(axis=1).astype(float)
    caps = whole_caps(scenario.max_tasks)
    # maximise total tasks over integer allocations where nobody loses
    cons = [LinearConstraint(model.A, -np.inf, model.b * (1 + 1e-9)),
            LinearConstraint(T, x, np.where(np.isfinite(caps), caps, np.inf))]
    res = milp(-np.ones(P), constraints=cons, integrality=np.ones(P),
               bounds=Bounds(0, np.inf), options={"time_limit": WHOLE_PO_SECONDS})
    if res.status != 0 or res.x is None:
        return PropertyCheck(key, name, None, f"integer program undecided: {res.message}")
    better = np.asarray(T @ np.round(res.x))
    gain = better - x
    n = int(np.argmax(gain))
    if gain[n] >= 1:
        return PropertyCheck(key, name, False, f"{_user(scenario, n)} could run "
                             f"{_num(better[n])} instead of {_num(x[n])} whole tasks with nobody "
                             "running fewer", {"user": _user(scenario, n), "tasks": float(x[n]),
                                               "improved": float(better[n]),
                                               "totals": [float(v) for v in better]})
    return PropertyCheck(key, name, True, "no user can gain a whole task without another "
                         "losing (integer program)")


# ---------------------------------------------------------------------------------------------
# bottleneck and single-resource fairness


def bottleneck_resource(scenario: Scenario) -> int | None:
    """The resource every user requests dominantly at every eligible server, if there is one."""
    cons = _consumption(scenario, "rdm")  # K x N x M
    cap = scenario.capacity
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(cap[:, None, :] > 0, cons / cap[:, None, :], 0.0)
    top = share.max(axis=2, keepdims=True)
    eligible = (scenario.gamma.T > 0)[:, :, None]
    is_dominant = (share >= top * (1 - 1e-12)) | ~eligible
    common = np.flatnonzero(is_dominant.all(axis=(0, 1)))
    if not eligible.any() or not len(common):
        return None
    return int(common[0])


def bottleneck_fairness(
    scenario: Scenario, X: FloatArray, mode: Mode, *, pooled: bool = False
) -> PropertyCheck:
    key, name = "bf", PROPERTY_NAMES["bf"]
    if _demands_external(scenario):
        return PropertyCheck(key, name, None, "not applicable: users demand external resources "
                             "(the property concerns server resources only)")
    r = bottleneck_resource(scenario)
    if r is None:
        return PropertyCheck(key, name, None, "not applicable: no resource is dominant for every "
                             "user at every eligible server")
    return _max_min_check(key, name, scenario, X, mode, pooled, r)


def single_resource_fairness(
    scenario: Scenario, X: FloatArray, mode: Mode, *, pooled: bool = False
) -> PropertyCheck:
    key, name = "srf", PROPERTY_NAMES["srf"]
    if _demands_external(scenario):
        return PropertyCheck(key, name, None, "not applicable: users demand external resources "
                             "besides the servers' one")
    if scenario.num_resources != 1:
        return PropertyCheck(key, name, None, "not applicable: servers have "
                             f"{scenario.num_resources} resources")
    return _max_min_check(key, name, scenario, X, mode, pooled, 0)


def _demands_external(scenario: Scenario) -> bool:
    return bool((scenario.external_demand > 0).any())


def _max_min_check(
    key: str, name: str, scenario: Scenario, X: FloatArray, mode: Mode, pooled: bool, r: int
) -> PropertyCheck:
    """Are the amounts of resource r weighted max-min fair over the feasible set?"""
    model = _model(scenario, mode, pooled)
    if not model.num_variables:
        return PropertyCheck(key, name, True, "nothing can be allocated to anyone")
    T = model.totals
    x = X.sum(axis=1)
    if pooled:
        G = sp.diags(scenario.demand[:, r]) @ T
        held = x * scenario.demand[:, r]
    else:
        cons = _consumption(scenario, "rdm")[:, :, r]  # K x N
        per = cons[model.server, model.user]
        G = sp.csr_matrix((per, (model.user, np.arange(len(per)))), shape=T.shape)
        held = (X * cons.T).sum(axis=1)
    level = held / scenario.weight
    pool = float(scenario.capacity[:, r].sum())
    finite = np.flatnonzero(np.isfinite(scenario.max_tasks))
    rname = scenario.resources[r]
    for n in np.argsort(level, kind="stable").tolist():
        if x[n] >= scenario.max_tasks[n] * (1 - RTOL):
            continue
        poorer = np.flatnonzero(level <= level[n] * (1 + KEEP) + 1e-15)
        poorer = poorer[poorer != n]
        norm = max(held[n], RTOL * pool)
        A_parts = [model.A, -G[poorer]]
        b_parts = [model.b, -held[poorer] * (1 - KEEP)]
        if len(finite):
            A_parts.append(T[finite])
            b_parts.append(scenario.max_tasks[finite])
        c = -np.asarray(G[n].todense()).ravel() / norm
        res = solve_lp(c, sp.vstack(A_parts, format="csr"), np.concatenate(b_parts))
        if not res.optimal:
            return PropertyCheck(key, name, None, f"LP failed: {res.message}")
        best = -res.objective * norm
        if (best - held[n]) / norm > RTOL:
            return PropertyCheck(
                key, name, False,
                f"{_user(scenario, n)} could hold {_num(best)} {rname} instead of "
                f"{_num(held[n])} with no user holding less per weight losing any",
                {"user": _user(scenario, n), "resource": rname, "held": float(held[n]),
                 "achievable": float(best)},
            )
    return PropertyCheck(key, name, True, f"{rname} (dominant everywhere) is weighted max-min "
                         "fair")


# ---------------------------------------------------------------------------------------------
# strategy-proofness, probed


def strategy_proofness(
    scenario: Scenario,
    policy: str,
    mode: Mode,
    X: FloatArray,
    *,
    trials: int = DEFAULT_TRIALS,
    seed: int = DEFAULT_SEED,
) -> PropertyCheck:
    key, name = "sp", PROPERTY_NAMES["sp"]
    if trials <= 0:
        return PropertyCheck(key, name, None, "not probed (0 trials)")
    rng = np.random.default_rng(seed)
    x = X.sum(axis=1)
    N = scenario.num_users
    best_gain = -np.inf
    best: dict[str, Any] | None = None
    failed = 0
    groups = scenario.task_groups
    for _ in range(trials):
        n = int(rng.integers(N))
        if groups is not None and groups.bound[n] and rng.random() < 1 / 3:
            lied_groups, lie = _misreport_groups(scenario, groups, n, rng)
            liar = scenario.replace_users(task_groups=lied_groups)
        else:
            liar, lie = _misreport_demand_or_servers(scenario, n, rng)
        if not (liar.gamma[n] > 0).any():
            continue
        try:
            outcome = allocate(liar, policy, mode, seed=seed)
        except PsdsfError:
            failed += 1
            continue
        true = true_tasks(scenario, liar, outcome, n)
        gain = (true - x[n]) / max(x[n], 1e-12)
        if gain > best_gain:
            best_gain = gain
            best = {"user": _user(scenario, n), "misreport": lie, "tasks": float(x[n]),
                    "true_tasks_when_lying": float(true), "gain": float(gain)}
    tried = f"{trials} seeded misreports (seed {seed})" + (f", {failed} unsolved" if failed else "")
    if best is None:
        return PropertyCheck(key, name, None, f"no usable misreport among {tried}")
    if best_gain > RTOL:
        return PropertyCheck(key, name, False, f"{best['user']} gains {100 * best_gain:.3g}% by "
                             f"misreporting its {next(iter(best['misreport']))}; {tried}", best)
    return PropertyCheck(key, name, True, f"no gain found in {tried} (best "
                         f"{100 * best_gain:+.3g}%)", best)


def _misreport_groups(scenario: Scenario, groups: TaskGroups, n: int,
                      rng: np.random.Generator) -> tuple[TaskGroups, dict[str, Any]]:
    """User n's task counts each scaled by a factor in [1/2, 2], and with probability 1/2 tasks
    claimed on one more server (the count of one of its groups): lying "at any set of sites"."""
    mine = groups.of_user(n)
    tasks = groups.tasks.copy()
    tasks[mine] *= np.exp(rng.uniform(-np.log(DEMAND_FACTOR), np.log(DEMAND_FACTOR), len(mine)))
    lied = groups.with_tasks(tasks)
    eligible = np.flatnonzero(scenario.gamma[n] > 0)
    if len(eligible) and rng.random() < 0.5:
        extra = int(rng.choice(eligible))
        count = float(tasks[int(rng.choice(mine))]) if len(mine) else 1.0
        lied = TaskGroups(np.append(lied.user, n), np.append(lied.tasks, count),
                          np.append(lied.ptr, lied.ptr[-1] + 1), np.append(lied.server, extra),
                          lied.bound)
    told = [{"servers": [scenario.server_names[i] for i in lied.servers_of(int(g))],
             "tasks": float(lied.tasks[g])} for g in lied.of_user(n)]
    return lied, {"task_groups": told}


def _misreport_demand_or_servers(scenario: Scenario, n: int, rng: np.random.Generator
                                 ) -> tuple[Scenario, dict[str, Any]]:
    K = scenario.num_servers
    lie_about_servers = K > 1 and rng.random() < 0.5
    demand = scenario.demand.copy()
    external = scenario.external_demand.copy()
    placement = scenario.placement.copy()
    if lie_about_servers:
        flip = rng.random(K) < 0.3
        if not flip.any():
            flip[int(rng.integers(K))] = True
        placement[n] = placement[n] ^ flip
        lie: dict[str, Any] = {"servers": [scenario.server_names[i]
                                           for i in np.flatnonzero(placement[n])]}
    else:
        factor = np.exp(rng.uniform(-np.log(DEMAND_FACTOR), np.log(DEMAND_FACTOR),
                                    scenario.num_resources))
        demand[n] = demand[n] * factor
        lie = {"demand": {r: float(demand[n, j]) for j, r in enumerate(scenario.resources)
                          if demand[n, j] > 0}}
        if scenario.external_resources:  # its demand of them is part of the report too
            external[n] = external[n] * np.exp(rng.uniform(
                -np.log(DEMAND_FACTOR), np.log(DEMAND_FACTOR), len(external[n])))
            lie["external_demand"] = {r: float(external[n, q]) for q, r in
                                      enumerate(scenario.external_resources)
                                      if external[n, q] > 0}
    return scenario.replace_users(demand=demand, placement=placement,
                                  external_demand=external), lie


def true_tasks(truth: Scenario, liar: Scenario, outcome: Allocation, n: int) -> float:
    """Tasks user n can really run with what it was given after misreporting (capped, and
    within its true task groups if it has any)."""
    X = outcome.allocation
    groups = truth.task_groups
    if groups is not None and groups.bound[n] and not outcome.pooled:
        per = np.zeros(truth.num_servers)
        for i in np.flatnonzero((X[n] > 0) & (truth.gamma[n] > 0)).tolist():
            per[i] = _true_tasks_on(truth, liar, outcome, n, i)
        return min(fit_to_groups(truth, n, per), float(truth.max_tasks[n]))
    if outcome.pooled:
        d_true, d_told = truth.demand[n], liar.demand[n]
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(d_true > 0, d_told / d_true, np.inf).min()
        # task equivalents drawn from servers the user cannot really use are worth nothing
        got = float(X[n, truth.gamma[n] > 0].sum() * q)
    elif outcome.mode == "tdm":
        with np.errstate(divide="ignore", invalid="ignore"):
            time = np.where(liar.gamma[n] > 0, X[n] / liar.gamma[n], 0.0)
        runs_at = time * truth.gamma[n]
        got = float((np.floor(runs_at + WHOLE_EPS) if outcome.whole else runs_at).sum())
    else:
        runs = [_true_tasks_on(truth, liar, outcome, n, i)
                for i in np.flatnonzero((X[n] > 0) & (truth.gamma[n] > 0)).tolist()]
        got = float(sum(np.floor(r + WHOLE_EPS) if outcome.whole else r for r in runs))
    if len(truth.external_resources):
        e = truth.external_demand[n]
        held_e = X[n].sum() * liar.external_demand[n]
        with np.errstate(divide="ignore", invalid="ignore"):
            got = min(got, float(np.where(e > 0, held_e / e, np.inf).min()))
    return min(got, float(truth.max_tasks[n]))


def _true_tasks_on(truth: Scenario, liar: Scenario, outcome: Allocation, n: int, i: int) -> float:
    """Tasks user n can really run on server i with what it got there."""
    X = outcome.allocation
    if outcome.mode == "tdm":
        return float(X[n, i] / liar.gamma[n, i] * truth.gamma[n, i]) if liar.gamma[n, i] else 0.0
    held = X[n, i] * liar.consumption(i, "rdm")[n]
    need = truth.consumption(i, "rdm")[n]
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.where(need > 0, held / need, np.inf).min())
