"""``psdsf-dist run`` end to end on the shared local Ray, and its one-line input errors."""

from __future__ import annotations

import json

import pytest

from psdsf_dist.cli.main import build_parser, main
from psdsf_dist.cli.run import config_from
from psdsf_dist.protocol.config import ProtocolConfig
from tests.conftest import EXAMPLES


@pytest.mark.usefixtures("ray_session")
def test_run_prints_the_solve_json_with_event_times(capsys: pytest.CaptureFixture[str]) -> None:
    # two servers, three users; one extra event from the command line at round 10
    status = main(["run", str(EXAMPLES / "paper_fig1.yaml"), "--period", "0.3", "--json",
                   "--seed", "4", "--until-converged", "--duration", "120",
                   "--event", "{at: 10, set_weight: {user: u1, weight: 3}}"])
    out, err = capsys.readouterr()
    assert status == 0, err
    doc = json.loads(out)
    assert doc["policy"] == "psdsf-ray/split" and doc["certificate"]["holds"]
    assert [e["event"] for e in doc["events"]] == ["start", "user u1 weight set to 3"]
    assert doc["events"][-1]["rounds_to_converge"] is not None
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
    (["run", str(EXAMPLES / "paper_fig1.yaml"), "--period", "0"], "--period: must be a positive"),
    (["run", str(EXAMPLES / "paper_fig1.yaml"), "--event", "[1, 2]"], "--event[0]"),
    (["run", str(EXAMPLES / "paper_fig1.yaml"), "--event", "{at: 1, user_leaves: zz}"],
     "events[0].user_leaves: unknown user 'zz'"),
])
def test_bad_input_is_one_line_exit_2_before_ray_starts(
        args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and needle in err and err.count("\n") == 1
