"""``psdsf-dist solve``: the oracles through the command line, output files, and bad input."""

from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from psdsf_dist.cli.main import main
from tests.conftest import EXAMPLES

Write = Callable[..., Path]


def example_path(name: str) -> Path:
    return EXAMPLES / f"{name}.yaml"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def solve_json(capsys: pytest.CaptureFixture[str], path: Path, mode: str) -> dict[str, Any]:
    status, out, err = run(capsys, "solve", str(path), "--mode", mode, "--json")
    assert status == 0, err
    assert err == ""
    result: dict[str, Any] = json.loads(out)
    return result


def valid() -> dict[str, Any]:
    return {
        "resources": ["cpu", "mem"],
        "servers": [
            {"name": "big", "capacity": {"cpu": 8, "mem": 16}, "labels": {"zone": "a"}},
            {"name": "small", "count": 2, "capacity": {"cpu": 4, "mem": 4}},
        ],
        "users": [
            {"name": "alice", "demand": {"cpu": 1, "mem": 2}},
            {"name": "bob", "demand": {"cpu": 2, "mem": 1}, "weight": 2, "servers": ["small"]},
        ],
    }


# -- the oracles through the CLI ---------------------------------------------------------------

JSON_KEYS = {"policy", "mode", "resources", "servers", "users", "allocation", "tasks",
             "utilization", "certificate"}


@pytest.mark.parametrize("mode", ["rdm", "tdm"])
def test_fig1_json(capsys: pytest.CaptureFixture[str], mode: str) -> None:
    out = solve_json(capsys, example_path("paper_fig1"), mode)
    assert set(out) >= JSON_KEYS
    assert out["policy"] == "psdsf" and out["mode"] == mode
    assert out["resources"] == ["cpu", "mem", "bw"]
    assert out["servers"] == ["s1", "s2"] and out["users"] == ["u1", "u2", "u3"]
    assert out["tasks"] == pytest.approx({"u1": 3, "u2": 3, "u3": 6}, abs=1e-6)
    assert out["allocation"]["u3"] == pytest.approx({"s2": 6}, abs=1e-6)
    assert out["certificate"]["holds"] is True
    assert out["certificate"]["residual"] <= 1e-9


def test_fig2_json_rdm_and_tdm(capsys: pytest.CaptureFixture[str]) -> None:
    rdm = solve_json(capsys, example_path("paper_fig2"), "rdm")
    expected = {"u1": {"s1": 3.6}, "u2": {"s1": 3.6}, "u3": {"s2": 8}, "u4": {"s2": 8}}
    assert set(rdm["allocation"]) == set(expected)
    for user, row in expected.items():
        assert rdm["allocation"][user] == pytest.approx(row, abs=1e-6)
    assert rdm["utilization"]["s1"] == pytest.approx({"cpu": 1, "mem": 0.9, "bw": 0.72})
    tdm = solve_json(capsys, example_path("paper_fig2"), "tdm")
    assert tdm["tasks"] == pytest.approx({"u1": 3, "u2": 3, "u3": 6, "u4": 6}, abs=1e-6)


@pytest.mark.parametrize("mode", ["rdm", "tdm"])
def test_paper_cluster_json_names_class_members(
    capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    out = solve_json(capsys, example_path("paper_cluster"), mode)
    expected_names = [f"{c}-{k}" for c, n in (("A", 8), ("B", 68), ("C", 33), ("D", 11))
                      for k in range(1, n + 1)]
    assert out["servers"] == expected_names
    assert out["tasks"] == pytest.approx({"u1": 210, "u2": 105, "u3": 82.5, "u4": 27.5},
                                         abs=1e-6)

    def by_class(user: str, cls: str) -> float:
        row = out["allocation"][user]
        return float(sum(v for s, v in row.items() if s.rsplit("-", 1)[0] == cls))

    assert by_class("u1", "A") == pytest.approx(40, abs=1e-6)
    assert by_class("u1", "B") == pytest.approx(170, abs=1e-6)
    assert by_class("u2", "A") == pytest.approx(20, abs=1e-6)
    assert by_class("u2", "B") == pytest.approx(85, abs=1e-6)
    assert by_class("u3", "C") == pytest.approx(82.5, abs=1e-6)
    assert by_class("u4", "D") == pytest.approx(27.5, abs=1e-6)
    assert out["utilization"]["C-1"]["cpu"] == pytest.approx(1.0)
    assert out["utilization"]["D-11"]["cpu"] == pytest.approx(1.0)


def test_table_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "solve", str(example_path("paper_cluster")))
    assert status == 0 and err == ""
    assert "certificate (Theorem 1): holds" in out
    assert "tasks per user" in out


def _without_timing(text: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(text)
    doc.get("solver", {}).pop("seconds", None)  # the only part that differs from run to run
    return doc


def test_output_file_holds_what_stdout_shows(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = str(example_path("paper_fig2"))
    _, shown, _ = run(capsys, "solve", path, "--json")
    target = tmp_path / "out.json"
    status, out, err = run(capsys, "solve", path, "--json", "-o", str(target))
    assert status == 0 and out == "" and err == ""
    assert _without_timing(target.read_text(encoding="utf-8")) == _without_timing(shown)
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary left behind


def test_output_into_a_missing_directory_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "absent" / "out.json"
    status, out, err = run(capsys, "solve", str(example_path("paper_fig1")), "-o", str(target))
    assert status == 2
    assert out == ""
    assert_one_line(err, str(target))
    assert not target.parent.exists()
    assert list(tmp_path.iterdir()) == []


# -- bad input ---------------------------------------------------------------------------------


def assert_one_line(err: str, *words: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("psdsf-dist: ")
    for w in words:
        assert w in lines[0], f"{w!r} not in {lines[0]!r}"


def _edit(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    """Set doc[path...] = value (a list index or dict key at each step)."""

    def apply(doc: dict[str, Any]) -> None:
        target: Any = doc
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return apply


def _append(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        target: Any = doc
        for step in path:
            target = target[step]
        target.append(value)

    return apply


BAD_DOCS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("unknown-resource", _edit(["users", 0, "demand", "gpu"], 1), "users[0].demand.gpu"),
    ("unknown-capacity-resource", _edit(["servers", 0, "capacity", "disk"], 1),
     "servers[0].capacity.disk"),
    ("negative-capacity", _edit(["servers", 1, "capacity", "cpu"], -4),
     "servers[1].capacity.cpu"),
    ("negative-demand", _edit(["users", 0, "demand", "mem"], -1), "users[0].demand.mem"),
    ("negative-max-tasks", _edit(["users", 1, "max_tasks"], -3), "users[1].max_tasks"),
    ("nan-weight", _edit(["users", 0, "weight"], float("nan")), "users[0].weight"),
    ("nan-demand", _edit(["users", 1, "demand", "cpu"], float("nan")), "users[1].demand.cpu"),
    ("inf-capacity", _edit(["servers", 0, "capacity", "mem"], float("inf")),
     "servers[0].capacity.mem"),
    ("inf-weight", _edit(["users", 0, "weight"], float("inf")), "users[0].weight"),
    ("string-number", _edit(["users", 0, "weight"], "heavy"), "users[0].weight"),
    ("duplicate-user", _append(["users"], {"name": "alice", "demand": {"cpu": 1}}),
     "users[2].name"),
    ("duplicate-server", _append(["servers"], {"name": "big", "capacity": {"cpu": 1}}),
     "servers[2].name"),
    ("member-collides-with-server", _append(["servers"], {"name": "small-2",
                                                          "capacity": {"cpu": 1}}), "servers"),
    ("duplicate-resource", _edit(["resources"], ["cpu", "mem", "cpu"]), "resources"),
    ("demand-all-zero", _edit(["users", 0, "demand"], {"cpu": 0, "mem": 0}), "users[0].demand"),
    ("demand-empty", _edit(["users", 0, "demand"], {}), "users[0].demand"),
    ("weight-zero", _edit(["users", 1, "weight"], 0), "users[1].weight"),
    ("weight-negative", _edit(["users", 1, "weight"], -2), "users[1].weight"),
    ("unknown-server", _edit(["users", 1, "servers"], ["small", "huge"]), "users[1].servers[1]"),
    ("unknown-gamma-server", _edit(["users", 0, "gamma"], {"huge": 2}), "users[0].gamma.huge"),
    ("count-zero", _edit(["servers", 1, "count"], 0), "servers[1].count"),
    ("count-fraction", _edit(["servers", 1, "count"], 1.5), "servers[1].count"),
    ("no-server", _edit(["servers"], []), "servers"),
    ("no-user", _edit(["users"], []), "users"),
    ("no-resource", _edit(["resources"], []), "resources"),
    ("missing-users", lambda d: d.pop("users"), "users"),
    ("missing-demand", lambda d: d["users"][0].pop("demand"), "users[0].demand"),
    ("missing-capacity", lambda d: d["servers"][0].pop("capacity"), "servers[0].capacity"),
    ("missing-name", lambda d: d["users"][1].pop("name"), "users[1].name"),
    ("unknown-top-key", _edit(["userz"], []), "userz"),
    ("unknown-server-key", _edit(["servers", 0, "capacty"], {}), "servers[0].capacty"),
    ("unknown-user-key", _edit(["users", 1, "wieght"], 2), "users[1].wieght"),
    ("servers-not-a-list", _edit(["servers"], {"big": 1}), "servers"),
    ("server-not-a-mapping", _edit(["servers", 0], "big"), "servers[0]"),
    ("capacity-not-a-mapping", _edit(["servers", 0, "capacity"], [8, 16]),
     "servers[0].capacity"),
    ("labels-not-a-mapping", _edit(["servers", 0, "labels"], ["a"]), "servers[0].labels"),
    ("user-not-a-mapping", _edit(["users", 0], ["alice"]), "users[0]"),
    ("demand-not-a-mapping", _edit(["users", 0, "demand"], 3), "users[0].demand"),
    ("requires-not-a-mapping", _edit(["users", 0, "requires"], ["zone"]), "users[0].requires"),
    ("gamma-not-a-mapping", _edit(["users", 0, "gamma"], [1, 2]), "users[0].gamma"),
    ("resources-not-a-list", _edit(["resources"], "cpu"), "resources"),
]


@pytest.mark.parametrize("fmt", ["yaml", "json"])
@pytest.mark.parametrize(("case", "edit", "field"), BAD_DOCS, ids=[c[0] for c in BAD_DOCS])
def test_bad_scenario_is_one_line_naming_file_and_field(
    capsys: pytest.CaptureFixture[str],
    write_scenario: Write,
    fmt: str,
    case: str,
    edit: Callable[[dict[str, Any]], None],
    field: str,
) -> None:
    doc = copy.deepcopy(valid())
    edit(doc)
    if fmt == "json" and case.startswith(("nan", "inf")):
        path = write_scenario(json.dumps(doc), fmt)  # Python's JSON writes NaN / Infinity
    else:
        path = write_scenario(doc, fmt)
    status, out, err = run(capsys, "solve", str(path), "--json")
    assert status == 2, err
    assert out == ""
    assert_one_line(err, str(path), f": {field}: ")


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("broken.yaml", "resources: [cpu\nservers: {", "malformed YAML"),
        ("tabs.yaml", "resources:\n\t- cpu\n", "malformed YAML"),
        ("broken.json", '{"resources": ["cpu"], "servers": [}', "malformed JSON"),
        ("trailing.json", '{"resources": ["cpu"]} x', "malformed JSON"),
        ("list.yaml", "- cpu\n- mem\n", "scenario"),
        ("list.json", "[1, 2]", "scenario"),
        ("empty.yaml", "", "empty"),
        ("scalar.yaml", "42\n", "scenario"),
        ("repeated.yaml", "resources: [cpu]\nresources: [mem]\n", "duplicate key 'resources'"),
        ("repeated.json", '{"users": [], "users": []}', "duplicate key 'users'"),
    ],
)
def test_malformed_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, text: str, words: str
) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    status, out, err = run(capsys, "solve", str(path))
    assert status == 2 and out == ""
    assert_one_line(err, str(path), words)


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "nowhere.yaml"
    status, out, err = run(capsys, "solve", str(path))
    assert status == 2 and out == ""
    assert_one_line(err, str(path), "no such file")


def test_unknown_mode_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "solve", str(example_path("paper_fig1")), "--mode", "fdm")
    assert status == 2 and out == ""
    assert_one_line(err, "fdm")


def tdm_only(write_scenario: Write) -> Path:
    doc = valid()
    doc["users"][0]["demand"]["gpu"] = 1
    doc["resources"].append("gpu")
    doc["users"][0]["gamma"] = {"big": 3}  # big has no gpu: a given gamma only means TDM
    return write_scenario(doc)


def test_tdm_only_gamma_refused_in_rdm(
    capsys: pytest.CaptureFixture[str], write_scenario: Write
) -> None:
    path = tdm_only(write_scenario)
    status, out, err = run(capsys, "solve", str(path))
    assert status != 0 and out == ""
    assert_one_line(err, str(path), "users[0].gamma.big", "tdm")
    status, out, err = run(capsys, "solve", str(path), "--mode", "tdm", "--json")
    assert status == 0, err
    assert json.loads(out)["tasks"]["alice"] > 0


def test_tdm_only_gamma_in_rdm_is_bad_input_exit_2(
    capsys: pytest.CaptureFixture[str], write_scenario: Write
) -> None:
    status, _, _ = run(capsys, "solve", str(tdm_only(write_scenario)))
    assert status == 2


def test_user_eligible_nowhere_is_a_warning_and_still_solves(
    capsys: pytest.CaptureFixture[str], write_scenario: Write
) -> None:
    doc = valid()
    doc["users"][1]["requires"] = {"zone": "a"}  # zone a AND class small: nowhere
    path = write_scenario(doc)
    status, out, err = run(capsys, "solve", str(path), "--json")
    assert status == 0
    assert_one_line(err, "warning", str(path), "bob", "eligible on no server")
    result = json.loads(out)
    assert result["tasks"]["bob"] == 0 and result["allocation"]["bob"] == {}
    assert result["certificate"]["holds"] is True


def test_the_installed_command_prints_no_traceback(write_scenario: Write) -> None:
    doc = valid()
    doc["users"][0]["weight"] = -1
    path = write_scenario(doc)
    proc = subprocess.run(
        [sys.executable, "-m", "psdsf_dist.cli.main", "solve", str(path)],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert_one_line(proc.stderr, str(path), "users[0].weight")


def test_output_onto_a_directory_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, err = run(capsys, "solve", str(example_path("paper_fig1")), "-o", str(tmp_path))
    assert status == 2 and out == ""
    assert_one_line(err, str(tmp_path), "directory")
    assert list(tmp_path.iterdir()) == []


def test_output_files_get_the_umasks_mode_or_keep_their_own(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    old = os.umask(0o027)
    try:
        status, _, _ = run(capsys, "solve", str(example_path("paper_fig1")), "-o", str(target))
        assert status == 0
        assert stat.S_IMODE(target.stat().st_mode) == 0o640
        target.chmod(0o644)  # an overwritten file keeps its mode
        status, _, _ = run(capsys, "solve", str(example_path("paper_fig1")), "-o", str(target))
        assert status == 0
        assert stat.S_IMODE(target.stat().st_mode) == 0o644
    finally:
        os.umask(old)


# -- whole tasks ---------------------------------------------------------------------------------


def test_whole_tasks_rounds_psdsf_and_states_the_bound(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "solve", str(example_path("paper_cluster")), "--whole-tasks",
                           "--json")
    assert status == 0, err
    doc = json.loads(out)
    assert doc["policy"] == "psdsf"
    assert doc["tasks"] == {"u1": 263, "u2": 84, "u3": 66, "u4": 22}
    assert all(float(v).is_integer() for row in doc["allocation"].values() for v in row.values())
    whole = doc["whole_tasks"]
    assert whole["fractional_tasks"]["u2"] == pytest.approx(105)
    assert whole["split_servers"] == {"u1": 68, "u2": 76, "u3": 33, "u4": 11}
    for u, x in doc["tasks"].items():
        assert x > whole["lower_bound"][u]
    status, out, _ = run(capsys, "solve", str(example_path("paper_cluster")), "--whole-tasks")
    assert status == 0 and "split over 76" in out and "u2  84 tasks, fractional 105" in out


def test_whole_task_policy_and_seed(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(example_path("kesidis_two_servers"))
    status, out, _ = run(capsys, "solve", path, "--policy", "psdsf-pf", "--json")
    assert status == 0
    assert json.loads(out)["allocation"] == {"f1": {"s1": 19.0}, "f2": {"s1": 2.0, "s2": 20.0}}
    seen = set()
    for seed in ("0", "0", "1", "2", "3"):
        status, out, _ = run(capsys, "solve", path, "--policy", "rrr-psdsf", "--seed", seed,
                             "--json")
        assert status == 0
        seen.add((seed, json.dumps(json.loads(out)["allocation"], sort_keys=True)))
    assert len({a for s, a in seen if s == "0"}) == 1  # a seed gives one allocation
    assert len({a for _, a in seen}) > 1


def test_whole_tasks_with_another_policy_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = run(capsys, "solve", str(example_path("paper_fig1")), "--policy", "tsf",
                           "--whole-tasks")
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "--whole-tasks rounds the PS-DSF allocation" in err
    status, _, err = run(capsys, "solve", str(example_path("paper_fig1")), "--seed", "x")
    assert status == 2 and err.count("\n") == 1
