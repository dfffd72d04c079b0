"""The allocator's Prometheus metrics: pinned names and labels, exposition, values, cardinality."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from psdsf_dist.core.solver import solve
from psdsf_dist.model.events import EVENT_KINDS, ServerFails, UserLeaves
from psdsf_dist.model.random_scenarios import random_scenario
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.observability.metrics import (
    METRICS,
    AllocatorMetrics,
    RunMetrics,
    ServerCounts,
    allocation_state,
)

# Dashboards and alerts depend on these: changing one is a breaking change.
PINNED = (
    ("psdsf_allocated_tasks", "gauge", ("user", "server")),
    ("psdsf_user_tasks", "gauge", ("user",)),
    ("psdsf_user_weighted_share", "gauge", ("user",)),
    ("psdsf_server_tasks", "gauge", ("server",)),
    ("psdsf_server_utilization_ratio", "gauge", ("server", "resource")),
    ("psdsf_server_min_vds", "gauge", ("server",)),
    ("psdsf_server_rounds_total", "counter", ("server",)),
    ("psdsf_server_round_duration_seconds", "histogram", ()),
    ("psdsf_gossip_messages_total", "counter", ("server",)),
    ("psdsf_gossip_bytes_total", "counter", ("server",)),
    ("psdsf_gossip_staleness_seconds", "gauge", ("server",)),
    ("psdsf_certificate_residual", "gauge", ()),
    ("psdsf_cap_excess_ratio", "gauge", ()),
    ("psdsf_converged", "gauge", ()),
    ("psdsf_last_reconvergence_seconds", "gauge", ()),
    ("psdsf_reconvergence_seconds", "histogram", ()),
    ("psdsf_churn_events_total", "counter", ("kind",)),
    ("psdsf_server_restarts_total", "counter", ("server",)),
    ("psdsf_members", "gauge", ("role",)),
    ("psdsf_unmanaged_usage", "gauge", ("server", "resource")),
    ("psdsf_distance_to_fair_ratio", "gauge", ()),
)


def test_names_types_and_labels_are_pinned() -> None:
    assert tuple((m.name, m.type, m.labels) for m in METRICS) == PINNED


def test_names_follow_prometheus_conventions() -> None:
    for m in METRICS:
        assert m.name.startswith("psdsf_")
        assert m.name.endswith("_total") == (m.type == "counter"), m.name
        assert m.help and "\n" not in m.help
    assert [m.name for m in METRICS if m.per_pair] == ["psdsf_allocated_tasks"]


def fed(scenario: Scenario, *, per_pair: bool = True) -> tuple[AllocatorMetrics, np.ndarray]:
    """Metrics holding every kind of series, from the certified allocation of ``scenario``."""
    X = solve(scenario, "rdm").allocation
    m = AllocatorMetrics(per_pair=per_pair)
    m.set_state(allocation_state(scenario, X))
    m.observe_server_round(scenario.server_names[0], 0.002)
    m.observe_gossip(scenario.server_names[0], 3, 420, 1.5)
    m.set_certificate(1e-7, True, distance=0.0)
    m.observe_event("user_leaves")
    m.observe_reconvergence(4.0)
    m.observe_restart(scenario.server_names[-1])
    m.set_membership(scenario.num_servers, scenario.num_users)
    m.set_unmanaged({scenario.server_names[0]: {scenario.resources[0]: 0.5}})
    return m, X


def families(m: AllocatorMetrics) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """Parse the registry's exposition text: family name -> (sample name, labels, value)."""
    text = generate_latest(m.registry).decode()
    out: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    types: dict[str, str] = {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        out[fam.name] = [(s.name, dict(s.labels), s.value) for s in fam.samples]
    out["__types__"] = [(name, {"type": t}, 0.0) for name, t in types.items()]
    return out


def value(m: AllocatorMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_exposition_parses_and_matches_the_table(fig1: Scenario) -> None:
    m, _ = fed(fig1)
    fams = families(m)
    types = {name: info["type"] for name, info, _ in fams.pop("__types__")}
    for spec in METRICS:
        # the parser names counter families without the _total suffix
        family = spec.name.removesuffix("_total") if spec.type == "counter" else spec.name
        assert types[family] == spec.type
        samples = [s for s in fams[family] if not s[0].endswith("_created")]
        assert samples, spec.name
        for sample, labels, _ in samples:
            extra = {"le"} if sample.endswith("_bucket") else set()
            assert set(labels) == set(spec.labels) | extra, (sample, labels)
    assert all(name.startswith("psdsf_") for name in types)


def test_values_are_what_was_set(fig1: Scenario) -> None:
    m, X = fed(fig1)
    # ORACLES 1: u1 and u2 get 3 tasks at s1, u3 (weight 2) gets 6 at s2
    for n, user in enumerate(fig1.user_names):
        assert value(m, "psdsf_user_tasks", user=user) == pytest.approx(X[n].sum())
        for i, server in enumerate(fig1.server_names):
            got = value(m, "psdsf_allocated_tasks", user=user, server=server)
            assert got == (pytest.approx(X[n, i]) if X[n, i] > 0 else None)
    assert value(m, "psdsf_user_tasks", user="u3") == pytest.approx(6.0)
    # u3 could run 6 tasks alone at each server: 6 / (2 * 12)
    assert value(m, "psdsf_user_weighted_share", user="u3") == pytest.approx(0.25)
    assert value(m, "psdsf_server_tasks", server="s1") == pytest.approx(6.0)
    assert value(m, "psdsf_server_utilization_ratio", server="s1", resource="mem") \
        == pytest.approx(1.0)
    assert value(m, "psdsf_server_utilization_ratio", server="s2", resource="bw") == 0.0
    # every holder is at V = 1/2 (3 of 6 alone at s1; 6 of 12 for weight 2 at s2)
    assert value(m, "psdsf_server_min_vds", server="s1") == pytest.approx(0.5)
    assert value(m, "psdsf_server_min_vds", server="s2") == pytest.approx(0.5)
    assert value(m, "psdsf_distance_to_fair_ratio") == 0.0
    assert value(m, "psdsf_server_rounds_total", server="s1") == 1.0
    assert value(m, "psdsf_server_round_duration_seconds_count") == 1.0
    assert value(m, "psdsf_server_round_duration_seconds_bucket", le="0.0025") == 1.0
    assert value(m, "psdsf_server_round_duration_seconds_bucket", le="0.001") == 0.0
    assert value(m, "psdsf_gossip_messages_total", server="s1") == 3.0
    assert value(m, "psdsf_gossip_bytes_total", server="s1") == 420.0
    assert value(m, "psdsf_gossip_staleness_seconds", server="s1") == 1.5
    assert value(m, "psdsf_certificate_residual") == 1e-7
    assert value(m, "psdsf_converged") == 1.0
    m.set_certificate(0.3, False)
    assert value(m, "psdsf_converged") == 0.0
    assert value(m, "psdsf_churn_events_total", kind="user_leaves") == 1.0
    assert value(m, "psdsf_last_reconvergence_seconds") == 4.0
    assert value(m, "psdsf_reconvergence_seconds_sum") == 4.0
    assert value(m, "psdsf_server_restarts_total", server="s2") == 1.0
    assert value(m, "psdsf_members", role="server") == 2.0
    assert value(m, "psdsf_members", role="user") == 3.0


def test_an_unknown_distance_to_fair_is_left_out_not_guessed(fig1: Scenario) -> None:
    m, _ = fed(fig1)
    m.set_certificate(0.3, False, distance=0.04)
    assert value(m, "psdsf_distance_to_fair_ratio") == pytest.approx(0.04)
    m.set_certificate(0.3, False)
    assert value(m, "psdsf_distance_to_fair_ratio") is None
    with pytest.raises(ValueError, match="distance"):
        m.set_certificate(0.3, False, distance=float("nan"))

def test_counters_accumulate_and_gauges_replace(fig1: Scenario) -> None:
    m, _ = fed(fig1)
    m.observe_gossip("s1", 2, 100, 0.5)
    m.observe_server_round("s1", 0.5)
    assert value(m, "psdsf_gossip_messages_total", server="s1") == 5.0
    assert value(m, "psdsf_gossip_bytes_total", server="s1") == 520.0
    assert value(m, "psdsf_gossip_staleness_seconds", server="s1") == 0.5
    assert value(m, "psdsf_server_rounds_total", server="s1") == 2.0
    assert value(m, "psdsf_server_round_duration_seconds_sum") == pytest.approx(0.502)


def test_every_event_kind_is_exposed_from_the_start() -> None:
    m = AllocatorMetrics()
    for kind in EVENT_KINDS:
        assert value(m, "psdsf_churn_events_total", kind=kind) == 0.0


def test_per_pair_off_keeps_only_aggregates(fig1: Scenario) -> None:
    m, X = fed(fig1, per_pair=False)
    fams = families(m)
    assert "psdsf_allocated_tasks" not in fams
    assert value(m, "psdsf_user_tasks", user="u1") == pytest.approx(X[0].sum())
    assert value(m, "psdsf_server_tasks", server="s2") == pytest.approx(X[:, 1].sum())
    # nothing in the exposition pairs a user with a server
    for fam, samples in fams.items():
        for _, labels, _ in samples:
            assert not {"user", "server"} <= set(labels), fam


def all_label_values(m: AllocatorMetrics, label: str) -> set[str]:
    return {labels[label] for fam, samples in families(m).items() if fam != "__types__"
            for _, labels, _ in samples if label in labels}


def test_forget_user_removes_its_series(fig1: Scenario) -> None:
    m, _ = fed(fig1)
    assert "u1" in all_label_values(m, "user")
    m.forget_user("u1")
    assert all_label_values(m, "user") == {"u2", "u3"}
    m.forget_user("u1")  # twice is harmless
    m.forget_user("nobody")


def test_forget_server_removes_its_series_but_keeps_restarts(fig1: Scenario) -> None:
    m, _ = fed(fig1)
    m.forget_server("s2")
    assert all_label_values(m, "server") == {"s1", "s2"}
    assert value(m, "psdsf_server_restarts_total", server="s2") == 1.0
    assert value(m, "psdsf_server_tasks", server="s2") is None
    assert value(m, "psdsf_allocated_tasks", user="u3", server="s2") is None
    m.forget_server("s2", restarts=True)
    assert all_label_values(m, "server") == {"s1"}
    m.forget_server("s1", restarts=True)
    assert all_label_values(m, "server") == set()
    # the user aggregates are untouched
    assert value(m, "psdsf_user_tasks", user="u3") == pytest.approx(6.0)


def test_a_pair_dropping_to_zero_loses_its_series(fig1: Scenario) -> None:
    m, X = fed(fig1)
    Y = X.copy()
    Y[2, 1] = 0.0
    m.set_state(allocation_state(fig1, Y))
    assert value(m, "psdsf_allocated_tasks", user="u3", server="s2") is None
    assert value(m, "psdsf_allocated_tasks", user="u1", server="s1") == pytest.approx(3.0)
    # s2 holds nothing now: it has no level
    assert value(m, "psdsf_server_min_vds", server="s2") is None
    assert value(m, "psdsf_server_tasks", server="s2") == 0.0


def test_masks_restrict_the_state_to_present_members(fig1: Scenario) -> None:
    X = solve(fig1, "rdm").allocation
    state = allocation_state(fig1, X, users=np.array([True, False, True]),
                             servers=np.array([True, False]))
    assert state.users == ("u1", "u3")
    assert state.servers == ("s1",)
    assert state.allocation.shape == (2, 1)
    assert state.utilization.shape == (1, 3)
    # u3 could now run 6 tasks alone on its only live server: 6 / (2 * 6)
    assert state.weighted_shares[1] == pytest.approx(0.5)


def test_bad_input_raises_value_errors(fig1: Scenario) -> None:
    m = AllocatorMetrics()
    with pytest.raises(ValueError, match="unknown event kind"):
        m.observe_event("meteor_strike")
    with pytest.raises(ValueError, match="seconds"):
        m.observe_server_round("s1", -1.0)
    with pytest.raises(ValueError, match="seconds"):
        m.observe_reconvergence(float("nan"))
    with pytest.raises(ValueError, match="bytes"):
        m.observe_gossip("s1", 1, -5, 0.0)
    with pytest.raises(ValueError, match="shapes"):
        m.set_allocation(["u1"], ["s1"], ["cpu"], np.zeros((2, 1)), np.zeros(1), np.zeros((1, 1)))
    with pytest.raises(ValueError, match="shape"):
        allocation_state(fig1, np.zeros((2, 2)))


def test_registries_are_private() -> None:
    first, second = AllocatorMetrics(), AllocatorMetrics()
    first.set_certificate(0.5, False)
    second.set_certificate(0.0, True)
    assert value(first, "psdsf_converged") == 0.0
    assert value(second, "psdsf_converged") == 1.0
    assert REGISTRY.get_sample_value("psdsf_converged") is None


def test_metric_modules_do_not_import_ray() -> None:
    code = ("import sys, psdsf_dist.observability.metrics, "
            "psdsf_dist.observability.metrics_server; sys.exit('ray' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(1, 6), N=st.integers(1, 5),
       M=st.integers(1, 3))
def test_min_vds_is_every_holders_level_under_tdm(seed: int, K: int, N: int, M: int) -> None:
    """Theorem 2: at each server only users at the minimum V get time, so the exported level is
    the V of every user holding tasks there and no eligible user is below it."""
    sc = random_scenario(np.random.default_rng(seed), K=K, N=N, M=M, cap_prob=0.0)
    solution = solve(sc, "tdm")
    assert solution.certificate.holds
    X = solution.allocation
    state = allocation_state(sc, X)
    x = X.sum(axis=1)
    for i in range(K):
        eligible = sc.gamma[:, i] > 0
        V = x[eligible] / (sc.weight[eligible] * sc.gamma[eligible, i])
        holders = X[eligible, i] > 1e-9 * max(X[:, i].max(), 1.0)
        if not holders.any():
            continue
        level = state.min_vds[i]
        assert V[holders] == pytest.approx(np.full(holders.sum(), level), rel=1e-6)
        assert (V >= level * (1 - 1e-6)).all()
    assert state.totals == pytest.approx(x)


def test_min_vds_is_the_lowest_holder(fig1: Scenario) -> None:
    # not a PS-DSF allocation: at s1, u1 holds 1 of its 6 (V = 1/6) and u2 3 of 6 (V = 1/2)
    X = np.array([[1.0, 0.0], [3.0, 0.0], [0.0, 0.0]])
    state = allocation_state(fig1, X)
    assert state.min_vds[0] == pytest.approx(1 / 6)
    assert np.isnan(state.min_vds[1])


def test_unmanaged_usage_per_server_and_resource() -> None:
    m = AllocatorMetrics()
    assert value(m, "psdsf_unmanaged_usage", server="s1", resource="CPU") is None
    m.set_unmanaged({"s1": {"CPU": 4.0, "memory": 0.0}, "s2": {"CPU": 1.0}})
    assert value(m, "psdsf_unmanaged_usage", server="s1", resource="CPU") == 4.0
    assert value(m, "psdsf_unmanaged_usage", server="s2", resource="CPU") == 1.0
    m.forget_server("s1")
    assert value(m, "psdsf_unmanaged_usage", server="s1", resource="CPU") is None
    assert value(m, "psdsf_unmanaged_usage", server="s2", resource="CPU") == 1.0


def test_nothing_is_claimed_before_it_is_known() -> None:
    m = AllocatorMetrics()
    for name in ("psdsf_certificate_residual", "psdsf_converged",
                 "psdsf_last_reconvergence_seconds"):
        assert value(m, name) is None
    assert value(m, "psdsf_members", role="server") is None
    # histograms are there from the start, empty, so that rates work from the first scrape
    assert value(m, "psdsf_reconvergence_seconds_count") == 0.0
    assert value(m, "psdsf_reconvergence_seconds_bucket", le="+Inf") == 0.0


def test_no_created_series(fig1: Scenario) -> None:
    m, _ = fed(fig1)
    text = generate_latest(m.registry).decode()
    assert "_created" not in text


def test_rounds_without_measured_durations(fig1: Scenario) -> None:
    m = AllocatorMetrics()
    m.add_server_rounds("s1", 7)
    m.observe_server_round("s1", 0.01)
    assert value(m, "psdsf_server_rounds_total", server="s1") == 8.0
    assert value(m, "psdsf_server_round_duration_seconds_count") == 1.0


def test_histogram_buckets_are_cumulative_and_inclusive() -> None:
    m = AllocatorMetrics()
    for seconds in (1.0, 1.0, 2.5, 700.0):
        m.observe_reconvergence(seconds)
    assert value(m, "psdsf_reconvergence_seconds_bucket", le="1.0") == 2.0  # le: <= bound
    assert value(m, "psdsf_reconvergence_seconds_bucket", le="2.0") == 2.0
    assert value(m, "psdsf_reconvergence_seconds_bucket", le="3.0") == 3.0
    assert value(m, "psdsf_reconvergence_seconds_bucket", le="600.0") == 3.0
    assert value(m, "psdsf_reconvergence_seconds_bucket", le="+Inf") == 4.0
    assert value(m, "psdsf_reconvergence_seconds_sum") == 704.5
    assert value(m, "psdsf_last_reconvergence_seconds") == 700.0


def test_a_registry_takes_one_allocator() -> None:
    m = AllocatorMetrics()
    with pytest.raises(ValueError, match="Duplicated"):
        AllocatorMetrics(registry=m.registry)


def test_a_scrape_sees_whole_updates(fig1: Scenario) -> None:
    """Scrapes come from the endpoint's thread while the coordinator updates: each scrape sees
    one observation - pairs, totals, levels and certificate of the same allocation."""
    X = solve(fig1, "rdm").allocation
    scales = (1.0, 2.0, 3.0)
    states = [allocation_state(fig1, X * k) for k in scales]
    m = AllocatorMetrics()
    stop = threading.Event()

    def observe(j: int) -> None:
        with m.atomically():
            m.set_state(states[j])
            m.set_certificate(scales[j], converged=False)  # the residual names the scale

    observe(0)

    def update() -> None:
        j = 0
        while not stop.is_set():
            observe(j % 3)
            j += 1

    writer = threading.Thread(target=update)
    writer.start()
    try:
        for _ in range(100):
            fams = {f.name: f for f in text_string_to_metric_families(
                generate_latest(m.registry).decode())}

            def total(name: str, fams: dict[str, Any] = fams) -> float:
                return float(sum(s.value for s in fams[name].samples))

            k = total("psdsf_certificate_residual")
            assert total("psdsf_user_tasks") == pytest.approx(k * X.sum())
            assert total("psdsf_allocated_tasks") == pytest.approx(k * X.sum())
            assert total("psdsf_server_tasks") == pytest.approx(k * X.sum())
            # every holder is at V = 1/2 in the certified allocation, k/2 scaled by k
            assert total("psdsf_server_min_vds") == pytest.approx(2 * k / 2)
    finally:
        stop.set()
        writer.join()


def test_gossip_without_a_staleness_estimate() -> None:
    m = AllocatorMetrics()
    m.observe_gossip("s1", 2, 64)
    assert value(m, "psdsf_gossip_staleness_seconds", server="s1") is None
    m.observe_gossip("s1", 1, 32, 0.75)
    m.observe_gossip("s1", 1, 32)
    assert value(m, "psdsf_gossip_staleness_seconds", server="s1") == 0.75
    assert value(m, "psdsf_gossip_messages_total", server="s1") == 4.0


# -- RunMetrics: what a coordinator feeds ------------------------------------------------------


def test_run_metrics_turn_cumulative_reports_into_increments(fig1: Scenario) -> None:
    X = solve(fig1, "rdm").allocation
    run = RunMetrics(AllocatorMetrics())
    everyone = np.ones(3, dtype=bool), np.ones(2, dtype=bool)

    def observe(now: float, *reports: ServerCounts, holds: bool = True) -> None:
        run.observe(fig1, X, users=everyone[0], servers=everyone[1], residual=0.0,
                    holds=holds, now=now, reports=reports)

    m = run.metrics
    observe(1.0, ServerCounts("s1", "s1", 1, 4, 400), ServerCounts("s2", "s2", 1, 2, 100))
    observe(2.0, ServerCounts("s1", "s1", 3, 10, 1000), ServerCounts("s2", "s2", 2, 2, 100))
    assert value(m, "psdsf_server_rounds_total", server="s1") == 3.0
    assert value(m, "psdsf_gossip_messages_total", server="s1") == 10.0
    assert value(m, "psdsf_gossip_bytes_total", server="s2") == 100.0
    # a new incarnation counts from zero again: its counts add on
    observe(3.0, ServerCounts("s2", "s2#1", 1, 1, 50))
    assert value(m, "psdsf_server_rounds_total", server="s2") == 3.0
    assert value(m, "psdsf_gossip_bytes_total", server="s2") == 150.0
    assert value(m, "psdsf_members", role="server") == 2.0
    assert value(m, "psdsf_user_tasks", user="u3") == pytest.approx(6.0)


def test_run_metrics_time_reconvergence_from_the_event(fig1: Scenario) -> None:
    X = solve(fig1, "rdm").allocation
    run = RunMetrics(AllocatorMetrics())
    users, servers = np.array([True, False, True]), np.ones(2, dtype=bool)
    run.event(UserLeaves(at=10.0, index=0, user="u2"), now=10.0)
    for now, holds in [(11.0, False), (12.0, False), (13.5, True), (14.5, True)]:
        run.observe(fig1, X, users=users, servers=servers, residual=0.0 if holds else 0.2,
                    holds=holds, now=now)
    m = run.metrics
    assert value(m, "psdsf_last_reconvergence_seconds") == 3.5  # once, at the first holding
    assert value(m, "psdsf_reconvergence_seconds_count") == 1.0
    assert value(m, "psdsf_churn_events_total", kind="user_leaves") == 1.0
    assert value(m, "psdsf_user_tasks", user="u2") is None
    assert value(m, "psdsf_members", role="user") == 2.0
    run.event(ServerFails(at=20.0, index=1, server="s2"), now=20.0)
    run.restart("s2")
    assert value(m, "psdsf_server_tasks", server="s2") is None
    assert value(m, "psdsf_server_restarts_total", server="s2") == 1.0
    assert value(m, "psdsf_churn_events_total", kind="server_fails") == 1.0


def test_run_metrics_time_the_new_rounds_and_keep_the_staleness(fig1: Scenario) -> None:
    X = solve(fig1, "rdm").allocation
    run = RunMetrics(AllocatorMetrics())
    everyone = np.ones(3, dtype=bool), np.ones(2, dtype=bool)

    def observe(*reports: ServerCounts) -> None:
        run.observe(fig1, X, users=everyone[0], servers=everyone[1], residual=0.0,
                    holds=True, now=1.0, reports=reports)

    m = run.metrics
    observe(ServerCounts("s1", "s1", 2, 1, 10, (0.001, 0.002), 0.5))
    # a report carries a window of the latest durations: only the two new rounds are timed
    observe(ServerCounts("s1", "s1", 4, 2, 20, (0.001, 0.002, 0.003, 0.2), 1.5))
    assert value(m, "psdsf_server_round_duration_seconds_count") == 4.0
    assert value(m, "psdsf_server_round_duration_seconds_sum") == pytest.approx(0.206)
    assert value(m, "psdsf_server_rounds_total", server="s1") == 4.0
    assert value(m, "psdsf_gossip_staleness_seconds", server="s1") == 1.5
    # more new rounds than the window holds: the rest are counted, not timed
    observe(ServerCounts("s1", "s1", 10, 3, 30, (0.004,), None))
    assert value(m, "psdsf_server_rounds_total", server="s1") == 10.0
    assert value(m, "psdsf_server_round_duration_seconds_count") == 5.0
    assert value(m, "psdsf_gossip_staleness_seconds", server="s1") == 1.5  # None: kept
    # no new round: nothing timed again; a new incarnation's window counts from its start
    observe(ServerCounts("s1", "s1", 10, 3, 30, (0.004,), 0.25))
    observe(ServerCounts("s1", "s1#1", 1, 1, 10, (0.003,), 0.25))
    assert value(m, "psdsf_server_round_duration_seconds_count") == 6.0
    assert value(m, "psdsf_server_rounds_total", server="s1") == 11.0
