"""Names of a run's Ray actors (pure): how a restarted coordinator finds its servers."""

from __future__ import annotations

from typing import Any

NAMESPACE = "psdsf"
DEFAULT_RUN_ID = "default"


def coordinator_name(run_id: str) -> str:
    return f"psdsf-{run_id}-coordinator"


def server_prefix(run_id: str) -> str:
    return f"psdsf-{run_id}-server-"


def server_actor_name(run_id: str, server: str) -> str:
    return server_prefix(run_id) + server


def server_from_actor_name(run_id: str, actor: str) -> str | None:
    prefix = server_prefix(run_id)
    return actor[len(prefix):] if actor.startswith(prefix) else None


def actor_key(handle: Any) -> str:
    """A key naming the actor behind a handle (two handles on one actor share it)."""
    actor_id = getattr(handle, "_actor_id", None)
    return actor_id.hex() if actor_id is not None else str(id(handle))
