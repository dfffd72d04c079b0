"""The benchmarks' private Ray cluster (experiments/common/ray_cluster.py).  Starting one is
exercised by the multi-node runtime tests, which use it through ``tests.conftest.ray_cluster``;
here, what is checked before anything starts."""

from __future__ import annotations

import pytest

from experiments.common.ray_cluster import local_cluster


def test_a_cluster_needs_its_head_node() -> None:
    with pytest.raises(ValueError, match="head node"), local_cluster():
        pass
