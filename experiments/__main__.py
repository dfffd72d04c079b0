"""The experiments' one entry point (from the repository root)::

    .venv/bin/python -m experiments list              # every experiment, by group
    .venv/bin/python -m experiments run NAME [ARGS]   # one of them; ARGS go to it (--help)
    .venv/bin/python -m experiments report [--quick]  # the papers' evaluations: REPORT.md

An experiment is a module of ``experiments.benchmarks``, ``experiments.studies`` or
``experiments.reproductions`` with a ``main(argv)``; ``list`` reads their docstrings without
importing them (no Ray starts).  Outputs go to ``experiments/results/``.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import pkgutil
import sys
from dataclasses import dataclass
from pathlib import Path

GROUPS = ("benchmarks", "studies", "reproductions")
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Experiment:
    name: str
    group: str
    summary: str
    """The first line of its docstring."""

    @property
    def module(self) -> str:
        return f"experiments.{self.group}.{self.name}"


def catalogue() -> dict[str, Experiment]:
    """Every experiment by name (names are unique across the groups)."""
    found: dict[str, Experiment] = {}
    for group in GROUPS:
        for info in pkgutil.iter_modules([str(HERE / group)]):
            path = HERE / group / f"{info.name}.py"
            tree = ast.parse(path.read_text(encoding="utf-8"))
            if not any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body):
                continue
            doc = ast.get_docstring(tree) or ""
            if info.name in found:
                raise RuntimeError(f"experiment {info.name!r} is in two groups")
            found[info.name] = Experiment(info.name, group, doc.strip().splitlines()[0]
                                          if doc.strip() else "")
    return found


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m experiments",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("verb", choices=("list", "run", "report"))
    parser.add_argument("name", nargs="?", help="run: the experiment (see list)")
    if not args or args[0] not in ("run", "report"):
        parser.parse_args(args)  # list, --help, or a clear error
        for group in GROUPS:
            print(f"{group}:")
            for e in sorted(catalogue().values(), key=lambda e: e.name):
                if e.group == group:
                    print(f"  {e.name:24} {e.summary}")
        return 0
    if args[0] == "report":
        name, rest = "reproduce", args[1:]
    else:
        if len(args) < 2 or args[1].startswith("-"):
            parser.error("run needs an experiment's name (see `python -m experiments list`)")
        name, rest = args[1], args[2:]
    experiments = catalogue()
    if name not in experiments:
        parser.error(f"no experiment {name!r} (see `python -m experiments list`)")
    module = importlib.import_module(experiments[name].module)
    sys.argv = [f"python -m experiments run {name}", *rest]  # argparse's prog in --help
    code = module.main(rest)
    return int(code) if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
