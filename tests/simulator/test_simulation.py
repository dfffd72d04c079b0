"""The simulator: feasibility at every instant, convergence in lock-step, events, determinism."""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from psdsf_dist.cli.main import main
from psdsf_dist.core.certificate import certificate
from psdsf_dist.errors import FeasibilityError
from psdsf_dist.model.random_scenarios import random_scenario, random_scenario_doc
from psdsf_dist.model.scenario import Scenario, load_scenario
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.convergence import final_run_of_holds
from psdsf_dist.protocol.update_rule import (
    DEFAULT_RULE,
    RULES,
    NoState,
    RuleState,
    ServerView,
    best_response,
    make_rule,
)
from psdsf_dist.simulator.simulation import SimConfig, Simulator, simulate
from tests.conftest import EXAMPLES


def _max_use(scenario: Scenario, X: np.ndarray[Any, Any]) -> float:
    use = np.einsum("nk,knm->km", X, scenario.consumption_tensor("rdm"))
    cap = scenario.capacity
    return float(np.max(np.where(cap > 0, use / np.where(cap > 0, cap, 1.0),
                                 np.where(use > 0, np.inf, 0.0))))


@pytest.mark.parametrize("seed", range(12))
def test_columns_stay_feasible_under_random_staleness(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sc = random_scenario(rng, K=int(rng.integers(2, 10)), N=int(rng.integers(2, 7)),
                         M=int(rng.integers(1, 4)))
    lockstep = bool(rng.random() < 0.5)
    rule = RULES[seed % len(RULES)]
    protocol = ProtocolConfig(
        jitter=0.0 if lockstep else float(rng.uniform(0, 0.9)),
        delay=float(rng.choice([0.0, 0.3, 1.0, 2.5])), loss=float(rng.choice([0.0, 0.3])),
        fanout=int(rng.integers(1, 3)), gossip_rate=int(rng.integers(1, 5)), seed=seed,
        rule=rule, rule_params=(("a", 0.5),) if rule == "damped" else ())
    cfg = SimConfig(protocol, rounds=12, gossip="snapshot" if seed % 4 == 0 else "scuttlebutt")
    seen: list[float] = []
    sim = Simulator(sc, cfg, progress=lambda rec: seen.append(_max_use(sc, sim.allocation())))
    result = sim.run()  # every adopted column is checked on the spot
    assert len(seen) == cfg.rounds
    assert max(seen) <= 1.0 + 1e-9
    assert np.all(result.allocation >= 0)


@dataclass(frozen=True)
class _Greedy:
    """A broken rule: twice the best response (must be caught)."""

    name: str = "greedy"

    def initial_state(self, num_users: int) -> RuleState:
        return NoState()

    def update(self, state: RuleState, view: ServerView, totals: Any,
               column: Any) -> tuple[Any, RuleState]:
        return 2.0 * best_response(view, totals, column), state


def test_an_infeasible_column_is_caught() -> None:
    sc = load_scenario(EXAMPLES / "paper_fig2.yaml")
    with pytest.raises(FeasibilityError, match="exceeds a capacity"):
        simulate(sc, SimConfig(rounds=3), rule=_Greedy())


@pytest.mark.parametrize("name", ["paper_fig1", "paper_fig2"])
@pytest.mark.parametrize("delay", [0.0, 1.0])
def test_paper_examples_converge_with_the_defaults_and_in_lockstep(name: str,
                                                                   delay: float) -> None:
    sc = load_scenario(EXAMPLES / f"{name}.yaml")
    for protocol in (ProtocolConfig(delay=delay), ProtocolConfig(delay=delay, jitter=0.0)):
        result = simulate(sc, SimConfig(protocol, rounds=40))
        start = result.events[0]
        assert start.rounds is not None and start.rounds <= 20, protocol
    assert certificate(sc, result.allocation, rtol=1e-3).holds


def test_paper_cluster_snapshot_churn_converges() -> None:
    sc = load_scenario(EXAMPLES / "paper_cluster.yaml")
    # lock-step, every server on the totals of the round before: the update rule's hard case
    result = simulate(sc, SimConfig(ProtocolConfig(jitter=0.0), rounds=290, gossip="snapshot"))
    assert [e.description for e in result.events] == ["start", "user u4 leaves", "user u4 joins"]
    for e in result.events:
        assert e.rounds is not None and e.rounds <= 40, e
    x = result.allocation.sum(axis=1)
    np.testing.assert_allclose(x, [210, 105, 82.5, 27.5], rtol=1e-3)
    # while u4 was away, class D went to u2: the trace shows the dip and the recovery
    assert all(rec.holds for rec in result.trace if 140 <= rec.time < 250)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("jitter", [0.2, 0.0])
def test_small_random_scenarios_converge(seed: int, jitter: float) -> None:
    rng = np.random.default_rng(100 + seed)
    sc = random_scenario(rng, K=int(rng.integers(2, 6)), N=int(rng.integers(2, 5)),
                         M=int(rng.integers(1, 3)))
    result = simulate(sc, SimConfig(ProtocolConfig(jitter=jitter, seed=seed), rounds=150,
                                    stop_after_hold=10))
    assert result.events[0].converged_at is not None
    assert certificate(sc, result.allocation, rtol=1e-3).holds


def _churn_doc(events: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "resources": ["cpu", "mem"],
        "servers": [{"name": "s", "count": 3, "capacity": {"cpu": 1, "mem": 1}}],
        "users": [{"name": "u1", "demand": {"cpu": 0.1, "mem": 0.05}},
                  {"name": "u2", "demand": {"cpu": 0.05, "mem": 0.1}}],
        "events": events,
    }


def test_user_leaves_and_server_fails_take_effect_at_once() -> None:
    sc = Scenario.from_dict(_churn_doc([{"at": 20, "user_leaves": "u1"},
                                        {"at": 40, "server_fails": "s-2"}]))
    snapshots: dict[int, np.ndarray[Any, Any]] = {}
    sim = Simulator(sc, SimConfig(rounds=80))
    sim.progress = lambda rec: snapshots.__setitem__(round(rec.time), sim.allocation())
    result = sim.run()
    assert snapshots[19][0].sum() > 0
    assert snapshots[20][0].sum() == 0  # u1's tasks ended with it
    assert snapshots[40][:, 1].sum() == 0  # the failed server's tasks are gone
    assert result.allocation[:, 1].sum() == 0
    # the others expire the silent server and stop counting it
    assert "s-2" not in sim.nodes
    assert all("s-2" not in node.gossip.members() for node in sim.nodes.values())
    # u2 ends with both live servers to itself
    np.testing.assert_allclose(result.allocation[1], [10, 0, 10], rtol=1e-6)
    assert all(e.converged_at is not None for e in result.events)


def test_joining_server_and_new_user_get_a_share() -> None:
    sc = Scenario.from_dict(_churn_doc([
        {"at": 10, "server_joins": {"name": "big", "capacity": {"cpu": 2, "mem": 2}}},
        {"at": 30, "user_joins": {"name": "u3", "demand": {"cpu": 0.1, "mem": 0.1}}},
        {"at": 50, "set_weight": {"user": "u1", "weight": 3}},
        {"at": 70, "set_demand": {"user": "u2", "demand": {"cpu": 0.2, "mem": 0.2}}},
    ]))
    result = simulate(sc, SimConfig(rounds=110))
    assert result.scenario.server_names[-1] == "big"
    assert result.allocation[:, 3].sum() > 0
    assert result.allocation[2].sum() > 0
    for e in result.events:
        assert e.converged_at is not None, e
    assert certificate(result.scenario, result.allocation, rtol=1e-3).holds


def test_runs_are_deterministic() -> None:
    rng = np.random.default_rng(3)
    sc = Scenario.from_dict(random_scenario_doc(rng, K=8, N=4, M=2))
    cfg = SimConfig(ProtocolConfig(jitter=0.4, loss=0.2, fanout=2, seed=9), rounds=15)

    def strip(r: Any) -> list[dict[str, Any]]:
        return [{k: v for k, v in rec.to_json().items() if k != "seconds"} for rec in r.trace]

    a, b = simulate(sc, cfg), simulate(sc, cfg)
    assert strip(a) == strip(b)
    np.testing.assert_array_equal(a.allocation, b.allocation)
    c = simulate(sc, SimConfig(ProtocolConfig(jitter=0.4, loss=0.2, fanout=2, seed=10),
                               rounds=15))
    assert strip(a) != strip(c)


def test_event_convergence_is_judged_on_the_events_as_they_happened() -> None:
    sc = load_scenario(EXAMPLES / "paper_fig2.yaml")
    doc = {"at": 12, "user_leaves": sc.user_names[0]}
    sc = Scenario.from_dict({**_fig2_doc(), "events": [doc]})
    result = simulate(sc, SimConfig(rounds=30))
    assert [(e.description, e.at) for e in result.events] == [
        ("start", 0.0), (f"user {sc.user_names[0]} leaves", 12.0)]
    start, leave = result.events
    assert start.converged_at is not None and start.converged_at <= 12.0
    assert leave.converged_at is not None and leave.converged_at >= 12.0
    # the leave's time counts from the first holding observation after it, in whole periods
    window = [o for o in result.trace if o.time >= 12.0]
    first = final_run_of_holds([o.holds for o in window], 10, open_ended=True)
    assert first is not None and leave.converged_at == window[first].time
    assert leave.rounds == round(leave.converged_at - 12.0)


def _fig2_doc() -> dict[str, Any]:
    return dict(yaml.safe_load((EXAMPLES / "paper_fig2.yaml").read_text()))


def test_cli_json_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_churn_doc([{"at": 5, "user_leaves": "u2"}])))
    out = tmp_path / "out.json"
    status = main(["simulate", str(path), "--rounds", "20", "--delay", "0.25", "--fanout", "2",
                   "--hold", "5", "--json", "-o", str(out)])
    assert status == 0
    doc = json.loads(out.read_text())
    assert len(doc["trace"]) == 20
    assert {"residual", "max_relative_change", "utilization", "messages", "bytes"} <= set(
        doc["trace"][0])
    assert [e["event"] for e in doc["events"]] == ["start", "user u2 leaves"]
    assert doc["events"][1]["converged_at"] is not None
    assert doc["allocation"]["u2"] == {}
    assert doc["certificate"]["holds"] is True
    assert doc["simulation"]["delay"] == 0.25
    assert (doc["simulation"]["fanout"], doc["simulation"]["hold"]) == (2, 5)
    err = capsys.readouterr().err
    assert "round 0" in err and "s per round" in err


@pytest.mark.parametrize("args", [["--loss", "1.5"], ["--fanout", "0"], ["--delay", "-1"],
                                  ["--jitter", "2"], ["--lockstep", "--jitter", "0.1"],
                                  ["--hold", "0"]])
def test_cli_bad_options(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                         args: list[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_churn_doc([])))
    assert main(["simulate", str(path), *args]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@dataclass
class _Recorder:
    """The default rule, recording what each server was told and what it did."""

    seen: list[tuple[float, int, ServerView, Any, Any]]
    name: str = "recorder"

    def initial_state(self, num_users: int) -> RuleState:
        return make_rule(DEFAULT_RULE).initial_state(num_users)

    def update(self, state: RuleState, view: ServerView, totals: Any,
               column: Any) -> tuple[Any, RuleState]:
        new, state = make_rule(DEFAULT_RULE).update(state, view, totals, column)
        self.seen.append((0.0, len(self.seen), view, column.copy(), new.copy()))
        return new, state


def test_gossip_tells_each_server_who_raised_and_who_lowered_each_user() -> None:
    sc = load_scenario(EXAMPLES / "paper_fig2.yaml")
    K = sc.num_servers
    rec = _Recorder([])
    # lock-step, one update and one exchange with everyone per period, messages half a period
    # on the way: at each tick a server has heard every column of the tick before, and no newer
    simulate(sc, SimConfig(ProtocolConfig(jitter=0.0, delay=0.5, fanout=K - 1, gossip_rate=1),
                           rounds=6, gossip="scuttlebutt"), rule=rec)
    ticks = [rec.seen[t * K:(t + 1) * K] for t in range(len(rec.seen) // K)]
    assert len(ticks) == 6
    # the run has both kinds of moves to count
    assert any(v.raising is not None and v.raising.any() for _, _, v, _, _ in rec.seen)
    assert any(v.lowering is not None and v.lowering.any() for _, _, v, _, _ in rec.seen)
    for before, now in pairwise(ticks):
        moves = np.array([new - old for _, _, _, old, new in before])
        for _, _, view, _, _ in now:
            assert view.raising is not None and view.lowering is not None
            np.testing.assert_array_equal(view.raising, (moves > 1e-12).sum(axis=0))
            np.testing.assert_array_equal(view.lowering, (moves < -1e-12).sum(axis=0))


def test_final_run_of_holds() -> None:
    assert final_run_of_holds([False, True, False, True, True], 1, open_ended=True) == 3
    assert final_run_of_holds([False, True, False, True, True], 3, open_ended=True) is None
    assert final_run_of_holds([False, True, False, True, True], 3, open_ended=False) == 3
    assert final_run_of_holds([True, False], 1, open_ended=False) is None
    assert final_run_of_holds([], 1, open_ended=True) is None


def test_many_events_at_one_instant_are_applied_once(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    doc = {"resources": ["cpu"], "servers": [{"name": "s", "count": 2, "capacity": {"cpu": 4}}],
           "users": [{"name": "a", "demand": {"cpu": 1}}, {"name": "b", "demand": {"cpu": 1}}],
           "events": [{"at": 2, "set_weight": {"user": "a", "weight": 1 + k % 3}}
                      for k in range(3000)]}
    path = tmp_path / "burst.json"
    path.write_text(json.dumps(doc))
    result = simulate(load_scenario(path), SimConfig(rounds=8))
    assert [e.at for e in result.events] == [0.0, 2.0]  # one change at t = 2
    assert result.events[1].description.endswith("(3000 events)")
    assert result.scenario.weight[0] == 1 + 2999 % 3  # the last one wins
