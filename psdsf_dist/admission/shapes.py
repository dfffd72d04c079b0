"""A task's resource shape, in Ray's terms and in the scenario's (pure).

A tenant submits Ray remote functions with Ray's options (``num_cpus``, ``num_gpus``,
``memory`` in bytes, ``resources``); the allocator shares the resources a ``servers: from-ray``
scenario lists, named as Ray names them (``CPU``, ``memory`` in GiB, ``GPU``, custom names; see
:mod:`psdsf_dist.runtime.from_ray`).  :func:`task_shape` checks the options and
:meth:`TaskShape.demand` gives the per-task demand vector PS-DSF allocates with.

One shape per user: a user's per-task demand is what PS-DSF shares by, and one user with two
shapes has no single dominant share.  A second shape is refused (:class:`ShapeError`) with the
advice to connect as a second user; so is a shape asking for a resource the allocator does not
share (its use could not be bounded), a shape asking for nothing (PS-DSF would give it
unboundedly many tasks), and a shape no server can hold one task of.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from psdsf_dist.errors import PsdsfError

FloatArray = npt.NDArray[np.float64]

GIB = float(2**30)
DEFAULT_NUM_CPUS = 1.0
"""Ray's default for a task that names no resources."""
SHAPE_OPTIONS = ("num_cpus", "num_gpus", "memory", "resources")
PASSED_OPTIONS = ("name", "runtime_env", "max_calls")
"""Ray options passed through to the task unchanged."""
OWN_OPTIONS = ("max_retries", "num_returns", "preemptible")
"""``max_retries``: how often a task lost to a node or worker failure is run again (ours: Ray's
own retries would re-run it on the same, dead node); ``num_returns``: how many ObjectRefs a
call returns (a whole number >= 1, as in Ray); ``preemptible``: the allocator may stop the
task to make room for a user below its share and run it again later from the start
(:mod:`psdsf_dist.admission.preemption`; default False)."""
DEFAULT_MAX_RETRIES = 3
UNSUPPORTED = {
    "scheduling_strategy": "placement is the allocator's",
    "placement_group": "placement is the allocator's",
    "label_selector": "placement is the allocator's",
    "accelerator_type": "placement is the allocator's; ask for the resource itself",
    "retry_exceptions": "a task's own exception is its result",
    "_generator_backpressure_num_objects": "generators are not supported",
}
"""Ray task options a tenant's task refuses, and why (the rest of Ray's unknown options are
refused too, naming the options it takes)."""


class ShapeError(PsdsfError, ValueError):
    """A submission the allocator cannot take: one line naming the option."""


@dataclass(frozen=True)
class OwnOptions:
    """A task's :data:`OWN_OPTIONS`, checked (:func:`check_options`)."""

    max_retries: int = DEFAULT_MAX_RETRIES
    num_returns: int = 1
    preemptible: bool = False


@dataclass(frozen=True)
class TaskShape:
    """Resources one task holds while it runs, by Ray resource name (memory in GiB)."""

    amounts: tuple[tuple[str, float], ...]
    """Sorted (resource, amount) pairs with amount > 0."""

    def as_dict(self) -> dict[str, float]:
        return dict(self.amounts)

    def demand(self, resources: Sequence[str]) -> FloatArray:
        """The per-task demand vector over the scenario's ``resources``."""
        have = self.as_dict()
        unshared = sorted(set(have) - set(resources))
        if unshared:
            raise ShapeError(f"resources: {', '.join(unshared)} not shared by the allocator "
                             f"(it shares {', '.join(resources)})")
        return np.array([have.get(r, 0.0) for r in resources])

    def ray_options(self) -> dict[str, Any]:
        """The options that make Ray reserve this shape for the task."""
        have = self.as_dict()
        custom = {r: v for r, v in have.items() if r not in ("CPU", "GPU", "memory")}
        out: dict[str, Any] = {"num_cpus": have.get("CPU", 0.0), "num_gpus": have.get("GPU", 0.0)}
        if "memory" in have:
            out["memory"] = round(have["memory"] * GIB)
        if custom:
            out["resources"] = custom
        return out

    def describe(self) -> str:
        return "{" + ", ".join(f"{r}: {v:g}" for r, v in self.amounts) + "}"


def task_shape(options: Mapping[str, Any]) -> TaskShape:
    """The shape of Ray task ``options`` (only :data:`SHAPE_OPTIONS` count; see
    :func:`check_options` for the rest)."""
    amounts: dict[str, float] = {}
    cpus = options.get("num_cpus")
    amounts["CPU"] = _amount("num_cpus", DEFAULT_NUM_CPUS if cpus is None else cpus)
    amounts["GPU"] = _amount("num_gpus", options.get("num_gpus") or 0.0)
    amounts["memory"] = _amount("memory", options.get("memory") or 0.0) / GIB
    custom = options.get("resources") or {}
    if not isinstance(custom, Mapping):
        raise ShapeError(f"resources: expected a mapping of name to amount, got {custom!r}")
    for name, value in custom.items():
        if name in ("CPU", "GPU", "memory"):
            raise ShapeError(f"resources.{name}: use num_cpus / num_gpus / memory")
        amounts[str(name)] = _amount(f"resources.{name}", value)
    kept = tuple(sorted((r, v) for r, v in amounts.items() if v > 0))
    if not kept:
        raise ShapeError("num_cpus: a task asking for no resource cannot be allocated "
                         "(give it a share of something, e.g. num_cpus=0.01)")
    return TaskShape(kept)


ACTOR_PASSED_OPTIONS = ("runtime_env", "max_concurrency")
"""Ray actor options passed through to a tenant's actor unchanged."""


def check_actor_options(options: Mapping[str, Any]) -> None:
    """Refuse actor options the allocator does not take (placement and lifetime are its: the
    tenant's queue owns the actor)."""
    known = (*SHAPE_OPTIONS, *ACTOR_PASSED_OPTIONS)
    for key in options:
        if key not in known:
            raise ShapeError(f"{key}: not an option of a tenant's actor (options: "
                             f"{', '.join(known)}; placement and lifetime are the "
                             "allocator's)")


def check_options(options: Mapping[str, Any]) -> OwnOptions:
    """Refuse options the allocator does not take (it places tasks itself); the task's own
    options."""
    known = (*SHAPE_OPTIONS, *PASSED_OPTIONS, *OWN_OPTIONS)
    for key in options:
        if key not in known:
            why = UNSUPPORTED.get(key, "placement is the allocator's")
            raise ShapeError(f"{key}: not an option of a tenant's task ({why}; options: "
                             f"{', '.join(known)})")
    retries = options.get("max_retries", DEFAULT_MAX_RETRIES)
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise ShapeError(f"max_retries: expected an integer >= 0, got {retries!r}")
    preemptible = options.get("preemptible", False)
    if not isinstance(preemptible, bool):
        raise ShapeError(f"preemptible: expected True or False, got {preemptible!r}")
    returns = options.get("num_returns", 1)
    if returns in ("streaming", "dynamic"):
        raise ShapeError(f"num_returns: {returns!r}: generators are not supported for a "
                         "tenant's task (return a list, or use num_returns=k)")
    if not isinstance(returns, int) or isinstance(returns, bool) or returns < 1:
        raise ShapeError(f"num_returns: expected an integer >= 1, got {returns!r}")
    return OwnOptions(retries, returns, preemptible)


def check_user(user: Any) -> str:
    """A tenant's user name: a non-blank string of printable characters (it names the user in
    the allocation, the metrics and every error)."""
    if not isinstance(user, str) or not user.strip() or not user.isprintable():
        raise ShapeError(f"user: expected a non-blank name of printable characters, got {user!r}")
    return user


def check_weight(weight: Any) -> float | None:
    """A tenant's weight: None (the cluster's configuration decides) or a finite number > 0."""
    if weight is None:
        return None
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) \
            or not math.isfinite(weight) or not weight > 0:
        raise ShapeError(f"weight: expected a finite number > 0, got {weight!r}")
    return float(weight)


def check_fits_somewhere(shape: TaskShape, resources: Sequence[str], capacity: FloatArray,
                         names: Sequence[str]) -> None:
    """Refuse a shape no server can hold one task of (``capacity``: K x M)."""
    need = shape.demand(resources)
    if capacity.size and np.any(np.all(capacity >= need - 1e-12, axis=1)):
        return
    largest = ", ".join(f"{r} {float(np.max(capacity[:, j])) if capacity.size else 0.0:g}"
                        for j, r in enumerate(resources) if need[j] > 0)
    raise ShapeError(f"shape {shape.describe()}: no node of the {len(names)} can hold one task "
                     f"(largest: {largest})")


def _amount(option: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ShapeError(f"{option}: expected a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise ShapeError(f"{option}: expected a finite number >= 0, got {value!r}")
    return v
