"""Checks of scenario-document fields shared by the scenario and its events: each raises
:class:`~psdsf_dist.errors.ScenarioError` naming the field.

Names (of resources, servers, classes, users, labels, and every key of a mapping) must be
printable text in Unicode normal form NFC: no line break, control, zero-width, bidi or other
invisible character and no lone surrogate, so two names that print alike are equal, and every
name prints on one line in every output.  Messages quote a name through :func:`show` (escaped,
at most :data:`SHOWN` characters) and never quote other content of the file."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from psdsf_dist.errors import ScenarioError, one_line
from psdsf_dist.model.limits import LARGEST, SMALLEST

FloatArray = npt.NDArray[np.float64]

USER_KEYS = {
    "name",
    "demand",
    "weight",
    "servers",
    "requires",
    "max_tasks",
    "gamma",
    "external_demand",
    "server_tasks",
    "task_groups",
}


SHOWN = 40
"""The most characters of a name or key an error message quotes."""


def show(value: Any) -> str:
    """A name or key as a message quotes it: ``repr`` of a string with every unprintable
    character escaped, cut to :data:`SHOWN` characters; anything else by its kind alone."""
    if not isinstance(value, str):
        return _kind(value)
    text = one_line(value)
    return repr(text if len(text) <= SHOWN else text[:SHOWN - 3] + "...")


def printable_name(value: str, fld: str, what: str = "name") -> str:
    """Refuse a name (or key) that is empty, not printable or not in NFC (see the module)."""
    if not value.isprintable():
        raise ScenarioError(fld, f"{what} {show(value)} has a character that does not print "
                                 "(a line break, control, zero-width or bidi character)")
    if unicodedata.normalize("NFC", value) != value:
        raise ScenarioError(fld, f"{what} {show(value)} is not in Unicode normal form NFC "
                                 "(write accented letters composed)")
    return value


def _mapping(value: Any, fld: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ScenarioError(fld, f"must be a mapping, got {_kind(value)}")
    for k in value:
        if not isinstance(k, str):
            raise ScenarioError(fld, f"keys must be strings, got {_kind(k)}")
        printable_name(k, fld, "key")
    return value


def _required(obj: Mapping[str, Any], key: str, fld: str) -> Any:
    """``obj[key]``, or the one-line error that ``fld.key`` is missing."""
    if key not in obj:
        raise ScenarioError(f"{fld}.{key}", "missing")
    return obj[key]


def _check_keys(obj: Mapping[str, Any], allowed: set[str], fld: str) -> None:
    """Refuse a key of ``obj`` outside ``allowed``, naming it and the keys allowed."""
    for k in obj:
        if k not in allowed:
            hint = ", ".join(sorted(allowed))
            raise ScenarioError(f"{fld}.{k}" if fld else k, f"unknown key (allowed: {hint})")


def _sequence(value: Any, fld: str) -> Sequence[Any]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ScenarioError(fld, f"must be a list, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _name(value: Any, fld: str) -> str:
    if not isinstance(value, str) or not value.strip():
        got = "an empty string" if isinstance(value, str) else _kind(value)
        raise ScenarioError(fld, f"must be a non-empty string, got {got}")
    return printable_name(value, fld)


def number(value: Any, fld: str, *, positive: bool = False, allow_inf: bool = False) -> float:
    """A non-negative number, 0 or within ``[SMALLEST, LARGEST]`` (:mod:`.limits`: so no ratio
    the mechanism forms overflows or underflows), or +inf when allowed; booleans are not
    numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScenarioError(fld, f"must be a number, got {_kind(value)}")
    try:
        x = float(value)
    except OverflowError:  # an integer beyond what a float holds
        raise ScenarioError(fld, f"must be at most {LARGEST:g}, got an integer of "
                                 f"{len(str(abs(value)))} digits") from None
    if math.isnan(x):
        raise ScenarioError(fld, "must be a number, got NaN")
    if math.isinf(x) and not (allow_inf and x > 0):
        raise ScenarioError(fld, f"must be finite, got {x}")
    if x < 0:
        raise ScenarioError(fld, f"must be >= 0, got {value}")
    if positive and x == 0:
        raise ScenarioError(fld, "must be > 0, got 0")
    if LARGEST < x < math.inf:
        raise ScenarioError(fld, f"must be at most {LARGEST:g}, got {x:g} (rescale the unit)")
    if 0 < x < SMALLEST:
        least = "at least" if positive else "0 or at least"
        raise ScenarioError(fld, f"must be {least} {SMALLEST:g}, got {x:g} (rescale the unit)")
    return x


def resource_vector(value: Any, resources: Sequence[str], fld: str) -> FloatArray:
    """A ``{resource: amount}`` mapping as a dense vector; left-out resources are 0."""
    m = _mapping(value, fld)
    out = np.zeros(len(resources))
    index = {r: j for j, r in enumerate(resources)}
    for k, v in m.items():
        if k not in index:
            declared = ", ".join(resources)
            raise ScenarioError(f"{fld}.{k}", f"unknown resource (declared: {declared})")
        out[index[k]] = number(v, f"{fld}.{k}")
    return out


def _label(value: Any, fld: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return printable_name(value, fld, "label")
    if isinstance(value, int | float):
        return str(value)
    raise ScenarioError(fld, f"label values must be strings, got {_kind(value)}")
