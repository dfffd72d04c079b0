"""What the coordinator does about its servers after an observation, pure:
``plan_recovery(request) -> plan``.

The observation step (:func:`psdsf_dist.runtime.observation.observe_reports`) says which servers
need the coordinator: restarted by Ray (not running, no error), erred (the loop stopped on an
error) or failed (their actor gone for good).  This step turns that, with the servers' error
streaks, their placement and the nodes Ray knows alive, into the plan the actor carries out:

* a server Ray restarted is started again as a new incarnation;
* a server whose loop erred is started again the same way — unless its loop has now erred
  :data:`ERROR_RESTARTS` times with no healthy report between two errors: a bug every
  incarnation hits, so it fails instead (started again at every observation it would keep a
  column of nothing and never let the run certify);
* an actor with a server on an older table than the current one missed a push: it is sent the
  table again;
* a failed server whose node is gone, and which is not its node (a ``servers: from-ray``
  server is), is placed again: its whole actor moves to an alive node (each actor once, however
  many of its servers failed); any other failed server leaves the run (churn ``server fails``).

Error streaks: a healthy report (running, no error) ends a server's streak; the plan carries the
streaks after this observation.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from psdsf_dist.runtime.members import Member
from psdsf_dist.runtime.messages import ServerReport

ERROR_RESTARTS = 3
"""A server whose loop stops on an error is restarted; one whose loop erred this many times
with no healthy observation of it between two errors has failed (a bug every incarnation
hits): it leaves the run as a failed server instead of being restarted at every
observation."""


@dataclass(frozen=True)
class RecoveryRequest:
    reports: Mapping[str, ServerReport]
    """This observation's reports, by server (servers that did not answer are absent)."""
    members: Mapping[str, Member]
    restart: Collection[str]
    """Servers Ray restarted (the observation step's ``restart``)."""
    errors: Mapping[str, str]
    """Servers whose loop stopped on an error, and the error."""
    failed: Collection[str]
    """Servers whose actor is gone for good."""
    erred: Mapping[str, int]
    """Each server's errors in a row before this observation."""
    epoch: int
    """The current table's epoch."""
    alive_nodes: Collection[str]
    """The nodes Ray reports alive (needed only when ``failed`` is not empty)."""


@dataclass(frozen=True)
class RecoveryPlan:
    crashed: tuple[str, ...]
    """Start again as new incarnations: restarted by Ray."""
    broke: tuple[str, ...]
    """Start again as new incarnations: their loop erred."""
    hopeless: tuple[tuple[str, str], ...]
    """(server, its error): erred :data:`ERROR_RESTARTS` times in a row; they fail."""
    repush: frozenset[str]
    """Actors to send the current table again."""
    relocate: tuple[str, ...]
    """Actors to start again on an alive node (their node is gone)."""
    fail: tuple[str, ...]
    """Failed servers that leave the run."""
    erred: dict[str, int]
    """Error streaks after this observation."""


def plan_recovery(request: RecoveryRequest) -> RecoveryPlan:
    members = request.members
    erred = dict(request.erred)
    for name, rep in request.reports.items():
        if rep.running and name not in request.errors:
            erred.pop(name, None)
    broke: list[str] = []
    hopeless: list[tuple[str, str]] = []
    for name, error in request.errors.items():
        if name not in members:
            continue
        erred[name] = erred.get(name, 0) + 1
        if erred[name] >= ERROR_RESTARTS:
            hopeless.append((name, error))
            del erred[name]
        else:
            broke.append(name)
    repush = frozenset(members[r.name].actor for r in request.reports.values()
                       if r.running and r.epoch < request.epoch and r.name in members)
    relocate: list[str] = []
    fail: list[str] = []
    alive = set(request.alive_nodes)
    for name in request.failed:
        gone = members.get(name)
        if gone is None:
            continue
        if not gone.pinned and gone.node is not None and gone.node not in alive:
            if gone.actor not in relocate:
                relocate.append(gone.actor)
        else:
            fail.append(name)
    return RecoveryPlan(tuple(n for n in request.restart if n in members), tuple(broke),
                        tuple(hopeless), repush, tuple(relocate), tuple(fail), erred)
