"""``compare``, ``properties`` and ``solve --policy`` through the real CLI entry point."""

from __future__ import annotations

import json
from importlib import resources as importlib_resources
from pathlib import Path

import pytest

from psdsf_dist.cli.main import main
from psdsf_dist.policies import POLICIES


def example(name: str) -> str:
    return str(importlib_resources.files("psdsf_dist") / "examples" / f"{name}.yaml")


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_compare_json_has_every_policy_and_the_oracle_numbers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = run(["compare", example("paper_fig1"), "--json", "--trials", "2"], capsys)
    assert status == 0 and err == ""
    doc = json.loads(out)
    assert list(doc["policies"]) == list(POLICIES)
    tsf = doc["policies"]["tsf"]
    assert tsf["tasks"] == pytest.approx({"u1": 2.0, "u2": 2.0, "u3": 8.0})
    assert tsf["total_tasks"] == pytest.approx(12.0)
    assert tsf["weighted_tasks"] == pytest.approx(2 + 2 + 2 * 8)
    assert tsf["properties"]["bf"] is False
    psdsf = doc["policies"]["psdsf"]
    assert psdsf["properties"]["bf"] is True and psdsf["properties"]["si"] is True
    assert psdsf["utilization"]["s1"]["mem"] == pytest.approx(1.0)
    assert psdsf["utilization"]["s2"]["bw"] is None  # s2 has no bandwidth
    # task shares 3/6, 3/6, 6/(2*12) = 1/2, 1/2, 1/4: Jain's index (5/4)^2 / (3 * 9/16) = 25/27
    assert psdsf["jain_index"] == pytest.approx(25 / 27)
    # TSF's are 2/6, 2/6, 8/24: all equal
    assert tsf["jain_index"] == pytest.approx(1.0)
    assert doc["policies"]["drf"]["pooled"] is True


def test_compare_table_is_aligned_with_units(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["compare", example("paper_cluster"), "--policies", "psdsf", "tsf",
                          "c-drfh", "--trials", "0"], capsys)
    assert status == 0
    lines = out.splitlines()
    header = next(line for line in lines if "psdsf" in line and "tsf" in line)
    assert header.split() == ["psdsf", "tsf", "c-drfh"]
    assert "utilisation, % of capacity" in out
    cpu_c = next(line for line in lines if line.strip().startswith("cpu [C]"))
    # PS-DSF keeps class C's CPU busy; TSF leaves about a fifth idle (ORACLES.md example 3)
    assert cpu_c.split()[-3:-1] == ["100.0", "80.5"]
    # numbers right-aligned under their policy names
    end = header.index("psdsf") + len("psdsf")
    assert cpu_c[:end].endswith("100.0")


def test_compare_shows_the_external_resource(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["compare", example("tsfer_fig2"), "--policies", "tsf", "tsf-er",
                          "--trials", "0"], capsys)
    assert status == 0
    uplink = next(line for line in out.splitlines() if "uplink [external]" in line)
    assert uplink.split()[-2:] == ["100.0", "89.3"]
    assert "only tsf-er models the external resources" in out


def test_compare_writes_the_output_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "cmp.json"
    status, out, _ = run(["compare", example("paper_fig2"), "--json", "--trials", "0",
                          "-o", str(target)], capsys)
    assert status == 0 and out == ""
    assert set(json.loads(target.read_text())["policies"]) == set(POLICIES)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compare", "missing.yaml"], "missing.yaml: no such file"),
        (["compare", "EXAMPLE", "--policies", "fair"], "invalid choice: 'fair'"),
        (["properties", "EXAMPLE", "--trials", "-3"], "--trials: must be in 0..100,000"),
        (["solve", "EXAMPLE", "--policy", "nope"], "invalid choice: 'nope'"),
    ],
)
def test_bad_input_is_one_line_and_status_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [example("paper_fig1") if a == "EXAMPLE" else a for a in argv]
    status, out, err = run(argv, capsys)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_bad_scenario_field_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("resources: [cpu]\nexternal: {uplink: -1}\nservers: [{name: s, capacity: "
                   "{cpu: 1}}]\nusers: [{name: u, demand: {cpu: 1}}]\n")
    status, _, err = run(["compare", str(bad)], capsys)
    assert status == 2
    assert err.strip() == f"psdsf-dist: {bad}: external.uplink: must be >= 0, got -1"


def test_properties_json_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["properties", example("paper_fig1"), "--policy", "c-drfh", "--json",
                          "--trials", "3", "--seed", "5"], capsys)
    assert status == 0
    doc = json.loads(out)
    assert doc["policy"] == "c-drfh"
    assert doc["properties"]["bf"]["holds"] is False
    assert doc["properties"]["bf"]["witness"]["user"] == "u1"
    assert doc["properties"]["srf"]["holds"] is None
    assert doc["tasks"]["u1"] == pytest.approx(60 / 23)
    status, out, _ = run(["properties", example("paper_fig1"), "--trials", "0"], capsys)
    assert status == 0
    assert "bottleneck fairness" in out and "NO" not in out


def test_solve_policy_json(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["solve", example("paper_fig1"), "--policy", "c-drfh", "--json"], capsys)
    assert status == 0
    doc = json.loads(out)
    assert doc["policy"] == "c-drfh"
    assert doc["tasks"]["u3"] == pytest.approx(144 / 23)
    # the PS-DSF certificate of the C-DRFH allocation: it is not PS-DSF
    assert doc["certificate"]["holds"] is False
    status, out, _ = run(["solve", example("paper_fig1"), "--policy", "drf", "--json"], capsys)
    assert json.loads(out)["certificate"] is None
    status, out, _ = run(["solve", example("paper_fig1"), "--json"], capsys)
    doc = json.loads(out)
    assert doc["policy"] == "psdsf" and doc["certificate"]["holds"] is True


def test_compare_and_properties_take_the_whole_task_policies(
    capsys: pytest.CaptureFixture[str],
) -> None:
    whole = ["drfh-first-fit", "drfh-best-fit", "psdsf-pf", "rpsdsf", "rrr-psdsf", "bf-drf"]
    path = example("kesidis_two_servers")
    status, out, err = run(["compare", path, "--json", "--trials", "2", "--seed", "5",
                            "--policies", "psdsf", *whole], capsys)
    assert status == 0 and err == ""
    doc = json.loads(out)["policies"]
    assert doc["psdsf-pf"]["tasks"] == {"f1": 19.0, "f2": 22.0}
    assert doc["rpsdsf"]["total_tasks"] == 42.0
    for p in whole:
        assert doc[p]["whole_tasks"] is True
        assert all(float(v).is_integer() for v in doc[p]["tasks"].values())
    assert doc["psdsf"]["whole_tasks"] is False
    status, out, _ = run(["properties", path, "--policy", "rpsdsf", "--json", "--trials", "3"],
                         capsys)
    assert status == 0
    props = json.loads(out)["properties"]
    assert props["feasible"]["holds"] is True and "whole tasks" in props["feasible"]["detail"]
    assert props["po"]["holds"] is True and "integer program" in props["po"]["detail"]


# -- the AMF family (Guan thesis) ----------------------------------------------------------------


def test_compare_amf_family_on_the_thesis_example(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(["compare", example("guan_amf"), "--policies", "amf", "amf-si", "gamf",
                            "gamf-si", "psdsf", "--json", "--trials", "3"], capsys)
    assert status == 0 and err == ""
    doc = json.loads(out)["policies"]
    assert doc["amf"]["tasks"] == pytest.approx({"J1": 3.0, "J2": 3.0})
    assert doc["amf-si"]["tasks"] == pytest.approx({"J1": 4.0, "J2": 2.0})
    assert doc["amf"]["properties"]["si"] is False and doc["amf-si"]["properties"]["si"] is True
    assert doc["gamf"]["properties"]["po"] is True and doc["gamf"]["properties"]["ef"] is True
    # psdsf ignores the task counts (one note says so in the table)
    assert doc["psdsf"]["tasks"] == pytest.approx({"J1": 4.0, "J2": 4.0})
    status, out, _ = run(["compare", example("guan_amf"), "--policies", "amf", "psdsf",
                          "--trials", "0"], capsys)
    assert status == 0 and "only the amf family models per-server task counts" in out


@pytest.mark.parametrize("policy", ["amf", "amf-si", "gamf", "gamf-si"])
def test_solve_and_properties_take_the_amf_family(
    capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    status, out, err = run(["solve", example("guan_gamf"), "--policy", policy, "--json"], capsys)
    assert status == 0 and err == ""
    doc = json.loads(out)
    assert doc["policy"] == policy and sum(doc["tasks"].values()) > 0
    status, out, err = run(["properties", example("guan_gamf"), "--policy", policy, "--json",
                            "--trials", "2"], capsys)
    assert status == 0 and err == ""
    props = json.loads(out)["properties"]
    assert props["feasible"]["holds"] is True and props["po"]["holds"] is True


def test_bad_task_group_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text("resources: [slots]\nservers: [{name: s, capacity: {slots: 2}}]\n"
                    "users: [{name: j, demand: {slots: 1}, task_groups: [{servers: [s], "
                    "tasks: -1}]}]\n", encoding="utf-8")
    for command in (["solve", "--policy", "gamf"], ["compare"], ["properties", "--policy", "amf"]):
        status, out, err = run([command[0], str(path), *command[1:]], capsys)
        assert status == 2 and out == ""
        assert err == (f"psdsf-dist: {path}: users[0].task_groups[0].tasks: must be >= 0, "
                       "got -1\n")


def test_mnw_and_cru_through_solve_properties_and_compare(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for policy in ("mnw", "cru"):
        status, out, _ = run(["solve", example("tsfer_fig2"), "--policy", policy, "--json"],
                             capsys)
        assert status == 0
        assert json.loads(out)["tasks"] == pytest.approx({"u1": 5.0, "u2": 5.0})
        status, out, _ = run(["properties", example("tsfer_sp_counterexample"), "--policy",
                              policy, "--json", "--trials", "20"], capsys)
        assert status == 0
        props = json.loads(out)["properties"]
        assert props["sp"]["holds"] is False and props["sp"]["witness"]["user"] == "B"
        assert props["ef"]["holds"] and props["po"]["holds"] and props["si"]["holds"]
    status, out, _ = run(["compare", example("tsfer_fig2"), "--policies", "tsf", "mnw", "cru",
                          "--trials", "0"], capsys)
    assert status == 0
    assert "only mnw, cru model the external resources" in out
    uplink = next(line for line in out.splitlines() if "uplink [external]" in line)
    assert uplink.split()[-2:] == ["100.0", "100.0"]
