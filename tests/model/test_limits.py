"""Limits: hostile sizes and numbers are refused at once, in one line naming the field; the
loader never ends in a traceback, whatever the document."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psdsf_dist.cli.main import main
from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.document import _read_bounded
from psdsf_dist.model.limits import LIMITS_ENV, Limits, current_limits, nesting_depth
from psdsf_dist.model.scenario import Scenario, load_scenario


def doc(**user: Any) -> dict[str, Any]:
    u = {"name": "u1", "demand": {"cpu": 1, "mem": 1}, **user}
    return {"resources": ["cpu", "mem"],
            "servers": [{"name": "s", "capacity": {"cpu": 4, "mem": 4}}],
            "users": [u, {"name": "u2", "demand": {"cpu": 1}}]}


def refused(data: Any, field: str, words: str) -> None:
    with pytest.raises(ScenarioError) as info:
        Scenario.from_dict(data)
    assert info.value.field == field, str(info.value)
    assert words in info.value.message, str(info.value)
    assert "\n" not in str(info.value)


def test_a_billion_servers_are_refused_before_any_is_built() -> None:
    d = doc()
    d["servers"][0]["count"] = 1_000_000_000
    began = time.perf_counter()
    refused(d, "servers[0].count", "more than the limit of 1,000,000")
    assert time.perf_counter() - began < 0.5


def test_users_resources_events_and_cells_have_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LIMITS_ENV, "users=1")
    refused(doc(), "users", "2 users is more than the limit of 1")
    monkeypatch.setenv(LIMITS_ENV, "resources=1")
    refused(doc(), "resources", "2 resources")
    monkeypatch.setenv(LIMITS_ENV, "cells=1")
    refused(doc(), "users", "2 cells")
    monkeypatch.setenv(LIMITS_ENV, "events=1")
    d = doc()
    d["events"] = [{"at": 1, "leave": "u1"}, {"at": 2, "join": "u1"}]
    refused(d, "events", "2 events")


def test_lists_longer_than_their_limit_are_refused_before_any_walk(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each entry is at least one server, user or event, so the list's length is checked
    first: the nesting walk of a million listed servers took seconds (here the walk would
    have stopped at the deep entry first)."""
    monkeypatch.setenv(LIMITS_ENV, "servers=10,users=10,events=10")
    deep: Any = 1
    for _ in range(40):
        deep = [deep]
    for key, what in (("servers", "servers"), ("users", "users"), ("events", "events")):
        d = doc()
        d[key] = [{"name": f"x{i}"} for i in range(11)] + [{"name": "deep", "x": deep}]
        refused(d, key, f"12 {what} is more than the limit of 10")


def test_limits_are_raised_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    d = doc()
    d["servers"][0]["count"] = 3
    monkeypatch.setenv(LIMITS_ENV, "servers=2")
    refused(d, "servers[0].count", f'{LIMITS_ENV}="servers=N"')
    monkeypatch.setenv(LIMITS_ENV, "servers=3, cells=1_000")
    assert Scenario.from_dict(d).num_servers == 3
    assert current_limits() == Limits(servers=3, cells=1000)
    for bad in ("servers", "planets=3", "servers=many", "servers=0"):
        monkeypatch.setenv(LIMITS_ENV, bad)
        with pytest.raises(ScenarioError, match=LIMITS_ENV):
            current_limits()


@pytest.mark.parametrize(("user", "field", "words"), [
    ({"weight": 1e-300}, "users[0].weight", "must be at least 1e-15"),
    ({"weight": 1e300}, "users[0].weight", "at most 1e+15"),
    ({"demand": {"cpu": 5e-324}}, "users[0].demand.cpu", "at least 1e-15"),
    ({"gamma": {"s": 1e308}}, "users[0].gamma.s", "at most 1e+15"),
    ({"max_tasks": 10**400}, "users[0].max_tasks", "integer of 401 digits"),
])
def test_numbers_floats_cannot_carry_are_refused(user: dict[str, Any], field: str,
                                                 words: str) -> None:
    refused(doc(**user), field, words)


def test_huge_capacities_are_refused() -> None:
    d = doc()
    d["servers"][0]["capacity"]["cpu"] = 1e308
    refused(d, "servers[0].capacity.cpu", "at most 1e+15")
    d["servers"][0]["capacity"]["cpu"] = 10**400
    refused(d, "servers[0].capacity.cpu", "integer of 401 digits")
    d["servers"][0]["capacity"] = {"cpu": 1e15, "mem": 1e15}  # the largest allowed works
    assert Scenario.from_dict(d).capacity[0, 0] == 1e15


def test_deep_nesting_is_refused_without_recursion() -> None:
    deep: Any = 1
    for _ in range(5000):
        deep = [deep]
    d = doc()
    d["description"] = deep
    refused(d, "", "nested more than 32 levels")
    assert nesting_depth(deep, 40) == 41  # stops counting past the limit
    assert nesting_depth({"a": [1, {"b": 2}]}, 40) == 3


def test_hostile_files_give_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = {
        "nested.yaml": "[" * 5000 + "]" * 5000,
        "nested.json": "[" * 5000 + "]" * 5000,
        "digits.json": '{"resources": [' + "9" * 5001 + "]}",
        "digits.yaml": "resources: [cpu]\nservers: [{name: s, capacity: {cpu: "
                       + "9" * 400 + "}}]\nusers: []\n",
        "billion.yaml": "resources: [cpu]\nservers: [{name: s, count: 1000000000, "
                        "capacity: {cpu: 1}}]\nusers: [{name: u, demand: {cpu: 1}}]\n",
        "weights.yaml": "resources: [cpu]\nservers: [{name: s, capacity: {cpu: 1}}]\nusers: "
                        "[{name: a, demand: {cpu: 1}, weight: 1.0e-300}, "
                        "{name: b, demand: {cpu: 1}, weight: 1.0e+300}]\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ScenarioError):
            load_scenario(path)
        status = main(["solve", str(path)])
        out, err = capsys.readouterr()
        assert status == 2, (name, out, err)
        assert out == "" and err.count("\n") == 1, (name, err)
        assert err.startswith(f"psdsf-dist: {path}: "), (name, err)


def test_a_file_larger_than_the_limit_is_not_read(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("resources: [cpu]\n" + "# padding\n" * 200)
    monkeypatch.setenv(LIMITS_ENV, "file_bytes=100")
    with pytest.raises(ScenarioError, match="more than the limit of 100 bytes"):
        load_scenario(path)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=30)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=json_values, as_yaml=st.booleans())
def test_random_documents_load_or_give_one_line(document: Any, as_yaml: bool,
                                                tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("fuzz") / ("s.yaml" if as_yaml else "s.json")
    path.write_text(yaml.safe_dump(document) if as_yaml else json.dumps(document))
    try:
        load_scenario(path)
    except ScenarioError as err:
        assert "\n" not in str(err) and str(err).startswith(str(path))


@settings(max_examples=100, deadline=None)
@given(weight=st.floats(), amount=st.floats())
def test_any_float_is_taken_or_refused(weight: float, amount: float) -> None:
    """Any weight or demand either builds a scenario with finite, non-negative arrays or is
    refused: nothing in between (no NaN or infinite gamma)."""
    try:
        s = Scenario.from_dict(doc(weight=weight, demand={"cpu": amount, "mem": 1}))
    except ScenarioError:
        return
    assert np.all(np.isfinite(s.gamma)) and np.all(s.gamma >= 0)
    assert np.all(np.isfinite(s.weight)) and np.all(s.weight > 0)


def test_devices_pipes_and_directories_are_refused_without_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # no writer: reading it would wait forever
    for path, words in (("/dev/zero", "not a regular file"), (str(fifo), "not a regular file"),
                        (str(tmp_path), "is a directory")):
        began = time.perf_counter()
        with pytest.raises(ScenarioError, match=words):
            load_scenario(path)
        assert time.perf_counter() - began < 2


def test_the_reader_refuses_past_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("# x\n" * 30)
    with pytest.raises(ScenarioError, match="more than the limit of 100 bytes"):
        _read_bounded(path, str(path), 100)


def _alias_levels(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return ("resources: [cpu]\nservers: [{name: s, capacity: {cpu: 1}}]\n"
            "users: [{name: u, demand: {cpu: 1}}]\ndescription:\n"
            + "".join(f"  {line}\n" for line in lines))


def test_an_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_alias_levels(10))  # 9^10 nodes once expanded
    began = time.perf_counter()
    with pytest.raises(ScenarioError, match="aliases expand to more than 1,000,000"):
        load_scenario(bomb)
    assert time.perf_counter() - began < 2
    fine = tmp_path / "fine.yaml"
    fine.write_text(_alias_levels(3))  # 9^3: well within the budget
    assert load_scenario(fine).num_users == 1


def test_shared_anchors_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "anchors.yaml"
    path.write_text("resources: [cpu, mem]\nservers:\n  - {name: s, capacity: &c {cpu: 4, mem: 4}}"
                    "\n  - {name: t, capacity: *c}\nusers:\n  - {name: a, demand: &d {cpu: 1}}"
                    "\n  - {name: b, demand: *d}\n")
    assert load_scenario(path).num_servers == 2


@pytest.mark.parametrize("name", ["\ud800", "a\nb", "x\u200b", "\u202eevil", "e\u0301", "\x00",
                                  "\u00a0"])
@pytest.mark.parametrize("where", ["user", "server", "resource key", "label"])
def test_names_that_do_not_print_are_refused(name: str, where: str) -> None:
    d = doc()
    if where == "user":
        d["users"][0]["name"] = name
    elif where == "server":
        d["servers"][0]["name"] = name
    elif where == "resource key":
        d["users"][0]["demand"] = {name: 1}
    else:
        d["servers"][0]["labels"] = {"zone": name}
    with pytest.raises(ScenarioError) as info:
        Scenario.from_dict(d)
    text = str(info.value)
    assert text.isprintable() and "\n" not in text, text
    text.encode("utf-8")  # no lone surrogate left in the message


def test_a_file_that_is_not_a_scenario_is_not_quoted(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    secret = "root:$6$s3cr3tHash:19000:0:99999:7:::"
    for name, text in (("shadow.yml", secret + "\n"), ("env.yaml", f"PASSWORD={secret}: x\n"),
                       ("plain.json", json.dumps(secret))):
        path = tmp_path / name
        path.write_text(text)
        assert main(["solve", str(path)]) == 2
        err = capsys.readouterr().err
        assert "not a scenario" in err and "s3cr3t" not in err and err.count("\n") == 1, err


def test_output_of_names_never_fails_to_encode(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # a path that is not valid UTF-8 (a lone surrogate once decoded) is escaped in the message
    status = main(["solve", str(tmp_path / "\udcff.yaml")])
    assert status == 2
    assert "\\udcff.yaml: no such file" in capsys.readouterr().err


def test_invalid_file_names_and_unreadable_text_give_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    example = str(Path(__file__).resolve().parents[2] / "psdsf_dist/examples/paper_fig1.yaml")
    for argv in (["solve", "a\x00b.yaml"], ["solve", "\ud800.yaml"],
                 ["solve", example, "-o", "out\ud800"],
                 ["run", example, "--event", "x: \ud800"]):
        assert main(argv) == 2, argv
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.isascii(), err


@pytest.mark.parametrize("event", [
    {"set_weight": {"user": "a", "weight": 1e15}},
    {"set_max_tasks": {"user": "a", "max_tasks": 1e-12}},
    {"set_demand": {"user": "a", "demand": {"cpu": 1e-12}}},
])
def test_a_span_the_events_set_is_refused_at_load(event: dict[str, Any]) -> None:
    """The span limit holds over the whole run: values set by events count with the declared
    ones (each value is in the documented range; together they span more than SPAN)."""
    doc: dict[str, Any] = {"resources": ["cpu"],
                           "servers": [{"name": "s", "capacity": {"cpu": 10}}],
                           "users": [{"name": "a", "demand": {"cpu": 1}},
                                     {"name": "b", "demand": {"cpu": 1}}],
                           "events": [{"at": 5, **event}]}
    with pytest.raises(ScenarioError, match=r"^events: with the values its events set, .* span"):
        Scenario.from_dict(doc)
    kind = next(iter(event))
    within: dict[str, dict[str, Any]] = {"set_weight": {"weight": 1e7},
                                         "set_max_tasks": {"max_tasks": 1e-6},
                                         "set_demand": {"demand": {"cpu": 1e-6}}}
    inside = {kind: {**event[kind], **within[kind]}}
    Scenario.from_dict({**doc, "events": [{"at": 5, **inside}]})
