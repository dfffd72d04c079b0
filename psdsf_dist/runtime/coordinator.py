"""The coordinator actor: membership, churn and convergence tracking — never the allocation.

The actor is a thin shell: its methods are the run's interface (start, advance, apply, the
tenants' calls, status, result) and each calls into
:class:`~psdsf_dist.runtime.run_control.RunControl`, which sequences the pure steps and holds
the state; the server actors are driven through a
:class:`~psdsf_dist.runtime.server_pool.ServerPool`, the tenants through a
:class:`~psdsf_dist.runtime.tenant_desk.TenantDesk`.

It starts one server actor per present server (placed by :func:`assign_nodes`), hands each a
few peers to gossip with, and applies churn — the scenario's events at their (scaled) times, and
changes asked for through :meth:`Coordinator.apply` (the Python API and the CLI) — by making a
new :class:`~psdsf_dist.protocol.membership.Table` and pushing it to every server.  Once per period
it collects the servers' columns, checks feasibility and the PS-DSF certificate on the scenario
as it stands, and records the observation; per event it reports how long the servers took to
re-converge.  The columns are the servers' own: the coordinator only reads them.

Faults
    A server actor that stops answering counts as holding nothing.  Ray restarts a crashed actor
    (``max_restarts``); its next report says it is not running, and the coordinator starts it
    again as a new incarnation with the current table.  So it does with a server whose loop
    stopped on an error (a bug: the error is the run's ``failure``), which would otherwise keep
    its last column for good — unless its loop erred
    :data:`~psdsf_dist.runtime.recovery.ERROR_RESTARTS` times in a row, a bug every incarnation
    hits: then it has failed (churn ``server fails``).  A server that missed a table (its
    ``adopt`` call failed or timed out) reports an older epoch at the next observation and is
    sent the table again.  A scenario server whose node is gone is started again on an alive
    node, as a new incarnation in a new actor (actors are pinned to their node,
    :mod:`psdsf_dist.runtime.placement`).  An actor gone for good otherwise (restarts exhausted,
    or the node of a ``servers: from-ray`` server removed) is a failed server: churn ``server
    fails``.  With ``servers: from-ray`` a new Ray node becomes a new server.
Restart
    The coordinator keeps nothing it cannot rebuild: every server holds the newest table it has
    adopted (membership, users, demands, weights, event history, how many scenario events were
    applied) and the run's start time, the servers' gossip knows every incarnation so far, and
    the server actors keep the coordinator's notes (its metrics endpoint, the faults and the
    restart count) and, on :data:`~psdsf_dist.runtime.server_pool.JOURNAL_REPLICAS` of them, its
    journal: every observation, sent after each is made.  A restarted coordinator finds the
    run's server actors by name, adopts the newest table among theirs, takes the longest
    journal, serves metrics again where it did, and carries on: a server the table counts but no
    actor answers for is started again (or fails, if its node is gone).  So its result — the
    trace, the per-event convergence, the faults and restarts — is the one an uninterrupted
    coordinator would give, but for the observations due while it was down (and its latest one,
    if every replica lost it too).
"""

from __future__ import annotations

from collections.abc import Mapping

import ray

from psdsf_dist.model.scenario import Scenario
from psdsf_dist.protocol.convergence import ObservationJson
from psdsf_dist.runtime.handles import (
    CoordinatorHandle,
    QueueHandle,
    ServerHandle,
    actor_class,
    this_actor,
)
from psdsf_dist.runtime.messages import FloatArray, RunResult, TenantInfo, TenantReply
from psdsf_dist.runtime.ray_state import node_ip_address
from psdsf_dist.runtime.run_control import RunControl
from psdsf_dist.runtime.run_status import RunStatus
from psdsf_dist.runtime.server_care import NodeSpec
from psdsf_dist.runtime.settings import RunConfig


class Coordinator:
    """The actor: Ray's entry points, each a call into :class:`RunControl`.  Only the calls
    below are the coordinator's interface; nothing else of the run is a method of the actor."""

    def __init__(self, run_id: str, scenario: Scenario, config: RunConfig,
                 pinned: Mapping[str, str] | None = None, detached_servers: bool = True,
                 node_spec: NodeSpec | None = None, secret: str | None = None) -> None:
        # the secret is a constructor argument, so that Ray gives it to a restarted
        # coordinator too
        ctx = ray.get_runtime_context()
        restarted = bool(ctx.was_current_actor_reconstructed)
        self.run = RunControl(run_id, scenario, config, pinned, detached_servers, node_spec,
                              secret, restarted)
        if restarted:  # rebuild at once: no caller may come (a detached run, metrics only)
            this_actor(CoordinatorHandle).resume.remote()

    # -- life cycle ---------------------------------------------------------------------------
    async def start(self) -> int:
        """Start the run: one server actor per present server.  Returns how many."""
        return await self.run.start()

    async def resume(self) -> None:
        """A restarted coordinator's first step (it calls itself): rebuild the state."""
        try:
            await self.run.ensure()
        except Exception as err:  # shown by status; a later call tries again
            self.run.failure = f"{type(err).__name__}: {err}"

    async def stop(self, secret: str | None = None) -> bool:
        """Stop the monitor and end every server actor of the run, if ``secret`` is the
        run's.  Returns whether it stopped."""
        if not self.run.authorised(secret):
            return False
        self.run.stop()
        return True

    async def advance(self, periods: int = 1) -> list[ObservationJson]:
        """Manual clock: move the run ``periods`` periods on and observe after each."""
        return await self.run.advance(periods)

    async def apply(self, item: Mapping[str, object],
                    secret: str | None = None) -> tuple[bool, str]:
        """Apply one change now, in the scenario-file syntax, e.g. ``{"user_leaves": "u4"}``
        or ``{"set_weight": {"user": "u1", "weight": 3}}``, if ``secret`` is the run's.
        Returns (True, its description), or (False, why it was refused) — as a value, so that
        the caller gets the one-line message rather than a wrapped remote exception."""
        if not self.run.authorised(secret):
            return False, (f"run {self.run.run_id!r} refused the change: wrong or missing run "
                           "secret (the launching Run's .secret)")
        return await self.run.operator_change(item)

    # -- tenants (:mod:`psdsf_dist.runtime.tenant_desk`) --------------------------------------
    async def tenant_connect(self, user: str, token: str | None = None) -> TenantInfo | str:
        await self.run.ensure()
        return await self.run.desk.connect(user, token)

    async def tenant_info(self, user: str) -> TenantInfo:
        await self.run.ensure()
        return self.run.desk.info(user)

    async def tenant_report(self, user: str, demand: dict[str, float], weight: float | None,
                            backlog: int, queue: QueueHandle | None = None,
                            token: str | None = None) -> TenantReply:
        await self.run.ensure()
        return await self.run.desk.report(user, demand, weight, backlog, queue, token)

    async def tenant_leave(self, user: str, queue: QueueHandle | None = None,
                           token: str | None = None) -> None:
        await self.run.ensure()
        await self.run.desk.leave(user, queue, token)

    # -- metrics and answers ------------------------------------------------------------------
    async def serve_metrics(self, port: int, bind: str, per_pair: bool = True) -> str:
        """Export the run's Prometheus metrics (:mod:`psdsf_dist.observability.metrics`) on one
        HTTP endpoint served from this process; returns its URL.  Calling it again returns the
        same URL.  The registry is the one kept since the start (also exported through Ray's
        pipeline); ``per_pair`` applies to both."""
        server = await self.run.serve_metrics(port, bind, per_pair)
        host = server.bind
        if host in ("0.0.0.0", "::", ""):  # all interfaces: name the one Ray knows this node by
            host = node_ip_address()
        return f"http://{host}:{server.port}/metrics"

    async def run_config(self) -> RunConfig:
        """The settings this run was launched with (what ``attach`` gives its handle)."""
        return self.run.config

    async def status(self) -> RunStatus:
        await self.run.ensure()
        return self.run.status()

    async def observations_json(self, since: int = 0) -> list[ObservationJson]:
        return [o.to_json() for o in self.run.observations[since:]]

    async def result(self) -> RunResult:
        await self.run.ensure()
        return await self.run.result()

    async def allocation(self) -> FloatArray | None:
        """The latest observation's allocation (users x servers of the run's universe; None
        before the first): what :meth:`result` gives, without shipping every observation (a
        light call, for tracing a run period by period)."""
        await self.run.ensure()
        X = self.run.last_allocation
        return None if X is None else X.copy()

    async def user_totals(self) -> dict[str, float]:
        """Each present user's tasks in the latest observation, summed over the servers (a
        light call, for watching a run)."""
        await self.run.ensure()
        return self.run.user_totals()

    async def user_allocation(self) -> dict[str, dict[str, float]]:
        """Each present user's tasks on each server in the latest observation (a light call,
        for watching where a run places its users)."""
        await self.run.ensure()
        return self.run.user_allocation()

    async def handles(self) -> dict[str, ServerHandle]:
        """server name -> the actor hosting it."""
        return {n: m.handle for n, m in self.run.pool.members.items()}


RemoteCoordinator = actor_class(Coordinator, CoordinatorHandle)
