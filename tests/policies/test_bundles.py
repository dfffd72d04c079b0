"""The uniform split and bundle values: by hand on small cases, and the uniform split feasible
and envy-free on random scenarios (the starting point of CRU's search relies on it)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.model.scenario import Mode, Scenario
from psdsf_dist.policies.bundles import (
    bundle_values,
    external_values,
    uniform_split,
    uniform_split_tasks,
)
from psdsf_dist.policies.properties import envy_freeness, feasible
from tests.policies.tsfer_scenarios import linked_scenario

TWO = {
    "resources": ["cpu", "mem"],
    "external": {"bw": 1.0},
    "servers": [{"name": "a", "capacity": {"cpu": 10, "mem": 10}},
                {"name": "b", "capacity": {"cpu": 4}}],
    "users": [{"name": "u1", "demand": {"cpu": 1, "mem": 2}, "external_demand": {"bw": 0.5}},
              {"name": "u2", "demand": {"cpu": 2}, "weight": 3, "external_demand": {"bw": 0.1}},
              {"name": "u3", "demand": {"cpu": 1}}],
}


def test_bundle_values_by_hand() -> None:
    sc = Scenario.from_dict(TWO)
    user = np.array([0, 1, 1], dtype=np.int64)
    server = np.array([0, 0, 1], dtype=np.int64)
    V = bundle_values(sc, "rdm", user, server)
    # u1's task at a (1 cpu, 2 mem): u2 runs 1/2, u3 runs 1; u2's task (2 cpu) at a: u1 needs
    # mem, gets none: 0; u3 runs 2; at b u1 is not eligible (no mem): 0
    np.testing.assert_allclose(V, np.array([[1, 0, 0], [0.5, 1, 1], [1, 2, 2]]))
    T = bundle_values(sc, "tdm", user, server)
    # time: gamma = u1 [5, 0], u2 [5, 2], u3 [10, 4]; value gamma[n, i] / gamma[m, i]
    np.testing.assert_allclose(T, [[1, 1, 0], [1, 1, 1], [2, 2, 2]])
    ext = external_values(sc)
    # u1 per task of u2's link (0.1 of 0.5): 0.2; u3 needs none: inf; of u3's (none): 0
    np.testing.assert_allclose(ext, np.array([[1, 0.2, 0], [5, 1, 0], [np.inf] * 3]))


def test_uniform_split_by_hand() -> None:
    sc = Scenario.from_dict(TWO)
    # shares 1/5, 3/5, 1/5; u1: 1/5 of a = 1 task, link share 0.2 allows 0.4: scaled to 0.4;
    # u2: 3/5 of (5 + 2) = 4.2 tasks, link 0.6 / 0.1 = 6: 4.2; u3: (10 + 4) / 5 = 2.8
    np.testing.assert_allclose(uniform_split_tasks(sc), [0.4, 4.2, 2.8])
    np.testing.assert_allclose(uniform_split(sc), [[0.4, 0], [3, 1.2], [2, 0.8]])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(1, 6), N=st.integers(1, 5),
       M=st.integers(1, 3), mode=st.sampled_from(["rdm", "tdm"]))
def test_uniform_split_is_feasible_envy_free_and_on_the_floor(
    seed: int, K: int, N: int, M: int, mode: Mode
) -> None:
    sc = linked_scenario(seed, K=K, N=N, M=M, placement_prob=0.5, cap_prob=0.3)
    X = uniform_split(sc)
    assert X.sum(axis=1) == pytest.approx(uniform_split_tasks(sc), rel=1e-12)
    assert feasible(sc, X, mode).holds
    assert envy_freeness(sc, X, mode).holds
