"""Random scenario generators: seeded, valid, of the requested sizes, every user eligible."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.errors import ScenarioWarning
from psdsf_dist.model.random_scenarios import (
    GOOGLE_2011_TOTAL,
    google_cluster,
    google_counts,
    random_scenario,
    random_scenario_doc,
)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    K=st.integers(1, 200),
    N=st.integers(1, 50),
    M=st.integers(1, 4),
)
def test_random_scenario_sizes_and_eligibility(seed: int, K: int, N: int, M: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ScenarioWarning)
        sc = random_scenario(np.random.default_rng(seed), K=K, N=N, M=M)
    assert (sc.num_servers, sc.num_users, sc.num_resources) == (K, N, M)
    assert (sc.gamma > 0).any(axis=1).all()
    assert (sc.weight > 0).all()
    assert (sc.max_tasks > 0).all()


def test_random_scenario_is_seeded() -> None:
    a = random_scenario_doc(np.random.default_rng(7), K=30, N=8, M=3)
    b = random_scenario_doc(np.random.default_rng(7), K=30, N=8, M=3)
    c = random_scenario_doc(np.random.default_rng(8), K=30, N=8, M=3)
    assert a == b
    assert a != c


def test_random_suite_has_constraints_caps_and_weights() -> None:
    rng = np.random.default_rng(1)
    scs = [random_scenario(rng, K=20, N=10, M=3) for _ in range(20)]
    assert any((~sc.placement).any() for sc in scs)
    assert any(np.isfinite(sc.max_tasks).any() for sc in scs)
    assert any(len(set(sc.weight.tolist())) > 1 for sc in scs)


@pytest.mark.parametrize("K", [1, 100, 1000, 10_000])
def test_google_counts_follow_the_mix(K: int) -> None:
    counts = google_counts(np.random.default_rng(0), K)
    assert counts.sum() == K
    assert counts[0] == max(counts)  # the 0.5/0.5 configuration dominates


def test_google_full_trace_is_exact() -> None:
    sc = google_cluster(np.random.default_rng(0), K=GOOGLE_2011_TOTAL, N=100)
    assert sc.num_servers == 12_583
    assert sc.num_users == 100
    assert len(sc.class_names) == 10
    assert np.isclose(sc.capacity[:, 0].sum(), 6732 * 0.5 + 3863 * 0.5 + 1001 * 0.5 + 795
                      + 126 * 0.25 + 52 * 0.5 + 5 * 0.5 + 5 * 0.5 + 3 + 0.5)


def test_google_four_resources() -> None:
    sc = google_cluster(np.random.default_rng(3), K=100, N=5, M=4)
    assert sc.resources == ("cpu", "mem", "disk", "net")
    assert (sc.gamma > 0).any(axis=1).all()
