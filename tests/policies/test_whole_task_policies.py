"""The whole-task schedulers against the papers: ORACLES example 5 and Kesidis et al.'s Tables
II and IV (randomised server choice: averages of 200 seeded trials within their confidence
intervals), randomised round robin against an independent implementation, and the relations
between the DRFH variants."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.model.random_scenarios import random_scenario
from psdsf_dist.model.scenario import Scenario, load_scenario
from psdsf_dist.policies import allocate
from psdsf_dist.policies.whole_task_policies import (
    rrr_drf,
    rrr_psdsf,
    rrr_tsf,
    whole_task_allocation,
)
from tests.conftest import EXAMPLES

FloatArray = npt.NDArray[np.float64]
TRIALS = 200  # as in the paper


@pytest.fixture(scope="module")
def kesidis() -> Scenario:
    return load_scenario(EXAMPLES / "kesidis_two_servers.yaml")


def unused(sc: Scenario, X: FloatArray) -> FloatArray:
    """K x M capacity left over (Table IV's columns are (server, resource))."""
    return np.asarray(sc.capacity - X.T @ sc.demand)


# -- ORACLES example 5 and Table II / IV: the deterministic rows --------------------------------


def test_psdsf_progressive_filling(kesidis: Scenario) -> None:
    X = allocate(kesidis, "psdsf-pf").allocation
    np.testing.assert_array_equal(X, [[19, 0], [2, 20]])
    np.testing.assert_allclose(unused(kesidis, X), [[3, 1], [10, 0]])  # Table IV, PS-DSF


def test_residual_psdsf(kesidis: Scenario) -> None:
    X = allocate(kesidis, "rpsdsf").allocation
    np.testing.assert_array_equal(X, [[19, 2], [2, 19]])
    np.testing.assert_allclose(unused(kesidis, X), [[3, 1], [1, 3]])  # Table IV, rPS-DSF


def test_best_fit_drf(kesidis: Scenario) -> None:
    """Table II prints BF-DRF as f1 [20, 2], f2 [0, 19] (41 tasks).  DRFH's H(i, l) gives the
    mirror-symmetric [19, 2], [2, 19] (42 tasks, as rPS-DSF): with equal shares the two users
    alternate and H sends each to the server shaped like its task until the last few tasks.
    Several other readings of "most closely matches" (L1 after normalising by the sum or the
    dominant resource, L2, cosine, the largest or smallest leftover) give 42 or 20, never the
    printed 41; we keep the DRFH paper's definition and record the difference."""
    X = allocate(kesidis, "bf-drf").allocation
    np.testing.assert_array_equal(X, [[19, 2], [2, 19]])
    np.testing.assert_array_equal(allocate(kesidis, "drfh-best-fit").allocation, X)


def test_drfh_first_fit(kesidis: Scenario) -> None:
    """Equal shares alternate the users; each takes the first server its task fits on, so s1
    fills with 5 + 5 tasks (its memory: 5 x 1 + 5 x 5 = 30) and then s2 the same way."""
    X = allocate(kesidis, "drfh-first-fit").allocation
    np.testing.assert_array_equal(X, [[5, 5], [5, 5]])


# -- Table II / IV: randomised server choice, 200 seeded trials ----------------------------------


def within_confidence(ours: FloatArray, paper: list[float], paper_std: list[float]) -> None:
    """|our mean - paper's mean| within 3 standard errors of the difference of two means of
    200 trials each (the paper's standard deviations from its Tables III and V)."""
    mean = ours.mean(axis=0).ravel()
    se = np.sqrt(ours.std(axis=0, ddof=1).ravel() ** 2 / len(ours)
                 + np.asarray(paper_std) ** 2 / TRIALS)
    assert (np.abs(mean - np.asarray(paper)) <= 3 * se + 1e-12).all(), (mean, paper, se)


def test_rrr_psdsf_table_ii(kesidis: Scenario) -> None:
    runs = np.array([allocate(kesidis, "rrr-psdsf", seed=s).allocation for s in range(TRIALS)])
    within_confidence(runs, [19.44, 1.15, 1.07, 19.42], [0.59, 0.99, 1.0, 0.49])
    assert runs.sum(axis=(1, 2)).mean() == pytest.approx(41.08, abs=0.15)


def test_rrr_psdsf_table_iv(kesidis: Scenario) -> None:
    """Unused capacity is linear in the tasks, so Table IV's means follow from Table II's: they
    do, within 0.1, except (s1, mem), printed 4.6 where Table II implies 30 - 19.44 - 5 x 1.07
    = 5.21.  Table V repeats Table III's deviations, which cannot be those of capacities moving
    5 units per task; so the paper's spread is taken as ours, and ours is averaged over 2,000
    seeded trials to make our side's noise small beside the paper's 200.  The server is drawn
    each step, as the paper's numbers were evidently made (see the test below on DRF)."""
    implied = np.array([[100 - 5 * 19.44 - 1.07, 30 - 19.44 - 5 * 1.07],
                        [30 - 5 * 1.15 - 19.42, 100 - 1.15 - 5 * 19.42]])
    table_iv = np.array([[1.8, 4.6], [4.86, 1.92]])
    close = np.abs(implied - table_iv) < 0.2
    assert close.sum() == 3 and not close[0, 1]
    runs = np.array([rrr_psdsf(kesidis, "rdm", np.random.default_rng(s), order="each-step")
                     for s in range(2000)], dtype=float)
    left = np.array([unused(kesidis, X) for X in runs])
    spread = left.std(axis=0, ddof=1)
    se = np.sqrt(spread**2 / len(left) + spread**2 / TRIALS)
    assert (np.abs(left.mean(axis=0) - table_iv) <= 3 * se).all(), (left.mean(axis=0), se)


@pytest.mark.parametrize(("rule", "paper", "total"), [
    (rrr_drf, [6.55, 4.69, 4.69, 6.55], 22.48),
    (rrr_tsf, [6.5, 4.7, 4.7, 6.5], 22.4),
])
def test_drf_and_tsf_with_a_random_server_table_ii(
    kesidis: Scenario, rule: object, paper: list[float], total: float
) -> None:
    assert callable(rule)
    runs = np.array([rule(kesidis, "rdm", np.random.default_rng(s), order="each-step")
                     for s in range(TRIALS)])
    within_confidence(runs, paper, [2.31, 0.46, 0.46, 2.31])
    left = np.array([unused(kesidis, X.astype(float)) for X in runs])
    within_confidence(left, [62.56, 0, 0, 62.56], [11.09, 0, 0, 11.09])
    assert abs(runs.sum(axis=(1, 2)).mean() - total) < 1.0


def per_round_reference(sc: Scenario, rng: np.random.Generator) -> FloatArray:
    """DRF under RRR written out from Kesidis et al.'s words: round after round, the servers in
    a random order, each giving a task to the fitting framework of smallest dominant share."""
    from psdsf_dist.policies.drfh import global_dominant_share

    mu = global_dominant_share(sc, respect_placement=False)
    D, C = sc.demand, sc.capacity
    N, K = D.shape[0], C.shape[0]
    R, X = C.copy(), np.zeros((N, K))
    active = list(range(K))
    while active:
        for i in rng.permutation(active).tolist():
            ok = [n for n in range(N) if (D[n] <= R[i] + 1e-9 * C[i]).all()]
            if ok:
                n = min(ok, key=lambda m: (X[m].sum() * mu[m], m))
                X[n, i] += 1
                R[i] -= D[n]
        active = [i for i in active
                  if any((D[n] <= R[i] + 1e-9 * C[i]).all() for n in range(N))]
    return X


@pytest.mark.parametrize("seed", range(5))
def test_round_robin_is_a_permutation_per_round(kesidis: Scenario, seed: int) -> None:
    ours = rrr_drf(kesidis, "rdm", np.random.default_rng(seed))
    np.testing.assert_array_equal(ours, per_round_reference(kesidis, np.random.default_rng(seed)))


def test_the_papers_drf_row_is_a_draw_per_step_not_a_permutation(kesidis: Scenario) -> None:
    """Read as written (a permutation per round), RRR gives DRF about 7.0 tasks of f1 on s1 over
    800 trials, outside the paper's 6.55 +- 0.33; drawing the server each step gives 6.6."""
    rounds = np.mean([rrr_drf(kesidis, "rdm", np.random.default_rng(s))[0, 0]
                      for s in range(800)])
    draws = np.mean([rrr_drf(kesidis, "rdm", np.random.default_rng(s), order="each-step")[0, 0]
                     for s in range(800)])
    assert rounds > 6.55 + 0.33
    assert abs(draws - 6.55) < 0.2


def test_rrr_psdsf_is_rrr_psdsf_with_round_robin(kesidis: Scenario) -> None:
    for s in range(3):
        np.testing.assert_array_equal(
            allocate(kesidis, "rrr-psdsf", seed=s).allocation,
            rrr_psdsf(kesidis, "rdm", np.random.default_rng(s)))
    with pytest.raises(ValueError, match="unknown server order"):
        rrr_psdsf(kesidis, "rdm", np.random.default_rng(0), order="sideways")  # type: ignore[arg-type]


# -- relations -----------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(1, 8), N=st.integers(1, 5),
       M=st.integers(1, 3))
def test_bf_drf_is_drfh_best_fit_without_placement(seed: int, K: int, N: int, M: int) -> None:
    sc = random_scenario(np.random.default_rng(seed), K=K, N=N, M=M, placement_prob=0.0)
    if not (sc.gamma > 0).all():  # a server lacking a demanded resource acts as placement
        return
    a = whole_task_allocation(sc, "bf-drf", "rdm")
    b = whole_task_allocation(sc, "drfh-best-fit", "rdm")
    assert np.array_equal(a, b)


def test_best_fit_is_first_fit_with_one_resource() -> None:
    sc = random_scenario(np.random.default_rng(7), K=6, N=4, M=1)
    for mode in ("rdm", "tdm"):
        a = whole_task_allocation(sc, "drfh-best-fit", mode)
        b = whole_task_allocation(sc, "drfh-first-fit", mode)
        assert np.array_equal(a, b)


def test_weights_favour_the_heavier_user(kesidis: Scenario) -> None:
    heavy = kesidis.replace_users(weight=np.array([3.0, 1.0]))
    for policy in ("psdsf-pf", "rpsdsf", "drfh-first-fit", "drfh-best-fit", "bf-drf"):
        even = allocate(kesidis, policy).totals
        tilted = allocate(heavy, policy).totals
        assert tilted[0] >= even[0], policy
