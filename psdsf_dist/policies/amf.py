"""AMF and GAMF: aggregate max-min fairness across servers (Guan thesis, chapters 4 and 5).

The thesis's jobs have tasks bound to sites: AMF (chapter 4) a count ``d[i, j]`` per site, GAMF
(chapter 5) a count ``d[i, k]`` per task group G_k of sites any one of which may run them (the
scenario fields ``server_tasks`` and ``task_groups``, :mod:`psdsf_dist.model.task_groups`).  Both
pool every site and make the *aggregate* allocation max-min fair: the job-wise vector
``A_i = sum_j a[i, j]`` is the max-min fair vector (Definition 4.1) over the feasible and
rational allocations, (4.1)-(4.2), resp. (5.1)-(5.3) - :func:`group_model` builds exactly that
set.  The set is compact and convex (Lemmas 4.1-4.2, 5.1-5.2), so the max-min fair vector
exists, is unique, and equals the leximin optimum; :func:`progressive_fill` computes it (one LP
per level, as the thesis's Algorithms 5 and 7 do: maximise the least unfixed total, fix the jobs
that cannot exceed it).

The thesis has one resource, computing slots.  Here a task needs a vector of resources, and
"the aggregate amount of resources a job receives" is measured as in C-DRFH: tasks times the
task's dominant share of the whole cluster pooled, ``x[n] * max_r D[n, r] / sum_i C[i, r]``
(weighted: divided by ``phi[n]``).  With one resource this is the thesis's slot count, so the
thesis's examples and theorems carry over unchanged.  On a scenario declaring no task counts
(every user unbound: unlimited tasks at every eligible server), ``amf`` and ``gamf`` are
therefore exactly ``c-drfh``.

* ``gamf``: groups as declared.  ``amf``: each task bound to one server; a group of several
  servers is bound to its first one (chapter 5's AMF baseline, section 5.5: "each task of a job
  must be executed at its associated site").
* ``amf-si`` (SIG-AMF, section 4.4.4): also ``a[i, j] >= min(d[i, j], u_j / n)`` at every server,
  (4.3)-(4.4), where ``u_j / n`` is user n's share ``phi[n] / sum(phi)`` of server j, in tasks
  ``phi[n] / sum(phi) * gamma[n, j]`` (an unbound user's ``d`` is unlimited; a user whose
  backlog ``max_tasks`` is below the sum gets its backlog as an aggregate floor instead).
* ``gamf-si`` (SIG-GAMF, section 5.3.4): also ``A_i >= X_i``, (5.24), where ``X_i`` is what job i
  could run owning that share of every server, the LP (5.22)-(5.23)
  (:func:`static_share_tasks`).
Floors of different users are jointly feasible (each within its own share of every server), so
the restricted set is still compact, convex and non-empty.  Pareto efficiency, envy-freeness
and strategy-proofness are Theorems 4.3-4.5 and 5.2-5.4, proved (and asserted for the ``-si``
versions) in the thesis's model - one resource, each task one slot - where the tests check them;
sharing incentive holds only for the ``-si`` versions (Theorem 4.6 is the counterexample for the
others).  Outside that model, when users turn a server into tasks at different rates, SIG-AMF's
per-server floors can cost Pareto optimality (tests/policies/test_amf.py has a witness).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from psdsf_dist.errors import SolverError
from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies.drfh import global_dominant_share
from psdsf_dist.policies.feasibility import LinearModel, group_model
from psdsf_dist.policies.lp import solve_lp
from psdsf_dist.policies.progressive import Filling, progressive_fill

FloatArray = npt.NDArray[np.float64]

AMF_POLICIES: tuple[str, ...] = ("amf", "amf-si", "gamf", "gamf-si")
# Sharing-incentive floors are lowered by this relative amount: when the floors of all users
# fill a server exactly, round-off must not make the LP infeasible.
FLOOR_SLACK = 1e-9


def task_group_view(scenario: Scenario, policy: str) -> Scenario:
    """The scenario's task groups as ``policy`` sees them: ``gamf``/``gamf-si`` as declared,
    ``amf``/``amf-si`` each bound to its first server, any other policy none at all."""
    groups = scenario.task_groups
    if groups is None or policy in ("gamf", "gamf-si"):
        return scenario
    if policy in ("amf", "amf-si"):
        if groups.single_server():
            return scenario
        return dataclasses.replace(scenario, task_groups=groups.first_server_only())
    return dataclasses.replace(scenario, task_groups=None)


def share(scenario: Scenario) -> FloatArray:
    """N: each user's static share of every server, ``phi[n] / sum(phi)``."""
    return np.asarray(scenario.weight / scenario.weight.sum())


def static_share_tasks(scenario: Scenario) -> FloatArray:
    """N: tasks each user could run owning only its share of every server, within its task
    groups and backlog: the thesis's LP (5.22)-(5.23), one independent block per bound user.
    An unbound user gets ``share * sum_i gamma[n, i]``, the uniform split of
    :func:`psdsf_dist.policies.properties.uniform_split_tasks`."""
    frac = share(scenario)
    out = np.minimum(frac * scenario.gamma.sum(axis=1), scenario.max_tasks)
    groups = scenario.task_groups
    if groups is None or not groups.bound.any():
        return np.asarray(out)
    gm = group_model(scenario, "tdm")  # one time row per server: the share is of its time
    model = gm.model
    R = gm.capacity_rows
    blocks = []
    rhs = []
    users = [n for n in np.flatnonzero(groups.bound).tolist() if (model.user == n).any()]
    out[groups.bound] = 0.0  # a bound user without a variable (no task it can run) runs none
    if not users:
        return np.asarray(out)
    for n in users:
        cols = np.flatnonzero(model.user == n)
        block = model.A[:, cols]
        rows = np.flatnonzero(np.diff(block.indptr) > 0)
        b = np.where(rows < R, frac[n], 1.0)
        if np.isfinite(scenario.max_tasks[n]):
            block = sp.vstack([block[rows], sp.csr_matrix(np.ones((1, len(cols))))])
            b = np.append(b, scenario.max_tasks[n])
        else:
            block = block[rows]
        blocks.append(block)
        rhs.append(b)
    A = sp.block_diag(blocks, format="csr")
    res = solve_lp(-np.ones(A.shape[1]), A, np.concatenate(rhs))
    if not res.optimal:
        raise SolverError(f"static-share LP failed: {res.message}")
    z = res.x
    start = 0
    for n, block in zip(users, blocks, strict=True):
        width = block.shape[1]
        out[n] = float(z[start: start + width].sum())
        start += width
    return np.asarray(out)


def amf(scenario: Scenario, mode: Mode, policy: str) -> tuple[FloatArray, Filling]:
    """One of :data:`AMF_POLICIES`: N x K tasks and the filling."""
    view = task_group_view(scenario, policy)
    model = group_model(view, mode).model
    if policy == "amf-si":
        per_server, total = pair_floors(view)
        model = _with_floors(model, per_server, per_server=True)
        model = _with_floors(model, total[:, None], per_server=False)
    elif policy == "gamf-si":
        model = _with_floors(model, static_share_tasks(view)[:, None], per_server=False)
    mu = global_dominant_share(view, respect_placement=False)
    ok = np.isfinite(mu) & (mu > 0)
    scale = np.where(ok, view.weight / np.where(ok, mu, 1.0), 0.0)
    filling = progressive_fill(model, scale, view.max_tasks)
    return model.allocation(filling.z), filling


def pair_floors(scenario: Scenario) -> tuple[FloatArray, FloatArray]:
    """SIG-AMF's floors (``scenario`` as ``amf-si`` sees it): N x K per-server floors (4.3)-(4.4),
    ``min(d[n, i], share * gamma[n, i])``, and N aggregate floors.  A user whose per-server
    floors sum above its backlog ``max_tasks`` (a cap the thesis does not have) needs no
    particular server to reach what its share would give it, its backlog: it gets that as an
    aggregate floor instead (binding it to servers would cost others for nothing)."""
    floor = share(scenario)[:, None] * scenario.gamma
    groups = scenario.task_groups
    if groups is not None:
        bound = groups.bound
        floor[bound] = np.minimum(floor[bound],
                                  groups.per_server_tasks(scenario.num_servers)[bound])
    capped = floor.sum(axis=1) > scenario.max_tasks
    floor[capped] = 0.0
    return floor, np.where(capped, scenario.max_tasks, 0.0)


def _with_floors(model: LinearModel, floor: FloatArray, *, per_server: bool) -> LinearModel:
    """The model with rows ``-(tasks of n [on i]) / floor <= -1`` for every positive floor."""
    V = model.num_variables
    user, server = model.user, model.server
    f = floor[user, server] if per_server else floor[user, 0]
    pair = user * model.num_servers + server if per_server else user
    keys, row = np.unique(pair[f > 0], return_inverse=True)
    if not len(keys):
        return model
    vs = np.flatnonzero(f > 0)
    need = f[vs] * (1.0 - FLOOR_SLACK)
    rows = sp.csr_matrix((-1.0 / need, (np.asarray(row).ravel(), vs)), shape=(len(keys), V))
    return dataclasses.replace(model, A=sp.vstack([model.A, rows], format="csr"),
                               b=np.concatenate([model.b, -np.ones(len(keys))]))
