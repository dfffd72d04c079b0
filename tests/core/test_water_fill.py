"""Weighted max-min water-filling with offsets and upper bounds: hand cases and properties."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from hypothesis import given
from hypothesis import strategies as st

from psdsf_dist.core.water_fill import WaterFill, water_fill

FloatArray = npt.NDArray[np.float64]
INF = np.inf


def fill(
    capacity: list[float],
    consumption: list[list[float]],
    weight: list[float],
    offset: list[float] | None = None,
    upper: list[float] | None = None,
) -> WaterFill:
    n = len(weight)
    return water_fill(
        np.array(capacity, dtype=float),
        np.array(consumption, dtype=float).reshape(n, len(capacity)),
        np.array(weight, dtype=float),
        np.zeros(n) if offset is None else np.array(offset, dtype=float),
        np.full(n, INF) if upper is None else np.array(upper, dtype=float),
    )


# -- hand-checked cases ------------------------------------------------------------------------


def test_equal_users_split_one_resource_equally() -> None:
    wf = fill([10], [[1], [1]], [1, 1])
    np.testing.assert_allclose(wf.column, [5, 5])
    np.testing.assert_allclose(wf.level, [5])
    assert [s.tolist() for s in wf.saturated] == [[0]]


def test_weights_scale_the_share() -> None:
    # x = w L: L (1 + 3) = 12 -> L = 3
    wf = fill([12], [[1], [1]], [1, 3])
    np.testing.assert_allclose(wf.column, [3, 9])


def test_offset_delays_a_user() -> None:
    # x0 = L, x1 = L - 4; 2L - 4 = 10 -> L = 7
    wf = fill([10], [[1], [1]], [1, 1], offset=[0, 4])
    np.testing.assert_allclose(wf.column, [7, 3])
    np.testing.assert_allclose(wf.level, [7])


def test_offset_above_the_final_level_gets_nothing() -> None:
    wf = fill([10], [[1], [1]], [1, 1], offset=[0, 20])
    np.testing.assert_allclose(wf.column, [10, 0])


def test_upper_bound_stops_a_user_and_the_rest_takes_the_remainder() -> None:
    wf = fill([10], [[1], [1]], [1, 1], upper=[2, INF])
    np.testing.assert_allclose(wf.column, [2, 8])
    assert wf.at_upper.tolist() == [True, False]


def test_user_needing_a_missing_resource_is_excluded() -> None:
    wf = fill([10, 0], [[1, 1], [1, 0]], [1, 1])
    np.testing.assert_allclose(wf.column, [0, 10])
    assert wf.group[0] == -1


def test_zero_weight_excludes_a_user() -> None:
    wf = fill([10], [[1], [1]], [0, 1])
    np.testing.assert_allclose(wf.column, [0, 10])


def test_two_resources_saturate_in_different_phases() -> None:
    # r0 used by A and B: 2L = 10 saturates at L = 5 (A, B frozen at 5).  r1 then holds B's 5
    # plus C's 0.5 L: full at L = 10, C = 10.
    wf = fill([10, 10], [[1, 0], [1, 1], [0, 0.5]], [1, 1, 1])
    np.testing.assert_allclose(wf.column, [5, 5, 10])
    np.testing.assert_allclose(wf.level, [5, 10])
    assert [s.tolist() for s in wf.saturated] == [[0], [1]]
    assert wf.group.tolist() == [0, 0, 1]


def test_all_users_capped_leaves_capacity_unused() -> None:
    wf = fill([100, 100], [[1, 2], [3, 1]], [1, 2], upper=[1, 2])
    np.testing.assert_allclose(wf.column, [1, 2])
    assert wf.at_upper.all()
    assert np.isinf(wf.level[-1])


def test_nobody_taking_part_is_an_empty_fill() -> None:
    wf = fill([5], [[0], [1]], [1, 1], upper=[INF, 0])
    np.testing.assert_allclose(wf.column, [0, 0])
    assert len(wf.level) == 0


def test_a_tiny_weight_still_fills_its_resource() -> None:
    # weight x consumption below ~1e-308: the level at which the resource saturates (~4e308)
    # overflows; the amount (4 tasks) does not
    wf = fill([4], [[1]], [2.2e-308])
    np.testing.assert_allclose(wf.column, [4])


# -- properties --------------------------------------------------------------------------------


@st.composite
def fills(draw: st.DrawFn) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    n = draw(st.integers(1, 8))
    m = draw(st.integers(1, 3))
    amount = st.floats(0.1, 20, allow_nan=False)
    capacity = np.array([draw(st.one_of(st.just(0.0), amount, amount)) for _ in range(m)])
    consumption = np.array(
        [[draw(st.one_of(st.just(0.0), st.floats(0.05, 5))) for _ in range(m)] for _ in range(n)]
    )
    weight = np.array([draw(st.one_of(st.just(0.0), st.floats(0.1, 10), st.floats(0.1, 10)))
                       for _ in range(n)])
    offset = np.array([draw(st.one_of(st.just(0.0), st.floats(0, 30))) for _ in range(n)])
    upper = np.array([draw(st.one_of(st.just(INF), st.floats(0, 10))) for _ in range(n)])
    return capacity, consumption, weight, offset, upper


@given(fills())
def test_column_is_feasible_and_within_bounds(
    case: tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray],
) -> None:
    capacity, consumption, weight, offset, upper = case
    wf = water_fill(capacity, consumption, weight, offset, upper)
    assert (wf.column >= 0).all()
    assert (wf.column <= upper * (1 + 1e-12) + 1e-12).all()
    assert (consumption.T @ wf.column <= capacity * (1 + 1e-12)).all()
    takes_part = (weight > 0) & (upper > 0) & (consumption > 0).any(axis=1) & ~(
        (consumption > 0) & (capacity <= 0)
    ).any(axis=1)
    assert (wf.column[~takes_part] == 0).all()


@given(fills())
def test_column_is_max_min_fair(
    case: tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray],
) -> None:
    """Every taking-part user below its upper bound consumes a saturated resource on which
    nobody at a higher level consumes (level = (X + offset) / weight)."""
    capacity, consumption, weight, offset, upper = case
    wf = water_fill(capacity, consumption, weight, offset, upper)
    x = wf.column
    used = consumption.T @ x
    saturated = used >= capacity * (1 - 1e-9)
    with np.errstate(divide="ignore", invalid="ignore"):
        level = np.where(weight > 0, (x + offset) / weight, np.inf)
    consumers = (consumption > 0) & (x[:, None] > 1e-12)
    missing = np.asarray(((consumption > 0) & (capacity[None, :] <= 0)).any(axis=1))
    for n in range(len(x)):
        if weight[n] <= 0 or missing[n] or not (consumption[n] > 0).any():
            continue
        if x[n] >= upper[n] * (1 - 1e-9):
            continue
        ok = False
        for r in np.flatnonzero((consumption[n] > 0) & saturated):
            top = level[consumers[:, r]].max(initial=-np.inf)
            if top <= level[n] * (1 + 1e-9) + 1e-12:
                ok = True
        assert ok, f"user {n} has no bottleneck: x={x}, level={level}, used={used}"


@given(fills(), st.sampled_from([1e-3, 0.37, 8.0, 1e4]))
def test_scaling_capacity_and_consumption_together_changes_nothing(
    case: tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray], scale: float
) -> None:
    capacity, consumption, weight, offset, upper = case
    a = water_fill(capacity, consumption, weight, offset, upper).column
    b = water_fill(capacity * scale, consumption * scale, weight, offset, upper).column
    np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9)


@given(st.data())
def test_extreme_weights_give_finite_feasible_columns(data: st.DataObject) -> None:
    # weights anywhere in [1e-300, 1e6] side by side: each phase fills on its own scale
    n, m = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 3))
    positive = st.floats(1e-100, 1e6)
    capacity = np.array([data.draw(st.one_of(st.just(0.0), positive)) for _ in range(m)])
    consumption = np.array(
        [[data.draw(st.one_of(st.just(0.0), positive)) for _ in range(m)] for _ in range(n)]
    )
    weight = np.array([data.draw(st.one_of(st.just(0.0), st.floats(1e-300, 1e6)))
                       for _ in range(n)])
    offset = np.array([data.draw(st.floats(0, 1e6)) for _ in range(n)])
    wf = water_fill(capacity, consumption, weight, offset, np.full(n, INF))
    assert np.isfinite(wf.column).all()
    assert (consumption.T @ wf.column <= capacity * (1 + 1e-9)).all()
