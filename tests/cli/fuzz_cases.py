"""Hostile inputs for the command line, and the one rule every outcome must obey.

A case is a scenario document (a valid small cluster, then mutated: extreme or ill-typed numbers,
names that do not print, unknown keys, many events at one instant, deep nesting, YAML aliases)
written as YAML or JSON — or, for ``replay``, a job trace (the CSV of docs/jobs.md or a SWIM
tsv, mutated likewise: hostile numbers, names, columns, quoting, line ends) — and a command line
of one subcommand whose options are drawn from valid values and from hostile ones (out of range,
NaN, infinities, 1e300, huge integers, text).
:func:`run_case` runs ``psdsf-dist`` in this process (``main(argv)`` with its output captured) and
:func:`verdict` accepts only:

* exit 0 with output that parses (JSON for ``--json``) and, for ``solve --policy psdsf``, a
  certificate that holds; or
* exit 2 with nothing on stdout and exactly one line on stderr, ``psdsf-dist: ...``; or
* for ``stop``, which only reaches out to a cluster, also exit 1 with one such line (no cluster
  or no allocator there: not an input error).  Its addresses are ones where no Ray can answer,
  never ``auto``, so a case cannot stop anything real.

Anything else — an exception escaping ``main``, exit 1, a second line, a failed certificate, a
case slower than its time bound — is a finding.  ``run`` is exercised up to the point where it
would start Ray (its options and its scenario are checked before): that part runs here.
``observe`` runs whole, at ``--pace 0`` on a free port of 127.0.0.1 (its wall-clock options are
drawn from values that end: hostile or small).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from psdsf_dist.cli.main import build_parser, main

NUMBERS: list[Any] = [0, 1, 2, 0.5, 1e-15, 1e15, 3e-16, 2e15, 5e-324, 1e308, -1, -0.0, 10**400,
                      True, "1", None, [], {}]
FLOATS = [math.inf, -math.inf, math.nan]
NAMES = ["u", "s", "cpu", "", " ", "a\nb", "\ud800", "x\u200b", "\u202eevil", "e\u0301", "\x00",
         "tab\there", "é", "名前", "x" * 300, "a: b", "- x", "*a", "&a"]
OPTION_VALUES = ["0", "1", "2", "3", "-1", "0.5", "1e-300", "1e20", "1e300", "inf", "-inf", "nan",
                 "100000000000000000000", "abc", "", "1r", "1e300r", "0x10", "1_000", "\ud800"]
POLICIES_SAMPLE = ["psdsf", "drf", "drfh", "c-drfh", "tsf", "cdrf", "tsf-er", "amf", "gamf",
                   "amf-si", "cru", "mnw", "per-server-drf", "drfh-first-fit", "rrr-psdsf"]
PROTOCOL = ["--period", "--jitter", "--delay", "--loss", "--fanout", "--gossip-rate", "--seed",
            "--rtol", "--hold"]
OPTIONS = {
    "solve": ["--seed"],
    "observe": ["--rounds", "--port", "--bind", *PROTOCOL],
    "replay": ["--sites", "--slots", "--available", "--zipf", "--utilisation", "--seed",
               "--pareto", "--pareto-per", "--order", "--scheduler"],
    "stop": ["--name", "--address"],
    "compare": ["--trials", "--seed"],
    "properties": ["--trials", "--seed"],
    "simulate": ["--rounds", *PROTOCOL],
    "run": ["--time-scale", "--duration", "--servers-per-actor", "--num-cpus", "--metrics-port",
            "--event", *PROTOCOL],
}
WALL_CLOCK = ["0", "0.01", "-1", "nan", "inf", "1e300", "1e7", "abc", "", "\ud800"]
"""Values of ``observe --pace/--keep-serving``: each either ends at once or is refused."""
BINDS = ["127.0.0.1", "::1", "", "abc", "999.1.1.1", "127.0.0.1 ", "\ud800", "localhost:80"]
UNREACHABLE = ["127.0.0.1:1", "[::1]:1", "abc", "host:99999", "no-such-host.invalid:6379",
               "\ud800", "1e300", ":"]
"""``stop --address`` values where no Ray can answer (``""`` would mean ``auto``)."""
SCHEDULER_NAMES = ["ata", "ata-greedy", "scta", "btaaj", "btawj", "swag", "psdsf", "", "ATA"]
TRACE_NUMBERS = ["0", "1", "2", "0.5", "-1", "-0", "1e-300", "1e15", "1e300", "1e309", "inf",
                 "nan", "-inf", "10" * 30, "abc", "", " 1", "1_0", "0x10", "2e7", "\ud800"]
EVENT_KINDS = ["user_leaves", "user_joins", "server_fails", "server_joins", "set_demand",
               "set_weight", "set_max_tasks"]


def base_document() -> dict[str, Any]:
    return {"resources": ["cpu", "mem"],
            "servers": [{"name": "s1", "capacity": {"cpu": 4, "mem": 8}},
                        {"name": "s2", "capacity": {"cpu": 8, "mem": 4}, "count": 2}],
            "users": [{"name": "u1", "demand": {"cpu": 1, "mem": 2}},
                      {"name": "u2", "demand": {"cpu": 2, "mem": 1}, "weight": 2},
                      {"name": "u3", "demand": {"cpu": 1}, "max_tasks": 3}]}


@dataclass
class Case:
    document: Any
    as_json: bool
    aliases: int
    """Levels of nine-fold YAML aliases added under ``description`` (0: none)."""
    nest: int
    """Levels of nested lists written as ``description`` (0: none)."""
    command: str
    options: list[str]
    trace: str | None = None
    """``replay``: the trace text (``trace.csv``, or ``trace.tsv`` when ``as_json``)."""


def _number(draw: Any, *, wild: bool) -> Any:
    pool = NUMBERS + FLOATS if wild else NUMBERS
    return draw(st.sampled_from(pool) | st.floats(allow_nan=wild, allow_infinity=wild)
                | st.integers(-5, 10**6))


@st.composite
def cases(draw: Any, *, commands: tuple[str, ...] = tuple(OPTIONS), big: bool = False) -> Case:
    """One hostile case (see the module docstring); ``big``: also valid but costly option
    values (the long run), which CI leaves out."""
    as_json = draw(st.booleans())
    doc: Any = base_document()
    for _ in range(draw(st.integers(0, 4))):
        doc = _mutate(draw, doc, wild=not as_json)
    if draw(st.integers(0, 9)) == 0:
        doc = _random_value(draw)
    aliases = 0 if as_json else draw(st.sampled_from([0, 0, 0, 0, 3, 10]))
    command = draw(st.sampled_from(commands))
    options: list[str] = []
    if command in ("solve", "compare", "properties"):
        if command == "compare":
            options += ["--policies", *draw(st.lists(st.sampled_from(POLICIES_SAMPLE),
                                                     min_size=1, max_size=3))]
        else:
            options += ["--policy", draw(st.sampled_from(POLICIES_SAMPLE))]
        if command != "compare" and draw(st.booleans()):
            options += ["--mode", "tdm"]
    if command in ("compare", "properties"):
        options += ["--trials", draw(st.sampled_from(["0", "1", "2"]))]
    if command in ("simulate", "observe"):
        options += ["--rounds", draw(st.sampled_from(["1", "3", "8"]))]
    if command == "observe":
        options += ["--port", "0", "--pace", draw(st.sampled_from(["0", *WALL_CLOCK])),
                    "--keep-serving", draw(st.sampled_from(["0", *WALL_CLOCK])), "--quiet"]
    if command == "stop":
        options += ["--address", draw(st.sampled_from(UNREACHABLE))]
    for opt in draw(st.lists(st.sampled_from(OPTIONS[command]), max_size=3)):
        if opt == "--bind":
            value = draw(st.sampled_from(BINDS))
        elif opt == "--port":
            value = draw(st.sampled_from(["0", "-1", "65536", "1e3", "abc", "\ud800"]))
        elif opt == "--address":
            value = draw(st.sampled_from(UNREACHABLE))
        elif opt == "--name":
            value = draw(st.sampled_from(NAMES))
        elif opt == "--order":
            value = draw(st.sampled_from(["swag", "fifo", "lifo", ""]))
        elif opt == "--pareto-per":
            value = draw(st.sampled_from(["task", "job", "site", ""]))
        elif opt == "--scheduler":
            options += [opt, *draw(st.lists(st.sampled_from(SCHEDULER_NAMES), min_size=1,
                                            max_size=3))]
            continue
        elif opt == "--pareto":
            options += [opt, *draw(st.lists(st.sampled_from(OPTION_VALUES), min_size=2,
                                            max_size=2))]
            continue
        elif opt == "--event":
            value = draw(st.sampled_from(["{at: 1, set_weight: {user: u1, weight: 3}}",
                                          "[1, 2]", "{at: 1, user_leaves: zz}",
                                          "{a: &a [1, 1], b: [*a, *a]}", "x: \ud800"]))
        else:
            pool = OPTION_VALUES + (["1000", "20000", "1000000"] if big else [])
            value = draw(st.sampled_from(pool))
        options += [opt, value]
    if command != "stop" and draw(st.booleans()):
        options.append("--json")
    if command == "replay":
        tsv = draw(st.booleans())
        return Case(document=None, as_json=tsv, aliases=0, nest=0, command=command,
                    options=options, trace=_swim(draw) if tsv else _csv(draw))
    nest = draw(st.sampled_from([0, 0, 0, 0, 0, 5, 40, 3000]))
    return Case(document=doc, as_json=as_json, aliases=0 if nest else aliases, nest=nest,
                command=command, options=options)


def _random_value(draw: Any) -> Any:
    leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6)
    return draw(st.recursive(leaves, lambda inner: st.lists(inner, max_size=4)
                             | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                             max_leaves=20))


def _mutate(draw: Any, doc: Any, *, wild: bool) -> Any:
    """One change of the document: a number, a name, a key, events, nesting."""
    if not isinstance(doc, dict):
        return doc
    what = draw(st.sampled_from(["number", "number", "name", "key", "events", "events", "drop",
                                 "count", "gamma"]))
    users: list[Any] = doc["users"] if isinstance(doc.get("users"), list) else []
    servers: list[Any] = doc["servers"] if isinstance(doc.get("servers"), list) else []
    if what == "number" and users and servers:
        target = draw(st.sampled_from(["weight", "max_tasks", "demand", "capacity"]))
        value = _number(draw, wild=wild)
        if target in ("weight", "max_tasks"):
            users[draw(st.integers(0, len(users) - 1))][target] = value
        elif target == "demand":
            users[draw(st.integers(0, len(users) - 1))]["demand"] = {"cpu": value, "mem": 1}
        else:
            servers[draw(st.integers(0, len(servers) - 1))]["capacity"] = {"cpu": value,
                                                                           "mem": 4}
    elif what == "gamma" and users:
        users[0]["gamma"] = {"s1": _number(draw, wild=wild)}
        users[0]["weight"] = _number(draw, wild=wild)
        users[0]["max_tasks"] = _number(draw, wild=wild)
    elif what == "name":
        name = draw(st.sampled_from(NAMES))
        spot = draw(st.sampled_from(["user", "server", "resource", "label"]))
        if spot == "user" and users:
            users[0]["name"] = name
        elif spot == "server" and servers:
            servers[0]["name"] = name
        elif spot == "resource":
            doc["resources"] = [*doc.get("resources", []), name] if isinstance(
                doc.get("resources"), list) else [name]
            if users:
                users[0]["demand"] = {name: 1}
        elif servers:
            servers[0]["labels"] = {name: name}
    elif what == "key":
        spot = draw(st.sampled_from([doc, *(users[:1]), *(servers[:1])]))
        spot[draw(st.sampled_from([*NAMES, "wieght", "events", "tenants"]))] = 1
    elif what == "events":
        doc["events"] = _events(draw, users, servers)
    elif what == "drop":
        doc.pop(draw(st.sampled_from(["resources", "servers", "users"])), None)
    elif what == "count" and servers:
        servers[-1]["count"] = draw(st.sampled_from([0, 1, 3, 10**6, 10**9, -1, 2.5, True]))
    return doc


def _events(draw: Any, users: list[Any], servers: list[Any]) -> list[Any]:
    names = [u.get("name") for u in users if isinstance(u, dict)] or ["u1"]
    snames = [f"{s.get('name')}-1" if "count" in s else s.get("name") for s in servers
              if isinstance(s, dict)] or ["s1"]
    out: list[Any] = []
    same = draw(st.booleans())
    for k in range(draw(st.sampled_from([1, 2, 5, 50, 2000]))):
        at: Any = 5 if same else draw(st.sampled_from([0, 1, 5, k, 1e15, -1, math.inf, "x"]))
        kind = draw(st.sampled_from(EVENT_KINDS))
        user = draw(st.sampled_from(names))
        body: Any
        if kind in ("user_leaves", "user_joins"):
            body = user if draw(st.booleans()) else {"name": f"n{k}", "demand": {"cpu": 1}}
        elif kind == "server_fails":
            body = draw(st.sampled_from(snames))
        elif kind == "server_joins":
            body = {"name": f"j{k}", "capacity": {"cpu": draw(st.sampled_from([1, 0, 1e15]))}}
        elif kind == "set_demand":
            body = {"user": user, "demand": {"cpu": draw(st.sampled_from([1, 0, 1e-15]))}}
        elif kind == "set_weight":
            body = {"user": user, "weight": draw(st.sampled_from([1, 3, 0, 1e15, 1e-15]))}
        else:
            body = {"user": user, "max_tasks": draw(st.sampled_from([1, 0, math.inf, 1e-15]))}
        out.append({"at": at, kind: body})
    return out


def _csv(draw: Any) -> str:
    """The CSV trace of docs/jobs.md: Table 3.1's jobs, then mutated."""
    header = ["job", "submit_s", "tasks", "sites", "duration_s", "user"]
    rows = [["J1", "0", "8", "S1 S2", "1", "a"], ["J2", "1", "15", "S1 S2 S3", "1", "b"],
            ["J3", "2", "6", "S2 S3", "1", "a"]]
    for _ in range(draw(st.integers(0, 4))):
        what = draw(st.sampled_from(["number", "number", "name", "column", "rows", "quote"]))
        row = rows[draw(st.integers(0, len(rows) - 1))] if rows else None
        if what in ("number", "name") and row:  # a column dropped before leaves fewer
            col = draw(st.sampled_from([1, 2, 4] if what == "number" else [0, 3, 5]))
            if col < len(row):
                row[col] = draw(st.sampled_from(TRACE_NUMBERS if what == "number" else NAMES))
        elif what == "column":
            col = draw(st.integers(0, len(header) - 1))
            change = draw(st.sampled_from(["drop", "rename", "twice"]))
            if change == "drop":
                header.pop(col)
                for r in rows:
                    r.pop(col)
            elif change == "rename":
                header[col] = draw(st.sampled_from(NAMES))
            else:
                header.append(header[col])
                for r in rows:
                    r.append(r[col])
        elif what == "rows":
            n = draw(st.sampled_from([0, 1, 50, 3000]))
            rows = [[f"J{k}", str(k % 7), "2", "S1 S2", "1", "u"][: len(header)]
                    for k in range(n)] if draw(st.booleans()) else rows[:n]
        elif what == "quote" and row:
            row[0] = draw(st.sampled_from(['"J,1"', '"J\n1"', '"unterminated', "J\r1"]))
    text = ",".join(header) + "\n" + "".join(",".join(r) + "\n" for r in rows)
    if draw(st.integers(0, 5)) == 0:
        text = draw(st.sampled_from(["\ufeff", "", "\x00", "sep=,\n"])) + text.replace(
            "\n", draw(st.sampled_from(["\n", "\r\n", "\r"])))
    return text


def _swim(draw: Any) -> str:
    """A SWIM tsv (name, submit s, gap s, input/shuffle/output bytes), then mutated."""
    rows = [["job0", "0", "0", "3000000000", "0", "0"], ["job1", "5", "5", "1", "0", "0"],
            ["job2", "9", "4", "0", "0", "0"]]
    for _ in range(draw(st.integers(0, 4))):
        row = rows[draw(st.integers(0, len(rows) - 1))]
        what = draw(st.sampled_from(["number", "number", "name", "short", "rows"]))
        if what == "number" and len(row) > 1:
            row[draw(st.integers(1, len(row) - 1))] = draw(st.sampled_from(
                [*TRACE_NUMBERS, "1000000000000000000", "20000000000000000"]))
        elif what == "name":
            row[0] = draw(st.sampled_from(NAMES))
        elif what == "short" and len(row) > 1:
            del row[draw(st.integers(1, len(row) - 1)):]
        else:
            rows = rows + [[f"j{k}", str(k), "1", "2000000000", "0", "0"]
                           for k in range(draw(st.sampled_from([1, 100, 5000])))]
    return "".join("\t".join(r) + "\n" for r in rows)


def write_case(case: Case, directory: Path) -> Path:
    if case.trace is not None:
        path = directory / ("trace.tsv" if case.as_json else "trace.csv")
        path.write_text(case.trace, encoding="utf-8", errors="surrogatepass", newline="")
        return path
    path = directory / ("scenario.json" if case.as_json else "scenario.yaml")
    if case.as_json:
        text = json.dumps(case.document)  # NaN and infinities as JSON's extensions
    else:
        text = yaml.safe_dump(case.document, allow_unicode=False)
        if case.aliases:
            lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
            lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]"
                      for i in range(1, case.aliases + 1)]
            text = "description:\n" + "".join(f"  {line}\n" for line in lines) + (
                text if isinstance(case.document, dict) and "description" not in case.document
                else "")
    if case.nest and isinstance(case.document, dict) and "description" not in case.document:
        deep = "[" * case.nest + "1" + "]" * case.nest
        text = ("{" + f'"description": {deep}, ' + text[1:] if case.as_json and text != "{}"
                else text + f"description: {deep}\n")
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return path


@dataclass
class Outcome:
    status: int | None
    out: str
    err: str
    seconds: float
    error: BaseException | None = None


def run_case(case: Case, directory: Path) -> Outcome:
    """Run the case's command in this process (``run`` up to where it would start Ray)."""
    path = write_case(case, directory)
    argv = [case.command, *([] if case.command == "stop" else [str(path)]), *case.options]
    out, err = io.StringIO(), io.StringIO()
    began = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = _run_without_ray(argv) if case.command == "run" else main(argv)
    except BaseException as error:  # whatever escapes is the finding
        return Outcome(None, out.getvalue(), err.getvalue(), time.perf_counter() - began, error)
    return Outcome(status, out.getvalue(), err.getvalue(), time.perf_counter() - began)


def _run_without_ray(argv: list[str]) -> int:
    """What ``run`` checks before Ray starts: its options, its events and its scenario."""
    from psdsf_dist.cli import run as run_cmd
    from psdsf_dist.cli.common import CommandError
    from psdsf_dist.errors import one_line

    try:
        args = build_parser().parse_args(argv)
        run_cmd.config_from(args)
        run_cmd.source_of(args.scenario, run_cmd.extra_events(args.event))
    except CommandError as err:
        print(f"psdsf-dist: {one_line(str(err))}", file=__import__("sys").stderr)
        return err.status
    return 0


def verdict(case: Case, outcome: Outcome, seconds: float) -> str | None:
    """None when the outcome obeys the rule (module docstring); else what is wrong."""
    if outcome.error is not None:
        return f"{type(outcome.error).__name__} escaped: {str(outcome.error)[:200]}"
    if outcome.seconds > seconds:
        return f"took {outcome.seconds:.1f} s (bound {seconds:g} s)"
    if outcome.status == 2:
        lines = outcome.err.splitlines()
        if outcome.out or len(lines) != 1 or not lines[0].startswith("psdsf-dist: "):
            return (f"exit 2 but not one line: stdout {outcome.out[:80]!r} "
                    f"stderr {outcome.err[:300]!r}")
        return None
    if outcome.status == 1 and case.command == "stop":
        lines = outcome.err.splitlines()
        if outcome.out or len(lines) != 1 or not lines[0].startswith("psdsf-dist: "):
            return f"stop: exit 1 but not one line: {outcome.err[:300]!r}"
        return None
    if outcome.status != 0:
        return f"exit {outcome.status}: {outcome.err.strip()[:300]}"
    if case.command in ("run", "stop"):
        return None
    if "--json" in case.options:
        try:
            doc = json.loads(outcome.out)
        except ValueError as err:
            return f"--json output is not JSON: {err}"
        cert = doc.get("certificate") if isinstance(doc, dict) else None
        psdsf = case.command == "solve" and _policy(case) == "psdsf"
        if psdsf and not (isinstance(cert, dict) and cert.get("holds")):
            return "solve --policy psdsf: the certificate does not hold"
    elif case.command == "solve" and _policy(case) == "psdsf" and (
            "certificate (Theorem" not in outcome.out or ": holds" not in outcome.out):
        return "solve --policy psdsf: the certificate does not hold"
    return None


def _policy(case: Case) -> str:
    opts = case.options
    return opts[opts.index("--policy") + 1] if "--policy" in opts else "psdsf"
