"""How large a task's argument or value is, where Python can tell at once (pure).

Ray sends an argument under ~100 KiB inline with the task and puts a larger one in the object
store; a large value costs a copy wherever it travels.  The tenants' paths follow the same
line: an argument this large goes to the object store once, from the caller, and a queue only
passes its ref on (:func:`~psdsf_dist.runtime.tenant_function.by_reference`); a bulk
submission's call with such an argument or value runs alone, not in a chunk
(:mod:`~psdsf_dist.admission.chunks`), so a chunk never gathers many large values into one.
Only the sizes known without serializing are counted — numpy arrays, bytes-like objects and
strings, alone or as the items of a tuple, list or dict; other values count as small.
"""

from __future__ import annotations

from typing import Any

import numpy as np

LARGE_VALUE_BYTES = 100 * 1024
"""A value this large travels by reference, and alone."""


def known_bytes(value: Any) -> int:
    """``value``'s size in bytes if it is a numpy array, bytes-like or a string, and the sum
    of its items' sizes if it is a tuple, list or dict of those (one level: a task's several
    results, a record); else 0."""
    if isinstance(value, tuple | list):
        return sum(_flat_bytes(item) for item in value)
    if isinstance(value, dict):
        return sum(_flat_bytes(item) for item in value.values())
    return _flat_bytes(value)


def _flat_bytes(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, bytes | bytearray | str):
        return len(value)
    if isinstance(value, memoryview):
        return value.nbytes
    return 0


def is_large(value: Any) -> bool:
    """Whether ``value`` is known to be at least :data:`LARGE_VALUE_BYTES`."""
    return known_bytes(value) >= LARGE_VALUE_BYTES


__all__ = ["LARGE_VALUE_BYTES", "is_large", "known_bytes"]
