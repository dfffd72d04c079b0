"""What bundles are worth: the uniform split (sharing incentive) and other users' bundles (envy).

Two reference points of fairness, used both by the property checkers (:mod:`properties`) and by
the policies that impose the properties as constraints (:mod:`cru`):

* **the uniform split** gives user n the share ``phi[n] / sum(phi)`` of every server (eligible
  or not) and of every external resource.  Non-wasteful, it runs ``X[n, i] = t[n] * frac[n] *
  gamma[n, i]`` tasks: ``frac[n] * gamma[n, i]`` tasks fill n's share of server i on n's
  dominant resource there (TDM: n's share of the server's time), and ``t[n] <= 1`` scales the
  row down to n's share of the external resources and to its backlog.  Its totals are the
  floor of sharing incentive (TSF-ER paper, Definition 6, weighted as PS-DSF's section II-A).
* **bundle values**: what one task's worth of user m's bundle is worth to user n, in n's tasks.
  At server i, m's task holds ``c[m, i, :]``, worth ``min_r c[m, i, r] / c[n, i, r]`` tasks to n
  (over the resources n uses; 0 if n may not use server i).  TDM: m's task is ``1 / gamma[m, i]``
  of the server's time, worth ``gamma[n, i] / gamma[m, i]`` tasks to n.  Of an external
  resource q, m's task holds ``e[m, q]``, worth ``e[m, q] / e[n, q]`` tasks to n; n's tasks are
  limited by every resource it needs, so m's whole bundle is worth (TSF-ER paper, eq. (1))

      U[n, m] = min(sum_i value[n, (m, i)] X[m, i],  external[n, m] * x[m]),

  with ``external[n, m] = min_q e[m, q] / e[n, q]`` over the external resources n needs
  (``inf`` when it needs none).  Both terms are linear in m's allocation; their minimum is not,
  unless one of them is below the other for every allocation (always so in the TSF-ER paper's
  model, where both are proportional to ``x[m]``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from psdsf_dist.model.scenario import Mode, Scenario

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

CHUNK = 4096  # (user, server) pairs valued at a time, to bound memory at N x CHUNK x M


def uniform_split(scenario: Scenario) -> FloatArray:
    """N x K: the uniform split as a non-wasteful task allocation (feasible in RDM and TDM)."""
    frac = scenario.weight / scenario.weight.sum()
    alone = frac[:, None] * scenario.gamma
    total = alone.sum(axis=1)
    tasks = uniform_split_tasks(scenario)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(total > 0, tasks / total, 0.0)
    return np.asarray(alone * t[:, None])


def uniform_split_tasks(scenario: Scenario) -> FloatArray:
    """N: tasks under the uniform split ``phi[n] / sum(phi)`` of everything, capped."""
    return split_tasks(scenario)


def split_tasks(scenario: Scenario, alone: FloatArray | None = None) -> FloatArray:
    """N: :func:`uniform_split_tasks`, with ``alone`` (N) the tasks each user runs on its share
    of the servers if not ``phi[n] / sum(phi) * sum_i gamma[n, i]`` (task groups), then limited
    by its share of the external resources and its cap."""
    frac = scenario.weight / scenario.weight.sum()
    tasks = frac * scenario.gamma.sum(axis=1) if alone is None else alone
    E = scenario.external_capacity
    if len(E):
        e = scenario.external_demand
        with np.errstate(divide="ignore", invalid="ignore"):
            limit = np.where(e > 0, frac[:, None] * E[None, :] / e, np.inf).min(axis=1)
        tasks = np.minimum(tasks, limit)
    return np.asarray(np.minimum(tasks, scenario.max_tasks))


def bundle_values(
    scenario: Scenario, mode: Mode, user: IntArray, server: IntArray
) -> FloatArray:
    """N x P: ``V[n, p]`` = tasks user n runs with one task's bundle of ``user[p]`` at
    ``server[p]`` (every pair must be eligible; 0 where n may not use the server)."""
    N = scenario.num_users
    P = len(user)
    V = np.zeros((N, P))
    gamma = scenario.gamma
    if mode == "tdm":
        with np.errstate(divide="ignore", invalid="ignore"):
            V[:] = gamma[:, server] / gamma[user, server][None, :]
        return V
    for lo in range(0, P, CHUNK):
        p = slice(lo, min(lo + CHUNK, P))
        srv = server[p]
        cons = scenario.consumption_tensor(mode, srv)  # P' x N x M
        mine = cons[np.arange(len(srv)), user[p], :]  # P' x M
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(cons > 0, mine[:, None, :] / cons, np.inf).min(axis=2)  # P' x N
        ratio[~np.isfinite(ratio)] = 0.0
        V[:, p] = np.where(gamma[:, srv] > 0, ratio.T, 0.0)
    return V


def external_values(scenario: Scenario) -> FloatArray:
    """N x N: tasks n runs per task of m's external bundle (``inf`` if n needs none of it)."""
    e = scenario.external_demand  # N x Q
    N = scenario.num_users
    if e.shape[1] == 0:
        return np.full((N, N), np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(e[:, None, :] > 0, e[None, :, :] / e[:, None, :], np.inf)
    return np.asarray(q.min(axis=2))
