"""A restarted coordinator's state, rebuilt from what its server actors keep, pure:
``rebuild_state(request) -> rebuilt``.

The coordinator keeps nothing it cannot rebuild (see :mod:`psdsf_dist.runtime.coordinator`,
"Restart"): each server actor answers with an :class:`~psdsf_dist.runtime.messages.ActorState`.
From those answers:

* the actors that answered host the servers they name; an actor that did not answer (Ray is
  restarting it, or its node is gone) is ended, and its servers count as missing;
* each server's newest incarnation is the newest any gossip origin shows (a new incarnation
  must be newer than every one heard of, or the others' gossip would ignore it);
* the table is the newest (highest epoch) any started server adopted: every change the old
  coordinator pushed to at least one server survives;
* the journal is the longest copy (the replicas are sent the observations in order, so the
  longest holds every shorter one);
* the notes are the union of the actors' (each note is sent to every actor); the fault counts
  go on from theirs, with one more coordinator restart and the missing servers started again;
* the run's time: with the wall clock, the origin the servers were started with; with the
  manual clock, the latest time any actor or any change of the table has seen;
* a server the table counts as present that no answering actor hosts is missing: it has
  failed if it is its node (``servers: from-ray``) and that node is gone, else it is started
  again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from psdsf_dist.protocol.convergence import Observation
from psdsf_dist.protocol.gossip import incarnation_of, server_of
from psdsf_dist.protocol.membership import Table
from psdsf_dist.runtime.messages import ActorState, Notes


class NothingToRebuildError(RuntimeError):
    """No server actor of the run answered with a table."""


@dataclass(frozen=True)
class Hosted:
    name: str
    actor: str
    incarnation: int
    """-1: the actor was restarted by Ray and has not started it again."""
    node: str


@dataclass(frozen=True)
class Rebuilt:
    table: Table
    hosted: tuple[Hosted, ...]
    unreachable: tuple[str, ...]
    """Actors that did not answer: to be ended."""
    incarnations: dict[str, int]
    notes: Notes
    observations: tuple[Observation, ...]
    journaled: dict[str, int]
    """Actor -> how many observations its journal copy holds."""
    started_at: float | None
    """The wall clock's origin the servers were started with (None: none started)."""
    latest_time: float
    """The latest run time any actor or change has seen (the manual clock resumes there)."""
    missing_failed: tuple[str, ...] = field(default=())
    """Missing servers whose node is gone: they fail."""
    missing_restart: tuple[str, ...] = field(default=())
    """Missing servers to start again."""
    restarts: int = 0
    """Server incarnations started after a crash so far, counting ``missing_restart``."""
    coordinator_restarts: int = 1
    """Times the coordinator was restarted, counting this one."""
    faults: tuple[tuple[str, float], ...] = ()
    """The run's faults so far (description, run time)."""


def rebuild_state(answers: Mapping[str, ActorState | BaseException],
                  pinned: Mapping[str, str], alive_nodes: Collection[str]) -> Rebuilt:
    """``answers``: each server actor's state, or the error asking it raised; ``pinned``:
    ``servers: from-ray`` server -> its node."""
    hosted: list[Hosted] = []
    unreachable: list[str] = []
    incarnations: dict[str, int] = {}
    notes: Notes = {}
    observations: tuple[Observation, ...] = ()
    journaled: dict[str, int] = {}
    started_at: float | None = None
    latest = 0.0
    best: Table | None = None
    for actor, answer in answers.items():
        if isinstance(answer, BaseException):
            unreachable.append(actor)
            continue
        for origin in answer.origins:
            server = server_of(origin)
            incarnations[server] = max(incarnations.get(server, -1), incarnation_of(origin))
        notes.update(answer.notes)
        if answer.journal:
            journaled[actor] = len(answer.journal)
            if len(answer.journal) > len(observations):
                observations = tuple(answer.journal)
        if answer.time is not None:
            latest = max(latest, answer.time)
        for h in answer.servers:
            hosted.append(Hosted(h.name, actor, h.incarnation, answer.node))
            if h.table is not None:
                started_at = h.started_at
                if best is None or h.table.epoch > best.epoch:
                    best = h.table
    if best is None:
        raise NothingToRebuildError(
            "no server of the run could be reached to rebuild its state")
    latest = max([latest, *(t for _, t in best.history)])
    hosted_names = {h.name for h in hosted}
    missing = [s for s, up in zip(best.full.server_names, best.servers_present, strict=True)
               if up and s not in hosted_names]
    alive = set(alive_nodes)
    failed = tuple(s for s in missing if s in pinned and pinned[s] not in alive)
    restart = tuple(s for s in missing if s not in failed)
    return Rebuilt(best, tuple(hosted), tuple(unreachable), incarnations, notes, observations,
                   journaled, started_at, latest, failed, restart,
                   int(notes.get("restarts", 0)) + len(restart),
                   int(notes.get("coordinator_restarts", 0)) + 1,
                   tuple((str(d), float(t)) for d, t in notes.get("faults", [])))
