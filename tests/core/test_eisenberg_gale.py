"""The Eisenberg-Gale program of TDM PS-DSF and its exact polish."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.core.eisenberg_gale import (
    FisherEquilibrium,
    eisenberg_gale,
    exact_equilibrium,
    on_support,
)

FloatArray = npt.NDArray[np.float64]
INF = np.inf


def test_one_server_splits_time_by_weight() -> None:
    # the interior-point optimum: objective to ~1e-9, so totals only to ~1e-5 (quadratic)
    gamma = np.array([[4.0], [2.0]])
    eq = eisenberg_gale(gamma, np.ones(1), np.array([1.0, 3.0]), np.array([INF, INF]))
    assert eq is not None
    np.testing.assert_allclose(eq.time_share[:, 0], [0.25, 0.75], rtol=1e-4)
    np.testing.assert_allclose(eq.totals, [1.0, 1.5], rtol=1e-4)


def test_cap_binds_and_the_rest_goes_to_the_other_user() -> None:
    gamma = np.array([[4.0], [2.0]])
    eq = eisenberg_gale(gamma, np.ones(1), np.ones(2), np.array([1.0, INF]))
    assert eq is not None
    np.testing.assert_allclose(eq.totals, [1.0, 1.5], rtol=1e-4)


def test_users_eligible_nowhere_or_with_cap_zero_get_nothing() -> None:
    gamma = np.array([[1.0, 2.0], [0.0, 0.0], [3.0, 1.0]])
    eq = eisenberg_gale(gamma, np.array([1.0, 2.0]), np.ones(3), np.array([INF, INF, 0.0]))
    assert eq is not None
    assert eq.totals[1] == 0 and eq.totals[2] == 0
    np.testing.assert_allclose(eq.time_share[0], [1.0, 1.0], rtol=1e-4)
    exact = exact_equilibrium(gamma, np.array([1.0, 2.0]), np.ones(3), np.array([INF, INF, 0]), eq)
    assert exact is not None
    np.testing.assert_allclose(exact[0], [1.0, 2.0], rtol=1e-12)
    assert (exact[1:] == 0).all()


def test_nobody_eligible() -> None:
    eq = eisenberg_gale(np.zeros((2, 3)), np.ones(3), np.ones(2), np.full(2, INF))
    assert eq is not None and (eq.totals == 0).all()


def test_classes_count_their_members() -> None:
    """Two identical servers as one class of 2 give what the two servers give."""
    gamma2 = np.array([[3.0, 3.0, 1.0], [1.0, 1.0, 2.0]])
    phi, cap = np.array([1.0, 2.0]), np.full(2, INF)
    apart = eisenberg_gale(gamma2, np.ones(3), phi, cap)
    merged = eisenberg_gale(gamma2[:, [0, 2]], np.array([2.0, 1.0]), phi, cap)
    assert apart is not None and merged is not None
    np.testing.assert_allclose(merged.totals, apart.totals, rtol=1e-4)


@st.composite
def markets(
    draw: st.DrawFn, caps: bool = True
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    n = draw(st.integers(1, 6))
    c = draw(st.integers(1, 8))
    level = st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 7.5])  # ties are common: degenerate cases
    gamma = np.array(draw(st.lists(level, min_size=n * c, max_size=n * c))).reshape(n, c)
    count = np.array(draw(st.lists(st.sampled_from([1.0, 2.0, 5.0]), min_size=c, max_size=c)))
    weight = np.array(draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=n, max_size=n)))
    choice = [INF, INF, INF, 0.5, 3.0] if caps else [INF]
    cap = np.array(draw(st.lists(st.sampled_from(choice), min_size=n, max_size=n)))
    return gamma, count, weight, cap


def _theorem_2_gap(
    gamma: FloatArray, count: FloatArray, weight: FloatArray, cap: FloatArray, Y: FloatArray
) -> float:
    """Largest violation of Theorem 2 (relative) for tasks per member ``Y``."""
    x = Y @ count
    eligible = gamma > 0
    time = np.where(eligible, Y / np.where(eligible, gamma, 1.0), 0.0).sum(axis=0)
    worst = max(0.0, float((time - 1.0).max()), float(np.max(x / cap - 1.0)))
    below = x < cap * (1 - 1e-9)
    with np.errstate(divide="ignore", invalid="ignore"):
        V = np.where(eligible, x[:, None] / (weight[:, None] * gamma), np.inf)
    for c in range(gamma.shape[1]):
        needs = eligible[:, c] & below
        if not needs.any():
            continue
        worst = max(worst, 1.0 - float(time[c]))  # fully shared
        holders = Y[:, c] > 1e-12
        if holders.any():
            top = float(V[holders, c].max())
            worst = max(worst, (top - float(V[needs, c].min())) / top)
    return worst


@settings(max_examples=60, deadline=None)
@given(markets(caps=False))
def test_exact_equilibrium_satisfies_theorem_2(
    market: tuple[FloatArray, FloatArray, FloatArray, FloatArray],
) -> None:
    gamma, count, weight, cap = market
    eq = eisenberg_gale(gamma, count, weight, cap)
    assert eq is not None
    Y = exact_equilibrium(gamma, count, weight, cap, eq)
    assert Y is not None
    assert (Y >= 0).all() and (Y[gamma <= 0] == 0).all()
    assert _theorem_2_gap(gamma, count, weight, cap, Y) <= 1e-9


@pytest.mark.parametrize("threshold", [1e-3, 1.0, 1e3])
def test_support_readings_agree_on_a_clear_optimum(threshold: float) -> None:
    gamma = np.array([[2.0, 1.0, 1.0], [1.0, 2.0, 1.0], [1.0, 1.0, 2.0]])
    phi, cap, count = np.ones(3), np.full(3, INF), np.ones(3)
    eq = eisenberg_gale(gamma, count, phi, cap)
    assert isinstance(eq, FisherEquilibrium)
    Y = on_support(gamma, count, phi, cap, eq, threshold=threshold)
    assert Y is not None
    np.testing.assert_allclose(Y, np.diag([2.0, 2.0, 2.0]), atol=1e-12)
