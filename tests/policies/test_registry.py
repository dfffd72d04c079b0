"""The policy registry: one entry per policy, names that cannot collide, docs that agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from psdsf_dist.cli.common import policies_epilog
from psdsf_dist.policies.amf import AMF_POLICIES
from psdsf_dist.policies.registry import (
    DESCRIPTIONS,
    EXTERNAL_POLICIES,
    POLICIES,
    REGISTRY,
    DuplicatePolicyError,
    Policy,
    UnknownPolicyError,
    describe,
    lookup,
    register,
    with_registry,
)
from psdsf_dist.policies.whole_task_policies import SEEDED_POLICIES, WHOLE_TASK_POLICIES

DOC = Path(__file__).resolve().parents[2] / "docs" / "policies.md"


def test_a_name_registered_twice_is_refused() -> None:
    before = dict(REGISTRY)
    entry = REGISTRY["drf"]
    with pytest.raises(DuplicatePolicyError, match="'drf' is already registered"):
        register(Policy("drf", "another DRF", entry.function))
    assert dict(REGISTRY) == before  # the first entry stays


def test_unknown_names_are_refused_with_the_choices() -> None:
    with pytest.raises(UnknownPolicyError,
                       match=r"unknown policy 'nope' \(choose from psdsf, drf,"):
        lookup("nope")


def test_capabilities_match_the_families_the_modules_define() -> None:
    assert POLICIES == tuple(REGISTRY) and len(set(POLICIES)) == len(POLICIES)
    assert tuple(p for p in POLICIES if REGISTRY[p].whole) == WHOLE_TASK_POLICIES
    assert tuple(p for p in POLICIES if REGISTRY[p].seeded) == SEEDED_POLICIES
    assert tuple(p for p in POLICIES if REGISTRY[p].task_groups) == AMF_POLICIES
    assert EXTERNAL_POLICIES == ("tsf-er", "drf-alpha-er", "tsf-alpha-er", "drf-er", "mnw", "cru")
    assert [p for p in POLICIES if REGISTRY[p].pooled] == ["drf"]
    assert [p for p in POLICIES if REGISTRY[p].certified] == ["psdsf"]
    assert all(DESCRIPTIONS[p] == describe(p) and describe(p) for p in POLICIES)


def test_docs_and_help_list_the_registry() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert with_registry(text) == text, ("docs/policies.md differs from the registry: run "
                                         "python -m psdsf_dist.policies docs/policies.md")
    for name in POLICIES:
        assert f"| `{name}` | {describe(name)} |" in text
    epilog = policies_epilog()
    assert all(f"{name} " in epilog and describe(name) in epilog for name in POLICIES)


def test_a_document_without_the_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="markers"):
        with_registry("# no table here\n")
