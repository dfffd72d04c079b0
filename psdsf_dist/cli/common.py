"""What every command shares: loading a scenario with one-line errors, writing output safely."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

from psdsf_dist.errors import PsdsfError, ScenarioError, ScenarioWarning
from psdsf_dist.model.scenario import Scenario, load_scenario
from psdsf_dist.protocol.update_rule import DEFAULT_RULE, RULES

EXIT_USAGE = 2
EXIT_FAILURE = 1


class CommandError(Exception):
    """A user-facing failure: printed as ``psdsf-dist: <message>``, exit status ``status``."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status


def failed(path: str, err: PsdsfError) -> CommandError:
    """A library failure on a scenario as a CLI error: bad input exits 2, anything else 1."""
    status = EXIT_USAGE if isinstance(err, ScenarioError) else EXIT_FAILURE
    return CommandError(f"{path}: {err}", status)


def load(path: str) -> Scenario:
    """Load a scenario; warnings go to stderr as one line each, errors become CommandError."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ScenarioWarning)
        try:
            scenario = load_scenario(path)
        except PsdsfError as err:
            raise CommandError(str(err)) from None
    for w in caught:
        print(f"psdsf-dist: warning: {path}: {w.message}", file=sys.stderr)
    return scenario


def emit(text: str, output: str | None) -> None:
    """Print ``text`` or write it to ``output`` atomically (never a half-written file)."""
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    target = Path(output)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise CommandError(f"{output}: directory {directory} does not exist")
    if target.is_dir():
        raise CommandError(f"{output}: is a directory")
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as err:  # e.g. no write permission: one line, not a traceback
        raise CommandError(f"{output}: cannot write: {err.strerror or err}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text if text.endswith("\n") else text + "\n")
        os.replace(tmp, target)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise CommandError(f"{output}: cannot write: {err.strerror or err}") from None
        raise


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, allow_nan=False, default=_default)


def _default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def add_protocol_options(p: argparse.ArgumentParser) -> None:
    """``--mode``, ``--rule`` and ``--seed``: how the distributed protocol runs (the commands
    that run it: ``simulate``, ``observe``, ``run``)."""
    p.add_argument("--mode", choices=["rdm", "tdm"], default="rdm",
                   help="rdm: divisible resources (Theorem 1); tdm: time-shared servers")
    p.add_argument("--rule", choices=RULES, default=DEFAULT_RULE,
                   help=f"update rule (default {DEFAULT_RULE})")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (default 0)")
