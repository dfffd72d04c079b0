"""Allocation policies: PS-DSF and the baselines it is compared against."""

from psdsf_dist.policies.registry import (
    DESCRIPTIONS,
    POLICIES,
    Allocation,
    UnknownPolicyError,
    allocate,
    models_external,
    policy_view,
    without_external,
)

__all__ = [
    "DESCRIPTIONS",
    "POLICIES",
    "Allocation",
    "UnknownPolicyError",
    "allocate",
    "models_external",
    "policy_view",
    "without_external",
]
