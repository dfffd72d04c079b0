"""Progressive filling with whole tasks: one task at a time, the engine every whole-task policy
shares.

Every whole-task scheduler of the source papers is the same loop (Kesidis et al. 2017, section
IV; Wang, Li and Liang, DRFH, section V-B): while some task still fits, pick one (user, server)
pair by a fairness criterion and place one whole task of the user there, never revoking a task.
They differ only in *how* the pair is picked, and this module implements the three orders once:

* **pair order** (:func:`fill_pairs`): the pair with the smallest criterion ``V[n, i]`` among
  the pairs where a task fits, ties to the lowest user, then the lowest server (PS-DSF, rPS-DSF);
* **user order** (:func:`fill_users`): the user with the smallest share ``s[n]`` among the users
  with a task that fits somewhere, then, for it, the fitting server with the smallest preference
  ``P[n, i]`` (First-Fit and Best-Fit DRFH, BF-DRF);
* **server order** (:func:`fill_round_robin`): randomised round robin - round after round,
  the servers that still take a task, in an order randomly permuted each round, each offer one
  task to their fitting user with the smallest ``V[n, i]`` (RRR, the default of Mesos; section
  VI of Kesidis et al.: "the server order is randomly permuted in each round");
  :func:`fill_random_server` is the variant that draws the server afresh at every step.

A *criterion* gives one server's column of values from the current state.  Every criterion
here depends on the user's total only through a common factor of its row (pair order: ``V =
x[n] A[n, i]``) or not at all, so placing a task on server ``i`` changes only column ``i`` (its
residual moved) of the matrix the engine keeps, with each row's minimum over blocks of about
``sqrt(K)`` servers: a step costs ``O(N (M + sqrt(K)))`` numpy work.  This is exact: a pair's
value changes only when its server's residual does, and a pair that stops fitting never fits
again (residuals only shrink, totals only grow), so a server nobody fits on is dropped for good
(``tests/policies/test_whole_tasks.py`` checks every choice against a full recomputation).

Feasibility is by construction: a task is placed only where its per-task consumption (RDM: the
demand, scaled where a ``gamma`` override was given; TDM: a share ``1/gamma`` of the server's
time, :meth:`Scenario.consumption_tensor`) fits the residual capacity (within ``FIT_RTOL`` of
the capacity, for round-off), only on eligible servers (``gamma > 0``) and only while the user is
below ``floor(max_tasks)``.  The loop stops when no task fits: the result is *maximal* - no
user below its backlog has a task that fits anywhere - though, as bin packing, not Pareto
optimal in general.  Every result is an integer N x K matrix.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from psdsf_dist.model.scenario import Mode, Scenario

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

FIT_RTOL = 1e-9
"""A task fits when its consumption is within the residual plus this share of the capacity."""


def whole_caps(max_tasks: FloatArray) -> FloatArray:
    """N: the most whole tasks each user may run, ``floor(max_tasks)`` (``inf`` stays)."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(max_tasks), np.floor(max_tasks + 1e-9), np.inf)


class FillState:
    """Residual capacities, the integer allocation and which (user, server) pairs fit."""

    def __init__(self, scenario: Scenario, mode: Mode, start: IntArray | None = None) -> None:
        self.scenario = scenario
        self.mode = mode
        cons = scenario.consumption_tensor(mode)  # K x N x M'
        self.eligible: BoolArray = np.asarray(scenario.gamma > 0)
        self.cons: FloatArray = np.where(self.eligible.T[:, :, None], cons, 0.0)
        self.capacity: FloatArray = scenario.server_capacity(mode)  # K x M'
        self.tol: FloatArray = FIT_RTOL * self.capacity
        self.limit: FloatArray = whole_caps(scenario.max_tasks)
        N, K = scenario.num_users, scenario.num_servers
        self.X: IntArray = np.zeros((N, K), dtype=np.int64)
        if start is not None:
            self.X = np.array(start, dtype=np.int64, copy=True)
        self.x: IntArray = self.X.sum(axis=1)
        used = np.einsum("nk,knm->km", self.X.astype(float), self.cons)
        self.residual: FloatArray = self.capacity - used
        self.fit: BoolArray = self._fit_all()

    def _fit_all(self) -> BoolArray:
        ok = (self.cons <= self.residual[:, None, :] + self.tol[:, None, :]).all(axis=2)  # K x N
        return np.asarray(ok.T & self.eligible & (self.x < self.limit)[:, None])

    def fit_column(self, i: int) -> BoolArray:
        """N: whose task fits on server ``i`` now."""
        ok = (self.cons[i] <= self.residual[i] + self.tol[i]).all(axis=1)
        return np.asarray(ok & self.eligible[:, i] & (self.x < self.limit))

    def place(self, n: int, i: int) -> None:
        """One task of user ``n`` on server ``i`` (the caller checked that it fits)."""
        self.X[n, i] += 1
        self.x[n] += 1
        self.residual[i] -= self.cons[i, n]
        self.fit[:, i] = self.fit_column(i)
        if self.x[n] >= self.limit[n]:
            self.fit[n, :] = False


Column = Callable[[FillState, int], FloatArray]
"""A criterion: server ``i`` -> its N values, given the state (a column at a time, see above)."""


class _RowMin:
    """A criterion's N x K matrix, ``inf`` where no task fits, with each row's minimum and the
    lowest server index attaining it.

    Servers are grouped in blocks of about ``sqrt(K)`` with each block's row minima kept, so a
    row whose best server got worse is re-scanned over the block minima, not over all K servers:
    a step costs ``O(N sqrt(K))`` however many users shared that best server.
    """

    def __init__(self, state: FillState, column: Column) -> None:
        self.state = state
        self.column = column
        N, K = state.X.shape
        self.B = max(1, int(np.ceil(np.sqrt(K))))
        nb = -(-K // self.B)
        V = np.full((N, nb * self.B), np.inf)  # padded with inf to whole blocks
        for i in range(K):
            V[:, i] = self._masked(i)
        self.V = V
        blocks = V.reshape(N, nb, self.B)
        within = np.argmin(blocks, axis=2)  # N x nb
        self.bmin: FloatArray = np.take_along_axis(blocks, within[:, :, None], axis=2)[:, :, 0]
        self.barg: IntArray = (within + self.B * np.arange(nb)[None, :]).astype(np.int64)
        b = np.argmin(self.bmin, axis=1)
        self.arg: IntArray = self.barg[np.arange(N), b]
        self.min: FloatArray = self.bmin[np.arange(N), b]

    def _masked(self, i: int) -> FloatArray:
        return np.where(self.state.fit[:, i], self.column(self.state, i), np.inf)

    def update(self, n: int, i: int) -> None:
        """After a task of ``n`` was placed on ``i``: column ``i`` changed, and row ``n`` is
        gone if ``n`` reached its backlog."""
        new = self._masked(i)
        self.V[:, i] = new
        b = i // self.B
        lo = b * self.B
        block = self.V[:, lo:lo + self.B]
        within = np.argmin(block, axis=1)
        self.bmin[:, b] = block[np.arange(len(within)), within]
        self.barg[:, b] = lo + within
        worse = np.flatnonzero((self.arg == i) & (new > self.min))
        better = (new < self.min) | ((new == self.min) & (i < self.arg))
        self.min[better] = new[better]
        self.arg[better] = i
        if len(worse):
            sub = self.bmin[worse]
            a = np.argmin(sub, axis=1)  # first block of the minimum: its lowest index
            self.arg[worse] = self.barg[worse, a]
            self.min[worse] = sub[np.arange(len(worse)), a]
        if not self.state.fit[n].any():
            self.V[n] = np.inf
            self.bmin[n] = np.inf
            self.min[n] = np.inf


def fill_pairs(state: FillState, per_task: Column) -> IntArray:
    """Pair order: the fitting pair of smallest ``V[n, i] = x[n] A[n, i]``, ``A`` given by
    ``per_task``; ties to the lowest user, then the lowest server.

    Scaling a row by ``x[n] > 0`` keeps its order, so each row's best server is that of ``A``
    and a placement only moves column ``i``; a user with no task yet has ``V = 0`` on every
    fitting server, and the tie goes to the first of them.
    """
    if state.X.size == 0:
        return state.X
    rows = _RowMin(state, per_task)
    while True:
        fits = np.isfinite(rows.min)
        with np.errstate(invalid="ignore"):  # 0 * inf where nothing fits: masked
            value = np.where(fits, np.where(state.x > 0, state.x * rows.min, 0.0), np.inf)
        n = int(np.argmin(value))
        if not fits[n]:
            return state.X
        i = int(rows.arg[n]) if state.x[n] > 0 else int(np.argmax(state.fit[n]))
        state.place(n, i)
        rows.update(n, i)


def fill_users(
    state: FillState, share: Callable[[FillState], FloatArray], preference: Column
) -> IntArray:
    """User order: the user of smallest ``share`` with a fitting server, on its fitting server
    of smallest preference; ties to the lowest user, then server."""
    if state.X.size == 0:
        return state.X
    rows = _RowMin(state, preference)
    while True:
        s = np.where(np.isfinite(rows.min), share(state), np.inf)
        n = int(np.argmin(s))
        if not np.isfinite(s[n]):
            return state.X
        i = int(rows.arg[n])
        state.place(n, i)
        rows.update(n, i)


def fill_round_robin(state: FillState, crit: Column, rng: np.random.Generator) -> IntArray:
    """Server order, randomised round robin: each round visits every server that still takes a
    task once, in a fresh random permutation, and each gives one task to its fitting user of
    smallest ``crit`` (ties to the lowest user; a server nobody fits on at its turn passes);
    after the round the servers nobody fits on leave the rotation for good (residuals only
    shrink, totals only grow)."""
    active = np.flatnonzero(state.fit.any(axis=0))
    while len(active):
        for i in rng.permutation(active).tolist():
            v = np.where(state.fit[:, i], crit(state, i), np.inf)
            n = int(np.argmin(v))
            if np.isfinite(v[n]):
                state.place(n, i)
        active = active[state.fit[:, active].any(axis=0)]
    return state.X


def fill_random_server(state: FillState, crit: Column, rng: np.random.Generator) -> IntArray:
    """Server order with the server drawn afresh at every step, uniformly among those that still
    take a task (not round robin: a server may be drawn twice before another once); it gives
    one task to its fitting user of smallest ``crit`` (ties to the lowest user); a server
    nobody fits on leaves the pool for good."""
    active = np.flatnonzero(state.fit.any(axis=0)).tolist()
    while active:
        j = int(rng.integers(len(active)))
        i = active[j]
        v = np.where(state.fit[:, i], crit(state, i), np.inf)
        n = int(np.argmin(v))
        if not np.isfinite(v[n]):
            active[j] = active[-1]  # order within the pool is irrelevant: draws are uniform
            active.pop()
            continue
        state.place(n, i)
    return state.X
