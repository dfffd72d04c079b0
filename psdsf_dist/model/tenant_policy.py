"""The operator's tenant policy: who may use a tenants run, with which weight and quota (pure).

A ``tenants: true`` scenario may carry a ``tenant_policy`` (docs/scenario-format.md)::

    tenant_policy:
      unknown: join            # join (default): a tenant not listed joins with default_weight;
                               # refuse: only the listed tenants may connect
      default_weight: 1
      unmanaged_weight: 1      # optional: work outside the allocator is a user of this weight
      tenants:
        - {name: etl, weight: 2, max_tasks: 40, cap: {CPU: 16}}
        - {name: adhoc}        # weight 1, no quota

The policy is the operator's: a tenant's own ``weight`` may lower its weight, never raise it
(:meth:`TenantPolicy.weight`), and its tasks in the allocation never exceed its quota — the
smaller of ``max_tasks`` and, for each resource of ``cap``, the cap divided by the tenant's
per-task demand of it (:meth:`TenantPolicy.max_tasks`).  Because every tenant submits one
shape, a per-resource cap is exactly a cap on its tasks, which the allocation honours through
``max_tasks`` (PS-DSF with bounded demands), so no separate mechanism enforces it.

Work outside the allocator (:mod:`psdsf_dist.admission.unmanaged`) is left out of the tenants'
allocation by default: a user of a weight no tenant reaches, served first.  With
``unmanaged_weight`` it is a user of that weight instead: it gets its PS-DSF share of its node,
and the tenants are allocated the rest, part of which it may still hold — their tasks wait at
the node and take that room as the outside work ends.

A run's policy changes only through the operator (:meth:`TenantPolicy.changed`, called with
the run's secret checked): the same syntax, merged into the policy in force.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.fields import _check_keys, _mapping, _name, _sequence, number, show
from psdsf_dist.model.limits import current_limits

UNKNOWN_CHOICES = ("join", "refuse")
POLICY_KEYS = {"unknown", "default_weight", "unmanaged_weight", "tenants"}
TENANT_KEYS = {"name", "weight", "max_tasks", "cap"}
DEFAULT_WEIGHT = 1.0

Unknown = Literal["join", "refuse"]


class UnknownTenantError(ScenarioError):
    """The policy admits no tenant of that name (``unknown: refuse``)."""

    def __init__(self, user: str) -> None:
        super().__init__("tenant_policy.unknown",
                         f"tenant {show(user)} is not declared and the policy refuses "
                         "unknown tenants")


@dataclass(frozen=True)
class TenantQuota:
    """One tenant's entry: its weight (the most it may ask for) and its quota."""

    weight: float = DEFAULT_WEIGHT
    max_tasks: float = math.inf
    cap: Mapping[str, float] = field(default_factory=dict)
    """resource -> the most of it the tenant's tasks may hold in the allocation."""

    def task_cap(self, demand: Mapping[str, float]) -> float:
        """The most tasks of per-task ``demand`` the quota allows (inf: no quota)."""
        limit = self.max_tasks
        for r, amount in self.cap.items():
            need = demand.get(r, 0.0)
            if need > 0:
                limit = min(limit, amount / need)
        return limit

    def to_raw(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = {"name": name, "weight": self.weight}
        if not math.isinf(self.max_tasks):
            out["max_tasks"] = self.max_tasks
        if self.cap:
            out["cap"] = dict(self.cap)
        return out


@dataclass(frozen=True)
class TenantPolicy:
    """See the module docstring."""

    tenants: Mapping[str, TenantQuota] = field(default_factory=dict)
    unknown: Unknown = "join"
    default_weight: float = DEFAULT_WEIGHT
    unmanaged_weight: float | None = None
    """The weight of work outside the allocator (None: left out, served first)."""

    def entry(self, user: str) -> TenantQuota:
        """``user``'s entry: its declared one, else the default for an unknown tenant.
        Raises :class:`UnknownTenantError` if unknown tenants are refused."""
        quota = self.tenants.get(user)
        if quota is not None:
            return quota
        if self.unknown == "refuse":
            raise UnknownTenantError(user)
        return TenantQuota(self.default_weight)

    def declared(self, user: str) -> bool:
        return user in self.tenants

    def weight(self, user: str, asked: float | None) -> float:
        """The weight ``user`` gets when it asks for ``asked`` (None: its entry's): never more
        than its entry's."""
        ceiling = self.entry(user).weight
        return ceiling if asked is None else min(asked, ceiling)

    def max_tasks(self, user: str, demand: Mapping[str, float], backlog: int) -> int:
        """The tasks ``user`` may have in the allocation with ``backlog`` tasks waiting or
        running: the backlog, bounded by the quota (whole tasks: the allocation's bound is
        the user's ``max_tasks``)."""
        limit = self.entry(user).task_cap(demand)
        return backlog if limit >= backlog else max(0, math.floor(limit + 1e-9))

    def changed(self, item: Any, resources: Sequence[str],
                fld: str = "tenant_policy") -> TenantPolicy:
        """This policy with an operator's change merged in (the ``tenant_policy`` syntax:
        listed tenants replace their entries; ``unknown`` / ``default_weight`` /
        ``unmanaged_weight`` replace the policy's)."""
        m = _mapping(item, fld)
        base = parse_tenant_policy(
            {"unknown": m.get("unknown", self.unknown),
             "default_weight": m.get("default_weight", self.default_weight),
             "unmanaged_weight": m.get("unmanaged_weight", self.unmanaged_weight),
             "tenants": m.get("tenants", [])}, resources, fld)
        return replace(base, tenants={**self.tenants, **base.tenants})

    def to_raw(self) -> dict[str, Any]:
        """The policy in the scenario syntax (kept by the run, shown by ``status``)."""
        out: dict[str, Any] = {"unknown": self.unknown, "default_weight": self.default_weight,
                               "tenants": [q.to_raw(n) for n, q in self.tenants.items()]}
        if self.unmanaged_weight is not None:
            out["unmanaged_weight"] = self.unmanaged_weight
        return out


def parse_tenant_policy(value: Any, resources: Sequence[str],
                        fld: str = "tenant_policy") -> TenantPolicy:
    """A ``tenant_policy`` mapping, checked; raises :class:`ScenarioError` naming the field."""
    top = _mapping(value if value is not None else {}, fld)
    _check_keys(top, POLICY_KEYS, fld)
    unknown = top.get("unknown", "join")
    if unknown not in UNKNOWN_CHOICES:
        raise ScenarioError(f"{fld}.unknown", f"expected join or refuse, got {show(unknown)}")
    default_weight = number(top.get("default_weight", DEFAULT_WEIGHT), f"{fld}.default_weight",
                            positive=True)
    raw_unmanaged = top.get("unmanaged_weight")
    unmanaged_weight = (None if raw_unmanaged is None else
                        number(raw_unmanaged, f"{fld}.unmanaged_weight", positive=True))
    tenants: dict[str, TenantQuota] = {}
    entries = _sequence(top.get("tenants") or [], f"{fld}.tenants")
    current_limits().check("users", len(entries), f"{fld}.tenants")
    for j, entry in enumerate(entries):
        efld = f"{fld}.tenants[{j}]"
        e = _mapping(entry, efld)
        _check_keys(e, TENANT_KEYS, efld)
        if "name" not in e:
            raise ScenarioError(f"{efld}.name", "missing")
        name = _name(e["name"], f"{efld}.name")
        if name in tenants:
            raise ScenarioError(f"{efld}.name", f"duplicate tenant {show(name)}")
        weight = number(e.get("weight", default_weight), f"{efld}.weight", positive=True)
        mt_raw = e.get("max_tasks")
        max_tasks = (math.inf if mt_raw is None
                     else number(mt_raw, f"{efld}.max_tasks", allow_inf=True))
        cap: dict[str, float] = {}
        for r, amount in _mapping(e.get("cap") or {}, f"{efld}.cap").items():
            if r not in resources:
                raise ScenarioError(f"{efld}.cap.{r}", "not a resource of the scenario")
            cap[r] = number(amount, f"{efld}.cap.{r}", allow_inf=True)
        tenants[name] = TenantQuota(weight, max_tasks, cap)
    return TenantPolicy(tenants, "refuse" if unknown == "refuse" else "join", default_weight,
                        unmanaged_weight)
