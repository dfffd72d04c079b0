"""Shared test set-up: a reproducible hypothesis profile, the paper's example scenarios, and one
local Ray session (2 CPUs) for every test that needs Ray.

Tests marked ``multinode`` (``ray.cluster_utils.Cluster``) shut the shared session down and start
their own cluster, so they are moved to the end of the run.

The suite runs on two pytest-xdist workers with ``--dist loadgroup`` (``scripts/test.sh``): every
test of a module that uses Ray is put in one group, ``ray``, so that those tests run in one worker,
one after another, on one Ray session as they would alone, while the other worker runs the tests
that need no Ray (most of them CPU-bound).  Without xdist the group is inert; the ``ray`` marker
it comes with lets ``scripts/test.sh --quick`` leave those modules out.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, settings

from psdsf_dist.model.scenario import Scenario, load_scenario

# Derandomised so that CI sees the same examples every run; modest counts keep the suite fast.
settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
# A long randomised hunt for counterexamples: PSDSF_HYPOTHESIS_PROFILE=deep pytest tests/...
settings.register_profile(
    "deep",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(os.environ.get("PSDSF_HYPOTHESIS_PROFILE", "ci"))

EXAMPLES = Path(__file__).resolve().parent.parent / "psdsf_dist" / "examples"
SMALL_CLUSTER = Path(__file__).resolve().parent / "small_cluster.yaml"


def example_path(name: str) -> Path:
    return EXAMPLES / f"{name}.yaml"


def example_scenario(name: str) -> Scenario:
    """A scenario of ``psdsf_dist/examples`` by name."""
    return load_scenario(str(example_path(name)))


@pytest.fixture(scope="session")
def fig1() -> Scenario:
    return load_scenario(example_path("paper_fig1"))


@pytest.fixture(scope="session")
def fig2() -> Scenario:
    return load_scenario(example_path("paper_fig2"))


@pytest.fixture(scope="session")
def cluster() -> Scenario:
    return load_scenario(example_path("paper_cluster"))


WriteScenario = Callable[..., Path]


@pytest.fixture
def write_scenario(tmp_path: Path) -> WriteScenario:
    """Write a scenario document (or raw text) to tmp_path as YAML or JSON; returns the path."""

    def write(doc: Any, fmt: str = "yaml", name: str = "scenario") -> Path:
        path = tmp_path / f"{name}.{fmt}"
        if isinstance(doc, str):
            path.write_text(doc, encoding="utf-8")
        elif fmt == "json":
            path.write_text(json.dumps(doc), encoding="utf-8")
        else:
            path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        return path

    return write


@contextmanager
def ray_cluster(head: dict[str, Any], *nodes: dict[str, Any]) -> Iterator[Any]:
    """A local multi-node Ray cluster this process is connected to, in place of the shared
    session (:func:`experiments.common.ray_cluster.local_cluster`, the benchmarks' one)."""
    import ray

    from experiments.common.ray_cluster import local_cluster

    ray.shutdown()  # the shared single-node session, if any
    with local_cluster(head, *nodes) as c:
        yield c


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "multinode: starts its own multi-node Ray cluster")
    config.addinivalue_line("markers", "ray: in a module that uses Ray (set at collection)")


RAY_MARKS = ("import ray", "ray_session", "ray_cluster(")


def _uses_ray(path: Path, seen: dict[Path, bool]) -> bool:
    """Whether a test module starts or joins Ray (imports it, or uses the session or cluster
    fixtures); read once per module."""
    if path not in seen:
        text = path.read_text(encoding="utf-8")
        seen[path] = any(mark in text for mark in RAY_MARKS)
    return seen[path]


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seen: dict[Path, bool] = {}
    for item in items:
        if _uses_ray(item.path, seen):
            item.add_marker(pytest.mark.ray)
            item.add_marker(pytest.mark.xdist_group("ray"))
    items.sort(key=lambda item: item.get_closest_marker("multinode") is not None)


def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """Under ``--dist loadgroup`` every test of a Ray module must carry its group in its id
    (xdist adds it on the worker): otherwise both workers would run Ray modules, two
    multi-node clusters at once, and the runtime tests would time out.  A pytest /
    pytest-xdist pair that loses the groups is refused at collection, not found out by
    flaky timeouts."""
    if node.config.getvalue("dist") != "loadgroup":
        return
    seen: dict[Path, bool] = {}
    root = node.config.rootpath
    for test_id in ids:
        if _uses_ray(root / test_id.split("::")[0], seen) and not test_id.endswith("@ray"):
            raise pytest.UsageError(
                f"--dist loadgroup: {test_id} lost its xdist group (this pytest-xdist does "
                "not support this pytest: see the pin in pyproject.toml)")


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    import ray  # here: most tests need no Ray

    if not ray.is_initialized():
        # "local": a session of its own, even when a cluster started on this machine (e.g. a
        # multinode test run elsewhere) would otherwise be joined
        ray.init(address="local", num_cpus=2, namespace="psdsf", include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture
def small_cluster() -> Path:
    return SMALL_CLUSTER
