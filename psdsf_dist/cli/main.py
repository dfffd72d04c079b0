"""Entry point of ``psdsf-dist``. Each command lives in its own module with ``register``."""

from __future__ import annotations

import argparse
import importlib
import io
import sys
from collections.abc import Sequence
from typing import NoReturn

from psdsf_dist.cli.common import CommandError
from psdsf_dist.errors import one_line

# Command modules, in the order ``--help`` lists them. Each exposes ``register(subparsers)``
# and sets ``run`` (args -> exit status) as the parser default.
COMMANDS = ("solve", "compare", "properties", "simulate", "observe", "run", "stop", "replay")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, no usage dump
        raise CommandError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="psdsf-dist", description="PS-DSF multi-resource fair allocation")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"psdsf_dist.cli.{name.replace('-', '_')}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # what is printed may quote names or paths that do not encode (a lone surrogate from a
    # file name's bytes): escape them rather than fail
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    try:
        args = build_parser().parse_args(argv)
        status: int = args.run(args)
    except CommandError as err:
        print(f"psdsf-dist: {one_line(str(err))}", file=sys.stderr)
        return err.status
    except KeyboardInterrupt:
        print("psdsf-dist: interrupted", file=sys.stderr)
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
