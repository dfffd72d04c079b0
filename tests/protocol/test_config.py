"""The protocol's settings, and the drivers' own: defaults valid, bad values refused by name."""

from __future__ import annotations

from typing import Any

import pytest

from psdsf_dist.protocol.config import (
    CONVERGENCE_RTOL,
    DEFAULT_HOLD,
    TOMBSTONE_PERIODS,
    TTL_PERIODS,
    ProtocolConfig,
)
from psdsf_dist.protocol.update_rule import DEFAULT_RULE, ClassRule
from psdsf_dist.runtime.settings import RunConfig
from psdsf_dist.simulator.simulation import SimConfig


def test_defaults_are_valid_and_shared_by_both_drivers() -> None:
    p = ProtocolConfig()
    p.check()
    RunConfig().check()
    SimConfig().check()
    assert RunConfig().protocol == SimConfig().protocol == p
    assert (p.fanout, p.gossip_rate, p.jitter, p.hold, p.rtol) == (4, 4, 0.2, DEFAULT_HOLD,
                                                                  CONVERGENCE_RTOL)
    assert p.rule == DEFAULT_RULE and isinstance(p.make_rule(), ClassRule)
    assert not p.lockstep and ProtocolConfig(jitter=0.0).lockstep


def test_times_scale_with_the_period() -> None:
    p = ProtocolConfig(period=0.5)
    assert p.ttl == TTL_PERIODS * 0.5 and p.tombstone_ttl == TOMBSTONE_PERIODS * 0.5
    run = RunConfig(protocol=p, rpc_timeout_periods=3.0)
    assert run.period == 0.5 and run.rpc_timeout == 1.5


@pytest.mark.parametrize(("field", "value"), [
    ("period", 0.0), ("period", float("nan")), ("jitter", 1.0), ("jitter", -0.1),
    ("delay", -1.0), ("loss", 1.0), ("fanout", 0), ("gossip_rate", 0), ("mode", "xdm"),
    ("rtol", 0.0), ("hold", 0), ("ttl_periods", 1.0),
])
def test_bad_protocol_values_are_refused(field: str, value: Any) -> None:
    words = field.replace("_periods", "").replace("_", " ")
    with pytest.raises(ValueError, match=words):
        ProtocolConfig(**{field: value}).check()
    with pytest.raises(ValueError, match=words):
        RunConfig(protocol=ProtocolConfig(**{field: value})).check()
    with pytest.raises(ValueError, match=words):
        SimConfig(protocol=ProtocolConfig(**{field: value})).check()


def test_bad_rules_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown update rule"):
        ProtocolConfig(rule="newton").check()
    with pytest.raises(ValueError, match="damping"):
        ProtocolConfig(rule="damped", rule_params=(("a", 2.0),)).check()


@pytest.mark.parametrize(("field", "value"), [
    ("time_scale", float("inf")), ("servers_per_actor", 0), ("clock", "sundial"),
])
def test_bad_run_values_are_refused(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field.replace("_", " ")):
        RunConfig(**{field: value}).check()


def test_bad_simulation_values_are_refused() -> None:
    with pytest.raises(ValueError, match="rounds"):
        SimConfig(rounds=0).check()
