"""The allocator on Ray (local session, 6 server actors): certified allocations after every
event, feasibility throughout, churn through the API, crashed servers and a restarted
coordinator.  Manual clock: rounds run as fast as the actors answer, no real periods slept."""

from __future__ import annotations

import math
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray

from psdsf_dist.cli.run import serve_metrics
from psdsf_dist.core.certificate import certificate
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.convergence import ObservationJson
from psdsf_dist.runtime.launcher import ChurnError, Run, attach, launch
from psdsf_dist.runtime.recovery import ERROR_RESTARTS
from psdsf_dist.runtime.settings import RunConfig

pytestmark = pytest.mark.usefixtures("ray_session")

MANUAL = RunConfig(ProtocolConfig(period=1.0, jitter=0.0, seed=1), clock="manual")


@pytest.fixture
def manual_run(small_cluster: Path, request: pytest.FixtureRequest) -> Iterator[Run]:
    run = launch(small_cluster, MANUAL, run_id=request.node.name.replace("_", "-")[:40])
    try:
        yield run
    finally:
        run.stop()


def advance_until_held(run: Run, hold: int = 3, limit: int = 80) -> list[ObservationJson]:
    seen: list[ObservationJson] = []
    while len(seen) < limit:
        seen += run.advance(1)
        if len(seen) >= hold and all(o["holds"] for o in seen[-hold:]):
            return seen
    raise AssertionError(f"certificate did not hold {hold} rounds in a row within {limit}: "
                         f"last residuals {[o['residual'] for o in seen[-5:]]}")


def assert_certified(run: Run) -> None:
    res = run.result()
    cert = certificate(res.scenario, res.allocation, mode="rdm", rtol=1e-3)
    assert cert.holds, cert.violations[:3]


def test_reaches_a_certified_allocation_and_reconverges_after_each_event(
        manual_run: Run) -> None:
    seen = manual_run.advance(60)  # events at 20 and 40
    assert all(o["feasible"] for o in seen)
    assert all(o["servers"] == 6 for o in seen)
    assert seen[-1]["holds"]
    assert_certified(manual_run)
    res = manual_run.result()
    assert [e.description for e in res.events] == ["start", "user u4 leaves", "user u4 joins"]
    for e in res.events:
        assert e.rounds is not None and e.rounds <= 20, e
    assert seen[-1]["messages"] > 0 and seen[-1]["bytes"] > 0


def test_the_latest_allocation_is_the_result_s(manual_run: Run) -> None:
    assert manual_run.allocation() is None  # nothing observed yet
    manual_run.advance(3)
    X = manual_run.allocation()
    assert X is not None and np.array_equal(X, manual_run.result().allocation)
    assert X.shape == (4, 6) and X.sum() > 0


def test_concurrent_result_calls_observe_once(manual_run: Run) -> None:
    # before the first observation each call must observe: one does, the others use it
    ray.get([manual_run.coordinator.result.remote() for _ in range(4)])
    res = manual_run.result()
    assert [o.round for o in res.trace] == [0]


def test_churn_through_the_api(manual_run: Run) -> None:
    advance_until_held(manual_run)
    assert manual_run.set_weight("u1", 4) == "user u1 weight set to 4"
    manual_run.user_joins({"name": "u9", "demand": {"cpu": 0.1, "mem": 0.05}})
    seen = advance_until_held(manual_run)
    assert all(o["feasible"] for o in seen)
    res = manual_run.result()
    assert res.scenario.user_names[-1] == "u9" and res.scenario.weight[0] == 4
    assert res.allocation[-1].sum() > 0
    assert_certified(manual_run)
    with pytest.raises(ChurnError, match="unknown user 'nobody'"):
        manual_run.set_weight("nobody", 2)


def test_only_a_handle_with_the_run_secret_steers_the_run(manual_run: Run) -> None:
    assert manual_run.secret  # launch made one
    reader = attach(manual_run.run_id, manual_run.config)  # another driver, by name alone
    assert reader.status()["present_users"] == manual_run.status()["present_users"]
    with pytest.raises(ChurnError, match="wrong or missing run secret"):
        reader.user_leaves("u1")
    with pytest.raises(ChurnError, match="refused to stop"):
        reader.stop()
    guesser = attach(manual_run.run_id, manual_run.config, secret="guess")
    with pytest.raises(ChurnError, match="wrong or missing run secret"):
        guesser.set_weight("u1", 9)
    assert "u1" in manual_run.status()["present_users"]  # nothing changed
    steerer = attach(manual_run.run_id, manual_run.config, secret=manual_run.secret)
    assert steerer.set_weight("u1", 2) == "user u1 weight set to 2"
    # without a config, the run's own (manual clock, jitter, seed), not RunConfig()'s
    assert manual_run.config != RunConfig()
    assert attach(manual_run.run_id).config == manual_run.config


def test_a_crashed_server_restarts_as_a_new_incarnation_and_rejoins(manual_run: Run) -> None:
    advance_until_held(manual_run)
    victim = manual_run.handles()["B-1"]
    pid_before = ray.get(victim.report.remote())[0].pid
    ray.kill(victim, no_restart=False)  # a crash; Ray restarts it (max_restarts)
    seen = advance_until_held(manual_run, limit=100)
    assert all(o["feasible"] for o in seen)
    assert any(not o["holds"] for o in seen)  # the crash was seen: its column was lost
    rep = ray.get(victim.report.remote())[0]
    assert rep.running and rep.origin == "B-1#1" and rep.pid != pid_before
    # the crashed incarnation's column has expired from the others' gossip: six members (the
    # certificate can hold before the TTL of the dead incarnation's last heartbeat has run out)
    manual_run.advance(math.ceil(manual_run.config.protocol.ttl_periods) + 1)
    advance_until_held(manual_run, limit=100)  # the expiry moves the totals: settle again
    other = ray.get(manual_run.handles()["A-1"].status.remote())["servers"]["A-1"]
    assert other["members"] == 6
    res = manual_run.result()
    assert res.restarts == 1
    # the crash is an event of the run, with its re-convergence
    crash = [e for e in res.events if e.description == "server B-1 restarted after a crash"]
    assert len(crash) == 1 and crash[0].rounds is not None
    assert_certified(manual_run)


def test_a_server_whose_loop_fails_is_restarted_and_its_error_reported(manual_run: Run) -> None:
    advance_until_held(manual_run)
    victim = manual_run.handles()["B-1"]

    def break_wake(actor: Any, name: str) -> None:  # a bug in one server's next round
        def broken(now: float) -> Any:
            raise RuntimeError("injected bug")
        actor.slots[name].node.wake = broken

    ray.get(victim.__ray_call__.remote(break_wake, "B-1"))
    seen = advance_until_held(manual_run, hold=manual_run.config.protocol.hold, limit=100)
    assert all(o["feasible"] for o in seen)
    assert manual_run.status()["failure"] == "server B-1: RuntimeError: injected bug"
    rep = ray.get(victim.report.remote())[0]
    assert rep.running and rep.origin == "B-1#1" and rep.error is None
    res = manual_run.result()
    assert res.restarts == 1
    event = [e for e in res.events if e.description == "server B-1 restarted after an error"]
    assert len(event) == 1 and event[0].rounds is not None
    assert_certified(manual_run)


def test_a_server_whose_every_incarnation_fails_is_given_up(manual_run: Run) -> None:
    advance_until_held(manual_run)
    victim = manual_run.handles()["B-1"]

    def break_every_wake(actor: Any, name: str) -> None:  # a bug every incarnation hits
        node_type = type(actor.slots[name].node)
        wake = node_type.wake

        def broken(node: Any, now: float) -> Any:
            if node.origin.startswith(name):
                raise RuntimeError("injected bug")
            return wake(node, now)
        node_type.wake = broken

    ray.get(victim.__ray_call__.remote(break_every_wake, "B-1"))
    seen = advance_until_held(manual_run, limit=100)
    assert all(o["feasible"] for o in seen)
    assert seen[-1]["servers"] == 5
    res = manual_run.result()
    told = [e.description for e in res.events]
    assert told.count("server B-1 restarted after an error") == ERROR_RESTARTS - 1
    # the churn event and its cause happen at one instant: one change, one line
    assert ("server B-1 fails; server B-1 failed: its loop erred "
            f"{ERROR_RESTARTS} times in a row (RuntimeError: injected bug)") in told
    assert not res.scenario.placement[:, res.scenario.server_names.index("B-1")].any()
    assert_certified(manual_run)


def test_a_server_that_missed_a_table_is_sent_it_again(manual_run: Run) -> None:
    advance_until_held(manual_run)
    victim = manual_run.handles()["B-1"]

    def lose_next_table(actor: Any, name: str) -> None:  # its next adopt call fails, once
        node = actor.slots[name].node
        adopt = node.adopt

        def fails_once(table: Any, now: float) -> bool:
            node.adopt = adopt
            raise TimeoutError("injected: the table was lost")
        node.adopt = fails_once

    ray.get(victim.__ray_call__.remote(lose_next_table, "B-1"))
    manual_run.user_leaves("u3")
    epoch = manual_run.status()["epoch"]
    assert ray.get(victim.status.remote())["servers"]["B-1"]["epoch"] == epoch - 1  # missed
    manual_run.advance(1)  # the observation finds it behind and sends the table again
    assert manual_run.status()["epoch"] == epoch  # (no other change meanwhile)
    assert ray.get(victim.status.remote())["servers"]["B-1"]["epoch"] == epoch
    seen = advance_until_held(manual_run)
    assert all(o["feasible"] for o in seen)
    res = manual_run.result()
    assert not res.scenario.eligible[2].any() and np.all(res.allocation[2] == 0)
    assert res.restarts == 0
    assert_certified(manual_run)


def test_a_restarted_coordinator_keeps_membership_and_users(manual_run: Run) -> None:
    advance_until_held(manual_run)
    manual_run.user_leaves("u3")
    manual_run.advance(2)
    before = manual_run.status()
    earlier = manual_run.result()
    ray.kill(manual_run.coordinator, no_restart=False)
    wait_for_restart(manual_run)
    after = manual_run.status()
    for key in ("members", "present_users", "epoch", "events_applied"):
        assert after[key] == before[key], key
    assert after["present_users"] == ["u1", "u2", "u4"]
    seen = advance_until_held(manual_run)
    assert all(o["feasible"] for o in seen)
    res = manual_run.result()
    assert not res.scenario.eligible[2].any() and np.all(res.allocation[2] == 0)
    told = [e.description for e in res.events]
    assert told == ["start", "user u3 leaves", "coordinator restarted"]
    # nothing observed before the crash is forgotten: the trace goes on from it, so the start's
    # convergence is the one measured before
    kept = len(earlier.trace)
    assert res.trace[:kept] == earlier.trace
    assert [o.round for o in res.trace] == list(range(len(res.trace)))
    assert res.events[0] == earlier.events[0] and res.events[0].rounds is not None
    assert res.restarts == 0  # the coordinator's own restart is an event, not a server's
    assert res.coordinator_restarts == 1 and after["coordinator_restarts"] == 1
    assert_certified(manual_run)


def test_several_servers_per_actor_behave_the_same(small_cluster: Path) -> None:
    cfg = RunConfig(ProtocolConfig(period=1.0, jitter=0.0, seed=1), clock="manual",
                    servers_per_actor=4)
    run = launch(small_cluster, cfg, run_id="packed")
    try:
        handles = run.handles()
        pids = {ray.get(h.status.remote())["pid"] for h in handles.values()}
        assert len(handles) == 6 and len(pids) == 2  # 4 + 2 servers in two processes
        seen = run.advance(60)
        assert all(o["feasible"] and o["servers"] == 6 for o in seen)
        assert seen[-1]["holds"]
        events = run.result().events
        assert all(e.rounds is not None for e in events), events
        assert_certified(run)
    finally:
        run.stop()


def wait_for_restart(run: Run) -> None:
    deadline = time.monotonic() + 60
    while True:  # the handle stays valid; calls fail until the restart is done
        try:
            if run.status()["coordinator_restarted"]:
                return
        except ray.exceptions.RayActorError:
            pass
        assert time.monotonic() < deadline, "the coordinator did not come back"
        time.sleep(0.2)


def scrape(url: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                text: str = answer.read().decode()
            if text:  # a process killed while answering can close the page empty
                return text
        except OSError:
            pass
        assert time.monotonic() < deadline, f"nothing served on {url}"
        time.sleep(0.2)


def test_a_restarted_coordinator_serves_metrics_again_and_restarts_a_lost_server(
        manual_run: Run) -> None:
    url = serve_metrics(manual_run, 0, "127.0.0.1", False)
    advance_until_held(manual_run)
    assert "psdsf_converged 1.0" in scrape(url)
    # a server's actor is gone for good while the coordinator is down
    ray.kill(manual_run.handles()["B-2"], no_restart=True)
    ray.kill(manual_run.coordinator, no_restart=False)
    # no call needed: the restarted coordinator rebuilds itself and serves on the same port
    text = scrape(url)
    assert "psdsf_members" in text
    wait_for_restart(manual_run)
    # before an observation of its own it serves the rebuilt membership and the last verdict
    # (the first scrape above may have reached the killed process before it ended)
    text = scrape(url)
    assert 'psdsf_members{role="server"} 6.0' in text and "psdsf_converged 1.0" in text, text
    status = manual_run.status()
    assert status["servers"] == 6 and "B-2" in status["members"]
    seen = advance_until_held(manual_run)
    assert all(o["feasible"] and o["servers"] == 6 for o in seen)
    assert ray.get(manual_run.handles()["B-2"].report.remote())[0].origin == "B-2#1"
    res = manual_run.result()
    assert res.restarts == 1  # counted by the restarted coordinator
    assert [e.description for e in res.events][1:] == [  # one instant: one change
        "coordinator restarted; server B-2 restarted (no actor hosted it)"]
    assert_certified(manual_run)
    text = scrape(url)
    assert "psdsf_converged 1.0" in text and 'psdsf_members{role="server"} 6.0' in text


def test_paced_paper_cluster_on_several_actors_converges_and_stays() -> None:
    """120 servers in 3 actors, paced, the protocol's defaults: certified within 20 rounds,
    and it stays so."""
    paper = Path(__file__).resolve().parents[2] / "psdsf_dist" / "examples" / "paper_cluster.yaml"
    cfg = RunConfig(ProtocolConfig(seed=0), clock="manual", time_scale=1000.0,
                    servers_per_actor=40)  # the defaults; no event within the test
    run = launch(paper, cfg, run_id="paced-paper")
    try:
        seen = run.advance(30)
        held = [o["holds"] for o in seen]
        assert any(held[:20]), [round(o["residual"], 4) for o in seen]
        assert all(held[20:]), [round(o["residual"], 4) for o in seen]
        assert all(o["feasible"] and o["servers"] == 120 for o in seen)
    finally:
        run.stop()


def test_events_at_one_instant_are_pushed_as_one_table(small_cluster: Path) -> None:
    """2,000 weight changes at one instant are one change for the actors (the simulator's
    rule): one table is pushed for them, not one per event (which stalled a run for minutes at
    the documented 100,000 events)."""
    import yaml

    doc = yaml.safe_load(small_cluster.read_text())
    doc["events"] = [{"at": 2, "set_weight": {"user": "u1", "weight": 1 + k % 3}}
                     for k in range(2_000)] + [{"at": 2, "set_weight": {"user": "u1",
                                                                         "weight": 7}}]
    run = launch(doc, MANUAL, run_id="one-instant")
    try:
        run.advance(1)
        pushed = run.status()["tables_pushed"]
        seen = run.advance(3)
        assert run.status()["tables_pushed"] == pushed + 1
        assert all(o["feasible"] for o in seen)
        res = run.result()
        assert res.scenario.weight[0] == 7
        assert res.events[1].description.startswith("user u1 weight set to")
    finally:
        run.stop()
