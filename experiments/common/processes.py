"""Independent runs of an experiment shared among processes, one per core.

Each item is run by ``fn`` in a forked worker (module-level functions and their partials
pickle; the workers inherit what the parent imported); results come back as runs end, so a
caller keys them by what each result carries, not by arrival order.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def cores() -> int:
    """The processes to use: one per core of the machine."""
    return os.cpu_count() or 1


def run_parallel(fn: Callable[[T], R], items: Sequence[T], workers: int | None = None
                 ) -> Iterator[R]:
    """``fn`` over ``items``, ``workers`` processes at a time (default :func:`cores`), in
    the order the runs end; put the longest items first so that none is left alone at the
    end."""
    n = min(workers or cores(), max(len(items), 1))
    if n <= 1:
        yield from map(fn, items)
        return
    with multiprocessing.get_context("fork").Pool(n) as pool:
        yield from pool.imap_unordered(fn, items)


__all__ = ["cores", "run_parallel"]
