"""Per-event re-convergence times from the coordinator's observations."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from psdsf_dist.model.scenario import Scenario
from psdsf_dist.protocol.convergence import (
    Observation,
    ObservationJson,
    Traffic,
    event_convergence,
    observe,
)


def obs(t: float, holds: bool) -> Observation:
    return Observation(int(t), t, 0.0 if holds else 1.0, holds, True, 1.0, 0.0, 0.0, 0.0, 0.0, 1)


def test_converged_after_the_last_flicker_before_the_next_event() -> None:
    holds = [False, True, False, True, True, False, False, True, True, True]
    seen = [obs(float(t + 1), h) for t, h in enumerate(holds)]
    out = event_convergence([("u4 leaves", 5.5)], seen, period=1.0)
    assert [e.description for e in out] == ["start", "u4 leaves"]
    assert out[0].converged_at == 4.0 and out[0].rounds == 4  # held at 4 and 5 until 5.5
    assert out[1].converged_at == 8.0 and out[1].seconds == 2.5 and out[1].rounds == 3


def test_an_event_never_followed_by_holding_has_no_time() -> None:
    seen = [obs(1.0, True), obs(2.0, False)]
    out = event_convergence([], seen, period=1.0)
    assert out[0].converged_at is None and out[0].rounds is None
    assert out[0].to_json()["rounds_to_converge"] is None


def test_rounds_follow_the_period() -> None:
    seen = [obs(0.25 * k, k >= 3) for k in range(1, 9)]
    out = event_convergence([], seen, period=0.25)
    assert out[0].converged_at == 0.75 and out[0].rounds == 3


def test_the_last_phase_needs_hold_observations_unless_an_event_cuts_it_short() -> None:
    holds = [False, True, True, False, False, True, True]
    seen = [obs(float(t + 1), h) for t, h in enumerate(holds)]
    out = event_convergence([("u4 leaves", 3.5)], seen, period=1.0, hold=3)
    # the start held at 2 and 3 only, but the event came: that counts; after the event the
    # certificate has held 2 observations so far (6, 7), fewer than 3: not yet converged
    assert out[0].converged_at == 2.0
    assert out[1].converged_at is None and out[1].rounds is None
    assert event_convergence([("u4 leaves", 3.5)], seen, period=1.0, hold=2)[1].converged_at == 6.0


def test_an_observation_reports_how_far_a_total_went_above_its_cap() -> None:
    scenario = Scenario.from_dict({
        "resources": ["cpu"],
        "servers": [{"name": "s1", "capacity": {"cpu": 10}},
                    {"name": "s2", "capacity": {"cpu": 10}}],
        "users": [{"name": "a", "demand": {"cpu": 1}, "max_tasks": 4},
                  {"name": "b", "demand": {"cpu": 1}}],
    })
    none = np.zeros(2)
    kw: dict[str, Any] = {"round": 0, "time": 1.0, "mode": "rdm", "rtol": 1e-3,
                          "traffic": Traffic(none, none), "previous_totals": None}
    up = np.ones(2, dtype=bool)
    over = observe(scenario, np.array([[3.0, 2.0], [7.0, 8.0]]), up, **kw)
    assert over.cap_excess == pytest.approx(0.25)  # 5 tasks against a cap of 4
    assert over.to_json()["cap_excess"] == pytest.approx(0.25)
    within = observe(scenario, np.array([[2.0, 2.0], [8.0, 8.0]]), up, **kw)
    assert within.cap_excess == 0.0


def dist_obs(t: float, distance: float | None) -> Observation:
    return Observation(int(t), t, 1.0, False, True, 1.0, 0.0, 0.0, 0.0, 0.0, 1,
                       distance=distance)


def test_rounds_within_each_threshold_count_from_the_last_time_the_distance_crossed_it() -> None:
    # 5 % first reached at 2, lost at 3, regained at 4; 1 % from 5 on; 0.1 % from 7 on
    distances = [0.2, 0.04, 0.06, 0.03, 0.005, 0.002, 0.0005, 0.0004, 0.0]
    seen = [dist_obs(float(t + 1), d) for t, d in enumerate(distances)]
    out = event_convergence([], seen, period=1.0)
    assert out[0].within == (4, 5, 7)
    assert out[0].to_json()["rounds_within"] == {"0.05": 4, "0.01": 5, "0.001": 7}
    assert out[0].rounds is None  # the certificate never held: the two measures are separate


def test_within_is_per_event_and_an_unknown_distance_never_counts() -> None:
    distances: list[float | None] = [0.5, 0.001, 0.0, 0.3, 0.02, None, 0.004, 0.004]
    seen = [dist_obs(float(t + 1), d) for t, d in enumerate(distances)]
    out = event_convergence([("u4 leaves", 3.5)], seen, period=1.0, hold=2)
    assert out[0].within == (2, 2, 3)  # held until the event cut it short
    # after the event (t = 3.5): 0.3, 0.02, unknown, 0.004, 0.004 at t = 4..8
    # 5 % and 1 % from t = 7 (two observations: hold), 3.5 s after the event: 4 rounds
    assert out[1].within == (4, 4, None)
    short = event_convergence([("u4 leaves", 3.5)], seen, period=1.0, hold=3)
    assert short[1].within == (None, None, None)  # the final run is shorter than hold


def test_an_observation_carries_its_distance_to_fair() -> None:
    scenario = Scenario.from_dict({
        "resources": ["cpu"],
        "servers": [{"name": "s1", "capacity": {"cpu": 10}}],
        "users": [{"name": "a", "demand": {"cpu": 1}}, {"name": "b", "demand": {"cpu": 1}}],
    })
    none = np.zeros(1)
    kw: dict[str, Any] = {"round": 0, "time": 1.0, "mode": "rdm", "rtol": 1e-3,
                          "traffic": Traffic(none, none), "previous_totals": None}
    up = np.ones(1, dtype=bool)
    fair = observe(scenario, np.array([[5.0], [5.0]]), up, **kw)
    assert fair.distance == 0.0 and fair.to_json()["distance"] == 0.0
    off = observe(scenario, np.array([[6.0], [4.0]]), up, **kw)
    assert off.distance == pytest.approx(0.2)
    assert observe(scenario, np.array([[np.inf], [4.0]]), up, **kw).to_json()["distance"] is None


def test_events_at_one_instant_are_one_change() -> None:
    seen = [obs(float(t), t >= 3) for t in range(1, 8)]
    events = [(f"w{k}", 2.0) for k in range(5000)]
    out = event_convergence(events, seen, period=1.0)
    assert [e.at for e in out] == [0.0, 2.0]
    assert out[1].description == "w0; w1; w2; ... (5000 events)"
    assert out[1].converged_at == 3.0


def test_the_json_form_of_an_observation_has_its_fields() -> None:
    """``ObservationJson`` restates :class:`Observation`'s fields for the JSON form (a
    TypedDict cannot be derived from a dataclass): the two must name the same fields, in
    the same order, and ``to_json`` must fill every one."""
    names = [f.name for f in dataclasses.fields(Observation)]
    assert list(ObservationJson.__annotations__) == names
    assert list(obs(1.0, True).to_json()) == names
