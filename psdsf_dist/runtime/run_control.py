"""The coordinator's work, behind its actor (:mod:`psdsf_dist.runtime.coordinator`): the run's
churn, clock, observations and faults.

Each step's decisions are pure and live elsewhere: the churn in
:class:`~psdsf_dist.protocol.membership.ChurnState`, the observation in
:func:`~psdsf_dist.runtime.observation.observe_reports`, what to do about the servers after it
in :func:`~psdsf_dist.runtime.recovery.plan_recovery`, a restart's state in
:func:`~psdsf_dist.runtime.rebuild.rebuild_state`, the status in
:func:`~psdsf_dist.runtime.run_status.run_status`.  This class sequences them and keeps their
state between calls; the Ray work goes to a :class:`~psdsf_dist.runtime.server_pool.ServerPool`
(the server actors, whose faults :class:`~psdsf_dist.runtime.server_care.ServerCare` carries
out) and a :class:`~psdsf_dist.runtime.tenant_desk.TenantDesk` (the tenants).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from psdsf_dist.admission.identity import secret_ok
from psdsf_dist.admission.unmanaged import UNMANAGED_SAMPLES_PER_PERIOD
from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.events import Event
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.observability.metrics import AllocatorMetrics, RunMetrics, ServerCounts
from psdsf_dist.observability.metrics_server import MetricsEndpoint, MetricsServer
from psdsf_dist.observability.ray_export import RayMetricsExport
from psdsf_dist.protocol.convergence import Observation, ObservationJson, event_convergence
from psdsf_dist.protocol.membership import ChurnState, Table
from psdsf_dist.runtime.clock import ManualClock, WallClock
from psdsf_dist.runtime.messages import FloatArray, NotStartedError, RunResult
from psdsf_dist.runtime.observation import ObservationRequest, observe_reports
from psdsf_dist.runtime.rebuild import rebuild_state
from psdsf_dist.runtime.recovery import RecoveryRequest, plan_recovery
from psdsf_dist.runtime.run_status import RunStatus, run_status, user_allocation, user_totals
from psdsf_dist.runtime.server_care import NodeSpec, ServerCare
from psdsf_dist.runtime.server_pool import AliveNodes, ServerPool, alive_nodes
from psdsf_dist.runtime.settings import RunConfig
from psdsf_dist.runtime.tenant_desk import TenantDesk

NODE_CHECK_PERIODS = 5  # from-ray runs: look for new nodes this often


class RunControl:
    """The run's state between the coordinator's calls, and the steps over it."""

    def __init__(self, run_id: str, scenario: Scenario, config: RunConfig,
                 pinned: Mapping[str, str] | None, detached_servers: bool,
                 node_spec: NodeSpec | None, secret: str | None, restarted: bool) -> None:
        self.run_id = run_id
        self.secret = secret
        """The run's secret: churn and stop are refused without it (None: no check)."""
        self.scenario = scenario
        self.config = config
        self.node_spec = node_spec
        """from-ray runs: makes the server entry of a new Ray node (None: nodes are not
        servers)."""
        self.restarted = restarted
        self.churn: ChurnState | None = None
        self.events: tuple[Event, ...] = ()
        self.observations: list[Observation] = []
        self.clock: WallClock | ManualClock = (ManualClock() if config.clock == "manual"
                                               else WallClock(time.time()))
        """The run's clock: a manual one :meth:`advance` moves, or the wall clock from the
        moment every actor was up (:meth:`start`)."""
        self.tables: dict[int, Scenario] = {}
        self.traffic: dict[str, tuple[int, int]] = {}
        self.pids: dict[str, int] = {}
        self.restarts = 0
        """Server incarnations started after a crash, an error or their node's loss."""
        self.coordinator_restarts = 0
        self.erred: dict[str, int] = {}
        """server -> errors of its loop in a row (:mod:`psdsf_dist.runtime.recovery`)."""
        self.faults: list[tuple[str, float]] = []
        """Faults as events (description, run time), kept in the notes with ``restarts``."""
        self.monitor: asyncio.Task[None] | None = None
        self.last_allocation: FloatArray | None = None
        self.lock = asyncio.Lock()
        """Held while changes that belong together apply (a rebuild, a report, a count of
        unmanaged work)."""
        self.observing = asyncio.Lock()
        self.failure: str | None = None
        self.desk = TenantDesk(self, scenario.tenant_policy, secret)
        self.care = ServerCare(self)
        self.pool = ServerPool(run_id, config, dict(pinned or {}), detached_servers,
                               self.desk.secret)
        self.metrics = RunMetrics(AllocatorMetrics())
        """Always kept: exported through Ray's metrics pipeline after every observation, and on
        an HTTP endpoint of its own once :meth:`serve_metrics` is asked for."""
        self.ray_metrics = RayMetricsExport(self.metrics.metrics.registry)
        self.endpoint = MetricsEndpoint(self.metrics.metrics)
        self.ready = False

    # -- what the tenant desk asks (DeskHost) -------------------------------------------------
    @property
    def period(self) -> float:
        return self.config.period

    def now(self) -> float:
        return self.clock.now()

    def state(self) -> ChurnState:
        if self.churn is None:
            raise NotStartedError(f"run {self.run_id!r} has not been started")
        return self.churn

    def takes_tenants(self) -> bool:
        return self.state().full.tenants and self.node_spec is not None

    def present(self, server: str) -> bool:
        churn = self.state()
        names = churn.full.server_names
        return server in names and bool(churn.servers_present[names.index(server)])

    async def change(self, item: Mapping[str, object]) -> tuple[bool, str]:
        """One change in the scenario-file syntax (the operator's: the API and the CLI),
        applied now: (True, its description) or (False, why it was refused)."""
        await self.ensure()
        try:
            event = self.state().parse(item)
        except ScenarioError as err:
            return False, str(err)
        return await self.apply_event(event)

    async def apply_event(self, event: Event, wait: bool = True) -> tuple[bool, str]:
        """One typed change applied now: (True, its description) or (False, why the state
        cannot take it); ``wait=False``: the table goes to the servers in the background."""
        await self.ensure()
        try:
            await self.apply_events(event, from_scenario=False, wait=wait)
        except ScenarioError as err:
            return False, str(err)
        return True, event.describe()

    async def operator_change(self, item: Mapping[str, object]) -> tuple[bool, str]:
        """The operator's change (:meth:`Coordinator.apply`, secret checked): churn, or a
        change of the tenant policy (:meth:`TenantDesk.operator_change`)."""
        await self.ensure()
        return await self.desk.operator_change(item)

    # -- life cycle ---------------------------------------------------------------------------
    async def start(self) -> int:
        """Start the run: one server actor per present server.  Returns how many."""
        self.churn, self.events = ChurnState.start(self.scenario)
        self.ready = True
        names = self.churn.present_servers()
        # the clock starts once every actor is up: event times count from when servers can act
        await self.spawn(names, start_clock=True)
        if self.config.clock == "real":
            self.monitor = asyncio.get_running_loop().create_task(self._monitor())
        return len(names)

    async def ensure(self) -> None:
        """A restarted coordinator rebuilds its state from the servers before anything else."""
        if self.ready:
            return
        async with self.lock:
            if self.ready:
                return
            if not self.restarted:
                raise NotStartedError("the run has not been started")
            await self._rebuild()
            self.ready = True
            self.failure = self.endpoint.reopen(self.pool.notes.get("metrics")) or self.failure
            if self.config.clock == "real" and self.monitor is None:
                self.monitor = asyncio.get_running_loop().create_task(self._monitor())

    async def _rebuild(self) -> None:
        """Rebuild the state from the server actors' (:mod:`psdsf_dist.runtime.rebuild`)."""
        pool = self.pool
        found = pool.find_actors()
        got = rebuild_state(await pool.states(found), pool.pinned, await alive_nodes())
        pool.adopt(found, got)
        self.observations = list(got.observations)
        if isinstance(self.clock, ManualClock):
            self.clock.move_to(got.latest_time)
        elif got.started_at is not None:
            self.clock = WallClock(got.started_at)
        self.churn = ChurnState.resume(got.table)
        _, self.events = ChurnState.start(self.scenario)
        await self.push_table()
        await self.care.fail(*got.missing_failed)
        self.restarts, self.coordinator_restarts = got.restarts, got.coordinator_restarts
        self.faults = list(got.faults)
        self.desk.restore(pool.notes, self.scenario.resources)
        await self.record_faults("coordinator restarted",
                                 *(f"server {s} restarted (no actor hosted it)"
                                   for s in got.missing_restart))
        if got.missing_restart:
            await self.spawn(list(got.missing_restart))
        # what the endpoint, reopened next, serves until the next observation: the rebuilt
        # membership and the last journaled certificate (an empty page would read as no run)
        churn = self.state()
        self.metrics.metrics.set_membership(int(churn.servers_present.sum()),
                                            int(churn.users_present.sum()))
        if self.observations:
            last = self.observations[-1]
            self.metrics.metrics.set_certificate(last.residual, last.holds, last.cap_excess,
                                                 last.distance)

    def authorised(self, secret: str | None) -> bool:
        return secret_ok(self.secret, secret)

    def stop(self) -> None:
        if self.monitor is not None:
            self.monitor.cancel()
            self.monitor = None
        self.pool.stop()
        self.endpoint.stop()

    async def record_faults(self, *descriptions: str) -> None:
        """Faults as events of the run (their re-convergence is measured like churn's), kept
        in the notes (one update for them all) for a restarted coordinator to report."""
        now = self.now()
        self.faults += [(d, now) for d in descriptions]
        await self.pool.note(faults=list(self.faults), restarts=self.restarts,
                             coordinator_restarts=self.coordinator_restarts)

    # -- time ---------------------------------------------------------------------------------
    async def advance(self, periods: int) -> list[ObservationJson]:
        """Manual clock: move the run ``periods`` periods on and observe after each.

        A period goes in ``gossip_rate`` steps.  At each step the events due by the current
        time are applied first, then every actor runs the wake-ups due before the step's end;
        after the last step the events due at the period's end are applied and the run is
        observed — the simulator's order of events, wake-ups and observations."""
        await self.ensure()
        out: list[ObservationJson] = []
        T = self.config.period
        steps = self.config.protocol.gossip_rate
        for _ in range(periods):
            assert isinstance(self.clock, ManualClock)
            start = self.clock.now()
            for j in range(1, steps + 1):
                await self._due_events()
                t = start + T * j / steps
                await self.pool.advance_to(t)
                self.clock.move_to(t)
            await self._due_events()
            out.append((await self.observe()).to_json())
            if self.node_spec is not None and len(self.observations) % NODE_CHECK_PERIODS == 0:
                await self.care.check_nodes()
        return out

    async def _monitor(self) -> None:
        """Every period: due events, expiries, unmanaged usage, an observation; unmanaged
        usage also in between (``UNMANAGED_SAMPLES_PER_PERIOD``)."""
        step = self.config.period / UNMANAGED_SAMPLES_PER_PERIOD
        while True:
            await self.clock.sleep(step - (self.now() % step))
            try:
                if round(self.now() / step) % UNMANAGED_SAMPLES_PER_PERIOD:
                    await self.desk.count_unmanaged()
                    continue
                await self._due_events()
                await self.desk.expire()
                await self.desk.count_unmanaged()
                self.metrics.metrics.set_unmanaged(self.desk.unmanaged)
                await self.observe()
                if self.node_spec is not None and len(self.observations) % NODE_CHECK_PERIODS == 0:
                    await self.care.check_nodes()
            except Exception as err:  # keep observing; the failure shows in status
                self.failure = f"{type(err).__name__}: {err}"

    # -- churn --------------------------------------------------------------------------------
    async def _due_events(self) -> None:
        due = self.state().due(self.events, self.now(), self.config.time_scale)
        if due:
            await self.apply_events(*due, from_scenario=True)

    async def apply_events(self, *events: Event, from_scenario: bool, wait: bool = True) -> None:
        """Apply events due together as one change (:meth:`ChurnState.apply_together`, as the
        simulator does): failed servers stop, every actor adopts the table once, joined
        servers start."""
        now = self.now()
        change = self.state().apply_together(events, now, from_scenario=from_scenario)
        for event in events:
            self.metrics.event(event, now)
        for server in change.failed:
            await self.pool.remove(server)
        if wait or change.failed or change.joined:
            await self.push_table()
        else:
            self.pool.push_soon(self.table)
        if change.joined:
            await self.spawn(list(change.joined))

    def table(self) -> Table:
        """The current table, remembered by epoch (the observation checks each server's
        column against the table it had)."""
        table = self.state().table()
        self.tables[table.epoch] = table.scenario
        return table

    async def push_table(self, actors: set[str] | frozenset[str] | None = None) -> None:
        await self.pool.push(self.table(), actors)

    # -- servers ------------------------------------------------------------------------------
    def clock_origin(self) -> tuple[float | None, float]:
        """(the manual clock's time or None, the wall clock's origin or 0) for a start."""
        if isinstance(self.clock, ManualClock):
            return self.clock.now(), 0.0
        return None, self.clock.started_at

    async def spawn(self, names: list[str], start_clock: bool = False) -> None:
        """New actors for ``names``, started on the current table.  ``start_clock``: the
        run's first start — the wall clock starts once every actor is up, and the servers
        know each other from the first round."""
        await self.pool.create(names)
        if start_clock and isinstance(self.clock, WallClock):
            self.clock = WallClock(time.time())
        now, started_at = self.clock_origin()
        await self.pool.start_new(names, self.table(), now, started_at, everyone=start_clock)

    # -- observing ----------------------------------------------------------------------------
    async def observe(self) -> Observation:
        """One observation at a time: the monitor, :meth:`advance` and :meth:`result` may ask
        together, and an observation's round is the number of those made before it."""
        async with self.observing:
            return await self._observe_now()

    async def _observe_now(self) -> Observation:
        churn = self.state()
        alive = AliveNodes()
        by_server = await self.pool.reports(alive)
        members = list(self.pool.members.values())
        # the table as observed: a tenant's report may change the live one (a user joins)
        # while this observation awaits its faults, restarts and pushes below
        current = churn.current()
        users_present = churn.users_present.copy()
        servers_present = churn.servers_present.copy()
        previous = self.last_allocation
        # in a thread: a new scenario's cold solve takes seconds; tenants' reports go on meanwhile
        reply = await asyncio.to_thread(observe_reports, ObservationRequest(
            round=len(self.observations), time=self.now(), scenario=current,
            servers_present=servers_present, epoch=churn.epoch, tables=dict(self.tables),
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
        plan = plan_recovery(RecoveryRequest(
            by_server, self.pool.members, reply.restart, reply.errors, reply.failed, self.erred,
            churn.epoch, await alive.get() if reply.failed else ()))
        self.erred = plan.erred
        await self.care.recover(plan)
        obs = reply.observation
        self.observations.append(obs)
        await self.pool.journal(self.observations)
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
    async def serve_metrics(self, port: int, bind: str, per_pair: bool) -> MetricsServer:
        """Export the run's metrics on one HTTP endpoint served from this process (the same
        one if already served); its port is noted for a restarted coordinator."""
        if self.endpoint.server is None:
            self.endpoint.open(port, bind, per_pair)
            # a restarted coordinator serves again on the port bound now (port 0 included)
            await self.pool.note(metrics=self.endpoint.noted())
        assert self.endpoint.server is not None
        return self.endpoint.server

    # -- answers ------------------------------------------------------------------------------
    def status(self) -> RunStatus:
        return run_status(self.state(), self.now(), self.observations, self.events,
                          sorted(self.pool.members), len(self.tables), self.restarts,
                          self.restarted, self.coordinator_restarts, self.failure,
                          self.desk.policy, self.desk.policy_changes, self.desk.unmanaged)

    async def result(self) -> RunResult:
        # read between observations: the table, the allocation and the trace agree
        async with self.observing:
            current = self.state().current()
            X = self.last_allocation
            if X is None or X.shape != (current.num_users, current.num_servers):
                await self._observe_now()
                current = self.state().current()  # the observation may have applied churn
                X = self.last_allocation
            assert X is not None
            conv = event_convergence([*self.state().history, *self.faults], self.observations,
                                     self.config.period, self.config.protocol.hold)
            return RunResult(current, X.copy(), tuple(self.observations), tuple(conv),
                             self.config, len(self.pool.members), self.restarts,
                             tuple(self.pids.values()), self.coordinator_restarts)

    def user_totals(self) -> dict[str, float]:
        return user_totals(self.state(), self.last_allocation)

    def user_allocation(self) -> dict[str, dict[str, float]]:
        return user_allocation(self.state(), self.last_allocation)

