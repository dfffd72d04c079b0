"""``psdsf-dist observe``: the simulator's state, exported round by round, and the command."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from psdsf_dist.cli.main import main
from psdsf_dist.cli.observe import SimulationExporter
from psdsf_dist.model.scenario import load_scenario
from psdsf_dist.observability.metrics import AllocatorMetrics
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.convergence import Observation
from psdsf_dist.simulator.simulation import SimConfig, Simulator

WriteScenario = Callable[..., Path]  # the conftest fixture: document -> scenario file

# The paper's Fig. 1 with churn: a user leaves, a server fails and comes back.
CHURN = {
    "resources": ["cpu", "mem", "bw"],
    "servers": [{"name": "s1", "capacity": {"cpu": 9, "mem": 12, "bw": 100}},
                {"name": "s2", "capacity": {"cpu": 12, "mem": 12}}],
    "users": [{"name": "u1", "demand": {"cpu": 1, "mem": 2, "bw": 10}, "weight": 1},
              {"name": "u2", "demand": {"cpu": 1, "mem": 2, "bw": 1}, "weight": 1},
              {"name": "u3", "demand": {"cpu": 1, "mem": 2}, "weight": 2}],
    "events": [{"at": 5, "user_leaves": "u2"},
               {"at": 12, "server_fails": "s2"},
               {"at": 16, "server_joins": {"name": "s2"}}],
}


def value(m: AllocatorMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_exporter_follows_the_simulation(write_scenario: WriteScenario) -> None:
    scenario = load_scenario(write_scenario(CHURN))
    metrics = AllocatorMetrics()
    # lock-step, so that each server's updates by each observation are known exactly
    sim = Simulator(scenario, SimConfig(ProtocolConfig(jitter=0.0), rounds=40, memoize=False))
    exporter = SimulationExporter(sim, metrics)
    exporter.start()
    assert value(metrics, "psdsf_members", role="user") == 3.0
    records: list[Observation] = []
    seen_u2: list[bool] = []

    def progress(rec: Observation) -> None:
        exporter.round(rec)
        records.append(rec)
        seen_u2.append(value(metrics, "psdsf_user_tasks", user="u2") is not None)
        # the exported state is the simulator's, every round
        assert value(metrics, "psdsf_certificate_residual") == rec.residual
        assert value(metrics, "psdsf_converged") == float(rec.holds)
        for n, user in enumerate(scenario.user_names):
            if sim.churn.users_present[n]:
                assert value(metrics, "psdsf_user_tasks", user=user) \
                    == pytest.approx(sim.allocation()[n].sum(), rel=1e-12, abs=1e-12)

    sim.progress = progress
    result = sim.run()
    assert len(records) == 40
    # u2 leaves at t=5: its series go from the observation at t=5 on (events come first)
    assert [rec.time for rec in records[:5]] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert seen_u2[:4] == [True] * 4 and not any(seen_u2[4:])
    for kind, count in [("user_leaves", 1), ("server_fails", 1), ("server_joins", 1),
                        ("user_joins", 0)]:
        assert value(metrics, "psdsf_churn_events_total", kind=kind) == count
    assert value(metrics, "psdsf_server_restarts_total", server="s2") == 1.0
    assert value(metrics, "psdsf_members", role="server") == 2.0
    assert value(metrics, "psdsf_members", role="user") == 2.0
    # s1 updated at t = 0..39; s2 at 0..11, then from its return (t=16) on as a new incarnation
    assert value(metrics, "psdsf_server_rounds_total", server="s1") == 40.0
    assert value(metrics, "psdsf_server_rounds_total", server="s2") == 40.0 - 16.0
    # the latency histogram is cluster-wide: s2's rounds before failing stay in it — those
    # observed by t=11; its update at t=11 died with it before the next observation
    assert value(metrics, "psdsf_server_round_duration_seconds_count") == 40.0 + 11.0 + 24.0
    assert (value(metrics, "psdsf_gossip_bytes_total", server="s1") or 0.0) > 0
    assert result.trace[-1].holds
    assert (value(metrics, "psdsf_reconvergence_seconds_count") or 0.0) >= 1.0
    X = result.allocation
    assert value(metrics, "psdsf_allocated_tasks", user="u3", server="s2") \
        == pytest.approx(X[2, 1])
    assert np.isfinite(value(metrics, "psdsf_server_min_vds", server="s1") or np.nan)


def test_command_writes_the_final_state(write_scenario: WriteScenario, tmp_path: Path) -> None:
    out = tmp_path / "final.json"
    status = main(["observe", str(write_scenario(CHURN)), "--port", "0", "--rounds", "30",
                   "--pace", "0", "--quiet", "--json", "-o", str(out)])
    assert status == 0
    doc = json.loads(out.read_text())
    assert doc["policy"].startswith("psdsf-async/")
    assert len(doc["trace"]) == 30
    assert [e["event"] for e in doc["events"]][1:] == [
        "user u2 leaves", "server s2 fails", "server s2 joins"]


def test_endpoint_line_on_stderr(write_scenario: WriteScenario,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["observe", str(write_scenario(CHURN)), "--port", "0", "--rounds", "2",
                   "--pace", "0", "--quiet"])
    assert status == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("psdsf-dist: observe: serving metrics on http://127.0.0.1:")
    assert err[0].endswith("/metrics")


@pytest.mark.parametrize(("extra", "message"), [
    (["--port", "70000"], "--port: must be in 0..65,535"),
    (["--pace", "-1"], "--pace: must be a number in [0, 1e+06]"),
    (["--keep-serving", "inf"], "--keep-serving: must be a number in [0, 1e+06]"),
    (["--hold", "0"], "--hold: must be in 1..1,000,000"),
    (["--rounds", "0"], "--rounds: must be in 1..1,000,000"),
    (["--bind", "no.such.host.invalid"], "cannot serve metrics on no.such.host.invalid"),
])
def test_bad_options_exit_2_with_one_line(write_scenario: WriteScenario,
                                          capsys: pytest.CaptureFixture[str],
                                          extra: list[str], message: str) -> None:
    status = main(["observe", str(write_scenario(CHURN)), "--port", "0", "--pace", "0",
                   *extra])
    assert status == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


def test_port_in_use_exits_2(write_scenario: WriteScenario,
                             capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "never.json"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        status = main(["observe", str(write_scenario(CHURN)), "--port", str(port),
                       "--pace", "0", "-o", str(out)])
    assert status == 2
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}" in err and err.count("\n") == 1
    assert not out.exists()


def test_bad_scenario_exits_2(write_scenario: WriteScenario,
                              capsys: pytest.CaptureFixture[str]) -> None:
    bad = dict(CHURN, users=[{"name": "u1", "demand": {"cpu": 1}, "weight": -1}])
    status = main(["observe", str(write_scenario(bad)), "--port", "0"])
    assert status == 2
    err = capsys.readouterr().err
    assert "weight" in err and err.count("\n") == 1
