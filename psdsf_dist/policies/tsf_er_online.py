"""Online TSF-ER with indivisible tasks: the TSF-ER paper's Algorithm 2 (:class:`OnlineTsfEr`),
and the paper's rounding of a divisible rule it is compared with (:class:`RoundedFluid`).

Whole tasks of the users are queued and placed one at a time, never more than fit: a server's
residual capacity must hold the task's demand and the external resources (pooled, outside every
server) its external demand.  The scheduler keeps each user's *active task share* ``s[j] =
running[j] / eta[j]``, with ``eta[j]`` the tasks j could run with every server and external
resource to itself (:func:`~psdsf_dist.policies.tsf_er.monopoly_tasks`, the paper's eq. (6)).

* ``AllocateFromQueues`` (:meth:`OnlineTsfEr.allocate_from_queues`): while some user has a
  queued task that fits, take the users of least ``s[j]``, among them the one of least
  ``1 / eta[j]`` (the smallest step in share), and put its first queued task on the fitting
  server of least ``sum_r (a[s, r] - d[j, r])^2`` (``a``: the server's residual), then raise
  ``s[j]`` by ``1 / eta[j]``.  Remaining ties go to the lowest user, then server index.
* ``TaskArrival`` (:meth:`arrive`): queue the tasks, allocate from the queues (nothing running
  is revoked).
* ``TaskDeparture`` (:meth:`depart`): free the task's resources, lower ``s[j]``, allocate.
* ``Reallocation`` (:meth:`reallocate`): suspend every running task (back to the *front* of its
  user's queue, lowest task id first: ids are given in arrival order, so the oldest work resumes
  first), zero the shares, free
  everything, allocate from the queues.  The caller runs it at the start of each reallocation
  slot in which some task arrived or departed, as the paper says.

Shares are kept as integer task counts and divided when compared, so equal shares compare equal
(accumulating ``1 / eta`` in floating point would break the paper's ties).  Tasks finishing
together are released together and then allocated once, as ``TaskDeparture`` takes a set.
The scheduler knows only demands and queues; task durations, slot lengths and suspend-resume
overheads belong to the caller that drives it through time.  Every decision is a pure function
of the state: the same calls give the same placements.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from psdsf_dist.model.scenario import Scenario
from psdsf_dist.policies.tsf_er import monopoly_tasks
from psdsf_dist.policies.whole_tasks import FIT_RTOL

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

SHARE_RTOL = 1e-12
"""Shares within this relative distance of the least are ties (``running / eta`` computed in
floating point: equal counts and ``eta`` give equal shares, others differ by far more)."""


@dataclass(frozen=True)
class Placement:
    """Task ``task`` of user ``user`` started on ``server``."""

    user: int
    task: int
    server: int


class OnlineTsfEr:
    """Algorithm 2's state: residual capacities, queues, running tasks and shares.

    ``scenario`` fixes the servers (RDM capacities), the external resources and every user that
    may ever arrive (its demand, external demand and ``eta``); placement constraints are
    honoured (a task goes only to a server with ``gamma > 0`` for its user).
    """

    def __init__(self, scenario: Scenario) -> None:
        self.capacity: FloatArray = np.array(scenario.capacity, dtype=float)  # K x M
        self.demand: FloatArray = np.array(scenario.demand, dtype=float)  # N x M
        self.eligible = np.asarray(scenario.gamma > 0)  # N x K
        self.ext_capacity: FloatArray = np.array(scenario.external_capacity, dtype=float)
        self.ext_demand: FloatArray = np.array(scenario.external_demand, dtype=float)  # N x Q
        self.eta: FloatArray = monopoly_tasks(scenario, respect_placement=True)
        N = len(self.demand)
        self.residual: FloatArray = self.capacity.copy()
        self.ext_residual: FloatArray = self.ext_capacity.copy()
        self.running: IntArray = np.zeros(N, dtype=np.int64)
        self.queues: list[deque[int]] = [deque() for _ in range(N)]
        self.where: dict[tuple[int, int], int] = {}  # (user, task) -> server
        self._tol = FIT_RTOL * self.capacity
        self._ext_tol = FIT_RTOL * self.ext_capacity

    @property
    def share(self) -> FloatArray:
        """N: the active task shares ``running / eta`` (0 for a user that can run nothing)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(np.where(self.eta > 0, self.running / self.eta, 0.0))

    @property
    def allocation(self) -> IntArray:
        """N x K: running tasks per user and server."""
        X = np.zeros(self.eligible.shape, dtype=np.int64)
        for (j, _), s in self.where.items():
            X[j, s] += 1
        return X

    def fits(self) -> npt.NDArray[np.bool_]:
        """N x K: where one task of each user fits now (external resources included)."""
        ok = (self.demand[:, None, :] <= self.residual[None, :, :]
              + self._tol[None, :, :]).all(axis=2) & self.eligible
        if len(self.ext_capacity):
            ext_ok = np.asarray((self.ext_demand <= self.ext_residual[None, :]
                                 + self._ext_tol[None, :]).all(axis=1))
            ok = ok & ext_ok[:, None]
        return np.asarray(ok)

    def allocate_from_queues(self) -> list[Placement]:
        """Algorithm 2's ``AllocateFromQueues``: the tasks started, in order.

        Placing a task only shrinks server m's residual and the external ones, so only column
        m of the fit matrix and the external check are recomputed (fits only get lost)."""
        out: list[Placement] = []
        queued = np.array([len(q) for q in self.queues]) > 0
        can = queued & (self.eta > 0)
        inv_eta = np.where(self.eta > 0, 1.0 / np.where(self.eta > 0, self.eta, 1.0), np.inf)
        fit = self.fits() & can[:, None]
        share = self.share
        ext = len(self.ext_capacity) > 0
        while True:
            feasible = fit.any(axis=1)
            if not feasible.any():
                return out
            s = np.where(feasible, share, np.inf)
            least = s <= s.min() * (1 + SHARE_RTOL)  # J_min (exact ties stay ties)
            j = int(np.argmin(np.where(least, inv_eta, np.inf)))  # least 1/eta, lowest index
            ok = np.flatnonzero(fit[j])
            dist = ((self.residual[ok] - self.demand[j][None, :]) ** 2).sum(axis=1)
            m = int(ok[int(np.argmin(dist))])
            task = self.queues[j].popleft()
            self.residual[m] -= self.demand[j]
            self.running[j] += 1
            share[j] = self.running[j] * inv_eta[j]
            self.where[j, task] = m
            out.append(Placement(j, task, m))
            if not self.queues[j]:
                fit[j] = False
            fit[:, m] &= (self.demand <= self.residual[m] + self._tol[m]).all(axis=1)
            if ext:
                self.ext_residual = self.ext_residual - self.ext_demand[j]
                ext_ok = np.asarray((self.ext_demand <= self.ext_residual
                                     + self._ext_tol).all(axis=1))
                fit &= ext_ok[:, None]

    def arrive(self, user: int, tasks: list[int]) -> list[Placement]:
        """``TaskArrival``: queue the user's tasks (ids unique per user) and allocate."""
        self.queues[user].extend(tasks)
        return self.allocate_from_queues()

    def release(self, user: int, task: int) -> None:
        """Free a running task's resources (no allocation); raises KeyError if not running."""
        server = self.where.pop((user, task))
        self.residual[server] += self.demand[user]
        if len(self.ext_capacity):
            self.ext_residual = self.ext_residual + self.ext_demand[user]
        self.running[user] -= 1

    def depart(self, tasks: list[tuple[int, int]]) -> list[Placement]:
        """``TaskDeparture``: these (user, task) finished; free their resources and allocate."""
        for user, task in tasks:
            self.release(user, task)
        return self.allocate_from_queues()

    def withdraw(self, user: int) -> list[int]:
        """Remove a user's queued tasks (e.g. a job cancelled); returns them."""
        gone = list(self.queues[user])
        self.queues[user].clear()
        return gone

    def reallocate(self) -> tuple[list[tuple[int, int]], list[Placement]]:
        """``Reallocation``: suspend every running task (each back to the front of its user's
        queue, oldest first), reset shares and resources, allocate from the queues.  Returns
        the suspended (user, task) pairs and the placements."""
        suspended = sorted(self.where.items(), key=lambda kv: kv[0])
        per_user: dict[int, list[int]] = {}
        for (j, task), _ in suspended:
            per_user.setdefault(j, []).append(task)
        for j, tasks in per_user.items():
            self.queues[j].extendleft(reversed(tasks))
        self.where.clear()
        self.running[:] = 0
        self.residual = self.capacity.copy()
        self.ext_residual = self.ext_capacity.copy()
        return [pair for pair, _ in suspended], self.allocate_from_queues()


FluidRule = Callable[[tuple[int, ...]], FloatArray]
"""The active users (ascending) -> an N x K divisible allocation for them (rows of the others
zero), feasible for the servers and external resources."""


class RoundedFluid(OnlineTsfEr):
    """The TSF-ER paper's extension of a divisible rule (MNW, CRU) to indivisible tasks (section
    6.1): at each reallocation every running task is suspended, the rule's divisible allocation
    for the users with tasks (not bounded by their task counts, as in the fluid model) is
    rounded down per server and started as far as the users have tasks, and, if a user arrived
    or left during the slot, tasks are then placed at random - a uniformly drawn (user, server)
    pair among those where a queued task fits - until none fits.  Between reallocations
    nothing is placed: arriving tasks wait for the next one, finished tasks leave their
    resources idle until then.  (The paper's words, "upon arrival or departure of some users
    during each reallocation time slot, the scheduler keeps allocating tasks to the server
    randomly", are read as acting at the slot's reallocation, as the rule itself does.)

    Rounding down keeps the allocation feasible (fewer tasks per server than the feasible
    divisible one, and so of the external resources too).
    """

    def __init__(self, scenario: Scenario, rule: FluidRule, rng: np.random.Generator) -> None:
        super().__init__(scenario)
        self.rule = rule
        self.rng = rng
        self.users_changed = False

    def _active(self) -> tuple[int, ...]:
        return tuple(j for j in range(len(self.queues)) if self.queues[j] or self.running[j])

    def random_fill(self) -> list[Placement]:
        """Place queued tasks on uniformly drawn fitting (user, server) pairs until none fits."""
        out: list[Placement] = []
        while True:
            queued = np.array([len(q) > 0 for q in self.queues])
            pairs = np.argwhere(self.fits() & queued[:, None])
            if not len(pairs):
                return out
            j, server = (int(v) for v in pairs[int(self.rng.integers(len(pairs)))])
            out.append(self._start(j, server))

    def _start(self, j: int, server: int) -> Placement:
        task = self.queues[j].popleft()
        self.residual[server] -= self.demand[j]
        if len(self.ext_capacity):
            self.ext_residual = self.ext_residual - self.ext_demand[j]
        self.running[j] += 1
        self.where[j, task] = server
        return Placement(j, task, server)

    def allocate_from_queues(self) -> list[Placement]:
        """The rule's allocation rounded down, then the random fill if users changed."""
        active = self._active()
        out: list[Placement] = []
        if active:
            X = np.floor(self.rule(active) + 1e-9).astype(np.int64)
            for j in active:
                for server in np.flatnonzero(X[j]).tolist():
                    for _ in range(min(int(X[j, server]), len(self.queues[j]))):
                        out.append(self._start(j, server))
        if self.users_changed:
            out += self.random_fill()
            self.users_changed = False
        return out

    def arrive(self, user: int, tasks: list[int]) -> list[Placement]:
        """A user's tasks arrive: queued until the next reallocation."""
        self.queues[user].extend(tasks)
        self.users_changed = True
        return []

    def depart(self, tasks: list[tuple[int, int]]) -> list[Placement]:
        """Tasks finished: their resources stay idle until the next reallocation."""
        for user, task in tasks:
            self.release(user, task)
            if not self.queues[user] and not self.running[user]:
                self.users_changed = True
        return []
