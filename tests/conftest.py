"""Shared test set-up: a reproducible hypothesis profile and the paper's example scenarios."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, settings

from psdsf_dist.scenario import Scenario, load_scenario

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


def example_path(name: str) -> Path:
    return EXAMPLES / f"{name}.yaml"


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
