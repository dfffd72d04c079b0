"""How many of a bulk submission's calls run in one Ray task (pure).

A tenant's ``map`` launches its calls into the slots delegated to its client
(:mod:`psdsf_dist.admission.direct_slots`), never more at once than the slots it holds.  A
slot then runs one Ray task after another, and each costs a round of Ray's own work between
two tasks — the task's end reaching its owner, the owner's next submission, a worker lease
from the raylet (Ray hands the lease back when its owner has no task of that kind waiting) —
a few milliseconds here, whatever the task does.  Plain Ray pays that round only once per
worker: its owner queues every task at once and pushes the next one the moment a worker
frees.  For calls much shorter than that round, a slot would mostly wait on Ray.

So a bulk submission's short calls run several to one Ray task, a *chunk* (the
``chunksize`` of ``multiprocessing.Pool.map`` and Ray's ``ray.util.multiprocessing``), sized
by two rules:

* **Short chunks.**  A chunk holds its slot for about :data:`CHUNK_SECONDS` of its calls' own
  run time, so a slot the allocator revokes is back within that, and each value reaches its
  caller that soon after it was computed.  The client sizes a chunk by the calls' measured
  run time (:class:`CallTimes`: calls longer than that run one to a task; a function runs one
  call to a task until a first call has been measured), and the worker ends a chunk early
  (:func:`chunk_full`) once its calls have run that long — or have made a large value
  (:mod:`~psdsf_dist.admission.values`: large values travel one to a task) — whatever the
  estimate said; the calls it did not run go back to wait, first in line.
* **Guided self-scheduling** (Polychronopoulos and Kuck, 1987): a chunk takes at most
  ``ceil(waiting / (GUIDED_FACTOR * slots))`` of the calls still waiting, so chunks shrink as
  the submission's end nears and every slot stays busy to the last calls, instead of one slot
  running a long last chunk while the others idle.

A chunk is, for the allocator, as many tasks as it ran calls: each is counted launched and
ended (:meth:`~psdsf_dist.admission.direct_slots.DirectSlots.ended`), with its share of the
chunk's time.  A chunk is one Ray task: Ray's retry after a system failure runs all its calls
again, those that had finished too (a retried task runs again from its start too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from psdsf_dist.admission.values import LARGE_VALUE_BYTES

CHUNK_SECONDS = 0.02
"""The longest run of calls (their own run time, seconds) one chunk holds its slot for."""

GUIDED_FACTOR = 2
"""A chunk takes at most the waiting calls over this many times the slots held."""

SMOOTHING = 0.5
"""Weight of the newest chunk in :attr:`CallTimes.seconds` (an exponential moving average,
so a function whose calls grow longer runs in smaller chunks within a few chunks)."""


@dataclass
class CallTimes:
    """A function's measured run time per call (seconds; None until a first call ended)."""

    seconds: float | None = None

    def measured(self, calls: int, seconds: float) -> None:
        """A chunk of ``calls`` calls ran ``seconds`` in all (its worker's own clock)."""
        if calls <= 0:
            return
        per_call = max(seconds, 0.0) / calls
        self.seconds = per_call if self.seconds is None else (
            SMOOTHING * per_call + (1.0 - SMOOTHING) * self.seconds)


def chunk_full(seconds: float, value_bytes: int) -> bool:
    """Whether a chunk whose calls so far ran ``seconds`` and made values of ``value_bytes``
    (:func:`~psdsf_dist.admission.values.known_bytes`) stops before its next call."""
    return seconds >= CHUNK_SECONDS or value_bytes >= LARGE_VALUE_BYTES


def chunk_size(waiting: int, slots: int, per_call: float | None) -> int:
    """How many of ``waiting`` calls (>= 1 of them) the next chunk runs, with ``slots`` slots
    held and calls measured at ``per_call`` seconds each (module docstring)."""
    if waiting <= 1 or per_call is None:
        return 1
    guided = math.ceil(waiting / (GUIDED_FACTOR * max(slots, 1)))
    short = int(CHUNK_SECONDS / per_call) if per_call > 0.0 else waiting
    return max(1, min(waiting, guided, short))


__all__ = ["CHUNK_SECONDS", "GUIDED_FACTOR", "SMOOTHING", "CallTimes", "chunk_full",
           "chunk_size"]
