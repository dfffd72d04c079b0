"""Settings of a distributed run: bad values are refused with a message naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from psdsf_dist.protocol.config import RunConfig


def test_defaults_are_valid() -> None:
    RunConfig().check()
    assert RunConfig().hold == 3


@pytest.mark.parametrize(("field", "value"), [
    ("period", 0.0), ("jitter", 1.0), ("fanout", 0), ("gossip_rate", 0), ("rtol", 0.0),
    ("hold", 0), ("time_scale", float("inf")), ("servers_per_actor", 0), ("ttl_periods", 1.0),
])
def test_bad_values_are_refused(field: str, value: Any) -> None:
    words = field.replace("_periods", "").replace("_", " ")
    with pytest.raises(ValueError, match=words):
        RunConfig(**{field: value}).check()
