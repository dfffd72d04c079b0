"""Names of a run's Ray actors (pure): how a restarted coordinator finds its servers, and how a
new run of the same name finds the leftovers of a dead one.

Every actor of a run is named after the run's name (``psdsf-<name>-...``, in the ``psdsf``
namespace), so allocators with different names share one Ray cluster without meeting.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypedDict

from psdsf_dist.errors import PsdsfError

NAMESPACE = "psdsf"
DEFAULT_RUN_ID = "default"
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A run's name: letters, digits, ``.``, ``_``, ``-`` (first a letter or digit), at most 64."""


class RunNameError(PsdsfError, ValueError):
    """A run name that cannot name a run's actors (one line)."""


class NamedActor(TypedDict):
    """An entry of Ray's named actors (``ray.util.list_named_actors(all_namespaces=True)``)."""

    name: str
    namespace: str


def check_run_name(name: object) -> str:
    """``name`` if it can name a run (:data:`RUN_NAME`), else :class:`RunNameError`."""
    if not isinstance(name, str) or RUN_NAME.fullmatch(name) is None:
        raise RunNameError(f"run name: expected 1-64 letters, digits, '.', '_' or '-' "
                           f"(first a letter or digit), got {name!r}")
    return name


def coordinator_name(run_id: str) -> str:
    return f"psdsf-{run_id}-coordinator"


def server_prefix(run_id: str) -> str:
    return f"psdsf-{run_id}-server-"


def server_actor_name(run_id: str, server: str) -> str:
    return server_prefix(run_id) + server


def server_from_actor_name(run_id: str, actor: str) -> str | None:
    prefix = server_prefix(run_id)
    return actor[len(prefix):] if actor.startswith(prefix) else None


def run_actor_names(run_id: str, named: Sequence[NamedActor]) -> list[str]:
    """The actors of run ``run_id`` among Ray's named actors ``named`` (entries of
    ``ray.util.list_named_actors(all_namespaces=True)``): its coordinator and its servers."""
    return [e["name"] for e in named
            if e.get("namespace") == NAMESPACE
            and (e["name"] == coordinator_name(run_id)
                 or server_from_actor_name(run_id, e["name"]) is not None)]


def actor_key(handle: object) -> str:
    """A key naming the actor behind a handle (two handles on one actor share it)."""
    actor_id = getattr(handle, "_actor_id", None)
    return actor_id.hex() if actor_id is not None else str(id(handle))
