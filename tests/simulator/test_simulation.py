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
from psdsf_dist.model.random_scenarios import random_scenario, random_scenario_doc
from psdsf_dist.model.scenario import Scenario, load_scenario
from psdsf_dist.protocol.update_rule import (
    DEFAULT_RULE,
    RULES,
    RuleState,
    ServerView,
    best_response,
    make_rule,
)
from psdsf_dist.simulator.simulation import (
    FeasibilityError,
    SimConfig,
    Simulator,
    converged_rounds,
    final_run_of_holds,
    simulate,
)
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
    cfg = SimConfig(
        rounds=12, lockstep=lockstep, jitter=0.0 if lockstep else float(rng.uniform(0, 0.9)),
        delay=float(rng.choice([0.0, 0.3, 1.0, 2.5])), loss=float(rng.choice([0.0, 0.3])),
        fanout=int(rng.integers(1, 3)), seed=seed, rule=RULES[seed % len(RULES)],
        gossip="snapshot" if seed % 4 == 0 else "scuttlebutt",
    )
    seen: list[float] = []
    sim = Simulator(sc, cfg, progress=lambda rec: seen.append(_max_use(sc, sim.X)))
    result = sim.run()  # every adopted column is checked on the spot
    assert len(seen) == cfg.rounds
    assert max(seen) <= 1.0 + 1e-9
    assert np.all(result.allocation >= 0)


@dataclass(frozen=True)
class _Greedy:
    """A broken rule: twice the best response (must be caught)."""

    name: str = "greedy"

    def initial_state(self, num_users: int) -> RuleState:
        return RuleState()

    def update(self, state: RuleState, view: ServerView, totals: Any,
               column: Any) -> tuple[Any, RuleState]:
        return 2.0 * best_response(view, totals, column), state


def test_an_infeasible_column_is_caught() -> None:
    sc = load_scenario(EXAMPLES / "paper_fig2.yaml")
    with pytest.raises(FeasibilityError, match="exceeds a capacity"):
        simulate(sc, SimConfig(rounds=3), rule=_Greedy())


@pytest.mark.parametrize("name", ["paper_fig1", "paper_fig2"])
@pytest.mark.parametrize("delay", [0.0, 1.0])
def test_paper_examples_converge_in_lockstep(name: str, delay: float) -> None:
    sc = load_scenario(EXAMPLES / f"{name}.yaml")
    result = simulate(sc, SimConfig(rounds=40, delay=delay))
    start = result.events[0]
    assert start.converged_round is not None and start.rounds_to_converge is not None
    assert start.rounds_to_converge <= 20
    assert certificate(sc, result.allocation, rtol=1e-3).holds


def test_paper_cluster_snapshot_churn_converges() -> None:
    sc = load_scenario(EXAMPLES / "paper_cluster.yaml")
    # lock-step, every server on the totals of the round before: the update rule's hard case
    result = simulate(sc, SimConfig(rounds=290, delay=0.0, gossip="snapshot"))
    assert [e.description for e in result.events] == ["start", "user u4 leaves", "user u4 joins"]
    for e in result.events:
        assert e.rounds_to_converge is not None and e.rounds_to_converge <= 40, e
    x = result.allocation.sum(axis=1)
    np.testing.assert_allclose(x, [210, 105, 82.5, 27.5], rtol=1e-3)
    # while u4 was away, class D went to u2: the trace shows the dip and the recovery
    assert all(rec.holds for rec in result.trace[100 + 40 : 250])


@pytest.mark.parametrize("seed", range(6))
def test_small_random_scenarios_converge_in_lockstep(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    sc = random_scenario(rng, K=int(rng.integers(2, 6)), N=int(rng.integers(2, 5)),
                         M=int(rng.integers(1, 3)))
    result = simulate(sc, SimConfig(rounds=150, delay=0.0, seed=seed))
    assert result.events[0].converged_round is not None
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
    sim = Simulator(sc, SimConfig(rounds=80, delay=0.0))
    sim.progress = lambda rec: snapshots.__setitem__(rec.round, sim.X.copy())
    result = sim.run()
    assert snapshots[19][0].sum() > 0
    assert snapshots[20][0].sum() == 0  # u1's tasks ended with it
    assert snapshots[40][:, 1].sum() == 0  # the failed server's tasks are gone
    assert result.allocation[:, 1].sum() == 0
    # the others expire the silent server and stop counting it
    g = sim.servers[0].gossip
    assert g is not None and "s-2" not in g.members()
    # u2 ends with both live servers to itself
    np.testing.assert_allclose(result.allocation[1], [10, 0, 10], rtol=1e-6)
    assert all(e.converged_round is not None for e in result.events)


def test_joining_server_and_new_user_get_a_share() -> None:
    sc = Scenario.from_dict(_churn_doc([
        {"at": 10, "server_joins": {"name": "big", "capacity": {"cpu": 2, "mem": 2}}},
        {"at": 30, "user_joins": {"name": "u3", "demand": {"cpu": 0.1, "mem": 0.1}}},
        {"at": 50, "set_weight": {"user": "u1", "weight": 3}},
        {"at": 70, "set_demand": {"user": "u2", "demand": {"cpu": 0.2, "mem": 0.2}}},
    ]))
    result = simulate(sc, SimConfig(rounds=110, delay=0.0))
    assert result.scenario.server_names[-1] == "big"
    assert result.allocation[:, 3].sum() > 0
    assert result.allocation[2].sum() > 0
    for e in result.events:
        assert e.converged_round is not None, e
    assert certificate(result.scenario, result.allocation, rtol=1e-3).holds


def test_runs_are_deterministic() -> None:
    rng = np.random.default_rng(3)
    sc = Scenario.from_dict(random_scenario_doc(rng, K=8, N=4, M=2))
    cfg = SimConfig(rounds=15, lockstep=False, jitter=0.4, loss=0.2, fanout=2, seed=9)

    def strip(r: Any) -> list[dict[str, Any]]:
        return [{k: v for k, v in rec.to_json().items() if k != "seconds"} for rec in r.trace]

    a, b = simulate(sc, cfg), simulate(sc, cfg)
    assert strip(a) == strip(b)
    np.testing.assert_array_equal(a.allocation, b.allocation)
    c = simulate(sc, SimConfig(rounds=15, lockstep=False, jitter=0.4, loss=0.2, fanout=2, seed=10))
    assert strip(a) != strip(c)


def test_converged_round_is_the_start_of_the_final_run_of_holds() -> None:
    sc = load_scenario(EXAMPLES / "paper_cluster.yaml")
    events = Simulator(sc, SimConfig(rounds=1))._u.events
    holds = [False] * 5 + [True] * 95 + [False, True, False] + [True] * 147 + [True] * 50
    out = converged_rounds(events, holds, 1.0)
    assert [(o.converged_round, o.rounds_to_converge) for o in out] == [
        (5, 6), (103, 4), (250, 1)]
    never = converged_rounds(events, [True] * 99 + [False], 1.0)
    assert never[0].converged_round is None
    assert len(never) == 1  # events after the run are not reported


def test_converged_round_needs_the_hold_unless_the_next_event_cuts_it_short() -> None:
    sc = load_scenario(EXAMPLES / "paper_cluster.yaml")
    events = Simulator(sc, SimConfig(rounds=1))._u.events  # u4 leaves at 100, joins at 250
    # start: holds 95..99 only (cut short by the leave: counts); leave: 150..249 (long enough);
    # rejoin: holds only in the last 10 rounds of the run (fewer than 20: not shown to stay)
    holds = [False] * 95 + [True] * 5 + [False] * 50 + [True] * 100 + [False] * 40 + [True] * 10
    out = converged_rounds(events, holds, 1.0, hold=20)
    assert [o.converged_round for o in out] == [95, 150, None]
    assert converged_rounds(events, holds, 1.0, hold=10)[2].converged_round == 290
    with pytest.raises(ValueError, match="hold"):
        SimConfig(hold=0).check()


def test_cli_json_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_churn_doc([{"at": 5, "user_leaves": "u2"}])))
    out = tmp_path / "out.json"
    status = main(["simulate", str(path), "--rounds", "20", "--delay", "0.5", "--fanout", "2",
                   "--hold", "5", "--json", "-o", str(out)])
    assert status == 0
    doc = json.loads(out.read_text())
    assert len(doc["trace"]) == 20
    assert {"residual", "max_relative_change", "utilization", "messages", "bytes"} <= set(
        doc["trace"][0])
    assert [e["event"] for e in doc["events"]] == ["start", "user u2 leaves"]
    assert doc["events"][1]["converged_round"] is not None
    assert doc["allocation"]["u2"] == {}
    assert doc["certificate"]["holds"] is True
    assert doc["simulation"]["delay"] == 0.5
    assert doc["simulation"]["signed_moves"] is True
    assert doc["simulation"]["hold"] == 5
    err = capsys.readouterr().err
    assert "round 0" in err and "s per round" in err


def test_cli_switches_signed_moves_off(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_churn_doc([])))
    out = tmp_path / "out.json"
    assert main(["simulate", str(path), "--rounds", "3", "--gossip", "scuttlebutt",
                 "--no-signed-moves", "--quiet", "--json", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["simulation"]["signed_moves"] is False


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
        self.seen.append((float(state.updates), len(self.seen), view, column.copy(), new.copy()))
        return new, state


@pytest.mark.parametrize("signed", [True, False])
def test_gossip_tells_each_server_who_raised_and_who_lowered_each_user(signed: bool) -> None:
    sc = load_scenario(EXAMPLES / "paper_fig2.yaml")
    K = sc.num_servers
    rec = _Recorder([])
    # lock-step, no delay, everyone gossips with everyone: at each tick a server has heard
    # every column of the tick before
    simulate(sc, SimConfig(rounds=6, delay=0.0, fanout=K - 1, gossip="scuttlebutt",
                           signed_moves=signed), rule=rec)
    ticks = [rec.seen[t * K:(t + 1) * K] for t in range(len(rec.seen) // K)]
    assert len(ticks) == 6
    if signed:  # the run has both kinds of moves to count
        assert any(v.raising is not None and v.raising.any() for _, _, v, _, _ in rec.seen)
        assert any(v.lowering is not None and v.lowering.any() for _, _, v, _, _ in rec.seen)
    for before, now in pairwise(ticks):
        moves = np.array([new - old for _, _, _, old, new in before])
        for _, _, view, _, _ in now:
            if not signed:
                assert view.raising is None and view.lowering is None
                continue
            assert view.raising is not None and view.lowering is not None
            np.testing.assert_array_equal(view.raising, (moves > 1e-12).sum(axis=0))
            np.testing.assert_array_equal(view.lowering, (moves < -1e-12).sum(axis=0))


def test_final_run_of_holds() -> None:
    assert final_run_of_holds([False, True, False, True, True], 1, open_ended=True) == 3
    assert final_run_of_holds([False, True, False, True, True], 3, open_ended=True) is None
    assert final_run_of_holds([False, True, False, True, True], 3, open_ended=False) == 3
    assert final_run_of_holds([True, False], 1, open_ended=False) is None
    assert final_run_of_holds([], 1, open_ended=True) is None
