"""Runtime tests share one local Ray session (2 CPUs); multi-node tests run last, on their own.

The modules marked ``multinode`` (``ray.cluster_utils.Cluster``) shut the shared session down
and start their own cluster, so they are moved to the end of the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

SMALL = Path(__file__).resolve().parent / "small_cluster.yaml"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "multinode: starts its own multi-node Ray cluster")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("multinode") is not None)


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    if not ray.is_initialized():
        ray.init(num_cpus=2, namespace="psdsf", include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture
def small_cluster() -> Path:
    return SMALL
