"""The coordinator's side of tenants: who may connect, what a queue's report changes, when a
silent tenant leaves, and the nodes' unmanaged work.

The decisions are the admission layer's: the operator's policy
(:class:`~psdsf_dist.model.tenant_policy.TenantPolicy`: weights, quotas, unknown tenants), the
tokens (:mod:`psdsf_dist.admission.identity`), the backlog reports turned into churn
(:class:`~psdsf_dist.admission.tenants.TenantBook`) and unmanaged usage turned into a user per
node (:mod:`psdsf_dist.admission.unmanaged`).  The desk holds the state between calls (the
latest reports, each user's queue actor, the policy as changed) and asks Ray whether a silent
queue's actor still lives; every change it decides goes through the run's churn
(:meth:`DeskHost.apply_event`): typed events from the admission layer, no round trip
through the scenario file's syntax.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol

import numpy as np
import ray

from psdsf_dist.admission.identity import tenant_token, token_ok
from psdsf_dist.admission.tenants import TenantBook, UserInTable
from psdsf_dist.admission.unmanaged import (
    UNMANAGED_WEIGHT,
    is_unmanaged_user,
    unmanaged_events,
    unmanaged_user,
)
from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.events import Event, UserJoins, UserLeaves
from psdsf_dist.model.tenant_policy import TenantPolicy, UnknownTenantError, parse_tenant_policy
from psdsf_dist.protocol.membership import ChurnState
from psdsf_dist.runtime.handles import QueueHandle
from psdsf_dist.runtime.messages import FloatArray, Notes, TenantInfo, TenantReply, TenantRunError
from psdsf_dist.runtime.names import actor_key
from psdsf_dist.runtime.server_pool import ServerPool


class DeskHost(Protocol):
    """What the desk needs of the coordinator."""

    run_id: str
    pool: ServerPool
    lock: asyncio.Lock
    """Held while one report's (or one unmanaged count's) changes apply together."""
    last_allocation: FloatArray | None
    failure: str | None

    @property
    def period(self) -> float: ...

    def now(self) -> float: ...

    def state(self) -> ChurnState: ...

    def takes_tenants(self) -> bool: ...

    def present(self, server: str) -> bool: ...

    async def apply_event(self, event: Event, wait: bool = True) -> tuple[bool, str]: ...

    async def change(self, item: Mapping[str, object]) -> tuple[bool, str]: ...


class TenantDesk:
    def __init__(self, host: DeskHost, policy: TenantPolicy | None,
                 secret: str | None) -> None:
        self.host = host
        self.book = TenantBook()
        """The queues' latest backlog reports."""
        self.queues: dict[str, QueueHandle] = {}
        """user -> its queue actor (to tell a silent queue from a gone one)."""
        self.policy = policy
        """The operator's tenant policy (None: an open run, as before policies)."""
        self.secret = secret if policy is not None else None
        """What tenants' tokens are checked against (None: an open run checks none)."""
        self.policy_changes: list[tuple[str, float]] = []
        """The operator's policy changes as events of the run (description, run time)."""
        self.unmanaged: dict[str, dict[str, float]] = {}
        """server -> its node's usage by work the allocator did not admit."""

    # -- the operator -------------------------------------------------------------------------
    def known(self, user: str) -> bool:
        try:
            assert self.policy is not None
            self.policy.entry(user)
        except UnknownTenantError:
            return False
        return True

    async def change_policy(self, change: object,
                            resources: tuple[str, ...]) -> tuple[bool, str]:
        """The operator's change of the tenant policy: merged in, kept in the notes (a
        restarted coordinator applies it too) and recorded as an event of the run.  Present
        tenants get their new weight and quota at their next report (within a period)."""
        if self.policy is None:
            return False, (f"run {self.host.run_id!r} has no tenant_policy (declare one in the "
                           "scenario to change it)")
        try:
            policy = self.policy.changed(change, resources)
        except ScenarioError as err:
            return False, str(err)
        self.policy = policy
        names = ", ".join(str(t.get("name")) for t in change.get("tenants", [])
                          if isinstance(t, Mapping)) if isinstance(change, Mapping) else ""
        text = "tenant policy changed" + (f" ({names})" if names else "")
        self.policy_changes.append((text, self.host.now()))
        await self.host.pool.note(tenant_policy=policy.to_raw(),
                                  policy_changes=list(self.policy_changes))
        return True, text

    def restore(self, notes: Notes, resources: tuple[str, ...]) -> None:
        """A restarted coordinator: the policy as its predecessor last changed it."""
        if self.policy is not None and "tenant_policy" in notes:
            self.policy = parse_tenant_policy(notes["tenant_policy"], resources)
            self.policy_changes = [(str(d), float(t))
                                   for d, t in notes.get("policy_changes", [])]

    # -- the tenants --------------------------------------------------------------------------
    def info(self, user: str) -> TenantInfo:
        """What a tenant's client checks its task shapes against."""
        churn = self.host.state()
        full = churn.full
        if not self.host.takes_tenants():
            raise TenantRunError(f"run {self.host.run_id!r} takes no tenants (its scenario "
                                 "needs `servers: from-ray` and `tenants: true`)")
        present = churn.servers_present
        weight = (float(churn.weight[full.user_names.index(user)])
                  if user in full.user_names else None)
        return TenantInfo(tuple(full.resources),
                          tuple(s for s, up in zip(full.server_names, present, strict=True) if up),
                          np.asarray(full.capacity)[present].copy(), weight, self.host.period)

    async def connect(self, user: str, token: str | None) -> TenantInfo | str:
        """A tenant connects as ``user``: what its client checks its task shapes against, or
        (as a value: one line) why it is refused (:class:`TenantRunError` if the run takes
        no tenants).  A run with a tenant policy admits a declared tenant only with its token,
        an unknown one only if the policy lets unknown tenants join and no live queue holds
        the name (it is then issued the name's token)."""
        info = self.info(user)
        run = self.host.run_id
        if is_unmanaged_user(user):
            return f"run {run!r}: {user!r} names a node's unmanaged work, not a tenant"
        if self.policy is None:
            return info
        try:
            entry = self.policy.entry(user)
        except UnknownTenantError as err:
            return f"run {run!r}: {err.message}"
        assert self.secret is not None
        if self.policy.declared(user):
            if not token_ok(self.secret, user, token):
                return (f"run {run!r}: tenant {user!r} needs its token (from the operator; "
                        "Tenant.connect(..., token=) or $PSDSF_TENANT_TOKEN)")
        elif not token_ok(self.secret, user, token):
            held = self.queues.get(user)
            if held is not None and await self.queue_lives(held):
                return (f"run {run!r}: user {user!r} is already connected from another "
                        "driver (connect under another name)")
        return TenantInfo(info.resources, info.servers, info.capacity, entry.weight,
                          info.period, tenant_token(self.secret, user))

    async def report(self, user: str, demand: dict[str, float], weight: float | None,
                     backlog: int, queue: QueueHandle | None,
                     token: str | None) -> TenantReply:
        """One queue's periodic report: its backlog (queued + running) becomes the user's
        presence and ``max_tasks`` (:class:`~psdsf_dist.admission.tenants.TenantBook`).
        Returns where its tasks may go: every present server's actor and Ray node.  With a
        tenant policy the report must carry ``user``'s token; the weight is the policy's
        for the asked one (never more than the operator's) and the backlog is bounded by
        the tenant's quota."""
        if not token_ok(self.secret, user, token):
            return TenantReply({}, f"refused: no valid token for tenant {user!r}")
        if is_unmanaged_user(user):
            return TenantReply({}, f"refused: {user!r} names a node's unmanaged work")
        error = None
        if self.policy is not None:
            try:
                weight = self.policy.weight(user, weight)
                backlog = self.policy.max_tasks(user, demand, backlog)
            except UnknownTenantError as err:  # the operator refused unknown tenants since
                await self.gone(user)
                return TenantReply({}, err.message)
        if queue is not None:
            held = self.queues.get(user)
            if held is not None and actor_key(held) != actor_key(queue) \
                    and await self.queue_lives(held):
                # one user, one queue: two would each report their own backlog and claim
                # the same user's slots
                return TenantReply({}, f"user {user!r} is already connected from another "
                                       "driver (connect under another name)")
            self.queues[user] = queue
        async with self.host.lock:  # one report's events apply together
            try:
                events = self.book.report(user, demand, weight, backlog, self.host.now(),
                                          self.user_in_table(user),
                                          self.host.state().full.resources)
            except ScenarioError as err:  # a value the scenario cannot take
                events, error = [], str(err)
            for event in events:
                # the servers get the table in the background, except when the user joins:
                # its queue asks them for slots as soon as this returns, and a server that has
                # not yet adopted the table naming it would grant none until the next ask
                ok, why = await self.host.apply_event(event, wait=isinstance(event, UserJoins))
                if not ok:
                    error = why
                    break
        servers = {n: (m.handle, m.node) for n, m in self.host.pool.members.items()
                   if m.node is not None and self.host.present(n)}
        return TenantReply(servers, error)

    async def operator_change(self, item: Mapping[str, object]) -> tuple[bool, str]:
        """The operator's change: churn (the host's), or a change of the tenant policy.  With a
        policy, the operator's ``set_weight`` is the tenant's ceiling from then on."""
        resources = self.host.state().full.resources
        if isinstance(item, Mapping) and "tenant_policy" in item:
            return await self.change_policy(item["tenant_policy"], resources)
        set_weight = item.get("set_weight") if isinstance(item, Mapping) else None
        if self.policy is not None and isinstance(set_weight, Mapping):
            user = set_weight.get("user")
            if isinstance(user, str):
                ok, text = await self.host.change(item)
                if ok:
                    entry = (self.policy.entry(user).to_raw(user) if self.known(user)
                             else {"name": user})
                    await self.change_policy({"tenants": [
                        {**entry, "weight": set_weight.get("weight")}]}, resources)
                return ok, text
        return await self.host.change(item)

    async def leave(self, user: str, queue: QueueHandle | None, token: str | None) -> None:
        """A queue closed: its user leaves now (it rejoins when it reports work again).  A
        queue that is not the user's registered one (refused as a second connection) is
        ignored, and so is a call without ``user``'s token in a run with a tenant policy."""
        held = self.queues.get(user)
        if queue is not None and held is not None and actor_key(held) != actor_key(queue):
            return
        if not token_ok(self.secret, user, token):
            return
        await self.gone(user)

    async def gone(self, user: str) -> None:
        self.book.tenants.pop(user, None)
        self.queues.pop(user, None)
        if self.user_in_table(user).present:
            await self.host.apply_event(UserLeaves(0.0, -1, user))

    async def expire(self) -> None:
        """Users whose queues fell silent leave — at once if Ray reports the queue's actor
        dead (its driver exited), else only after a long silence (a loaded queue)."""
        churn = self.host.state()
        now, period = self.host.now(), self.host.period
        silent = self.book.silent(now, period)
        if not silent:
            return

        async def lives(user: str) -> bool:
            queue = self.queues.get(user)
            return queue is not None and await self.queue_lives(queue)

        answers = await asyncio.gather(*(lives(u) for u in silent))
        alive = {u for u, up in zip(silent, answers, strict=True) if up}
        names = churn.full.user_names
        present = {u: bool(p) for u, p in zip(names, churn.users_present, strict=True)}
        for event in self.book.expired(now, period, present, alive):
            await self.host.apply_event(event)
        for user in silent:
            if user not in self.book.tenants:
                self.queues.pop(user, None)

    async def count_unmanaged(self) -> None:
        """Each server's unmanaged usage (work on its node the allocator did not admit)
        becomes the ``unmanaged@server`` user of the table, so that the tenants share only
        what is left (:mod:`psdsf_dist.admission.unmanaged`)."""
        if not self.host.takes_tenants():
            return
        pool = self.host.pool
        members = [m for m in pool.members.values() if self.host.present(m.name)]
        answers = await asyncio.gather(*(pool.call(m.handle.unmanaged.remote(m.name))
                                         for m in members), return_exceptions=True)
        async with self.host.lock:
            for m, usage in zip(members, answers, strict=True):
                if usage is None or isinstance(usage, BaseException):
                    continue
                self.unmanaged[m.name] = usage
                table = self.user_in_table(unmanaged_user(m.name))
                weight = UNMANAGED_WEIGHT if self.policy is None \
                    or self.policy.unmanaged_weight is None else self.policy.unmanaged_weight
                for event in unmanaged_events(m.name, usage, known=table.known,
                                              present=table.present, demand=table.demand,
                                              resources=self.host.state().full.resources,
                                              weight=weight, known_weight=table.weight):
                    ok, why = await self.host.apply_event(event)
                    if not ok:
                        self.host.failure = f"unmanaged usage of server {m.name}: {why}"
                        break
            for name in [n for n in self.unmanaged if n not in pool.members]:
                del self.unmanaged[name]

    async def queue_lives(self, queue: QueueHandle) -> bool:
        """Whether Ray still has a tenant's queue actor (one slow to answer counts)."""
        try:
            await asyncio.wait_for(queue.status.remote(), self.host.period)
        except ray.exceptions.RayActorError:
            return False
        except (TimeoutError, ray.exceptions.RayError):
            return True  # there, but slow to answer
        return True

    def user_in_table(self, user: str) -> UserInTable:
        churn = self.host.state()
        names = churn.full.user_names
        if user not in names:
            return UserInTable(known=False)
        n = names.index(user)
        X = self.host.last_allocation
        allocated = float(X[n].sum()) if X is not None and n < X.shape[0] else 0.0
        return UserInTable(True, bool(churn.users_present[n]),
                           dict(zip(churn.full.resources,
                                    (float(v) for v in churn.demand[n]), strict=True)),
                           float(churn.weight[n]), float(churn.max_tasks[n]), allocated)
