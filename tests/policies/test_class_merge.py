"""Class merging: the same totals as on the full cluster, feasible per server, typed refusal."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psdsf_dist.model.random_scenarios import google_cluster, random_scenario
from psdsf_dist.model.scenario import Scenario, load_scenario
from psdsf_dist.policies import allocate, without_external
from psdsf_dist.policies.class_merge import (
    CLASS_INVARIANT,
    NotClassInvariantError,
    allocate_by_class,
    expand,
    merge_classes,
)
from psdsf_dist.policies.properties import feasible

# pooled DRF reports task equivalents, not per-server tasks: its totals are compared, not fit
PER_SERVER = sorted(CLASS_INVARIANT - {"drf", "tsf-er"})


def _fits(sc: Scenario, X: npt.NDArray[np.float64]) -> bool:
    return feasible(sc, X, "rdm").holds is True


def test_paper_cluster_merges_into_its_four_classes() -> None:
    sc = load_scenario("psdsf_dist/examples/paper_cluster.yaml")
    merged, classes = merge_classes(sc)
    assert merged.server_names == ("A", "B", "C", "D")
    np.testing.assert_allclose(classes.count, [8, 68, 33, 11])
    np.testing.assert_allclose(merged.capacity[2], [33 * 0.5, 33 * 0.25])
    # Table III of the paper: per-class gamma totals
    np.testing.assert_allclose(merged.gamma[0], [80, 340, 82.5, 55])
    np.testing.assert_allclose(merged.gamma[3], [0, 0, 27.5, 27.5])


def test_paper_cluster_table_iv_through_merging() -> None:
    sc = load_scenario("psdsf_dist/examples/paper_cluster.yaml")
    X = allocate_by_class(sc, "psdsf").allocation
    cls = np.array(sc.server_class)
    per_class = np.stack([X[:, cls == c].sum(axis=1) for c in "ABCD"], axis=1)
    table_iv = np.array([[40, 170, 0, 0], [20, 85, 0, 0], [0, 0, 82.5, 0], [0, 0, 0, 27.5]])
    np.testing.assert_allclose(per_class, table_iv, atol=1e-6)


def test_expand_spreads_evenly() -> None:
    sc = load_scenario("psdsf_dist/examples/paper_cluster.yaml")
    _, classes = merge_classes(sc)
    merged_X = np.arange(16, dtype=float).reshape(4, 4)
    X = expand(classes, merged_X)
    assert X.shape == (4, 120)
    np.testing.assert_allclose(X.sum(axis=1), merged_X.sum(axis=1))
    np.testing.assert_allclose(X[:, 0], merged_X[:, 0] / 8)


def test_a_policy_not_known_invariant_is_refused() -> None:
    sc = load_scenario("psdsf_dist/examples/paper_cluster.yaml")
    with pytest.raises(NotClassInvariantError, match="not known to be class-invariant"):
        allocate_by_class(sc, "some-whole-task-policy")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), policy=st.sampled_from(sorted(CLASS_INVARIANT - {"tsf-er"})))
def test_merged_totals_equal_the_full_clusters(seed: int, policy: str) -> None:
    rng = np.random.default_rng(seed)
    sc = random_scenario(rng, K=int(rng.integers(4, 25)), N=int(rng.integers(2, 6)),
                         M=int(rng.integers(1, 4)), classes=int(rng.integers(1, 4)))
    sc = without_external(sc)
    direct = allocate(sc, policy)
    merged = allocate_by_class(sc, policy)
    scale = max(float(direct.totals.max()), 1.0)
    np.testing.assert_allclose(merged.totals, direct.totals, rtol=2e-3, atol=2e-3 * scale)
    if policy in PER_SERVER:
        assert _fits(sc, merged.allocation)
        assert np.all(merged.allocation[~sc.eligible] == 0)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000))
def test_google_mix_merges_to_at_most_ten_servers(seed: int) -> None:
    sc = google_cluster(np.random.default_rng(seed), K=500, N=8, placement_prob=0.5)
    merged, classes = merge_classes(sc)
    assert merged.num_servers <= 10
    assert int(classes.count.sum()) == 500
    np.testing.assert_allclose(merged.capacity.sum(axis=0), sc.capacity.sum(axis=0))
    np.testing.assert_allclose(merged.gamma.sum(axis=1), sc.gamma.sum(axis=1))
    out = allocate_by_class(sc, "drfh")
    assert _fits(sc, out.allocation)
