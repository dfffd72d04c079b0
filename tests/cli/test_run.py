"""``psdsf-dist run`` end to end on the shared local Ray, and its one-line input errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

import pytest

from psdsf_dist.cli.main import build_parser, main
from psdsf_dist.cli.run import config_from
from psdsf_dist.protocol.config import ProtocolConfig
from tests.conftest import EXAMPLES


@pytest.mark.usefixtures("ray_session")
def test_run_prints_the_solve_json_with_event_times(capsys: pytest.CaptureFixture[str]) -> None:
    # two servers, three users; one extra event from the command line at round 10
    status = main(["run", str(EXAMPLES / "paper_fig1.yaml"), "--period", "0.3", "--json",
                   "--time-scale", "0.3", "--seed", "4", "--until-converged", "--duration", "120",
                   "--event", "{at: 10, set_weight: {user: u1, weight: 3}}"])
    out, err = capsys.readouterr()
    assert status == 0, err
    doc = json.loads(out)
    assert doc["policy"] == "psdsf-ray/class" and doc["certificate"]["holds"]
    assert [e["event"] for e in doc["events"]] == ["start", "user u1 weight set to 3"]
    assert doc["events"][-1]["rounds_to_converge"] is not None
    assert set(doc["events"][-1]["rounds_within"]) == {"0.05", "0.01", "0.001"}
    assert doc["trace"][-1]["distance"] is not None
    assert doc["run"]["servers"] == 2 and doc["trace"]
    assert (doc["run"]["fanout"], doc["run"]["gossip_rate"]) == (4, 4)
    assert all(o["feasible"] for o in doc["trace"])
    assert "residual" in err and "since last event" in err


def test_gossip_options_reach_the_run_config() -> None:
    scenario = str(EXAMPLES / "paper_fig1.yaml")
    default = config_from(build_parser().parse_args(["run", scenario]))
    assert default.protocol == ProtocolConfig()
    changed = config_from(build_parser().parse_args(
        ["run", scenario, "--fanout", "1", "--gossip-rate", "2", "--lockstep", "--delay", "0.5r",
         "--period", "2", "--hold", "4"]))
    p = changed.protocol
    assert (p.fanout, p.gossip_rate, p.jitter, p.delay, p.period, p.hold) == (1, 2, 0.0, 1.0,
                                                                              2.0, 4)


@pytest.mark.parametrize(("args", "needle"), [
    (["run", "missing.yaml"], "missing.yaml: no such file"),
    (["run", str(EXAMPLES / "paper_fig1.yaml"), "--period", "0"],
     "--period: must be a number in [0.001, 1e+06]"),
    (["run", str(EXAMPLES / "paper_fig1.yaml"), "--event", "[1, 2]"], "--event[0]"),
    (["run", str(EXAMPLES / "paper_fig1.yaml"), "--event", "{at: 1, user_leaves: zz}"],
     "events[0].user_leaves: unknown user 'zz'"),
])
def test_bad_input_is_one_line_exit_2_before_ray_starts(
        args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and needle in err and err.count("\n") == 1


def _descendants(root: int) -> list[int]:
    """Every process under ``root`` (from /proc: the raylet a run starts is its child, and the
    actors' workers are the raylet's)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_json_stays_valid_when_an_actor_is_killed(tmp_path: Path) -> None:
    """kill -9 of a server actor's process during ``run --json``: Ray reports the death on
    the driver, and that line goes to stderr; stdout parses as the result."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "psdsf_dist.cli.main", "run", str(EXAMPLES / "paper_fig1.yaml"),
         "--json", "--period", "0.3", "--duration", "20", "--num-cpus", "2",
         "--servers-per-actor", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    killed = None
    deadline = time.monotonic() + 60
    while killed is None and time.monotonic() < deadline and proc.poll() is None:
        actors = [p for p in _descendants(proc.pid) if "ray::ServerActor" in _cmdline(p)]
        if actors:
            time.sleep(3.0)  # let it run a few periods first
            os.kill(actors[0], signal.SIGKILL)
            killed = actors[0]
        time.sleep(0.2)
    out, err = proc.communicate(timeout=120)
    assert killed is not None, err
    doc = json.loads(out)  # nothing but the result on stdout
    assert doc["run"]["servers"] == 2
    assert doc["run"]["restarts"] >= 1, err
    assert any(e["event"].endswith("restarted after a crash") for e in doc["events"])


@pytest.mark.usefixtures("ray_session")
def test_run_without_address_starts_its_own_ray_beside_another(tmp_path: Path) -> None:
    """Another Ray is up (the tests' own) and RAY_ADDRESS names it: ``run`` without
    ``--address`` still starts a Ray of its own and leaves the other alone."""
    import ray

    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    proc = subprocess.Popen(
        [sys.executable, "-m", "psdsf_dist.cli.main", "run", str(EXAMPLES / "paper_fig1.yaml"),
         "--period", "0.3", "--duration", "2", "--num-cpus", "1", "--name", "beside",
         "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    seen_here = False
    while proc.poll() is None:
        names = {e["name"] for e in ray.util.list_named_actors(all_namespaces=True)}
        seen_here |= "psdsf-beside-coordinator" in names
        time.sleep(0.2)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert not seen_here


def test_run_reads_a_file_as_solve_does(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """One loader: a deeply nested file, a device, an alias bomb give run the line solve
    gives, before Ray starts."""
    nested = tmp_path / "nested.yaml"
    nested.write_text("[" * 5000 + "]" * 5000)
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 11)))
    for path in (str(nested), "/dev/zero", str(bomb)):
        assert main(["solve", path]) == 2
        solve_err = capsys.readouterr().err
        assert main(["run", path]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err == solve_err and err.count("\n") == 1, err


def test_tenant_tokens_need_a_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "open.yaml"
    f.write_text("tenants: true\nresources: [CPU]\nservers: [{name: a, capacity: {CPU: 2}}]\n")
    assert main(["run", str(f), "--tenant-tokens", str(tmp_path / "t")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "has no tenant_policy" in err
    assert not (tmp_path / "t").exists()


def test_tenant_tokens_are_written_for_the_declared_tenants_owner_only(tmp_path: Path) -> None:
    from psdsf_dist.admission.identity import token_ok
    from psdsf_dist.cli.run import _write_tokens
    from psdsf_dist.runtime.handles import CoordinatorHandle
    from psdsf_dist.runtime.launcher import Run
    from psdsf_dist.runtime.settings import RunConfig

    doc = {"servers": "from-ray", "tenants": True, "resources": ["CPU"],
           "tenant_policy": {"tenants": [{"name": "etl"}, {"name": "adhoc", "weight": 2}]}}
    target = tmp_path / "tokens"
    args = build_parser().parse_args(["run", "x.yaml", "--tenant-tokens", str(target)])
    # it only reads the run's secret: no coordinator is called
    _write_tokens(args, doc, Run(cast(CoordinatorHandle, None), "r", RunConfig(), "the-secret"))
    lines = [line.split("\t") for line in target.read_text().splitlines()]
    assert [n for n, _ in lines] == ["etl", "adhoc"]
    assert all(token_ok("the-secret", n, t) for n, t in lines)
    assert target.stat().st_mode & 0o777 == 0o600


def test_the_progress_line_names_unmanaged_usage() -> None:
    from psdsf_dist.cli.run import _unmanaged_note

    assert _unmanaged_note({"unmanaged": {"node-b": {"CPU": 4.0, "memory": 0.0},
                                          "node-a": {"CPU": 1.5}}}) == \
        ", unmanaged: node-a CPU 1.5; node-b CPU 4"
    assert _unmanaged_note({"unmanaged": {}}) == _unmanaged_note({}) == ""
