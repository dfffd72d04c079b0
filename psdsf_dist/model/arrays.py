"""Array functions every part of the model shares: the demand-based ``gamma``, read-only copies,
and the first repeated name of a list."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def demand_gamma(capacity: FloatArray, demand: FloatArray) -> FloatArray:
    """N x K: min over demanded resources of C[i, r] / D[n, r] (0 if a demanded one is missing)."""
    d = demand[:, None, :]  # N x 1 x M
    c = capacity[None, :, :]  # 1 x K x M
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(d > 0, c / d, np.inf)
    g = ratio.min(axis=2)
    g[~np.isfinite(g)] = 0.0
    return np.asarray(g, dtype=float)


def frozen(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A read-only copy: a scenario's arrays never change once built."""
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


def first_duplicate(items: Sequence[str]) -> str | None:
    """The first item of ``items`` seen before in it, or None."""
    seen: set[str] = set()
    for it in items:
        if it in seen:
            return it
        seen.add(it)
    return None
