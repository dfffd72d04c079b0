"""The sites' slots shared by the per-server protocol itself while jobs come and go.

The allocated simulator (:mod:`psdsf_dist.jobs.allocated`) asks a policy for the active jobs'
allocation whenever something changes.  Driven by the protocol instead, nobody solves
anything: every site is a server of the protocol that, once per period ``T`` of simulated
time, runs its update rule on the columns of the others as it last observed them, and the
job simulator starts whole tasks from the columns the servers hold at that moment.

The jobs are the protocol's users, seen as the ``psdsf`` policy sees them
(:func:`~psdsf_dist.jobs.allocated.job_scenario`: one resource, ``slots``; a job is placed on
the sites of its task groups, its backlog is its unfinished tasks).  A job's arrival is a user
joining, its completion a user leaving, and every task that starts or ends changes a backlog
or a placement: :meth:`ProtocolShare.follow` takes each new set of jobs as the coordinator's
membership table would be taken by the servers — a server keeps its column and its rule's
memory (:meth:`~psdsf_dist.protocol.update_rule.RuleState.selected`) for the jobs that stay,
a job that arrives starts with nothing anywhere, one that left is forgotten.  Its new view
applies from the next update; until then a newly arrived job holds no slots (the deployment
rule still runs its tasks on slots no other job wants).

A period's update (:meth:`ProtocolShare.round`) is the protocol's lock-step round, the one the
simulator's snapshot gossip model and the rule studies run
(:func:`~psdsf_dist.simulator.lockstep.update_on_snapshot`): all servers at once, each on the
columns observed ``1 + delay / T`` periods before (its own as it is now), the servers holding,
raising and lowering each user counted from the same observation.  Every server acts in every
round, so there are no slots: the class rule runs ``split``, as in
:func:`psdsf_dist.simulator.lockstep.run`.  The allocation a round leaves is checked against
the paper's certificate for the jobs of that moment (``rtol`` of the config): a run reports in
how many rounds the protocol's allocation was PS-DSF, and how far from it it was otherwise —
the price of a protocol that moves at its own pace while the jobs change under it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from psdsf_dist.core.certificate import certify_columns
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.update_rule import RuleState, ServerView, UpdateRule, server_view
from psdsf_dist.simulator.lockstep import Snapshot, update_on_snapshot

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass
class ProtocolShare:
    """The protocol's servers, one per site, over the jobs of the moment (see the module
    docstring).  ``columns[p, j]``: slots server ``j`` gives the ``p``-th job of ``jobs``."""

    config: ProtocolConfig
    num_sites: int
    rule: UpdateRule = field(init=False)
    jobs: list[int] = field(default_factory=list)
    columns: FloatArray = field(init=False)
    states: list[RuleState] = field(init=False)
    views: list[ServerView] = field(default_factory=list)
    scenario: Scenario | None = None
    history: deque[FloatArray] = field(init=False)
    """The observations a round may read, oldest first (one per period, rows as ``jobs``)."""
    residuals: list[float] = field(default_factory=list)
    """The certificate's residual after each round (0: certified)."""
    held: list[bool] = field(default_factory=list)
    """After each round: whether the allocation was PS-DSF for the jobs of that moment."""

    def __post_init__(self) -> None:
        self.config.check()
        self.rule = self.config.make_rule()
        self.columns = np.zeros((0, self.num_sites))
        self.states = [self.rule.initial_state(0) for _ in range(self.num_sites)]
        self.history = deque([self.columns], maxlen=self.lag + 1)

    @property
    def lag(self) -> int:
        """Periods between an observation and the round that reads it (1 + delay / T)."""
        return 1 + round(self.config.delay / self.config.period)

    def follow(self, jobs: list[int], scenario: Scenario) -> None:
        """The jobs are now ``jobs`` (ids; row ``p`` of ``scenario`` is job ``jobs[p]``):
        every server keeps what it held and remembered of the jobs that stay, new jobs start
        empty, the views are the new scenario's."""
        if scenario.num_users != len(jobs) or scenario.num_servers != self.num_sites:
            raise ValueError(f"a scenario of {len(jobs)} jobs on {self.num_sites} sites "
                             f"expected, got {scenario.num_users} x {scenario.num_servers}")
        where = {job: p for p, job in enumerate(self.jobs)}
        rows = np.array([where.get(job, -1) for job in jobs], dtype=np.int64)
        known = rows >= 0

        def kept(X: FloatArray) -> FloatArray:
            out = np.zeros((len(jobs), self.num_sites))
            out[known] = X[rows[known]]
            return out

        self.columns = kept(self.columns)
        self.history = deque((kept(X) for X in self.history), maxlen=self.lag + 1)
        self.states = [s.selected(rows) for s in self.states]
        self.jobs = list(jobs)
        self.scenario = scenario
        mode = self.config.mode
        self.views = [server_view(scenario, j, mode) for j in range(self.num_sites)]

    def round(self) -> FloatArray:
        """One period: every server updates at once on the observation ``lag`` periods old;
        returns the new columns (jobs x sites)."""
        self.history.append(self.columns)
        back = len(self.history) - self.lag  # the observation the servers read
        seen = Snapshot.of(self.history[max(back, 0)],
                           self.history[back - 1] if back >= 1 else None)
        new = np.empty_like(self.columns)
        for j in range(self.num_sites):
            new[:, j], self.states[j] = update_on_snapshot(
                self.rule, self.states[j], self.views[j], self.columns[:, j], seen, j,
                staleness=float(self.lag - 1), where=f"site {j}")
        self.columns = new
        self._certify()
        return new

    @property
    def rounds(self) -> int:
        return len(self.residuals)

    @property
    def certified(self) -> int:
        """Rounds after which the allocation was PS-DSF for the jobs of the moment."""
        return sum(self.held)

    def _certify(self) -> None:
        sc = self.scenario
        if sc is None or sc.num_users == 0:
            self.residuals.append(0.0)
            self.held.append(True)
            return
        cert = certify_columns(sc, self.columns, self.columns.sum(axis=1),
                               np.arange(self.num_sites, dtype=np.int64),
                               mode=self.config.mode, rtol=self.config.rtol, explain=True)
        self.residuals.append(float(cert.residual))
        self.held.append(bool(cert.holds))
