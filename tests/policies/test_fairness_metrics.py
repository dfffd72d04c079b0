"""Jain's index and weight-normalised task shares."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.model.scenario import Scenario
from psdsf_dist.policies.fairness_metrics import jain_index, task_shares

values = st.lists(st.floats(0.0, 1e6, allow_nan=False), min_size=1, max_size=30)


@settings(max_examples=200)
@given(v=values, scale=st.floats(1e-3, 1e3))
def test_jain_index_bounds_and_scale_invariance(v: list[float], scale: float) -> None:
    a = np.array(v)
    j = jain_index(a)
    assert 1.0 / len(a) - 1e-12 <= j <= 1.0 + 1e-12
    assert jain_index(a * scale) == pytest.approx(j, rel=1e-9)


def test_jain_index_known_values() -> None:
    assert jain_index(np.array([2.0, 2.0, 2.0])) == pytest.approx(1.0)
    assert jain_index(np.array([1.0, 0.0, 0.0, 0.0])) == pytest.approx(0.25)
    assert jain_index(np.array([1.0, 3.0])) == pytest.approx(16 / 20)
    assert jain_index(np.zeros(3)) == 1.0


def test_task_shares_divide_by_weight_and_solo_tasks() -> None:
    sc = Scenario.from_dict({
        "resources": ["cpu"],
        "servers": [{"name": "a", "capacity": {"cpu": 4}}, {"name": "b", "capacity": {"cpu": 6}}],
        "users": [{"name": "u", "demand": {"cpu": 1}, "weight": 2},
                  {"name": "v", "demand": {"cpu": 2}, "servers": ["a"]}],
    })
    # u could run 10 tasks alone, v 2 (only on a)
    np.testing.assert_allclose(task_shares(sc, np.array([5.0, 1.0])), [5 / 20, 1 / 2])
