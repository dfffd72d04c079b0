"""The run's server actors as the coordinator drives them: creating, starting, reaching and
ending them, and the copies of its notes and journal they keep.

The pool decides nothing about the run: which servers to start, restart, move or end comes
from the coordinator (churn, :mod:`psdsf_dist.runtime.recovery`, :mod:`psdsf_dist.runtime.rebuild`);
where actors go from :func:`~psdsf_dist.runtime.placement.assign_nodes` and
:func:`~psdsf_dist.runtime.members.groups`.  It holds the Ray calls: an actor per group of
servers sharing a node (hard-pinned to it), named after its first server's incarnation so that
no new actor takes an earlier one's name, detached so that it outlives a coordinator restart.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from typing import TypeVar, Unpack

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from psdsf_dist.protocol.convergence import Observation
from psdsf_dist.protocol.gossip import origin_name
from psdsf_dist.protocol.membership import Table
from psdsf_dist.protocol.node import seed_peers, server_seed
from psdsf_dist.runtime.from_ray import RayNode
from psdsf_dist.runtime.handles import ServerHandle, named_actor
from psdsf_dist.runtime.members import Member, groups
from psdsf_dist.runtime.messages import ActorState, Notes, ServerReport
from psdsf_dist.runtime.names import NAMESPACE, server_actor_name, server_from_actor_name
from psdsf_dist.runtime.placement import assign_nodes
from psdsf_dist.runtime.ray_state import named_actors, nodes
from psdsf_dist.runtime.rebuild import Rebuilt
from psdsf_dist.runtime.server_actor import RemoteServerActor
from psdsf_dist.runtime.settings import RunConfig

JOURNAL_REPLICAS = 3  # server actors keeping a copy of the observations
START_TIMEOUT = 900.0  # seconds for a new actor to come up (120 at once on 2 busy cores: slow)

R = TypeVar("R")


class ServerPool:
    def __init__(self, run_id: str, config: RunConfig, pinned: dict[str, str],
                 detached: bool, tenant_secret: str | None) -> None:
        self.run_id = run_id
        self.config = config
        self.pinned = pinned
        """``servers: from-ray`` server -> its node."""
        self.detached = detached
        self.tenant_secret = tenant_secret
        self.members: dict[str, Member] = {}
        self.actors: dict[str, ServerHandle] = {}
        """actor name -> handle of every server actor of the run."""
        self.incarnations: dict[str, int] = {}
        """server -> the newest incarnation started so far (a new one must be newer: the
        others' gossip ignores an origin's entries older than what it has heard)."""
        self.notes: Notes = {}
        """What a restarted coordinator must know besides the table (kept by the servers)."""
        self.journaled: dict[str, int] = {}
        """actor name -> how many observations its copy of the journal holds."""
        self._push_due: Callable[[], Table] | None = None
        self._pusher: asyncio.Task[None] | None = None

    async def call(self, ref: ray.ObjectRef[R], timeout: float | None = None) -> R:
        """The result of an actor call, or :class:`TimeoutError` after ``timeout`` (default:
        the run's call timeout, at least 5 s)."""
        limit = timeout if timeout is not None else max(self.config.rpc_timeout, 5.0)
        return await asyncio.wait_for(ref, limit)

    def find_actors(self) -> dict[str, ServerHandle]:
        """The run's server actors Ray knows by name (a restarted coordinator's first look)."""
        found: dict[str, ServerHandle] = {}
        for entry in named_actors():
            if entry.get("namespace") != NAMESPACE:
                continue
            if server_from_actor_name(self.run_id, entry["name"]) is not None:
                found[entry["name"]] = named_actor(entry["name"], ServerHandle)
        return found

    async def states(self, found: dict[str, ServerHandle]) -> dict[str, ActorState | BaseException]:
        """Each found actor's state (:meth:`ServerActor.state`), or the error asking it raised
        (what :func:`~psdsf_dist.runtime.rebuild.rebuild_state` takes)."""
        states = await asyncio.gather(*(self.call(h.state.remote()) for h in found.values()),
                                      return_exceptions=True)
        return dict(zip(found, states, strict=True))

    def adopt(self, found: dict[str, ServerHandle], got: Rebuilt) -> None:
        """Take the actors and servers a rebuild found; end the actors that did not answer
        (their servers are started again)."""
        for actor in got.unreachable:
            ray.kill(found[actor], no_restart=True)
        self.actors = {a: h for a, h in found.items() if a not in got.unreachable}
        self.incarnations = dict(got.incarnations)
        self.notes.update(got.notes)
        self.journaled = dict(got.journaled)
        for h in got.hosted:
            # a server not started (its actor was restarted by Ray) reports incarnation -1
            # and is started again by the next observation
            self.members[h.name] = Member(
                h.name, self.actors[h.actor], h.actor,
                max(h.incarnation, self.incarnations.get(h.name, -1)), h.node,
                h.name in self.pinned)

    # -- starting -----------------------------------------------------------------------------
    async def create(self, names: list[str]) -> None:
        """New actors for ``names`` (new incarnations), placed on the alive nodes, up and
        holding the notes when this returns; not started (:meth:`start`)."""
        nodes = await alive_nodes()
        load = Counter(m.node for m in self.members.values()
                       if m.node is not None and m.name not in names)
        where = assign_nodes(names, nodes, self.pinned, load)
        for group in groups(names, where, self.config.servers_per_actor):
            node, pinned = where[group[0]]
            incarnation = {n: self.incarnations.get(n, -1) + 1 for n in group}
            first = origin_name(group[0], incarnation[group[0]])
            actor = server_actor_name(self.run_id, first if len(group) == 1 else f"group-{first}")
            options: dict[str, object] = {
                "name": actor, "namespace": NAMESPACE,
                "num_cpus": 0, "max_restarts": self.config.max_restarts,
                "max_concurrency": 1000,
            }
            if self.detached:
                options["lifetime"] = "detached"  # outlives a coordinator restart
            if node is not None:  # hard: Ray ignores a soft affinity here (placement.py)
                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
            handle = RemoteServerActor.options(**options).remote(self.run_id, group, self.config,
                                                                 self.tenant_secret)
            self.actors[actor] = handle
            for name in group:
                self.members[name] = Member(name, handle, actor, incarnation[name], node, pinned)
                self.incarnations[name] = incarnation[name]
        fresh = {self.members[n].actor for n in names}
        await asyncio.gather(*(self.call(self.actors[a].keep_notes.remote(self.notes),
                                         START_TIMEOUT) for a in fresh))  # every process is up

    async def start_new(self, names: list[str], table: Table, now: float | None,
                        started_at: float, everyone: bool) -> None:
        """Start the servers :meth:`create` made, and tell the other actors their handles
        (their columns come by gossip).  ``everyone``: a cluster that starts together knows
        its members (as in the simulator), so the rule's membership size and the peers chosen
        are right from the first round."""
        await self.start([self.members[n] for n in names], table, now, started_at, everyone)
        handles = {n: self.members[n].handle for n in names}
        fresh = {self.members[n].actor for n in names}
        await asyncio.gather(*(self.call(h.adopt.remote(table, handles))
                               for a, h in self.actors.items() if a not in fresh),
                             return_exceptions=True)

    async def start(self, members: Sequence[Member], table: Table, now: float | None,
                    started_at: float, everyone: bool = False) -> None:
        """Start servers: one call per actor (in parallel), which starts its servers one after
        another in the given order.  Ray does not keep the order of concurrent calls to an
        async actor, and a manual clock breaks ties between equal wake-up times by the order
        the servers went to sleep (as the simulator does); one call per server also queued each
        start behind the gossip of the servers already running (a 120-server start took
        minutes).  ``now``: the manual clock's time (None: the wall clock, from
        ``started_at``)."""
        by_actor: dict[str, list[Member]] = {}
        for m in members:
            by_actor.setdefault(m.actor, []).append(m)
        handles = {n: o.handle for n, o in self.members.items()}
        seed = self.config.protocol.seed

        def seeds(m: Member) -> list[str]:
            others = [origin_name(n, o.incarnation) for n, o in self.members.items()
                      if n != m.name]
            return seed_peers(others, server_seed(seed, m.name, m.incarnation),
                              everyone=everyone)

        await asyncio.gather(*(
            self.call(group[0].handle.start.remote(
                [(m.name, m.incarnation, seeds(m)) for m in group], table, started_at,
                handles, now), START_TIMEOUT)
            for group in by_actor.values()))

    def new_incarnation(self, name: str) -> Member:
        """A member to start again (after a crash or an error) as a new incarnation."""
        m = self.members[name]
        m.incarnation = self.incarnations.get(m.name, m.incarnation) + 1
        self.incarnations[m.name] = m.incarnation
        return m

    # -- reaching -----------------------------------------------------------------------------
    async def advance_to(self, t: float) -> None:
        """Manual clock: every actor runs the wake-ups due before ``t``, then sets its time to
        ``t`` (:meth:`ServerActor.advance_to`); an actor that fails or takes over a minute is
        left behind (its servers' reports show it)."""
        await asyncio.gather(*(self.call(h.advance_to.remote(t), 60.0)
                               for h in self.actors.values()), return_exceptions=True)

    async def push(self, table: Table, actors: Collection[str] | None = None) -> None:
        """The table (and the members' handles) to every actor, or to ``actors``.  A call that
        fails is not retried here: the next observation finds the actor's servers on an older
        epoch and pushes again."""
        handles = {n: m.handle for n, m in self.members.items()}
        await asyncio.gather(*(self.call(h.adopt.remote(table, handles))
                               for a, h in self.actors.items()
                               if actors is None or a in actors), return_exceptions=True)

    def push_soon(self, table: Callable[[], Table]) -> None:
        """Push the newest table to every actor in the background: ``table`` is called when
        the push goes out, and changes made while one is under way go out together in the
        next.  For a tenant's report, which must not wait on every server actor (a slow one
        holds a push for seconds); the servers adopt only newer epochs, so a push that lands
        after a later one changes nothing."""
        self._push_due = table
        if self._pusher is None or self._pusher.done():
            self._pusher = asyncio.get_running_loop().create_task(self._push_pending())

    async def _push_pending(self) -> None:
        while self._push_due is not None:
            table, self._push_due = self._push_due, None
            await self.push(table())

    async def reports(self, alive: AliveNodes) -> dict[str, ServerReport]:
        """Every answering actor's servers' reports, by server.  An actor that does not answer
        counts towards its servers' ``gone`` unless Ray is restarting it on an alive node
        (``alive``: read only if an actor does not answer)."""

        async def one(actor: str, handle: ServerHandle) -> list[ServerReport]:
            hosted = [m for m in self.members.values() if m.actor == actor]
            try:
                reps = await self.call(handle.report.remote())
            except (ray.exceptions.RayError, TimeoutError) as err:
                restarting = isinstance(err, (ray.exceptions.ActorUnavailableError,
                                              TimeoutError))
                if restarting:  # unless it waits for a node that is gone
                    nodes = await alive.get()
                    restarting = all(m.node is None or m.node in nodes for m in hosted)
                if not restarting:  # dead, or never coming back
                    for m in hosted:
                        m.gone += 1
                return []
            for m in hosted:
                m.gone = 0
            return reps

        answers = await asyncio.gather(*(one(a, h) for a, h in list(self.actors.items())))
        return {r.name: r for reps in answers for r in reps}

    async def note(self, **notes: Unpack[Notes]) -> None:
        """Keep notes in every server actor (what a restarted coordinator must know)."""
        self.notes.update(notes)
        await asyncio.gather(*(self.call(h.keep_notes.remote(self.notes))
                               for h in self.actors.values()), return_exceptions=True)

    async def journal(self, observations: Sequence[Observation]) -> None:
        """Send each journal replica the observations it does not hold yet.  The replicas are
        the first :data:`JOURNAL_REPLICAS` actors by name (a restarted one is sent everything
        again: it answers with what it holds)."""
        total = len(observations)

        async def send(actor: str) -> None:
            first = min(self.journaled.get(actor, 0), total)
            try:
                held = await self.call(self.actors[actor].keep_journal.remote(
                    first, list(observations[first:])))
            except (ray.exceptions.RayError, TimeoutError):
                return  # unreachable: sent again once it answers
            self.journaled[actor] = int(held)

        await asyncio.gather(*(send(a) for a in sorted(self.actors)[:JOURNAL_REPLICAS]))

    # -- ending -------------------------------------------------------------------------------
    async def remove(self, name: str) -> None:
        """A server leaves the run: stopped alone if it shares its actor (a tombstone), else its
        actor is ended with it (a failure: its tasks are lost, no goodbye)."""
        m = self.members.pop(name, None)
        if m is None:
            return
        if any(o.actor == m.actor for o in self.members.values()):
            await self.call(m.handle.leave.remote(m.name))
        else:
            self.kill(m.actor)

    def kill(self, actor: str) -> list[str]:
        """End an actor for good; returns the servers it hosted (still members; none if the
        actor was already ended)."""
        handle = self.actors.pop(actor, None)
        if handle is None:
            return []
        ray.kill(handle, no_restart=True)
        return [m.name for m in self.members.values() if m.actor == actor]

    def stop(self) -> None:
        if self._pusher is not None:
            self._pusher.cancel()
        for handle in self.actors.values():
            ray.kill(handle, no_restart=True)
        self.actors.clear()
        self.members.clear()


class AliveNodes:
    """Ray's alive nodes, read at most once — when first asked — for one step (an observation
    asks when an actor does not answer and again when a server failed)."""

    def __init__(self) -> None:
        self._read: asyncio.Task[list[str]] | None = None

    async def get(self) -> set[str]:
        if self._read is None:
            self._read = asyncio.ensure_future(alive_nodes())
        return set(await self._read)


async def alive_nodes() -> list[str]:
    return sorted(str(n["NodeID"]) for n in await ray_nodes() if n.get("Alive"))


async def ray_nodes() -> list[RayNode]:
    """Ray's node table, read in a worker thread: the read is a blocking call to Ray's GCS
    (slow on a loaded machine), and the coordinator's one event loop also answers the tenants'
    reports and connects."""
    return await asyncio.to_thread(nodes)
