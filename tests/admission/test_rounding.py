"""Credit rounding: whole-task targets that fit and meet the fractional column on average."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.admission.rounding import CREDIT_LIMIT, round_column


def run(x: np.ndarray, demand: np.ndarray, capacity: np.ndarray, steps: int
        ) -> tuple[np.ndarray, np.ndarray]:
    """Targets of every step (steps x N) and the largest |credit| seen per user."""
    credit = np.zeros(len(x))
    out, worst = [], np.zeros(len(x))
    for _ in range(steps):
        r = round_column(x, demand, capacity, credit, 1.0)
        credit = r.credit
        worst = np.maximum(worst, np.abs(credit))
        out.append(r.targets)
    return np.array(out), worst


@st.composite
def equal_demand_columns(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    """x with sum(x) <= C, every task one unit of the one resource."""
    n = draw(st.integers(1, 6))
    cap = draw(st.integers(1, 12))
    raw = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n)))
    fill = draw(st.floats(0.0, 1.0))
    x = raw / max(raw.sum(), 1e-12) * cap * fill
    return x, cap


@settings(max_examples=200, deadline=None)
@given(equal_demand_columns())
def test_equal_demands_meet_x_within_one_task_period(case: tuple[np.ndarray, int]) -> None:
    x, cap = case
    demand = np.ones((len(x), 1))
    targets, worst = run(x, demand, np.array([float(cap)]), 60)
    # never past the capacity, never below the floors
    assert np.all(targets.sum(axis=1) <= cap)
    assert np.all(targets >= np.floor(x + 1e-9))
    # the chairman-assignment bound: credit within (-1, 1) task-periods, so the average over
    # any window of w steps is within 2 / w of x
    assert np.all(worst < 1.0 + 1e-9)
    for w in (10, 60):
        assert np.all(np.abs(targets[-w:].mean(axis=0) - x) <= 2.0 / w + 1e-9)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5), st.integers(1, 3), st.data())
def test_any_demands_never_exceed_capacity_and_credit_stays_clamped(
        n: int, m: int, data: st.DataObject) -> None:
    demand = np.array(data.draw(st.lists(st.lists(st.floats(0.05, 2.0), min_size=m,
                                                  max_size=m), min_size=n, max_size=n)))
    capacity = np.array(data.draw(st.lists(st.floats(1.0, 10.0), min_size=m, max_size=m)))
    # a feasible fractional column: scale random shares into the capacity
    share = np.array(data.draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n)))
    load = share @ demand
    x = share / max(float(np.max(load / capacity)), 1e-12) * data.draw(st.floats(0.0, 1.0))
    targets, worst = run(x, demand, capacity, 30)
    for t in targets:
        assert np.all(t @ demand <= capacity * (1 + 1e-9))
    assert np.all(worst <= CREDIT_LIMIT)


def test_integrality_gap_is_a_clamped_deficit_not_a_growing_debt() -> None:
    # 1.5 tasks of 0.6 cpu on one cpu: only one fits, ever
    targets, worst = run(np.array([1.5]), np.array([[0.6]]), np.array([1.0]), 20)
    assert targets.max() == 1
    assert worst[0] == CREDIT_LIMIT


def test_two_users_share_one_leftover_slot_in_proportion() -> None:
    x = np.array([0.25, 0.75])
    targets, _ = run(x, np.ones((2, 1)), np.array([1.0]), 40)
    assert targets.sum(axis=1).max() == 1
    assert targets.mean(axis=0).tolist() == [0.25, 0.75]


def test_a_step_is_a_function_of_its_inputs() -> None:
    x, d, c = np.array([0.5, 0.5]), np.ones((2, 1)), np.array([1.0])
    a = round_column(x, d, c, np.zeros(2), 1.0)
    b = round_column(x, d, c, np.zeros(2), 1.0)
    assert a.targets.tolist() == b.targets.tolist() == [1, 0]  # tie: the lower index first
