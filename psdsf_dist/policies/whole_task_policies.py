"""The whole-task schedulers of the source papers: which criterion, in which order.

Each is :mod:`.whole_tasks`' one-task-at-a-time filling with the criterion its paper states, so
this module holds only the criteria; they are a few lines each and read best side by side.
``x[n]`` is user n's current number of tasks, ``phi[n]`` its weight, ``gamma[n, i]`` the tasks
it could run alone on server i, ``c[i, n, :]`` its per-task consumption there and ``R[i, :]``
the server's residual (unreserved) capacity.

* ``psdsf-pf`` - progressive filling with the PS-DSF criterion (Kesidis et al. 2017, eq. (12)-
  (13); Khamse-Ashari et al. 2016, the virtual dominant share): the pair of smallest
  ``V[n, i] = x[n] / (phi[n] gamma[n, i])``, server and user chosen jointly.
* ``rpsdsf`` - residual PS-DSF (Kesidis et al., section VI): the same with ``gamma`` computed on
  the residual capacity, ``V[n, i] = x[n] max_r c[i, n, r] / R[i, r] / phi[n]``: a server that
  has little left of what n needs looks expensive to n.
* ``rrr-psdsf`` - randomised round robin picks the server (a random order of the servers, new
  each round), the PS-DSF criterion ``x[n] / (phi[n] gamma[n, i])`` the user for it (Kesidis et
  al., section VI); seeded, so a seed gives one allocation.  :func:`rrr_psdsf` also runs it with
  the server drawn afresh at every step (``order="each-step"``), for comparison.
* ``drfh-first-fit`` - First-Fit DRFH (Wang, Li and Liang, section V-B): the user of smallest
  weighted global dominant share ``x[n] mu[n] / phi[n]`` with a task that fits somewhere, on the
  first server (lowest index) it fits on.  ``mu[n]`` is :func:`.drfh.global_dominant_share`
  pooled over the user's eligible servers, as the fractional ``drfh`` policy uses.
* ``drfh-best-fit`` - Best-Fit DRFH (same section, eq. (9)): that user on the fitting server of
  smallest ``H(n, i) = || D_n / D_n1 - R_i / R_i1 ||_1``, demand and residual both in shares of
  the pooled capacity.  The paper normalises by resource 1; a user that does not demand it would
  divide by zero, so we normalise by the first resource the user demands, which is resource 1
  whenever the paper's formula is defined (and a fitting server has some of it left).  With one
  resource (TDM: time) ``H`` is 0 everywhere and Best-Fit is First-Fit.
* ``bf-drf`` - best-fit DRF as Kesidis et al. run it (section VI, citing DRFH): the user by
  DRF's dominant share of the *whole* pool (placement ignored, :func:`.drfh.global_dominant_share`
  with ``respect_placement=False``), the server by ``H``.  Without placement constraints it is
  ``drfh-best-fit``.

Ties go to the lowest user index, then the lowest server index, as ORACLES example 5 fixes them.
Also here, for the papers' comparisons, DRF and TSF under randomised round robin
(:func:`rrr_drf`, :func:`rrr_tsf`; Kesidis et al.'s Table II rows DRF and TSF), each with the
same choice of server order.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

from psdsf_dist.model.defaults import DEFAULT_SEED
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies.drfh import global_dominant_share
from psdsf_dist.policies.tsf import task_share_scale
from psdsf_dist.policies.whole_tasks import (
    Column,
    FillState,
    fill_pairs,
    fill_random_server,
    fill_round_robin,
    fill_users,
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

WHOLE_TASK_POLICIES: tuple[str, ...] = (
    "drfh-first-fit",
    "drfh-best-fit",
    "psdsf-pf",
    "rpsdsf",
    "rrr-psdsf",
    "bf-drf",
)
SEEDED_POLICIES: tuple[str, ...] = ("rrr-psdsf",)

ServerOrder = Literal["round-robin", "each-step"]
SERVER_ORDERS: tuple[ServerOrder, ...] = ("round-robin", "each-step")
"""How the randomised schedulers pick the server: ``round-robin`` visits every server once per
round in a fresh random permutation (Kesidis et al.'s RRR); ``each-step`` draws one uniformly at
every step (:func:`.whole_tasks.fill_random_server`)."""


# -- criteria: one column (server i -> N values) at a time -------------------------------------


def psdsf_per_task(state: FillState) -> Column:
    """``1 / (phi[n] gamma[n, i])``: times ``x[n]``, the PS-DSF virtual dominant share."""
    sc = state.scenario
    g = sc.gamma * sc.weight[:, None]
    inv = np.where(g > 0, 1.0 / np.where(g > 0, g, 1.0), 0.0)  # ineligible: masked by fit
    return lambda s, i: inv[:, i]


def psdsf_value(state: FillState) -> Column:
    """``x[n] / (phi[n] gamma[n, i])``, the criterion RRR-PS-DSF applies at the drawn server."""
    per_task = psdsf_per_task(state)
    return lambda s, i: s.x * per_task(s, i)


def residual_psdsf_per_task(state: FillState) -> Column:
    """``max_r c[i, n, r] / R[i, r] / phi[n]``: PS-DSF's per-task share on the residual."""
    phi = state.scenario.weight

    def column(s: FillState, i: int) -> FloatArray:
        res = s.residual[i]
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(s.cons[i] > 0, s.cons[i] / np.where(res > 0, res, 0.0), 0.0)
        return np.asarray(q.max(axis=1) / phi)

    return column


def first_fit_preference(state: FillState) -> Column:
    """The server index: the lowest-indexed fitting server wins."""
    N = state.X.shape[0]
    return lambda s, i: np.full(N, float(i))


def best_fit_preference(state: FillState) -> Column:
    """DRFH's ``H(n, i)``, eq. (9), in shares of the pooled capacity (see the module doc)."""
    total = state.capacity.sum(axis=0)
    pool = np.where(total > 0, total, 1.0)  # M'
    N = state.X.shape[0]
    demand = state.cons.max(axis=0) / pool  # N x M': one direction per user (gamma only scales)
    r0 = np.argmax(demand > 0, axis=1)  # the first resource each user demands
    d_dir = demand / np.maximum(demand[np.arange(N), r0], 1e-300)[:, None]

    def column(s: FillState, i: int) -> FloatArray:
        c = s.residual[i] / pool  # M'
        base = c[r0]  # N
        with np.errstate(divide="ignore", invalid="ignore"):
            h = np.abs(d_dir - c[None, :] / base[:, None]).sum(axis=1)
        return np.asarray(np.where((base > 0) & np.isfinite(h), h, np.inf))

    return column


def _dominant_share(state: FillState, *, respect_placement: bool) -> FloatArray:
    """N: a task's weighted global dominant share, ``mu[n] / phi[n]``."""
    sc = state.scenario
    mu = global_dominant_share(sc, respect_placement=respect_placement)
    return np.asarray(mu / sc.weight)


# -- the policies --------------------------------------------------------------------------------


def whole_task_allocation(
    scenario: Scenario, policy: str, mode: Mode, *, seed: int = DEFAULT_SEED,
    start: IntArray | None = None,
) -> IntArray:
    """N x K integer tasks of one of :data:`WHOLE_TASK_POLICIES` (``seed``: ``rrr-psdsf``).

    ``start`` (integers that fit) is kept and filled on top of; the rounding of PS-DSF uses it.
    """
    state = FillState(scenario, mode, start)
    if policy == "psdsf-pf":
        return fill_pairs(state, psdsf_per_task(state))
    if policy == "rpsdsf":
        return fill_pairs(state, residual_psdsf_per_task(state))
    if policy == "rrr-psdsf":
        return _fill_servers(state, psdsf_value(state), np.random.default_rng(seed), "round-robin")
    if policy in ("drfh-first-fit", "drfh-best-fit", "bf-drf"):
        per_task = _dominant_share(state, respect_placement=policy != "bf-drf")
        # a user eligible nowhere (an infinite share per task) is never chosen: not 0 * inf
        runs = np.isfinite(per_task)
        share = np.where(runs, per_task, 0.0)
        prefer = first_fit_preference if policy == "drfh-first-fit" else best_fit_preference
        return fill_users(state, lambda s: np.where(runs, s.x * share, np.inf), prefer(state))
    raise ValueError(f"not a whole-task policy: {policy!r}")


def _fill_servers(state: FillState, crit: Column, rng: np.random.Generator,
                  order: ServerOrder) -> IntArray:
    if order == "round-robin":
        return fill_round_robin(state, crit, rng)
    if order == "each-step":
        return fill_random_server(state, crit, rng)
    raise ValueError(f"unknown server order {order!r} (choose from {', '.join(SERVER_ORDERS)})")


def rrr_psdsf(scenario: Scenario, mode: Mode, rng: np.random.Generator, *,
              order: ServerOrder = "round-robin") -> IntArray:
    """PS-DSF choosing the user at the server of randomised round robin (``rrr-psdsf``), or,
    ``order="each-step"``, at a server drawn afresh every step."""
    state = FillState(scenario, mode)
    return _fill_servers(state, psdsf_value(state), rng, order)


def rrr_drf(scenario: Scenario, mode: Mode, rng: np.random.Generator, *,
            order: ServerOrder = "round-robin") -> IntArray:
    """DRF under randomised round robin (the Mesos default): the server by ``order``, the user
    of smallest pooled dominant share ``x[n] mu[n] / phi[n]`` (Kesidis et al., Table II)."""
    state = FillState(scenario, mode)
    per_task = _dominant_share(state, respect_placement=False)
    return _fill_servers(state, _times_total(per_task), rng, order)


def rrr_tsf(scenario: Scenario, mode: Mode, rng: np.random.Generator, *,
            order: ServerOrder = "round-robin") -> IntArray:
    """TSF under randomised round robin: the server by ``order``, the user of smallest task
    share ``x[n] / (phi[n] gamma_n)``, ``gamma_n`` ignoring placement (Kesidis et al., Table II,
    "TSF")."""
    state = FillState(scenario, mode)
    scale = task_share_scale(scenario, respect_placement=False)
    per_task = np.where(scale > 0, 1.0 / np.where(scale > 0, scale, 1.0), np.inf)
    return _fill_servers(state, _times_total(per_task), rng, order)


def _times_total(per_task: FloatArray) -> Column:
    """A criterion the same at every server: ``x[n] per_task[n]``."""

    def column(s: FillState, i: int) -> FloatArray:
        return np.asarray(s.x * per_task, dtype=float)

    return column
