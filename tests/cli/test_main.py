"""Every subcommand's options, walked from the parser: one name, one meaning, one default."""

from __future__ import annotations

import argparse
import ast
import inspect
from collections import defaultdict
from typing import Any

from psdsf_dist.cli.main import COMMANDS, build_parser
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.runtime import launcher
from psdsf_dist.runtime.settings import RunConfig

# Options whose help says what *this* command prints or where it connects; their default,
# type and choices must still agree.
OUTPUT_OPTIONS = {"--json", "--output", "--quiet", "--address"}


def _options() -> dict[str, list[tuple[str, argparse.Action]]]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(sub.choices) == sorted(COMMANDS)
    seen: dict[str, list[tuple[str, argparse.Action]]] = defaultdict(list)
    for command, p in sub.choices.items():
        for action in p._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    seen[flag].append((command, action))
    return seen


def _signature(action: argparse.Action, with_help: bool) -> tuple[Any, ...]:
    kind = getattr(action.type, "__name__", action.type)
    choices = None if action.choices is None else tuple(action.choices)
    return (type(action).__name__, action.dest, action.default, kind, choices, action.const,
            action.nargs, action.help if with_help else None)


def test_options_of_the_same_name_agree_in_every_command() -> None:
    shared = {flag: uses for flag, uses in _options().items() if len(uses) > 1}
    assert {"--seed", "--mode", "--policy", "--trials", "--gossip"} <= set(shared)
    for flag, uses in shared.items():
        signatures = {command: _signature(a, flag not in OUTPUT_OPTIONS) for command, a in uses}
        assert len(set(signatures.values())) == 1, (flag, signatures)


def test_protocol_and_run_options_default_to_their_configs() -> None:
    options = {flag: uses[0][1] for flag, uses in _options().items()}
    protocol, run = ProtocolConfig(), RunConfig()
    for flag in ("--period", "--jitter", "--loss", "--fanout", "--gossip-rate", "--rule",
                 "--mode", "--seed", "--rtol", "--hold"):
        assert options[flag].default == getattr(protocol, flag[2:].replace("-", "_")), flag
    assert options["--time-scale"].default == run.time_scale
    assert options["--servers-per-actor"].default == run.servers_per_actor


def test_the_launcher_example_builds_its_config() -> None:
    """The ``RunConfig(...)`` of the launcher's usage example is a valid call."""
    doc = inspect.getdoc(launcher)
    assert doc is not None
    calls = [node for line in doc.splitlines() if "RunConfig(" in line
             for node in ast.walk(ast.parse(line.strip().split("=", 1)[-1].strip()))
             if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "RunConfig"]
    assert calls
    for call in calls:
        eval(compile(ast.Expression(call), "<launcher example>", "eval"),
             {"RunConfig": RunConfig, "ProtocolConfig": ProtocolConfig}).check()
