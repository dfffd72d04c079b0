"""A run's status as the coordinator answers it (``Run.status()``, ``psdsf-dist status``), pure:
the churn state, the observations and the fault counts in, one JSON-able mapping out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypedDict

import numpy as np
import numpy.typing as npt

from psdsf_dist.model.events import Event
from psdsf_dist.model.tenant_policy import TenantPolicy
from psdsf_dist.protocol.convergence import Observation
from psdsf_dist.protocol.membership import ChurnState


class RunStatus(TypedDict):
    """A run's status (``Run.status()``)."""

    time: float
    """Run time now."""
    round: int | None
    """The latest observation's round (None: none yet); its certificate below."""
    residual: float | None
    holds: bool | None
    feasible: bool
    """Every observation so far found every column within its server's capacities."""
    utilization: float | None
    since_last_event: float
    last_event_at: float
    servers: int
    users: int
    """Users present."""
    epoch: int
    """The current table's epoch."""
    members: list[str]
    present_users: list[str]
    events_applied: int
    """The scenario's events applied so far (of ``events_total``)."""
    events_total: int
    tables_pushed: int
    restarts: int
    coordinator_restarted: bool
    coordinator_restarts: int
    failure: str | None
    """The latest failure seen (a server's error, a failed export, ...)."""
    tenant_policy: dict[str, object] | None
    policy_changes: list[list[str | float]]
    """The operator's policy changes: [description, run time]."""
    unmanaged: dict[str, dict[str, float]]
    """Server -> its node's usage by work the allocator did not admit (where there is some)."""


def run_status(churn: ChurnState, now: float, observations: Sequence[Observation],
               events: Sequence[Event], members: list[str], tables_pushed: int, restarts: int,
               coordinator_restarted: bool, coordinator_restarts: int, failure: str | None,
               policy: TenantPolicy | None, policy_changes: Sequence[tuple[str, float]],
               unmanaged: Mapping[str, Mapping[str, float]]) -> RunStatus:
    last = observations[-1] if observations else None
    history = churn.history
    last_event_at = history[-1][1] if history else 0.0
    return {
        "time": now,
        "round": None if last is None else last.round,
        "residual": None if last is None else last.residual,
        "holds": None if last is None else last.holds,
        "feasible": all(o.feasible for o in observations),
        "utilization": None if last is None else last.utilization,
        "since_last_event": now - last_event_at,
        "last_event_at": last_event_at,
        "servers": len(members),
        "users": int(churn.users_present.sum()),
        "epoch": churn.epoch,
        "members": members,
        "present_users": [u for u, p in zip(churn.full.user_names, churn.users_present,
                                            strict=True) if p],
        "events_applied": churn.scenario_events_applied,
        "events_total": len(events),
        "tables_pushed": tables_pushed,
        "restarts": restarts,
        "coordinator_restarted": coordinator_restarted,
        "coordinator_restarts": coordinator_restarts,
        "failure": failure,
        "tenant_policy": None if policy is None else policy.to_raw(),
        "policy_changes": [list(c) for c in policy_changes],
        "unmanaged": {n: dict(u) for n, u in unmanaged.items() if any(v > 0 for v in u.values())},
    }


def user_allocation(churn: ChurnState, allocation: npt.NDArray[np.float64] | None,
                    ) -> dict[str, dict[str, float]]:
    """Each present user's tasks on each server in ``allocation`` (users x servers of the
    universe; None: not observed yet), the servers it has none on left out."""
    if allocation is None:
        return {}
    servers = churn.full.server_names
    return {u: {servers[i]: float(x) for i, x in enumerate(allocation[n]) if x > 0}
            for n, u in enumerate(churn.full.user_names)
            if n < allocation.shape[0] and churn.users_present[n]}


def user_totals(churn: ChurnState, allocation: npt.NDArray[np.float64] | None) -> dict[str, float]:
    """Each present user's tasks in ``allocation`` (users x servers; None: not observed yet)."""
    if allocation is None:
        return {}
    return {u: float(allocation[n].sum()) for n, u in enumerate(churn.full.user_names)
            if n < allocation.shape[0] and churn.users_present[n]}
