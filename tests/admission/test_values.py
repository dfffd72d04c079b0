"""Sizes of values known without serializing them; the line between small and large."""

from __future__ import annotations

import numpy as np

from psdsf_dist.admission.values import LARGE_VALUE_BYTES, is_large, known_bytes


def test_sizes_known_at_once_and_others_small() -> None:
    assert known_bytes(np.ones(10)) == 80
    assert known_bytes(b"abc") == 3 and known_bytes(bytearray(5)) == 5
    assert known_bytes(memoryview(bytes(32))) == 32 and known_bytes("hé") == 2
    assert known_bytes((1, np.ones(10), b"ab")) == 82 and known_bytes({"a": "xyz"}) == 3
    assert known_bytes([[np.ones(10**6)]]) == 0  # one level only
    assert known_bytes(3) == 0 and known_bytes(None) == 0
    assert is_large(np.zeros(LARGE_VALUE_BYTES, dtype=np.uint8))
    assert not is_large(np.zeros(LARGE_VALUE_BYTES - 1, dtype=np.uint8))
