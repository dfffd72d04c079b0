"""Defaults shared by several layers, each stated once here and derived everywhere else."""

from __future__ import annotations

from psdsf_dist.model.scenario import Mode

DEFAULT_SEED = 0
"""Seed of every random choice when none is given: the protocol's jitter, peers and losses
(:class:`~psdsf_dist.protocol.config.ProtocolConfig`), ``rrr-psdsf``'s server draws, the
misreports of the property probes and a replayed trace's placement and durations."""

DEFAULT_MODE: Mode = "rdm"
"""Divisible resources unless time-shared servers (``tdm``) are asked for."""
