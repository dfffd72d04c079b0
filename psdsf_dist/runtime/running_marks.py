"""Which tenants' tasks are running on this node, as Ray sees it: a mark file per task.

A tenant's queue counts a task as running once it has handed it to Ray, but Ray starts it
only when the node has room; while other work (an intruder) holds the node, the task waits
there.  To tell the node's usage by tenants from the usage by anyone else
(:mod:`psdsf_dist.admission.unmanaged`), each tenant task marks itself, in the worker, while
its body runs: an empty file named after its user and its worker's process, in a directory per
Ray node under ``/dev/shm`` (memory; the system's temporary directory where there is none).
The node's server actor counts them (:func:`running_per_user`) without a message per task.  A
mark whose process is gone (a worker killed mid-task) is not counted and is removed.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
from collections import Counter
from pathlib import Path

_SEQ = itertools.count()


def marks_dir(node_id: str) -> Path:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    return base / "psdsf-running" / node_id


def mark_start(node_id: str, user: str) -> Path | None:
    """Mark one running task of ``user`` on node ``node_id``; its path (None: not writable,
    and the task runs unmarked)."""
    directory = marks_dir(node_id)
    path = directory / f"{user.encode().hex()}.{os.getpid()}.{next(_SEQ)}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError:
        return None
    return path


def mark_end(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


def running_per_user(node_id: str) -> Counter[str]:
    """The marked running tasks on node ``node_id``, per user."""
    out: Counter[str] = Counter()
    try:
        entries = list(os.scandir(marks_dir(node_id)))
    except OSError:
        return out
    for entry in entries:
        parts = entry.name.split(".")
        if len(parts) != 3:
            continue
        try:
            user, pid = bytes.fromhex(parts[0]).decode(), int(parts[1])
        except ValueError:
            continue
        if not _alive(pid):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
            continue
        out[user] += 1
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
