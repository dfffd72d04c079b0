"""Chunk sizes of a bulk submission's short calls: never more than wait, each chunk within
its time budget once calls are measured, shrinking as the submission's end nears."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from psdsf_dist.admission.chunks import (
    CHUNK_SECONDS,
    GUIDED_FACTOR,
    SMOOTHING,
    CallTimes,
    chunk_full,
    chunk_size,
)
from psdsf_dist.admission.values import LARGE_VALUE_BYTES


@given(st.integers(0, 10_000), st.integers(0, 64),
       st.none() | st.floats(0.0, 10.0, allow_nan=False))
def test_a_chunk_is_within_what_waits_its_time_and_its_guided_share(
        waiting: int, slots: int, per_call: float | None) -> None:
    size = chunk_size(waiting, slots, per_call)
    assert size >= 1
    assert size <= max(waiting, 1)
    if size > 1:
        assert per_call is not None
        assert size * per_call <= CHUNK_SECONDS + 1e-12
        assert size <= math.ceil(waiting / (GUIDED_FACTOR * max(slots, 1)))


def test_chunks_need_a_measurement_and_short_calls() -> None:
    assert chunk_size(1000, 8, None) == 1  # not measured yet: one call to a task
    assert chunk_size(1000, 8, 0.5) == 1  # long calls: one to a task
    assert chunk_size(1000, 8, 1e-5) == math.ceil(1000 / (GUIDED_FACTOR * 8))  # guided
    assert chunk_size(1000, 8, 0.001) == int(CHUNK_SECONDS / 0.001)  # the time budget
    assert chunk_size(10, 8, 1e-5) == 1  # near the end: one each, every slot busy
    assert chunk_size(1000, 8, 0.0) == math.ceil(1000 / (GUIDED_FACTOR * 8))


def test_call_times_follow_the_newest_chunks() -> None:
    times = CallTimes()
    times.measured(0, 1.0)  # nothing measured
    assert times.seconds is None
    times.measured(10, 0.01)
    assert times.seconds == 0.001
    times.measured(2, 0.2)  # calls grew longer: the estimate moves toward them at once
    assert times.seconds == SMOOTHING * 0.1 + (1 - SMOOTHING) * 0.001


def test_a_chunk_is_full_after_its_time_or_a_large_value() -> None:
    assert not chunk_full(0.0, 0)
    assert not chunk_full(CHUNK_SECONDS / 2, LARGE_VALUE_BYTES - 1)
    assert chunk_full(CHUNK_SECONDS, 0)
    assert chunk_full(0.0, LARGE_VALUE_BYTES)
