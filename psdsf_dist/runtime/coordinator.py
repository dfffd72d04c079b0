"""The coordinator actor: membership, churn and convergence tracking — never the allocation.

It starts one server actor per present server (placed by :func:`assign_nodes`), hands each a
few peers to gossip with, and applies churn — the scenario's events at their (scaled) times, and
changes asked for through :meth:`Coordinator.apply` (the Python API and the CLI) — by making a
new :class:`~psdsf_dist.protocol.membership.Table` and pushing it to every server.  Once per period
it collects the servers' columns, checks feasibility and the PS-DSF certificate on the scenario
as it stands, and records the observation; per event it reports how long the servers took to
re-converge.  The columns are the servers' own: the coordinator only reads them.

Faults
    A server actor that stops answering counts as holding nothing.  Ray restarts a crashed
    actor (``max_restarts``); its next report says it is not running, and the coordinator
    starts it again as a new incarnation with the current table.  So it does with a server
    whose loop stopped on an error (a bug: the error is the run's ``failure``), which would
    otherwise keep its last column for good — unless its loop erred :data:`ERROR_RESTARTS`
    times in a row, a bug every incarnation hits: then it has failed (churn ``server
    fails``).  A server that missed a table (its ``adopt`` call failed or timed out) reports
    an older epoch at the next observation and is sent the table again.  A scenario server
    whose node is gone is started again on an alive node, as a new incarnation in a new actor
    (actors are pinned to their node, :mod:`psdsf_dist.runtime.placement`).  An actor gone for good
    otherwise (restarts exhausted, or the node of a ``servers: from-ray`` server removed) is a
    failed server: churn ``server fails``.  With ``servers: from-ray`` a new Ray node becomes a
    new server.
Restart
    The coordinator keeps nothing it cannot rebuild: every server holds the newest table it has
    adopted (membership, users, demands, weights, event history, how many scenario events
    were applied) and the run's start time, the servers' gossip knows every incarnation so far,
    and the server actors keep the coordinator's notes (its metrics endpoint, the faults and the
    restart count) and, on :data:`JOURNAL_REPLICAS` of them, its journal: every observation,
    sent after each is made.  A restarted coordinator finds the run's server actors by name,
    adopts the newest table among theirs, takes the longest journal, serves metrics again where
    it did, and carries on: a server the table counts but no actor answers for is started again
    (or fails, if its node is gone).  So its result — the trace, the per-event convergence, the
    faults and restarts — is the one an uninterrupted coordinator would give, but for the
    observations due while it was down (and its latest one, if every replica lost it too).
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from psdsf_dist.admission.identity import tenant_token, token_ok
from psdsf_dist.admission.tenants import TenantBook, UserInTable
from psdsf_dist.admission.unmanaged import is_unmanaged_user, unmanaged_events, unmanaged_user
from psdsf_dist.errors import PsdsfError, ScenarioError
from psdsf_dist.model.events import Event, ServerFails, ServerJoins
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.model.tenant_policy import (
    TenantPolicy,
    UnknownTenantError,
    parse_tenant_policy,
)
from psdsf_dist.observability.metrics import AllocatorMetrics, RunMetrics, ServerCounts
from psdsf_dist.observability.metrics_server import MetricsEndpointError, MetricsServer
from psdsf_dist.observability.ray_export import RayMetricsExport
from psdsf_dist.protocol.convergence import (
    EventConvergence,
    Observation,
    event_convergence,
)
from psdsf_dist.protocol.gossip import incarnation_of, origin_name, server_of
from psdsf_dist.protocol.membership import ChurnState, Table
from psdsf_dist.protocol.node import seed_peers, server_seed
from psdsf_dist.runtime.clock import ManualClock, WallClock
from psdsf_dist.runtime.names import (
    NAMESPACE,
    actor_key,
    server_actor_name,
    server_from_actor_name,
)
from psdsf_dist.runtime.observation import (
    ObservationRequest,
    ServerReport,
    observe_reports,
)
from psdsf_dist.runtime.placement import assign_nodes
from psdsf_dist.runtime.server_actor import RemoteServerActor
from psdsf_dist.runtime.settings import RunConfig

FloatArray = npt.NDArray[np.float64]

NODE_CHECK_PERIODS = 5  # from-ray runs: look for new nodes this often
JOURNAL_REPLICAS = 3  # server actors keeping a copy of the observations (see Restart above)
START_TIMEOUT = 900.0  # seconds for a new actor to come up (120 at once on 2 busy cores: slow)
ERROR_RESTARTS = 3
"""A server whose loop stops on an error is restarted; one whose loop erred this many times
with no healthy observation of it between two errors has failed (a bug every incarnation
hits): it leaves the run as a failed server instead of being restarted at every
observation."""


@dataclass
class Member:
    name: str
    handle: Any
    """The actor hosting this server."""
    actor: str
    """That actor's name."""
    incarnation: int = 0
    node: str | None = None
    pinned: bool = False
    """A ``servers: from-ray`` server: it is its node, and fails with it."""
    gone: int = 0
    """Consecutive reports that failed because the actor is dead for good."""


@dataclass(frozen=True)
class RunResult:
    scenario: Scenario
    allocation: FloatArray
    observations: tuple[Observation, ...]
    events: tuple[EventConvergence, ...]
    config: RunConfig
    servers: int
    restarts: int
    """Server incarnations started after a crash (the coordinator's own restarts are
    ``coordinator_restarts``)."""
    pids: tuple[int, ...]
    coordinator_restarts: int = 0
    """Times the coordinator was restarted (and rebuilt its state from the servers)."""


NodeSpec = Callable[[Mapping[str, Any]], dict[str, Any]]


class TenantRunError(PsdsfError, RuntimeError):
    """A tenant connected to a run that does not take tenants."""


@dataclass(frozen=True)
class TenantInfo:
    """What a tenant's client needs to check its submissions."""

    resources: tuple[str, ...]
    servers: tuple[str, ...]
    capacity: FloatArray
    """Present servers x resources."""
    weight: float | None
    """The user's weight in the cluster's configuration (None: not declared)."""
    period: float
    token: str | None = None
    """The token the tenant's calls carry (a run with a tenant policy: the one it proved, or
    the one issued to an unknown tenant the policy lets join)."""


@dataclass(frozen=True)
class TenantReply:
    servers: dict[str, tuple[Any, str]]
    """Present server -> (its actor, its Ray node id)."""
    error: str | None
    """Why the report's change was refused (e.g. a demand the scenario cannot take)."""


class Coordinator:
    def __init__(self, run_id: str, scenario: Scenario, config: RunConfig,
                 pinned: Mapping[str, str] | None = None, detached_servers: bool = True,
                 node_spec: Any = None, secret: str | None = None) -> None:
        self.run_id = run_id
        self.secret = secret
        """The run's secret: churn and stop are refused without it (None: no check).  A
        constructor argument, so Ray gives it to a restarted coordinator too."""
        self.scenario = scenario
        self.config = config
        self.pinned = dict(pinned or {})
        self.detached_servers = detached_servers
        self.node_spec: NodeSpec | None = node_spec
        """from-ray runs: makes the server entry of a new Ray node (None: nodes are not
        servers)."""
        self.churn: ChurnState | None = None
        self.events: tuple[Event, ...] = ()
        self.members: dict[str, Member] = {}
        self.actors: dict[str, Any] = {}
        """actor name -> handle of every server actor of the run."""
        self.incarnations: dict[str, int] = {}
        """server -> the newest incarnation started so far (a new one must be newer: the
        others' gossip ignores an origin's entries older than what it has heard)."""
        self.notes: dict[str, Any] = {}
        """What a restarted coordinator must know besides the table (kept by the servers)."""
        self.observations: list[Observation] = []
        self.journaled: dict[str, int] = {}
        """actor name -> how many observations its copy of the journal holds."""
        self.clock: WallClock | ManualClock = (ManualClock() if config.clock == "manual"
                                               else WallClock(time.time()))
        """The run's clock: a manual one the coordinator moves (:meth:`advance`), or the wall
        clock from the moment every actor was up (:meth:`_start_clock`)."""
        self.tables: dict[int, Scenario] = {}
        self.traffic: dict[str, tuple[int, int]] = {}
        self.pids: dict[str, int] = {}
        self.restarts = 0
        self.coordinator_restarts = 0
        self.erred: dict[str, int] = {}
        """server -> errors of its loop in a row (a healthy report in between resets it)."""
        self.faults: list[tuple[str, float]] = []
        """Faults as events (description, run time): crashed servers started again, servers
        moved off a lost node, coordinator restarts — kept in the notes with ``restarts``."""
        self.monitor: asyncio.Task[None] | None = None
        self.last_allocation: FloatArray | None = None
        self.lock: asyncio.Lock | None = None
        self.observing = asyncio.Lock()
        self.failure: str | None = None
        self.tenants = TenantBook()
        """Tenant runs: the queues' latest backlog reports."""
        self.tenant_queues: dict[str, Any] = {}
        """user -> its queue actor (to tell a silent queue from a gone one)."""
        self.policy: TenantPolicy | None = scenario.tenant_policy
        """The operator's tenant policy (None: an open run, as before policies)."""
        self.tenant_secret = secret if self.policy is not None else None
        """What tenants' tokens are checked against (None: an open run checks none)."""
        self.policy_changes: list[tuple[str, float]] = []
        """The operator's policy changes as events of the run (description, run time)."""
        self.unmanaged: dict[str, dict[str, float]] = {}
        """Tenant runs: server -> its node's usage by work the allocator did not admit."""
        self.metrics = RunMetrics(AllocatorMetrics())
        """Always kept: exported through Ray's metrics pipeline after every observation, and on
        an HTTP endpoint of its own once :meth:`serve_metrics` is asked for."""
        self.ray_metrics = RayMetricsExport(self.metrics.metrics.registry)
        self.metrics_server: MetricsServer | None = None
        ctx = ray.get_runtime_context()
        self.restarted = bool(ctx.was_current_actor_reconstructed)
        self.ready = False
        if self.restarted:  # rebuild at once: no caller may come (a detached run, metrics only)
            ctx.current_actor.resume.remote()

    # -- life cycle ---------------------------------------------------------------------------
    async def start(self) -> int:
        """Start the run: one server actor per present server.  Returns how many."""
        self.lock = asyncio.Lock()
        self.churn, self.events = ChurnState.start(self.scenario)
        self.ready = True
        names = self.churn.present_servers()
        # The run's clock starts once every actor is up (120 take minutes on a busy machine):
        # event times count from when the servers can act on them.
        await self._spawn(names, before_start=self._start_clock)
        if self.config.clock == "real":
            self.monitor = asyncio.get_running_loop().create_task(self._monitor())
        return len(names)

    async def resume(self) -> None:
        """A restarted coordinator's first step (it calls itself): rebuild the state."""
        try:
            await self._ensure()
        except Exception as err:  # shown by status; a later call tries again
            self.failure = f"{type(err).__name__}: {err}"

    async def _ensure(self) -> None:
        """A restarted coordinator rebuilds its state from the servers before anything else."""
        if self.ready:
            return
        if self.lock is None:
            self.lock = asyncio.Lock()
        async with self.lock:
            if self.ready:
                return
            if not self.restarted:
                raise RuntimeError("the run has not been started")
            await self._rebuild()
            self.ready = True
            self._serve_noted_metrics()
            if self.config.clock == "real" and self.monitor is None:
                self.monitor = asyncio.get_running_loop().create_task(self._monitor())

    async def _rebuild(self) -> None:
        found: dict[str, Any] = {}
        for entry in ray.util.list_named_actors(all_namespaces=True):
            if entry.get("namespace") != NAMESPACE:
                continue
            if server_from_actor_name(self.run_id, entry["name"]) is not None:
                found[entry["name"]] = ray.get_actor(entry["name"], namespace=NAMESPACE)
        states = await asyncio.gather(*(self._call(h.state.remote()) for h in found.values()),
                                      return_exceptions=True)
        best: Table | None = None
        for (actor, handle), answer in zip(found.items(), states, strict=True):
            if isinstance(answer, BaseException):
                # unreachable (restarting, or its node is gone): its servers start again below
                ray.kill(handle, no_restart=True)
                continue
            self.actors[actor] = handle
            for origin in answer.origins:
                server = server_of(origin)
                self.incarnations[server] = max(self.incarnations.get(server, -1),
                                                incarnation_of(origin))
            self.notes.update(answer.notes)
            if answer.journal:
                self.journaled[actor] = len(answer.journal)
                if len(answer.journal) > len(self.observations):
                    self.observations = list(answer.journal)
            if answer.time is not None and isinstance(self.clock, ManualClock):
                self.clock.move_to(answer.time)
            for hosted in answer.servers:
                # a server not started (its actor was restarted by Ray) reports incarnation -1
                # and is started again by the next observation
                self.members[hosted.name] = Member(hosted.name, handle, actor,
                                                   hosted.incarnation, answer.node)
                if hosted.table is not None:
                    if isinstance(self.clock, WallClock):
                        self.clock = WallClock(hosted.started_at)
                    if best is None or hosted.table.epoch > best.epoch:
                        best = hosted.table
        if best is None:
            raise RuntimeError("no server of the run could be reached to rebuild its state")
        self.churn = ChurnState.resume(best)
        _, self.events = ChurnState.start(self.scenario)
        if isinstance(self.clock, ManualClock):
            self.clock.move_to(max((t for _, t in best.history), default=0.0))
        for m in self.members.values():
            m.incarnation = max(m.incarnation, self.incarnations.get(m.name, -1))
            m.pinned = m.name in self.pinned
        await self._push_table()
        # servers the table counts that no reachable actor hosts
        alive = set(await _alive_nodes())
        missing = [s for s, up in zip(self.churn.full.server_names, self.churn.servers_present,
                                      strict=True) if up and s not in self.members]
        for s in missing:
            if s in self.pinned and self.pinned[s] not in alive:
                await self._apply(ServerFails(self.now(), -1, s), from_scenario=False)
        restart = [s for s in missing if s not in self.pinned or self.pinned[s] in alive]
        self.restarts = int(self.notes.get("restarts", 0))
        self.coordinator_restarts = int(self.notes.get("coordinator_restarts", 0)) + 1
        self.faults = [(str(d), float(t)) for d, t in self.notes.get("faults", [])]
        if self.policy is not None and "tenant_policy" in self.notes:
            self.policy = parse_tenant_policy(self.notes["tenant_policy"],
                                              self.scenario.resources)
            self.policy_changes = [(str(d), float(t))
                                   for d, t in self.notes.get("policy_changes", [])]
        self.restarts += len(restart)
        await self._faults("coordinator restarted",
                           *(f"server {s} restarted (no actor hosted it)" for s in restart))
        if restart:
            await self._spawn(restart)

    async def stop(self, secret: str | None = None) -> bool:
        """Stop the monitor and end every server actor of the run, if ``secret`` is the
        run's.  Returns whether it stopped."""
        if not self._authorised(secret):
            return False
        if self.monitor is not None:
            self.monitor.cancel()
            self.monitor = None
        for handle in self.actors.values():
            ray.kill(handle, no_restart=True)
        self.actors.clear()
        self.members.clear()
        if self.metrics_server is not None:
            self.metrics_server.stop()
            self.metrics_server = None
        return True

    async def _faults(self, *descriptions: str) -> None:
        """Faults as events of the run (their re-convergence is measured like churn's), kept
        in the notes — one update for them all — so that a restarted coordinator still
        reports them."""
        now = self.now()
        self.faults += [(d, now) for d in descriptions]
        await self._note(faults=list(self.faults), restarts=self.restarts,
                         coordinator_restarts=self.coordinator_restarts)

    async def _journal(self) -> None:
        """Send each journal replica the observations it does not hold yet.  The replicas are
        the first :data:`JOURNAL_REPLICAS` actors by name (a restarted one is sent everything
        again: it answers with what it holds)."""
        total = len(self.observations)

        async def send(actor: str) -> None:
            first = min(self.journaled.get(actor, 0), total)
            try:
                held = await self._call(self.actors[actor].keep_journal.remote(
                    first, self.observations[first:]))
            except (ray.exceptions.RayError, TimeoutError):
                return  # unreachable: sent again once it answers
            self.journaled[actor] = int(held)

        await asyncio.gather(*(send(a) for a in sorted(self.actors)[:JOURNAL_REPLICAS]))

    async def _note(self, **notes: Any) -> None:
        """Keep notes in every server actor (what a restarted coordinator must know)."""
        self.notes.update(notes)
        await asyncio.gather(*(self._call(h.keep_notes.remote(self.notes))
                               for h in self.actors.values()), return_exceptions=True)

    # -- time ---------------------------------------------------------------------------------
    def now(self) -> float:
        return self.clock.now()

    async def advance(self, periods: int = 1) -> list[dict[str, Any]]:
        """Manual clock: move the run ``periods`` periods on and observe after each.

        A period goes in ``gossip_rate`` steps.  At each step the events due by the current
        time are applied first, then every actor runs the wake-ups due before the step's end;
        after the last step the events due at the period's end are applied and the run is
        observed — the simulator's order of events, wake-ups and observations."""
        await self._ensure()
        out: list[dict[str, Any]] = []
        T = self.config.period
        steps = self.config.protocol.gossip_rate
        for _ in range(periods):
            assert isinstance(self.clock, ManualClock)
            start = self.clock.now()
            for j in range(1, steps + 1):
                await self._due_events()
                t = start + T * j / steps
                await asyncio.gather(*(self._call(h.advance_to.remote(t), 60.0)
                                       for h in self.actors.values()), return_exceptions=True)
                self.clock.move_to(t)
            await self._due_events()
            out.append((await self._observe()).to_json())
            if self.node_spec is not None and len(self.observations) % NODE_CHECK_PERIODS == 0:
                await self._check_nodes()
        return out

    async def _monitor(self) -> None:
        period = self.config.period
        while True:
            await self.clock.sleep(period - (self.now() % period))
            try:
                await self._due_events()
                await self._expire_tenants()
                await self._count_unmanaged()
                await self._observe()
                if self.node_spec is not None and len(self.observations) % NODE_CHECK_PERIODS == 0:
                    await self._check_nodes()
            except Exception as err:  # keep observing; the failure shows in status
                self.failure = f"{type(err).__name__}: {err}"

    # -- churn --------------------------------------------------------------------------------
    def _authorised(self, secret: str | None) -> bool:
        return self.secret is None or (
            secret is not None and hmac.compare_digest(secret.encode(), self.secret.encode()))

    async def apply(self, item: Mapping[str, Any], secret: str | None = None) -> tuple[bool, str]:
        """Apply one change now, in the scenario-file syntax, e.g. ``{"user_leaves": "u4"}``
        or ``{"set_weight": {"user": "u1", "weight": 3}}``, if ``secret`` is the run's.
        Returns (True, its description), or (False, why it was refused) — as a value, so that
        the caller gets the one-line message rather than a wrapped remote exception."""
        if not self._authorised(secret):
            return False, (f"run {self.run_id!r} refused the change: wrong or missing run "
                           "secret (the launching Run's .secret)")
        if isinstance(item, Mapping) and "tenant_policy" in item:
            return await self._change_policy(item["tenant_policy"])
        if self.policy is not None and isinstance(item, Mapping) \
                and isinstance(item.get("set_weight"), Mapping):
            # the operator's weight is the tenant's ceiling from now on
            user = item["set_weight"].get("user")
            if isinstance(user, str):
                ok, text = await self._change(item)
                if ok:
                    entry = (self.policy.entry(user).to_raw(user) if self._known(user)
                             else {"name": user})
                    await self._change_policy({"tenants": [
                        {**entry, "weight": item["set_weight"].get("weight")}]})
                return ok, text
        return await self._change(item)

    def _known(self, user: str) -> bool:
        try:
            assert self.policy is not None
            self.policy.entry(user)
        except UnknownTenantError:
            return False
        return True

    async def _change_policy(self, change: Any) -> tuple[bool, str]:
        """The operator's change of the tenant policy: merged in, kept in the notes (a
        restarted coordinator applies it too) and recorded as an event of the run.  Present
        tenants get their new weight and quota at their next report (within a period)."""
        await self._ensure()
        if self.policy is None:
            return False, (f"run {self.run_id!r} has no tenant_policy (declare one in the "
                           "scenario to change it)")
        try:
            policy = self.policy.changed(change, self.scenario.resources)
        except ScenarioError as err:
            return False, str(err)
        self.policy = policy
        names = ", ".join(str(t.get("name")) for t in change.get("tenants", [])
                          if isinstance(t, Mapping)) if isinstance(change, Mapping) else ""
        text = "tenant policy changed" + (f" ({names})" if names else "")
        self.policy_changes.append((text, self.now()))
        await self._note(tenant_policy=policy.to_raw(), policy_changes=list(self.policy_changes))
        return True, text

    async def _change(self, item: Mapping[str, Any]) -> tuple[bool, str]:
        """:meth:`apply` for the coordinator's own changes (tenants' queues)."""
        await self._ensure()
        assert self.churn is not None
        try:
            event = self.churn.parse(item)
            await self._apply(event, from_scenario=False)
        except ScenarioError as err:
            return False, str(err)
        return True, event.describe()

    async def _due_events(self) -> None:
        assert self.churn is not None
        now = self.now()
        first = end = self.churn.scenario_events_applied
        while end < len(self.events) and \
                self.events[end].at * self.config.time_scale <= now + 1e-9:
            end += 1
        if end > first:
            await self._apply(*self.events[first:end], from_scenario=True)

    async def _apply(self, *events: Event, from_scenario: bool) -> None:
        """Apply events due together as one change, as the simulator does: the churn state
        takes each in order, and the actors adopt the resulting table once (a server sees only
        the state after them, so pushing each intermediate table would be work without effect:
        100,000 weight changes at one instant were 100,000 pushes to every actor)."""
        assert self.churn is not None
        joined: list[str] = []
        for event in events:
            self.churn.apply(event, self.now(), from_scenario=from_scenario)
            self.metrics.event(event, self.now())
            if isinstance(event, ServerJoins):
                joined.append(event.server)
            elif isinstance(event, ServerFails):
                joined = [s for s in joined if s != event.server]
                m = self.members.pop(event.server, None)
                if m is not None:
                    if any(o.actor == m.actor for o in self.members.values()):
                        # it shares its actor with others: stop it alone (a tombstone)
                        await self._call(m.handle.leave.remote(m.name))
                    else:  # a failure: its tasks are lost, no goodbye
                        ray.kill(m.handle, no_restart=True)
                        self.actors.pop(m.actor, None)
        await self._push_table()
        if joined:
            await self._spawn(joined)

    async def _push_table(self, actors: Collection[str] | None = None) -> None:
        """The current table (and the members' handles) to every actor, or to ``actors``.  A
        call that fails is not retried here: the next observation finds the actor's servers
        on an older epoch and pushes again."""
        assert self.churn is not None
        table = self.churn.table()
        self.tables[table.epoch] = table.scenario
        handles = {n: m.handle for n, m in self.members.items()}
        await asyncio.gather(*(self._call(h.adopt.remote(table, handles))
                               for a, h in self.actors.items()
                               if actors is None or a in actors), return_exceptions=True)

    # -- tenants ------------------------------------------------------------------------------
    async def tenant_connect(self, user: str, token: str | None = None) -> TenantInfo | str:
        """A tenant connects as ``user``: what its client checks its task shapes against, or
        (as a value: one line) why it is refused (:class:`TenantRunError` if the run takes
        no tenants).  A run with a tenant policy admits a
        declared tenant only with its token, an unknown one only if the policy lets unknown
        tenants join and no live queue holds the name (it is then issued the name's token)."""
        info = await self.tenant_info(user)
        if is_unmanaged_user(user):
            return f"run {self.run_id!r}: {user!r} names a node's unmanaged work, not a tenant"
        if self.policy is None:
            return info
        try:
            entry = self.policy.entry(user)
        except UnknownTenantError as err:
            return f"run {self.run_id!r}: {err.message}"
        assert self.tenant_secret is not None
        if self.policy.declared(user):
            if not token_ok(self.tenant_secret, user, token):
                return (f"run {self.run_id!r}: tenant {user!r} needs its token (from the "
                        "operator; Tenant.connect(..., token=) or $PSDSF_TENANT_TOKEN)")
        elif not token_ok(self.tenant_secret, user, token):
            held = self.tenant_queues.get(user)
            if held is not None and await self._queue_lives(held):
                return (f"run {self.run_id!r}: user {user!r} is already connected from "
                        "another driver (connect under another name)")
        return TenantInfo(info.resources, info.servers, info.capacity, entry.weight,
                          info.period, tenant_token(self.tenant_secret, user))

    async def tenant_info(self, user: str) -> TenantInfo:
        """What a tenant's client checks its task shapes against."""
        await self._ensure()
        assert self.churn is not None
        full = self.churn.full
        if not full.raw.get("tenants") or self.node_spec is None:
            raise TenantRunError(f"run {self.run_id!r} takes no tenants (its scenario needs "
                                 "`servers: from-ray` and `tenants: true`)")
        present = self.churn.servers_present
        weight = (float(self.churn.weight[full.user_names.index(user)])
                  if user in full.user_names else None)
        return TenantInfo(tuple(full.resources),
                          tuple(s for s, up in zip(full.server_names, present, strict=True) if up),
                          np.asarray(full.capacity)[present].copy(), weight,
                          self.config.period)

    async def tenant_report(self, user: str, demand: dict[str, float], weight: float | None,
                            backlog: int, queue: Any = None,
                            token: str | None = None) -> TenantReply:
        """One queue's periodic report: its backlog (queued + running) becomes the user's
        presence and ``max_tasks`` (:class:`~psdsf_dist.admission.tenants.TenantBook`).
        Returns where its tasks may go: every present server's actor and Ray node.  With a
        tenant policy the report must carry ``user``'s token; the weight is the policy's
        for the asked one (never more than the operator's) and the backlog is bounded by
        the tenant's quota."""
        await self._ensure()
        assert self.churn is not None and self.lock is not None
        if not token_ok(self.tenant_secret, user, token):
            return TenantReply({}, f"refused: no valid token for tenant {user!r}")
        if is_unmanaged_user(user):
            return TenantReply({}, f"refused: {user!r} names a node's unmanaged work")
        error = None
        if self.policy is not None:
            try:
                weight = self.policy.weight(user, weight)
                backlog = self.policy.max_tasks(user, demand, backlog)
            except UnknownTenantError as err:  # the operator refused unknown tenants since
                await self._tenant_gone(user)
                return TenantReply({}, err.message)
        if queue is not None:
            held = self.tenant_queues.get(user)
            if held is not None and actor_key(held) != actor_key(queue) \
                    and await self._queue_lives(held):
                # one user, one queue: two would each report their own backlog and claim
                # the same user's slots
                return TenantReply({}, f"user {user!r} is already connected from another "
                                       "driver (connect under another name)")
            self.tenant_queues[user] = queue
        async with self.lock:  # one report's events apply together
            for item in self.tenants.report(user, demand, weight, backlog, self.now(),
                                            self._user_in_table(user)):
                ok, why = await self._change(item)
                if not ok:
                    error = why
                    break
        servers = {n: (m.handle, m.node) for n, m in self.members.items()
                   if m.node is not None and self._present(n)}
        return TenantReply(servers, error)

    async def tenant_leave(self, user: str, queue: Any = None, token: str | None = None) -> None:
        """A queue closed: its user leaves now (it rejoins when it reports work again).  A
        queue that is not the user's registered one (refused as a second connection) is
        ignored, and so is a call without ``user``'s token in a run with a tenant policy."""
        assert self.churn is not None
        held = self.tenant_queues.get(user)
        if queue is not None and held is not None and actor_key(held) != actor_key(queue):
            return
        if not token_ok(self.tenant_secret, user, token):
            return
        await self._tenant_gone(user)

    async def _tenant_gone(self, user: str) -> None:
        self.tenants.tenants.pop(user, None)
        self.tenant_queues.pop(user, None)
        if self._user_in_table(user).present:
            await self._change({"user_leaves": user})

    async def _expire_tenants(self) -> None:
        """Users whose queues fell silent leave — at once if Ray reports the queue's actor
        dead (its driver exited), else only after a long silence (a loaded queue)."""
        assert self.churn is not None
        now, period = self.now(), self.config.period
        silent = self.tenants.silent(now, period)
        if not silent:
            return

        async def lives(user: str) -> bool:
            queue = self.tenant_queues.get(user)
            return queue is not None and await self._queue_lives(queue)

        answers = await asyncio.gather(*(lives(u) for u in silent))
        alive = {u for u, up in zip(silent, answers, strict=True) if up}
        names = self.churn.full.user_names
        present = {u: bool(p) for u, p in zip(names, self.churn.users_present, strict=True)}
        for item in self.tenants.expired(now, period, present, alive):
            await self._change(item)
        for user in silent:
            if user not in self.tenants.tenants:
                self.tenant_queues.pop(user, None)

    async def _count_unmanaged(self) -> None:
        """Tenant runs: each server's unmanaged usage (work on its node the allocator did not
        admit) becomes the ``unmanaged@server`` user of the table, so that the tenants share
        only what is left (:mod:`psdsf_dist.admission.unmanaged`)."""
        assert self.churn is not None and self.lock is not None
        if not self.churn.full.raw.get("tenants") or self.node_spec is None:
            return
        members = [m for m in self.members.values() if self._present(m.name)]
        answers = await asyncio.gather(*(self._call(m.handle.unmanaged.remote(m.name))
                                         for m in members), return_exceptions=True)
        async with self.lock:
            for m, usage in zip(members, answers, strict=True):
                if usage is None or isinstance(usage, BaseException):
                    continue
                self.unmanaged[m.name] = usage
                table = self._user_in_table(unmanaged_user(m.name))
                for item in unmanaged_events(m.name, usage, known=table.known,
                                             present=table.present, demand=table.demand):
                    ok, why = await self._change(item)
                    if not ok:
                        self.failure = f"unmanaged usage of server {m.name}: {why}"
                        break
            for name in [n for n in self.unmanaged if n not in self.members]:
                del self.unmanaged[name]
        self.metrics.metrics.set_unmanaged(self.unmanaged)

    async def _queue_lives(self, queue: Any) -> bool:
        """Whether Ray still has a tenant's queue actor (one slow to answer counts)."""
        try:
            await asyncio.wait_for(queue.status.remote(), self.config.period)
        except ray.exceptions.RayActorError:
            return False
        except (TimeoutError, ray.exceptions.RayError):
            return True  # there, but slow to answer
        return True

    def _user_in_table(self, user: str) -> UserInTable:
        assert self.churn is not None
        names = self.churn.full.user_names
        if user not in names:
            return UserInTable(known=False)
        n = names.index(user)
        X = self.last_allocation
        allocated = float(X[n].sum()) if X is not None and n < X.shape[0] else 0.0
        return UserInTable(True, bool(self.churn.users_present[n]),
                           dict(zip(self.churn.full.resources,
                                    (float(v) for v in self.churn.demand[n]), strict=True)),
                           float(self.churn.weight[n]), float(self.churn.max_tasks[n]),
                           allocated)

    def _present(self, server: str) -> bool:
        assert self.churn is not None
        names = self.churn.full.server_names
        return server in names and bool(self.churn.servers_present[names.index(server)])

    # -- servers ------------------------------------------------------------------------------
    async def _start_clock(self) -> None:
        if isinstance(self.clock, WallClock):
            self.clock = WallClock(time.time())

    async def _spawn(self, names: list[str],
                     before_start: Callable[[], Awaitable[None]] | None = None) -> None:
        assert self.churn is not None
        nodes = await _alive_nodes()
        load = Counter(m.node for m in self.members.values()
                       if m.node is not None and m.name not in names)
        where = assign_nodes(names, nodes, self.pinned, load)
        for group in _groups(names, where, self.config.servers_per_actor):
            node, pinned = where[group[0]]
            incarnation = {n: self.incarnations.get(n, -1) + 1 for n in group}
            # named after its first server's incarnation: never the name of an earlier actor
            first = origin_name(group[0], incarnation[group[0]])
            actor = server_actor_name(self.run_id, first if len(group) == 1 else f"group-{first}")
            options: dict[str, Any] = {
                "name": actor, "namespace": NAMESPACE,
                "num_cpus": 0, "max_restarts": self.config.max_restarts,
                "max_concurrency": 1000,
            }
            if self.detached_servers:
                options["lifetime"] = "detached"  # outlives a coordinator restart
            if node is not None:  # hard: Ray ignores a soft affinity here (placement.py)
                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
            handle = RemoteServerActor.options(**options).remote(self.run_id, group, self.config,
                                                                 self.tenant_secret)
            self.actors[actor] = handle
            for name in group:
                self.members[name] = Member(name, handle, actor, incarnation[name], node, pinned)
                self.incarnations[name] = incarnation[name]
        fresh_actors = {self.members[n].actor for n in names}
        await asyncio.gather(*(self._call(self.actors[a].keep_notes.remote(self.notes),
                                          START_TIMEOUT)
                               for a in fresh_actors))  # every process is up
        if before_start is not None:
            await before_start()
        table = self.churn.table()
        self.tables[table.epoch] = table.scenario
        # A cluster that starts together knows its members (as in the simulator): the rule's
        # membership size and the peers chosen are right from the first round.
        everyone = before_start is not None
        await self._start_members([self.members[n] for n in names], table, everyone)
        # the others learn the newcomers' handles (their columns come by gossip)
        handles = {n: self.members[n].handle for n in names}
        fresh = {self.members[n].actor for n in names}
        await asyncio.gather(*(self._call(h.adopt.remote(table, handles))
                               for a, h in self.actors.items() if a not in fresh),
                             return_exceptions=True)

    async def _start_members(self, members: list[Member], table: Table,
                             everyone: bool = False) -> None:
        """Start servers: one call per actor (in parallel), which starts its servers one after
        another in the given order.  Ray does not keep the order of concurrent calls to an
        async actor, and a manual clock breaks ties between equal wake-up times by the order
        the servers went to sleep (as the simulator does); one call per server also queued each
        start behind the gossip of the servers already running (a 120-server start took
        minutes)."""
        by_actor: dict[str, list[Member]] = {}
        for m in members:
            by_actor.setdefault(m.actor, []).append(m)
        handles = {n: o.handle for n, o in self.members.items()}
        now = self.now() if isinstance(self.clock, ManualClock) else None
        started_at = self.clock.started_at if isinstance(self.clock, WallClock) else 0.0
        seed = self.config.protocol.seed

        def seeds(m: Member) -> list[str]:
            others = [origin_name(n, o.incarnation) for n, o in self.members.items()
                      if n != m.name]
            return seed_peers(others, server_seed(seed, m.name, m.incarnation),
                              everyone=everyone)

        await asyncio.gather(*(
            self._call(group[0].handle.start.remote(
                [(m.name, m.incarnation, seeds(m)) for m in group], table, started_at,
                handles, now), START_TIMEOUT)
            for group in by_actor.values()))

    async def _reports(self, actor: str, handle: Any,
                       alive: Callable[[], Awaitable[set[str]]]) -> list[ServerReport] | None:
        """The reports of one actor's servers (None: it did not answer).  ``alive``: the
        alive nodes (asked for only when an actor does not answer)."""
        hosted = [m for m in self.members.values() if m.actor == actor]
        try:
            reps: list[ServerReport] = await self._call(handle.report.remote())
        except (ray.exceptions.RayError, TimeoutError) as err:
            restarting = isinstance(err, (ray.exceptions.ActorUnavailableError, TimeoutError))
            if restarting:  # unless it waits for a node that is gone
                nodes = await alive()
                restarting = all(m.node is None or m.node in nodes for m in hosted)
            if not restarting:  # dead, or never coming back: counts towards "gone"
                for m in hosted:
                    m.gone += 1
            return None
        for m in hosted:
            m.gone = 0
        return reps

    async def _call(self, ref: Any, timeout: float | None = None) -> Any:
        limit = timeout if timeout is not None else max(self.config.rpc_timeout, 5.0)
        return await asyncio.wait_for(ref, limit)

    async def _check_nodes(self) -> None:
        """from-ray: every alive node without a server becomes one; a server pinned to a node
        that is gone has failed with it."""
        assert self.churn is not None and self.node_spec is not None
        nodes = await _ray_nodes()
        alive = {str(n["NodeID"]) for n in nodes if n.get("Alive")}
        for m in list(self.members.values()):
            if m.pinned and m.node is not None and m.node not in alive:
                await self._apply(ServerFails(self.now(), -1, m.name), from_scenario=False)
        known = set(self.pinned.values())
        for node in nodes:
            if node.get("Alive") and node["NodeID"] not in known:
                spec = self.node_spec(node)
                self.pinned[spec["name"]] = node["NodeID"]
                if spec["name"] in self.churn.full.server_names:  # a node came back
                    event = ServerJoins(self.now(), -1, spec["name"], None)
                else:
                    event = ServerJoins(self.now(), -1, spec["name"], spec)
                await self._apply(event, from_scenario=False)

    async def _relocate(self, actor: str) -> None:
        """The servers of an actor whose node is gone: a new actor on an alive node hosts them,
        as new incarnations (the others learn its handle; the old columns expire)."""
        handle = self.actors.pop(actor, None)
        if handle is None:
            return
        ray.kill(handle, no_restart=True)
        names = [m.name for m in self.members.values() if m.actor == actor]
        self.restarts += len(names)
        for name in names:
            self.metrics.restart(name)
        await self._faults(*(f"server {name} restarted on another node (its node is gone)"
                             for name in names))
        await self._spawn(names)

    # -- observing ----------------------------------------------------------------------------
    async def _observe(self) -> Observation:
        """One observation at a time: the monitor, :meth:`advance` and :meth:`result` may ask
        together, and an observation's round is the number of those made before it."""
        async with self.observing:
            return await self._observe_now()

    async def _observe_now(self) -> Observation:
        assert self.churn is not None
        churn = self.churn
        actors = list(self.actors.items())
        nodes: list[set[str]] = []

        async def alive() -> set[str]:
            if not nodes:
                nodes.append(set(await _alive_nodes()))
            return nodes[0]

        answers = await asyncio.gather(*(self._reports(a, h, alive) for a, h in actors))
        by_server: dict[str, ServerReport] = {}
        for reps in answers:
            for r in reps or []:
                by_server[r.name] = r
        members = list(self.members.values())
        # the table as observed: a tenant's report may change the live one (a user joins)
        # while this observation awaits its faults, restarts and pushes below
        current = churn.current()
        users_present = churn.users_present.copy()
        servers_present = churn.servers_present.copy()
        previous = self.last_allocation
        reply = observe_reports(ObservationRequest(
            round=len(self.observations), time=self.now(), scenario=current,
            servers_present=servers_present, epoch=churn.epoch, tables=self.tables,
            members=tuple(m.name for m in members), reports=by_server,
            gone={m.name: m.gone for m in members}, sent=self.traffic,
            previous_totals=(None if previous is None or previous.shape[0] != current.num_users
                             else previous.sum(axis=1)),
            config=self.config))
        self.traffic = reply.sent
        for name, error in reply.errors.items():
            self.failure = f"server {name}: {error}"
        for name, rep in by_server.items():
            self.pids[name] = rep.pid
        crashed = [self.members[name] for name in reply.restart]
        # a server whose loop stopped on an error keeps its last column for good: it is
        # restarted like a crashed one (the error stays in ``failure``), unless it keeps erring
        for name, rep in by_server.items():
            if rep.running and name not in reply.errors:
                self.erred.pop(name, None)
        broke: list[Member] = []
        hopeless: list[str] = []
        for name in reply.errors:
            if name not in self.members:
                continue
            self.erred[name] = self.erred.get(name, 0) + 1
            if self.erred[name] >= ERROR_RESTARTS:
                hopeless.append(name)
            else:
                broke.append(self.members[name])
        for m in (*crashed, *broke):  # a new incarnation each
            m.incarnation = self.incarnations.get(m.name, m.incarnation) + 1
            self.incarnations[m.name] = m.incarnation
            self.restarts += 1
            self.metrics.restart(m.name)
        if crashed or broke:  # one notes update, and the servers start together
            await self._faults(*(f"server {m.name} restarted after a crash" for m in crashed),
                               *(f"server {m.name} restarted after an error" for m in broke))
            await self._start_members([*crashed, *broke], churn.table())
        # a server on an older table missed a push (its adopt call failed or timed out): it
        # would act on the old table until the next change, and the run never certify
        missed = {self.members[r.name].actor for r in by_server.values()
                  if r.running and r.epoch < churn.epoch and r.name in self.members}
        if missed:
            await self._push_table(missed)
        for name in hopeless:
            error = reply.errors[name]
            await self._faults(f"server {name} failed: its loop erred {ERROR_RESTARTS} times in "
                               f"a row ({error})")
            await self._apply(ServerFails(self.now(), -1, name), from_scenario=False)
            self.erred.pop(name, None)
        for name in reply.failed:
            gone = self.members.get(name)
            if gone is None:
                continue
            if not gone.pinned and gone.node is not None and gone.node not in await alive():
                await self._relocate(gone.actor)  # its node is gone: place it again
            else:
                await self._apply(ServerFails(self.now(), -1, name), from_scenario=False)
        obs = reply.observation
        self.observations.append(obs)
        await self._journal()
        self.last_allocation = reply.allocation
        self.metrics.observe(
            current, reply.allocation, users=users_present,
            servers=servers_present, residual=obs.residual, holds=obs.holds,
            now=obs.time, cap_excess=obs.cap_excess, distance=obs.distance,
            reports=[ServerCounts(r.name, r.origin, r.rounds, r.messages, r.bytes,
                                  r.round_seconds, r.staleness_seconds)
                     for r in by_server.values() if r.running])
        try:
            self.ray_metrics.push()
        except Exception as err:  # the export must not stop the observations
            self.failure = f"Ray metrics export: {type(err).__name__}: {err}"
        return obs

    # -- metrics ------------------------------------------------------------------------------
    async def serve_metrics(self, port: int, bind: str, per_pair: bool = True) -> str:
        """Export the run's Prometheus metrics (:mod:`psdsf_dist.observability.metrics`) on one
        HTTP endpoint served from this process; returns its URL.  Calling it again returns the same
        URL.  The registry is the one kept since the start (also exported through Ray's
        pipeline); ``per_pair`` applies to both."""
        if self.metrics_server is None:
            metrics = self.metrics.metrics
            metrics.per_pair = per_pair
            self.metrics_server = MetricsServer(metrics.registry, port, bind).start()
            # a restarted coordinator serves again on the port bound now (port 0 included)
            await self._note(metrics=(self.metrics_server.port, bind, per_pair))
        server = self.metrics_server
        host = server.bind
        if host in ("0.0.0.0", "::", ""):  # all interfaces: name the one Ray knows this node by
            node_ip: Any = ray.util.get_node_ip_address
            host = str(node_ip())
        return f"http://{host}:{server.port}/metrics"

    def _serve_noted_metrics(self) -> None:
        """A restarted coordinator: the endpoint its predecessor served, on the same port."""
        noted = self.notes.get("metrics")
        if noted is None or self.metrics_server is not None:
            return
        port, bind, per_pair = noted
        metrics = self.metrics.metrics
        metrics.per_pair = bool(per_pair)
        try:
            self.metrics_server = MetricsServer(metrics.registry, int(port), str(bind)).start()
        except MetricsEndpointError as err:
            self.failure = str(err)

    # -- answers ------------------------------------------------------------------------------
    async def run_config(self) -> RunConfig:
        """The settings this run was launched with (what ``attach`` gives its handle)."""
        return self.config

    async def status(self) -> dict[str, Any]:
        await self._ensure()
        assert self.churn is not None
        last = self.observations[-1] if self.observations else None
        history = self.churn.history
        last_event_at = history[-1][1] if history else 0.0
        since = self.now() - last_event_at
        return {
            "time": self.now(),
            "round": None if last is None else last.round,
            "residual": None if last is None else last.residual,
            "holds": None if last is None else last.holds,
            "feasible": all(o.feasible for o in self.observations),
            "utilization": None if last is None else last.utilization,
            "since_last_event": since,
            "last_event_at": last_event_at,
            "servers": len(self.members),
            "users": int(self.churn.users_present.sum()),
            "epoch": self.churn.epoch,
            "members": sorted(self.members),
            "present_users": [u for u, p in zip(self.churn.full.user_names,
                                                self.churn.users_present, strict=True) if p],
            "events_applied": self.churn.scenario_events_applied,
            "events_total": len(self.events),
            "tables_pushed": len(self.tables),
            "restarts": self.restarts,
            "coordinator_restarted": self.restarted,
            "coordinator_restarts": self.coordinator_restarts,
            "failure": self.failure,
            "tenant_policy": None if self.policy is None else self.policy.to_raw(),
            "policy_changes": [list(c) for c in self.policy_changes],
            "unmanaged": {n: dict(u) for n, u in self.unmanaged.items()
                          if any(v > 0 for v in u.values())},
        }

    async def observations_json(self, since: int = 0) -> list[dict[str, Any]]:
        return [o.to_json() for o in self.observations[since:]]

    async def result(self) -> RunResult:
        await self._ensure()
        assert self.churn is not None
        # read between observations: the table, the allocation and the trace agree
        async with self.observing:
            current = self.churn.current()
            X = self.last_allocation
            if X is None or X.shape != (current.num_users, current.num_servers):
                await self._observe_now()
                current = self.churn.current()  # the observation may have applied churn
                X = self.last_allocation
            assert X is not None
            conv = event_convergence([*self.churn.history, *self.faults], self.observations,
                                     self.config.period, self.config.protocol.hold)
            return RunResult(current, X.copy(), tuple(self.observations), tuple(conv),
                             self.config, len(self.members), self.restarts,
                             tuple(self.pids.values()), self.coordinator_restarts)

    async def allocation(self) -> FloatArray | None:
        """The latest observation's allocation (users x servers of the run's universe; None
        before the first): what :meth:`result` gives, without shipping every observation (a
        light call, for tracing a run period by period)."""
        await self._ensure()
        return None if self.last_allocation is None else self.last_allocation.copy()

    async def user_totals(self) -> dict[str, float]:
        """Each present user's tasks in the latest observation, summed over the servers (a
        light call, for watching a run)."""
        await self._ensure()
        assert self.churn is not None
        X = self.last_allocation
        if X is None:
            return {}
        return {u: float(X[n].sum()) for n, u in enumerate(self.churn.full.user_names)
                if n < X.shape[0] and self.churn.users_present[n]}

    async def handles(self) -> dict[str, Any]:
        """server name -> the actor hosting it."""
        return {n: m.handle for n, m in self.members.items()}


def _groups(names: list[str], where: Mapping[str, tuple[str | None, bool]],
            size: int) -> list[list[str]]:
    """Servers in groups of at most ``size`` that share a node (one actor per group)."""
    by_node: dict[tuple[str | None, bool], list[str]] = {}
    for n in names:
        by_node.setdefault(where[n], []).append(n)
    out: list[list[str]] = []
    for members in by_node.values():
        out += [members[k:k + size] for k in range(0, len(members), size)]
    return out


async def _alive_nodes() -> list[str]:
    return sorted(str(n["NodeID"]) for n in await _ray_nodes() if n.get("Alive"))


async def _ray_nodes() -> list[dict[str, Any]]:
    """Ray's node table, read in a worker thread: the read is a blocking call to Ray's GCS
    (slow on a loaded machine), and the coordinator's one event loop also answers the tenants'
    reports and connects."""
    nodes: Any = ray.nodes
    return list(await asyncio.to_thread(nodes))


RemoteCoordinator: Any = ray.remote(Coordinator)
