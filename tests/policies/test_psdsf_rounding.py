"""Rounding the PS-DSF allocation to whole tasks: feasible, integral, maximal, and no user loses
as many tasks as the servers its fractional allocation was split over (the stated bound), which
no integer allocation can beat in general."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.core.solver import solve
from psdsf_dist.model.random_scenarios import random_scenario
from psdsf_dist.model.scenario import Mode, Scenario, load_scenario
from psdsf_dist.policies.psdsf_rounding import floor_allocation, round_psdsf
from tests.conftest import EXAMPLES
from tests.policies.test_whole_tasks import assert_maximal, assert_whole_and_feasible


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(1, 8), N=st.integers(1, 5),
       M=st.integers(1, 3), mode=st.sampled_from(["rdm", "tdm"]))
def test_rounding_is_whole_feasible_maximal_and_within_its_bound(
    seed: int, K: int, N: int, M: int, mode: Mode
) -> None:
    sc = random_scenario(np.random.default_rng(seed), K=K, N=N, M=M)
    r = round_psdsf(sc, mode)
    X = r.allocation.astype(float)
    assert_whole_and_feasible(sc, X, mode)
    assert_maximal(sc, X, mode)
    assert (r.allocation >= r.floor).all()  # the fill only adds
    assert (r.floor <= r.fractional * (1 + 1e-9) + 1e-9).all()
    frac = r.fractional.sum(axis=1)
    # the claim: x[n] > x*[n] - s[n] when s[n] > 0, x[n] >= x*[n] otherwise
    assert (r.totals >= frac - r.split - 1e-6).all()
    split = r.split > 0
    assert (r.totals[split] > frac[split] - r.split[split] - 1e-6).all()
    # s[n] counts servers holding a fractional part of n: at most its servers with tasks
    assert (r.split <= (r.fractional > 1e-9).sum(axis=1)).all()


def test_bound_is_tight_for_every_integer_allocation() -> None:
    """A lone user whose task needs 1 cpu, on s servers of 0.99 cpu: x* = 0.99 s, no task fits
    anywhere, so every integer allocation loses 0.99 s of the bound s."""
    s = 5
    sc = Scenario.from_dict({
        "resources": ["cpu"],
        "servers": [{"name": "a", "count": s, "capacity": {"cpu": 0.99}}],
        "users": [{"name": "u", "demand": {"cpu": 1}}],
    })
    r = round_psdsf(sc)
    assert r.fractional.sum() == pytest.approx(0.99 * s)
    assert r.totals.tolist() == [0]
    assert r.split.tolist() == [s]
    assert r.loss[0] == pytest.approx(0.99 * s)


def test_whole_fractional_allocation_is_kept() -> None:
    """ORACLES example 5: PS-DSF gives f1 all of s1 and f2 all of s2, whole already."""
    sc = load_scenario(EXAMPLES / "kesidis_two_servers.yaml")
    r = round_psdsf(sc)
    np.testing.assert_array_equal(r.allocation, [[20, 0], [0, 20]])
    assert r.split.tolist() == [0, 0]


def test_paper_cluster_rounding() -> None:
    """ORACLES example 3: every user holds a fractional number of tasks per server (u1 2.5 on
    each class-B server, u2 2.5 on A and 1.25 on B, u3 2.5 on C, u4 2.5 on D), so the bound
    allows losses of 68 / 76 / 33 / 11.  Measured: u2, u3, u4 lose 21, 16.5 and 5.5 tasks (their
    third task fits in no leftover) and u1, whose small task fits in every leftover, gains 53:
    the fill has no upper bound, as stated."""
    sc = load_scenario(EXAMPLES / "paper_cluster.yaml")
    r = round_psdsf(sc)
    frac = r.fractional.sum(axis=1)
    np.testing.assert_allclose(frac, [210, 105, 82.5, 27.5], rtol=1e-7)
    assert r.split.tolist() == [68, 76, 33, 11]
    assert (r.totals > frac - r.split).all()
    assert r.totals.tolist() == [263, 84, 66, 22]


def test_floor_absorbs_solver_round_off() -> None:
    X = np.array([[2.9999999999, 0.5], [1e-12, 4.0]])
    np.testing.assert_array_equal(floor_allocation(X, np.array([np.inf, np.inf])),
                                  [[3, 0], [0, 4]])
    # a total at its backlog stays there whatever the round-off
    capped = floor_allocation(np.array([[1.9999999999, 1.0000000001]]), np.array([2.9999999]))
    assert capped.sum() <= 2


def test_given_fractional_allocation_is_used(fig1: Scenario) -> None:
    sol = solve(fig1, "rdm")
    r = round_psdsf(fig1, "rdm", sol.allocation)
    np.testing.assert_array_equal(r.allocation.sum(axis=1), [3, 3, 6])
