"""The operator's tenant policy: parsing, the weight ceiling, quotas and operator changes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from psdsf_dist.cli.main import main
from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.model.tenant_policy import (
    TenantPolicy,
    TenantQuota,
    UnknownTenantError,
    parse_tenant_policy,
)

RESOURCES = ("CPU", "memory")
SERVERS = [{"name": "a", "capacity": {"CPU": 8, "memory": 16}}]
POLICY = {"unknown": "refuse",
          "tenants": [{"name": "etl", "weight": 2, "max_tasks": 40, "cap": {"CPU": 6}},
                      {"name": "adhoc"}]}


def test_the_scenario_carries_the_policy() -> None:
    s = Scenario.from_dict({"tenants": True, "resources": list(RESOURCES), "servers": SERVERS,
                            "tenant_policy": POLICY})
    assert s.tenant_policy is not None
    assert s.tenant_policy.tenants["etl"] == TenantQuota(2.0, 40.0, {"CPU": 6.0})
    assert s.tenant_policy.tenants["adhoc"] == TenantQuota(1.0)
    assert s.tenant_policy.unknown == "refuse"
    # survives the churn's copies of the scenario
    assert s.replace_users(weight=s.weight).tenant_policy is s.tenant_policy
    without = Scenario.from_dict({"tenants": True, "resources": list(RESOURCES),
                                  "servers": SERVERS})
    assert without.tenant_policy is None


@pytest.mark.parametrize(("policy", "field"), [
    ({"unknown": "maybe"}, "tenant_policy.unknown: expected join or refuse"),
    ({"default_weight": 0}, "tenant_policy.default_weight"),
    ({"unmanaged_weight": -2}, "tenant_policy.unmanaged_weight"),
    ({"unmanaged_weight": "heavy"}, "tenant_policy.unmanaged_weight"),
    ({"tenants": [{"name": "x", "weight": -1}]}, "tenant_policy.tenants[0].weight"),
    ({"tenants": [{"name": "x", "cap": {"gpu": 1}}]},
     "tenant_policy.tenants[0].cap.gpu: not a resource"),
    ({"tenants": [{"name": "x"}, {"name": "x"}]}, "tenant_policy.tenants[1].name: duplicate"),
    ({"tenants": [{"weight": 1}]}, "tenant_policy.tenants[0].name: missing"),
    ({"tenants": [{"name": "x", "quota": 1}]}, "tenant_policy.tenants[0].quota: unknown key"),
    ({"who": 1}, "tenant_policy.who: unknown key"),
    ([1], "tenant_policy: must be a mapping"),
])
def test_bad_policy_names_the_field(policy: object, field: str) -> None:
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict({"tenants": True, "resources": list(RESOURCES), "servers": SERVERS,
                            "tenant_policy": policy})
    assert field in str(err.value) and "\n" not in str(err.value)


def test_a_policy_needs_a_tenants_run() -> None:
    with pytest.raises(ScenarioError, match="tenant_policy: needs `tenants: true`"):
        Scenario.from_dict({"resources": list(RESOURCES), "servers": SERVERS,
                            "users": [{"name": "u", "demand": {"CPU": 1}}],
                            "tenant_policy": {}})


def test_bad_policy_file_is_one_line_exit_2(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "ops.yaml"
    f.write_text("tenants: true\nresources: [CPU]\nservers: [{name: a, capacity: {CPU: 2}}]\n"
                 "tenant_policy: {tenants: [{name: etl, weight: 1e400}]}\n")
    assert main(["run", str(f)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert "ops.yaml: tenant_policy.tenants[0].weight" in err


@given(ceiling=st.floats(1e-6, 1e6), asked=st.one_of(st.none(), st.floats(1e-9, 1e12)))
def test_a_tenant_never_gets_more_than_the_operators_weight(ceiling: float,
                                                            asked: float | None) -> None:
    policy = TenantPolicy({"t": TenantQuota(ceiling)}, "join", 3.0)
    got = policy.weight("t", asked)
    assert got <= ceiling
    assert got == (ceiling if asked is None else min(asked, ceiling))
    assert policy.weight("stranger", asked) <= 3.0


def test_the_greedy_case() -> None:
    policy = parse_tenant_policy({"tenants": [{"name": "greedy", "weight": 1}]}, RESOURCES)
    assert policy.weight("greedy", 1000) == 1.0
    assert policy.weight("greedy", 0.5) == 0.5


def test_unknown_tenants_join_with_the_default_weight_or_are_refused() -> None:
    joins = parse_tenant_policy({"default_weight": 0.5}, RESOURCES)
    assert joins.weight("anyone", None) == 0.5
    refuses = parse_tenant_policy({"unknown": "refuse"}, RESOURCES)
    with pytest.raises(UnknownTenantError, match="not declared"):
        refuses.weight("anyone", 1)


@given(backlog=st.integers(0, 10**6), cpu_cap=st.floats(0, 1e4), max_tasks=st.floats(0, 1e4),
       cpu=st.floats(1e-3, 8), mem=st.floats(0, 8))
def test_the_quota_bounds_the_backlog_on_every_resource(backlog: int, cpu_cap: float,
                                                       max_tasks: float, cpu: float,
                                                       mem: float) -> None:
    policy = TenantPolicy({"t": TenantQuota(1.0, max_tasks, {"CPU": cpu_cap})})
    demand = {"CPU": cpu, "memory": mem}
    got = policy.max_tasks("t", demand, backlog)
    assert 0 <= got <= backlog and got <= max_tasks + 1e-9
    assert got * cpu <= cpu_cap * (1 + 1e-9) + 1e-9
    # whole tasks: one more would break the quota, unless the backlog is the bound
    if got < backlog:
        assert (got + 1) > min(max_tasks, cpu_cap / cpu) - 1e-9


def test_a_cap_on_a_resource_the_tenant_does_not_use_binds_nothing() -> None:
    q = TenantQuota(1.0, math.inf, {"memory": 1.0})
    assert q.task_cap({"CPU": 1.0}) == math.inf


def test_operator_changes_merge_into_the_policy() -> None:
    policy = parse_tenant_policy(POLICY, RESOURCES)
    changed = policy.changed({"tenants": [{"name": "etl", "weight": 5}], "unknown": "join"},
                             RESOURCES)
    assert changed.tenants["etl"] == TenantQuota(5.0)
    assert changed.tenants["adhoc"] == policy.tenants["adhoc"]
    assert changed.unknown == "join" and changed.default_weight == 1.0
    with pytest.raises(ScenarioError, match=r"tenant_policy\.tenants\[0\]\.weight"):
        policy.changed({"tenants": [{"name": "etl", "weight": 0}]}, RESOURCES)
    assert parse_tenant_policy(changed.to_raw(), RESOURCES) == changed


def test_the_weight_of_work_outside_the_allocator_is_the_operators_to_set() -> None:
    policy = parse_tenant_policy(POLICY, RESOURCES)
    assert policy.unmanaged_weight is None  # left out, first
    weighted = policy.changed({"unmanaged_weight": 2}, RESOURCES)
    assert weighted.unmanaged_weight == 2.0 and weighted.tenants == policy.tenants
    assert weighted.changed({"unknown": "join"}, RESOURCES).unmanaged_weight == 2.0
    assert parse_tenant_policy(weighted.to_raw(), RESOURCES) == weighted
