"""The coordinator's observation step, pure: the servers' reports and the membership in, the
observation and what to do about each server out (``observe_reports(request) -> reply``).

Once per period the coordinator asks every server actor for its hosted servers' reports and
hands them here with the membership table.  The step assembles the allocation from the columns
(a server that did not answer, or is not running, holds nothing and keeps the certificate
from counting as held, as does a server on an older table), checks each column against the
capacities of the table the server had, counts the traffic since the previous observation,
and observes the allocation (:func:`psdsf_dist.protocol.convergence.observe`, as the
simulator does).  It also says which servers need the coordinator: a server not running
without an error was restarted by Ray and must be started again; one that has missed
``MISSES_BEFORE_FAILED`` reports in a row because its actor is gone has failed (or, its node
gone, must be placed again — the actor decides, it knows the nodes).  Lifecycle, spawning,
placement and fault recovery stay in the actor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from psdsf_dist.model.scenario import Scenario
from psdsf_dist.protocol.convergence import Observation, Traffic, observe
from psdsf_dist.protocol.update_rule import is_feasible_column, server_view
from psdsf_dist.runtime.messages import ServerReport
from psdsf_dist.runtime.settings import RunConfig

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

MISSES_BEFORE_FAILED = 3  # reports a gone-for-good actor may miss before it is a failed server


@dataclass(frozen=True)
class ObservationRequest:
    round: int
    time: float
    scenario: Scenario
    """The scenario as it stands (the current table's)."""
    servers_present: BoolArray
    epoch: int
    tables: Mapping[int, Scenario]
    """The scenario of every table handed out so far, by epoch (a column is checked against
    the table its server had)."""
    members: tuple[str, ...]
    """Servers the coordinator runs, in its order."""
    reports: Mapping[str, ServerReport | None]
    """Per member: its report, or None (its actor did not answer)."""
    gone: Mapping[str, int]
    """Per member: reports missed in a row because its actor is dead for good."""
    sent: Mapping[str, tuple[int, int]]
    """Per server: (messages, bytes) it had sent by the previous observation."""
    previous_totals: FloatArray | None
    config: RunConfig


@dataclass(frozen=True)
class ObservationReply:
    observation: Observation
    allocation: FloatArray
    sent: dict[str, tuple[int, int]]
    """Per server: (messages, bytes) sent by now (the next request's ``sent``)."""
    restart: tuple[str, ...] = ()
    """Running no more, without an error: Ray restarted its actor; start it again."""
    failed: tuple[str, ...] = ()
    """Gone for good: a failed server (or one to place again, if its node is gone)."""
    errors: Mapping[str, str] = field(default_factory=dict)
    """Servers whose loop stopped on an error, with the error."""


def observe_reports(request: ObservationRequest) -> ObservationReply:
    scenario = request.scenario
    N, K = scenario.num_users, scenario.num_servers
    X = np.zeros((N, K))
    messages = np.zeros(K)
    bytes_ = np.zeros(K)
    answered = feasible = True
    restart: list[str] = []
    failed: list[str] = []
    errors: dict[str, str] = {}
    sent = dict(request.sent)
    for name in request.members:
        rep = request.reports.get(name)
        if rep is None:
            answered = False
            if request.gone.get(name, 0) >= MISSES_BEFORE_FAILED:
                failed.append(name)
            continue
        if not rep.running:
            answered = False
            if rep.error is not None:
                errors[name] = rep.error
            else:
                restart.append(name)
            continue
        i = scenario.server_names.index(name)
        col = np.zeros(N)
        col[: len(rep.column)] = rep.column[:N]
        X[:, i] = col
        answered &= rep.epoch == request.epoch
        # checked against the table the server acted on; users are only ever appended, so a
        # table older than a user's arrival knows the first entries of the column only
        had = request.tables.get(rep.epoch, scenario)
        own = np.zeros(had.num_users)
        k = min(had.num_users, len(rep.column))
        own[:k] = rep.column[:k]
        feasible &= is_feasible_column(server_view(had, i, request.config.protocol.mode), own)
        before = sent.get(name, (0, 0))
        if rep.messages < before[0]:
            before = (0, 0)  # a new incarnation counts from zero
        messages[i] = rep.messages - before[0]
        bytes_[i] = rep.bytes - before[1]
        sent[name] = (rep.messages, rep.bytes)
    cfg = request.config.protocol
    obs = observe(scenario, X, request.servers_present, round=request.round, time=request.time,
                  mode=cfg.mode, rtol=cfg.rtol, traffic=Traffic(messages, bytes_),
                  previous_totals=request.previous_totals, answered=answered,
                  feasible=feasible)
    return ObservationReply(obs, X, sent, tuple(restart), tuple(failed), errors)
