"""Per-event re-convergence times from the coordinator's observations."""

from __future__ import annotations

from psdsf_dist.protocol.convergence import Observation, event_convergence


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
