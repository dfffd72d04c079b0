"""The transport's decisions: seeded losses, the same in every driver."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.node import server_seed
from psdsf_dist.protocol.transport import TRANSPORT_STREAM, Transport


@given(seed=st.integers(0, 2**32), loss=st.floats(0.01, 0.99))
def test_losses_follow_the_transport_stream_of_the_seed(seed: int, loss: float) -> None:
    transport = Transport(ProtocolConfig(seed=seed, loss=loss))
    rng = np.random.default_rng(server_seed(seed, TRANSPORT_STREAM, 0))
    assert [transport.lost() for _ in range(50)] == [bool(rng.random() < loss) for _ in range(50)]


def test_without_loss_nothing_is_lost_and_the_delay_is_the_configs() -> None:
    transport = Transport(ProtocolConfig(delay=0.25))
    assert not any(transport.lost() for _ in range(1000)) and transport.delay == 0.25
    lossy = Transport(ProtocolConfig(loss=0.5, seed=3))
    assert 400 < sum(lossy.lost() for _ in range(1000)) < 600
