"""Scenario files: schema details, array conventions and validation errors of the library."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from psdsf_dist.errors import ScenarioError, ScenarioWarning
from psdsf_dist.model.scenario import Scenario, load_scenario


def base() -> dict[str, Any]:
    return {
        "resources": ["cpu", "mem", "gpu"],
        "servers": [
            {"name": "big", "capacity": {"cpu": 8, "mem": 16, "gpu": 2}, "labels": {"zone": "a"}},
            {"name": "small", "count": 3, "capacity": {"cpu": 4, "mem": 4},
             "labels": {"zone": "b"}},
        ],
        "users": [
            {"name": "alice", "demand": {"cpu": 1, "mem": 2}},
            {"name": "bob", "demand": {"cpu": 2, "gpu": 1}, "weight": 3, "max_tasks": 5},
        ],
    }


def test_paper_fig1_arrays(fig1: Scenario) -> None:
    assert fig1.resources == ("cpu", "mem", "bw")
    np.testing.assert_array_equal(fig1.capacity, [[9, 12, 100], [12, 12, 0]])
    np.testing.assert_array_equal(fig1.weight, [1, 1, 2])
    # ORACLES 1: users 1 and 2 need bandwidth, which s2 lacks
    np.testing.assert_allclose(fig1.gamma, [[6, 0], [6, 0], [6, 6]])
    assert fig1.eligible.tolist() == [[True, False], [True, False], [True, True]]
    assert fig1.placement.all()


def test_paper_fig2_gamma(fig2: Scenario) -> None:
    np.testing.assert_allclose(fig2.gamma, [[6, 0], [6, 0], [12, 12], [9, 12]])


def test_paper_cluster_classes_and_gamma_totals(cluster: Scenario) -> None:
    assert cluster.num_servers == 120
    assert cluster.class_names == ("A", "B", "C", "D")
    members = {c: [i for i, k in enumerate(cluster.server_class) if k == c] for c in "ABCD"}
    assert [len(members[c]) for c in "ABCD"] == [8, 68, 33, 11]
    per_class = np.array([[cluster.gamma[n, members[c]].sum() for c in "ABCD"] for n in range(4)])
    # ORACLES 3, Table III
    np.testing.assert_allclose(
        per_class,
        [[80, 340, 82.5, 55], [40, 170, 41.25, 41.25], [0, 0, 82.5, 27.5], [0, 0, 27.5, 27.5]],
    )


def test_count_expands_a_class_into_named_members() -> None:
    s = Scenario.from_dict(base())
    assert s.server_names == ("big", "small-1", "small-2", "small-3")
    assert s.server_class == ("big", "small", "small", "small")
    assert s.class_names == ("big", "small")
    np.testing.assert_array_equal(s.capacity[1:], [[4, 4, 0]] * 3)
    assert s.server_labels[2] == {"zone": "b"}


def test_defaults_weight_one_and_unlimited_backlog() -> None:
    s = Scenario.from_dict(base())
    np.testing.assert_array_equal(s.weight, [1, 3])
    assert np.isinf(s.max_tasks[0]) and s.max_tasks[1] == 5
    assert s.placement.all()
    assert np.isnan(s.gamma_given).all()


def test_left_out_resources_are_zero_and_gamma_needs_every_demanded_resource() -> None:
    s = Scenario.from_dict(base())
    np.testing.assert_array_equal(s.demand, [[1, 2, 0], [2, 0, 1]])
    # alice: min(8/1, 16/2) on big, min(4/1, 4/2) on small; bob needs a gpu: only big
    np.testing.assert_allclose(s.gamma, [[8, 2, 2, 2], [2, 0, 0, 0]])


def test_servers_accepts_class_and_member_names() -> None:
    doc = base()
    doc["users"][0]["servers"] = ["small"]
    doc["users"][1]["servers"] = ["big", "small-2"]
    s = Scenario.from_dict(doc)
    assert s.placement.tolist() == [[False, True, True, True], [True, False, True, False]]
    # placement allows small-2 for bob but it has no gpu: not eligible
    assert s.eligible[1].tolist() == [True, False, False, False]


def test_requires_matches_labels_and_is_anded_with_servers() -> None:
    doc = base()
    doc["users"][0]["requires"] = {"zone": "b"}
    doc["users"][1]["requires"] = {"zone": "a"}
    doc["users"][1]["servers"] = ["small"]  # zone a AND class small: nothing
    with pytest.warns(ScenarioWarning, match="eligible on no server"):
        s = Scenario.from_dict(doc)
    assert s.placement[0].tolist() == [False, True, True, True]
    assert not s.placement[1].any()


def test_label_values_compare_as_strings() -> None:
    doc = base()
    doc["servers"][0]["labels"] = {"gpu": True, "gen": 3}
    doc["users"][0]["requires"] = {"gpu": "true", "gen": "3"}
    s = Scenario.from_dict(doc)
    assert s.placement[0].tolist() == [True, False, False, False]


def test_gamma_override_scales_rdm_demand_so_alone_the_user_gets_gamma() -> None:
    doc = base()
    doc["users"][0]["gamma"] = {"big": 4.0}
    s = Scenario.from_dict(doc)
    assert s.gamma[0, 0] == 4.0 and s.demand_gamma[0, 0] == 8.0
    assert s.gamma_given[0, 0] == 4.0 and np.isnan(s.gamma_given[0, 1])
    cons = s.consumption(0, "rdm")[0]
    demanded = cons > 0
    assert np.min(s.capacity[0, demanded] / cons[demanded]) == pytest.approx(4.0)
    np.testing.assert_allclose(s.consumption(0, "tdm")[:, 0], [1 / 4.0, 1 / 2.0])
    s.check_mode("rdm")  # valid in RDM: big has every resource alice demands


def test_gamma_by_class_then_member_overrides_the_class() -> None:
    doc = base()
    doc["users"][0]["gamma"] = {"small-2": 7, "small": 1.5}
    s = Scenario.from_dict(doc)
    np.testing.assert_allclose(s.gamma[0], [8, 1.5, 7, 1.5])


def test_gamma_override_where_a_demanded_resource_is_missing_is_tdm_only() -> None:
    doc = base()
    doc["users"][1]["gamma"] = {"small": 3}  # bob needs a gpu, small has none
    s = Scenario.from_dict(doc)
    np.testing.assert_allclose(s.gamma[1], [2, 3, 3, 3])
    assert s.check_mode("tdm") == "tdm"
    with pytest.raises(ScenarioError) as err:
        s.check_mode("rdm")
    assert err.value.field == "users[1].gamma.small-1"
    assert "tdm" in err.value.message


def test_gamma_override_on_an_excluded_server_is_an_error() -> None:
    doc = base()
    doc["users"][0]["servers"] = ["big"]
    doc["users"][0]["gamma"] = {"small": 3}
    with pytest.raises(ScenarioError, match=r"users\[0\]\.gamma\.small: .*excluded"):
        Scenario.from_dict(doc)


def test_unknown_mode_is_a_scenario_error() -> None:
    with pytest.raises(ScenarioError, match="mode"):
        Scenario.from_dict(base()).check_mode("fast")


def test_consumption_tensor_matches_per_server_consumption() -> None:
    doc = base()
    doc["users"][0]["gamma"] = {"small-1": 3}
    s = Scenario.from_dict(doc)
    for mode in ("rdm", "tdm"):
        tensor = s.consumption_tensor(mode)
        for i in range(s.num_servers):
            np.testing.assert_allclose(tensor[i], s.consumption(i, mode))


def test_replace_users_recomputes_gamma() -> None:
    s = Scenario.from_dict(base())
    t = s.replace_users(demand=np.array([[2.0, 2, 0], [2, 0, 1]]), placement=s.placement)
    np.testing.assert_allclose(t.gamma[0], [4, 2, 2, 2])
    np.testing.assert_array_equal(s.gamma[0], [8, 2, 2, 2])  # the original is untouched


def test_arrays_are_read_only() -> None:
    s = Scenario.from_dict(base())
    with pytest.raises(ValueError):
        s.capacity[0, 0] = 1.0


def test_yaml_and_json_give_the_same_scenario(write_scenario: Callable[..., Path]) -> None:
    a = load_scenario(write_scenario(base(), "yaml"))
    b = load_scenario(write_scenario(base(), "json"))
    for name in ("capacity", "demand", "weight", "placement", "gamma", "max_tasks"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.server_names == b.server_names and a.user_names == b.user_names


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        (lambda d: d["users"][0]["demand"].update(disk=1), "users[0].demand.disk",
         "unknown resource"),
        (lambda d: d["servers"][0]["capacity"].update(cpu=-1), "servers[0].capacity.cpu", ">= 0"),
        (lambda d: d["users"][1].update(weight=0), "users[1].weight", "> 0"),
        (lambda d: d["users"][1].update(max_tasks=float("nan")), "users[1].max_tasks", "NaN"),
        (lambda d: d["users"].append({"name": "alice", "demand": {"cpu": 1}}), "users[2].name",
         "duplicate"),
        (lambda d: d["servers"].append({"name": "small-2", "capacity": {"cpu": 1}}), "servers",
         "duplicate server name 'small-2'"),
        (lambda d: d["users"][0].update(demand={"cpu": 0}), "users[0].demand", "all zero"),
        (lambda d: d["users"][0].update(servers=["nowhere"]), "users[0].servers[0]",
         "unknown server"),
        (lambda d: d["users"][0].update(wieght=2), "users[0].wieght", "unknown key"),
        (lambda d: d.update(users=[]), "users", "no user"),
        (lambda d: d.update(servers=[]), "servers", "no server"),
        (lambda d: d["servers"][1].update(count=0), "servers[1].count", ">= 1"),
        (lambda d: d["servers"][0].update(capacity=[8, 16]), "servers[0].capacity", "mapping"),
    ],
)
def test_library_errors_name_the_field(edit: Any, field: str, words: str) -> None:
    doc = base()
    edit(doc)
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict(doc, "x.yaml")
    assert isinstance(err.value, ValueError)
    assert err.value.field == field
    assert words in err.value.message
    text = str(err.value)
    assert text.startswith(f"x.yaml: {field}: ") and "\n" not in text


def test_missing_file_is_a_scenario_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenario(tmp_path / "absent.yaml")


def test_user_eligible_nowhere_is_a_warning_not_an_error() -> None:
    doc = base()
    doc["users"][1]["servers"] = ["small"]  # bob needs a gpu; small has none
    with pytest.warns(ScenarioWarning, match=r"users\[1\] \(bob\)"):
        s = Scenario.from_dict(doc)
    assert not s.eligible[1].any()


def test_a_key_written_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text(
        "resources: [cpu]\nservers: [{name: s, capacity: {cpu: 1}}]\n"
        "users:\n  - {name: u, demand: {cpu: 1}, weight: 1, weight: -5}\n",
        encoding="utf-8",
    )
    with pytest.raises(ScenarioError, match="line 4: duplicate key 'weight'"):
        load_scenario(path)


def test_yaml_merge_keys_may_be_overridden(tmp_path: Path) -> None:
    path = tmp_path / "merge.yaml"
    path.write_text(
        "resources: [cpu, mem]\n"
        "servers:\n  - &big {name: big, capacity: {cpu: 4, mem: 4}}\n"
        "  - {<<: *big, name: other}\n"
        "users: [{name: u, demand: {cpu: 1}}]\n",
        encoding="utf-8",
    )
    assert load_scenario(path).server_names == ("big", "other")


def test_scenario_error_survives_pickling() -> None:
    import pickle

    from psdsf_dist.errors import ScenarioError

    err = ScenarioError("users[0].weight", "must be > 0, got 0", "a.yaml")
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, ScenarioError)
    assert (back.field, back.message, back.source) == (err.field, err.message, err.source)
    assert str(back) == "a.yaml: users[0].weight: must be > 0, got 0"


def test_a_tenants_scenario_may_declare_no_user_and_starts_with_none_present() -> None:
    from psdsf_dist.model.universe import universe

    servers = [{"name": "a", "capacity": {"CPU": 4, "memory": 8}}]
    empty = Scenario.from_dict({"tenants": True, "resources": ["CPU", "memory"],
                                "servers": servers})
    assert empty.num_users == 0 and empty.demand.shape == (0, 2)
    declared = Scenario.from_dict({"tenants": True, "resources": ["CPU", "memory"],
                                   "servers": servers,
                                   "users": [{"name": "u", "demand": {"CPU": 1}, "weight": 2}]})
    assert not universe(declared).users_present.any()
    with pytest.raises(ScenarioError, match="users: missing"):
        Scenario.from_dict({"resources": ["CPU", "memory"], "servers": servers})
    with pytest.raises(ScenarioError, match="tenants: expected true or false"):
        Scenario.from_dict({"tenants": "yes", "resources": ["CPU", "memory"],
                            "servers": servers})
