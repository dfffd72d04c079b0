"""Scalar summaries of an allocation used by ``compare``: task shares and Jain's index."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from psdsf_dist.model.scenario import Scenario

FloatArray = npt.NDArray[np.float64]


def task_shares(scenario: Scenario, totals: FloatArray) -> FloatArray:
    """N: ``x[n] / (phi[n] * sum_i gamma[n, i])``, the weight-normalised task share.

    ``sum_i gamma[n, i]`` is what user n could run with every server eligible for it to itself,
    so the share is comparable across users whatever their task sizes; a user eligible nowhere
    has share 0.
    """
    alone = scenario.gamma.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(alone > 0, totals / (scenario.weight * alone), 0.0)
    return np.asarray(share)


def jain_index(values: FloatArray) -> float:
    """Jain's fairness index ``(sum v)^2 / (n sum v^2)``: 1 when all equal, 1/n at worst.

    All-zero input counts as perfectly equal (1.0).
    """
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return 1.0
    square_sum = float(np.sum(v * v))
    if square_sum <= 0.0:
        return 1.0
    return float(np.sum(v) ** 2 / (v.size * square_sum))
