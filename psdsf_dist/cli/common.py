"""What every command shares: loading a scenario with one-line errors, writing output safely."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import stat
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from psdsf_dist.core.certificate import certificate
from psdsf_dist.core.report import allocation_json, allocation_table
from psdsf_dist.errors import PsdsfError, ScenarioError, ScenarioWarning, one_line
from psdsf_dist.model import limits
from psdsf_dist.model.defaults import DEFAULT_MODE, DEFAULT_SEED
from psdsf_dist.model.document import document_size, read_document
from psdsf_dist.model.scenario import MODES, Mode, Scenario, load_scenario
from psdsf_dist.policies.registry import DEFAULT_POLICY, POLICIES, describe
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.protocol.convergence import CAP_EXCESS_RTOL, EventConvergence, Observation
from psdsf_dist.protocol.distance import THRESHOLDS
from psdsf_dist.protocol.outcome import ProtocolOutcome
from psdsf_dist.protocol.update_rule import RULES
from psdsf_dist.simulator.simulation import AUTO_SNAPSHOT_ABOVE

EXIT_USAGE = 2
EXIT_FAILURE = 1

# -- ranges of the numeric options -------------------------------------------------------------
# Every numeric option of every command is parsed by one of the types below, so it is refused
# at parse time (one line, exit 2) unless it is a number in its range.  The bounds are where the
# work an option asks for stays bounded (rounds, trials) or where a number of seconds still
# fits every clock and timer (a wait of 1e300 s overflows them).
MAX_SECONDS = 1e6
"""The longest period, delay, pace, duration or serving time, in seconds (11.6 days)."""
MIN_PERIOD = 1e-3
"""The shortest period, in seconds."""
MAX_ROUNDS = 1_000_000
"""The most rounds of ``simulate`` and ``observe`` (and of ``--hold``)."""
MAX_TRIALS = 100_000
"""The most random misreports ``properties`` and ``compare`` may probe."""
MAX_FANOUT = 1_000
"""The most gossip peers per round, and gossip rounds per period."""
MAX_SEED = 2**63 - 1
MAX_TIME_SCALE = 1e6
"""The most wall-clock seconds per second of event time (``run --time-scale``)."""


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number in ``[low, high]``."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip().replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be a whole number in {low:,}..{high:,}, got {show_arg(text)}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"must be in {low:,}..{high:,}, got {_digits(value)}")
        return value

    parse.__name__ = f"int_in({low}, {high})"  # what the option test compares across commands
    return parse


def float_in(low: float, high: float, *, low_open: bool = False,
             high_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in the interval from ``low`` to ``high`` (each end
    excluded when ``*_open``); NaN and infinities are refused."""
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be a number in {interval}, got {show_arg(text)}") from None
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        if not (above and below):  # NaN fails both
            raise argparse.ArgumentTypeError(f"must be a number in {interval}, got {value:g}")
        return value

    parse.__name__ = f"float_in{interval}"
    return parse


def show_arg(text: str) -> str:
    """A command-line argument as a message quotes it: escaped, at most 40 characters."""
    shown = one_line(text)
    return repr(shown if len(shown) <= 40 else shown[:37] + "...")


def _digits(value: int) -> str:
    text = str(value)
    return text if len(text) <= 20 else f"a number of {len(text)} digits"


SECONDS = float_in(0.0, MAX_SECONDS)
"""A number of seconds >= 0 (pace, keep-serving)."""


class CommandError(Exception):
    """A user-facing failure: printed as ``psdsf-dist: <message>``, exit status ``status``."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status


def failed(path: str, err: PsdsfError) -> CommandError:
    """A library failure on a scenario as a CLI error: bad input exits 2, anything else 1."""
    status = EXIT_USAGE if isinstance(err, ScenarioError) else EXIT_FAILURE
    return CommandError(f"{path}: {err}", status)


def load(path: str, document: Any = None) -> Scenario:
    """Load a scenario (from ``document`` when the file was read already, by
    :func:`read`); warnings go to stderr as one line each, errors become CommandError."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ScenarioWarning)
        try:
            scenario = (load_scenario(path) if document is None
                        else Scenario.from_dict(document, path))
        except PsdsfError as err:
            raise CommandError(str(err)) from None
    for w in caught:
        print(f"psdsf-dist: warning: {one_line(path)}: {one_line(str(w.message))}",
              file=sys.stderr)
    return scenario


MIN_CELLS = 1_000
"""The cells a round or an event instant counts for at least (its fixed cost)."""


def load_within_work(path: str, times: int, option: str, what: str, *,
                     instants: bool = False) -> Scenario:
    """Load a scenario for a command whose work is its cells times ``times``, refusing it first
    — on the document's counts, before a server is expanded or an array built — when that is
    beyond the ``work`` limit (:mod:`psdsf_dist.model.limits`).  Cells are users x servers,
    counting those that join by events, and at least :data:`MIN_CELLS`; with ``instants``,
    each distinct event time counts as one more round (every server adopts the new state
    then)."""
    document = read(path)
    cells, moments = document_size(document)
    if instants:
        times += moments
        what += " and event instants"
    try:
        limits.check_work(max(cells, MIN_CELLS), times, option, what)
    except ScenarioError as err:
        raise CommandError(f"{one_line(path)}: {err}") from None
    return load(path, document)


def read(path: str) -> Any:
    """The parsed document of a scenario file (the loader's one reader, with its limits);
    errors become CommandError."""
    try:
        return read_document(path)
    except PsdsfError as err:
        raise CommandError(str(err)) from None


@contextlib.contextmanager
def results_only_on_stdout() -> Iterator[None]:
    """While inside, whatever is written to standard output — Ray's forwarded worker and
    raylet lines (printed to ``sys.stdout`` by its log threads), anything written to file
    descriptor 1 by native code — goes to standard error instead, so that the command's own
    output, written after, is all that stdout carries (``--json`` stays valid JSON)."""
    sys.stdout.flush()
    saved_object = sys.stdout
    try:
        saved_fd: int | None = os.dup(1)
    except OSError:  # no descriptor 1 (a closed stdout): nothing to protect at that level
        saved_fd = None
    if saved_fd is not None:
        os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stderr.flush()
        sys.stdout = saved_object
        if saved_fd is not None:
            os.dup2(saved_fd, 1)
            os.close(saved_fd)


def _file_mode(target: Path) -> int:
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def emit(text: str, output: str | None, *, private: bool = False) -> None:
    """Print ``text`` or write it to ``output`` atomically (never a half-written file);
    ``private``: the file is readable by its owner only (0600, e.g. secrets)."""
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    target = Path(output)
    directory = target.parent if str(target.parent) else Path(".")
    try:
        os.fsencode(output)
        if "\0" in output:
            raise ValueError(output)
    except ValueError:  # a NUL byte, or a character the file system cannot encode
        raise CommandError(f"{one_line(output)}: cannot write: not a valid file name") from None
    if not directory.is_dir():
        raise CommandError(f"{output}: directory {directory} does not exist")
    if target.is_dir():
        raise CommandError(f"{output}: is a directory")
    if target.exists() and not target.is_file():
        # a device, FIFO or socket: the atomic rename would replace the node itself
        raise CommandError(f"{one_line(output)}: cannot write: not a regular file (a device, "
                           "pipe or socket is never replaced)")
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as err:  # e.g. no write permission: one line, not a traceback
        raise CommandError(f"{output}: cannot write: {err.strerror or err}") from None
    try:
        # the mode a plain open() would give: an existing file's, else 0666 less the umask
        # (mkstemp makes its file 0600)
        os.fchmod(fd, 0o600 if private else _file_mode(target))
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
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
    """The distributed protocol's options (:class:`ProtocolConfig`), with the same names,
    units and defaults in every command that runs it: ``simulate``, ``observe``, ``run``."""
    d = ProtocolConfig()
    g = p.add_argument_group("protocol (the same in simulate, observe and run)")
    _add_period(g)
    timing = g.add_mutually_exclusive_group()
    timing.add_argument("--jitter", type=float_in(0.0, 1.0, high_open=True),
                        default=d.jitter, metavar="J",
                        help="random spread of each wait, as a fraction of it; servers start at "
                             f"random phases (default {d.jitter:g})")
    timing.add_argument("--lockstep", action="store_const", const=0.0, dest="jitter",
                        help="jitter 0: every server wakes at the same instants (the hard "
                             "case: all act on the same stale totals)")
    _add_delay(g)
    g.add_argument("--loss", type=float_in(0.0, 1.0, high_open=True), default=d.loss, metavar="P",
                   help=f"probability that the transport drops a message (default {d.loss:g})")
    g.add_argument("--fanout", type=int_in(1, MAX_FANOUT), default=d.fanout, metavar="F",
                   help=f"peers per gossip round (default {d.fanout})")
    g.add_argument("--gossip-rate", type=int_in(1, MAX_FANOUT), default=d.gossip_rate, metavar="G",
                   help=f"gossip rounds per period (default {d.gossip_rate})")
    _add_rule(g)
    add_mode_option(g, d.mode)
    add_seed_option(g, d.seed)
    _add_rtol(g)
    g.add_argument("--hold", type=int_in(1, MAX_ROUNDS), default=d.hold, metavar="H",
                   help="rounds in a row the certificate must hold for an event's convergence "
                        f"to count, unless the next event comes first (default {d.hold})")


def add_job_protocol_options(p: argparse.ArgumentParser) -> None:
    """The protocol's options that mean something when it shares a job trace's slots
    (``replay --job-policies protocol``): its lock-step rounds exchange no messages, so only
    the period, the observations' delay, the rule and the certificate's tolerance, each as in
    :func:`add_protocol_options`."""
    g = p.add_argument_group("protocol (with --job-policies protocol; the same as in simulate)")
    _add_period(g)
    _add_delay(g)
    _add_rule(g)
    _add_rtol(g)


def _add_period(g: argparse._ArgumentGroup) -> None:
    d = ProtocolConfig()
    g.add_argument("--period", type=float_in(MIN_PERIOD, MAX_SECONDS),
                   default=d.period, metavar="T",
                   help=f"seconds between two updates of a server (default {d.period:g})")


def _add_delay(g: argparse._ArgumentGroup) -> None:
    d = ProtocolConfig()
    g.add_argument("--delay", default=f"{d.delay:g}", metavar="D",
                   help="seconds the transport holds each message, or rounds with a trailing r "
                        f"(e.g. 1r; default {d.delay:g}; on Ray, on top of Ray's own latency)")


def _add_rule(g: argparse._ArgumentGroup) -> None:
    d = ProtocolConfig()
    g.add_argument("--rule", choices=RULES, default=d.rule,
                   help=f"update rule (default {d.rule})")


def _add_rtol(g: argparse._ArgumentGroup) -> None:
    d = ProtocolConfig()
    g.add_argument("--rtol", type=float_in(0.0, 1.0, low_open=True, high_open=True), default=d.rtol,
                   help=f"certificate tolerance for convergence (default {d.rtol:g})")


def add_mode_option(p: argparse.ArgumentParser | argparse._ArgumentGroup,
                    default: Mode = DEFAULT_MODE) -> None:
    """``--mode``: the same choices, meaning and default in every command."""
    p.add_argument("--mode", choices=MODES, default=default,
                   help="rdm: divisible resources (Theorem 1); tdm: time-shared servers "
                        f"(Theorem 2) (default {default})")


def add_seed_option(p: argparse.ArgumentParser | argparse._ArgumentGroup,
                    default: int = DEFAULT_SEED) -> None:
    """``--seed``: the same range, meaning and default in every command."""
    p.add_argument("--seed", type=int_in(0, MAX_SEED), default=default, metavar="S",
                   help="seed of every random choice the command makes; the same seed gives "
                        f"the same output (default {default})")


def add_gossip_option(p: argparse.ArgumentParser) -> None:
    """``--gossip``: the simulator's gossip model (``simulate``, ``observe``)."""
    p.add_argument("--gossip", choices=["auto", "scuttlebutt", "snapshot"], default="auto",
                   help="scuttlebutt: the protocol itself, message by message; snapshot: a model "
                        "for cluster scale (every server once per period, all on the true totals "
                        "of 1 + delay/T rounds before); auto: snapshot above "
                        f"{AUTO_SNAPSHOT_ABOVE} servers (default auto)")


def add_policy_option(p: argparse.ArgumentParser) -> None:
    """``--policy``: one of the registry's policies (``solve``, ``properties``)."""
    p.add_argument("--policy", choices=POLICIES, default=DEFAULT_POLICY, metavar="POLICY",
                   help=f"allocation policy (default {DEFAULT_POLICY}; each is described at "
                        "the end of this help)")


def policies_epilog() -> str:
    """The policies and what each does, from the registry (the end of a command's help)."""
    width = max(len(name) for name in POLICIES)
    return "policies:\n" + "\n".join(f"  {name:<{width}}  {describe(name)}" for name in POLICIES)


def parse_delay(text: str, period: float) -> float:
    """Seconds from ``"0.5"`` (seconds) or ``"2r"`` (rounds of ``period``)."""
    raw = text.strip().lower()
    rounds = raw.endswith("r")
    try:
        value = float(raw[:-1] if rounds else raw)
    except ValueError:
        raise CommandError(
            f"--delay: expected seconds or rounds (e.g. 0.5 or 1r), got {show_arg(text)}"
        ) from None
    seconds = value * period if rounds else value
    if not 0 <= seconds <= MAX_SECONDS:  # NaN fails too
        raise CommandError(f"--delay: must be between 0 and {MAX_SECONDS:g} seconds, got "
                           f"{show_arg(text)}")
    return seconds


def protocol_config(args: argparse.Namespace) -> ProtocolConfig:
    """The :class:`ProtocolConfig` the options of :func:`add_protocol_options` (or of
    :func:`add_job_protocol_options`: the others keep their defaults) ask for."""
    d = ProtocolConfig()
    cfg = ProtocolConfig(
        period=args.period, jitter=getattr(args, "jitter", d.jitter),
        delay=parse_delay(args.delay, args.period), loss=getattr(args, "loss", d.loss),
        fanout=getattr(args, "fanout", d.fanout),
        gossip_rate=getattr(args, "gossip_rate", d.gossip_rate), rule=args.rule,
        mode=getattr(args, "mode", d.mode), seed=args.seed, rtol=args.rtol,
        hold=getattr(args, "hold", d.hold))
    try:
        cfg.check()
    except ValueError as err:
        raise CommandError(str(err)) from None
    return cfg


def protocol_json(cfg: ProtocolConfig) -> dict[str, Any]:
    """A run's protocol settings as ``simulate --json`` and ``run --json`` report them."""
    return {**dataclasses.asdict(cfg), "rule_params": dict(cfg.rule_params)}


def cap_line(observations: Sequence[Observation]) -> str:
    """Whether any user's total went above its ``max_tasks`` during the run (text reports)."""
    worst = max(observations, key=lambda o: o.cap_excess, default=None)
    if worst is None or worst.cap_excess <= CAP_EXCESS_RTOL:
        return "caps: no user's total exceeded its max_tasks"
    return (f"caps: a user's total exceeded its max_tasks by up to "
            f"{100 * worst.cap_excess:.2f}% (round {worst.round}, t={worst.time:g}s)")


def convergence_lines(events: Sequence[EventConvergence], hold: int) -> list[str]:
    """Per event, when the certificate held for good and from which round every user's total
    stayed within 5 % / 1 % / 0.1 % of its PS-DSF total (the text reports of simulate and
    run)."""
    lines = [f"convergence (certificate held {hold} rounds in a row, or until the next event; "
             "within X: every user's total within X of its PS-DSF total from then on)"]
    for e in events:
        when = ("not yet" if e.seconds is None
                else f"after {e.seconds:g} s ({e.rounds} rounds)")
        within = ", ".join(f"{100 * t:g} % {'not yet' if r is None else f'after {r}'}"
                           for t, r in zip(THRESHOLDS, e.within, strict=False))
        lines.append(f"  t={e.at:g}s {e.description}: {when}"
                     + (f"; within {within}" if within else ""))
    return lines


def render_outcome(result: ProtocolOutcome, *, policy: str, json_output: bool, section: str,
                   fields: dict[str, Any], summary: str) -> str:
    """The report of ``simulate`` and ``run`` alike: the final allocation with its
    certificate, the per-event convergence, the caps, then the run's own ``summary`` line;
    with ``--json`` the allocation's JSON with the protocol settings and ``fields`` under
    ``section``, the events and the trace."""
    cfg = result.protocol
    final = certificate(result.scenario, result.allocation, mode=cfg.mode, rtol=cfg.rtol,
                        explain=not json_output)
    if json_output:
        extra = {section: {**protocol_json(cfg), **fields},
                 "events": [e.to_json() for e in result.events],
                 "trace": [o.to_json() for o in result.trace]}
        return dumps(allocation_json(result.scenario, result.allocation, policy=policy,
                                     mode=cfg.mode, certificate=final, extra=extra))
    return "\n".join([allocation_table(result.scenario, result.allocation, policy=policy,
                                       mode=cfg.mode, certificate=final), "",
                      *convergence_lines(result.events, cfg.hold), cap_line(result.trace),
                      summary])


def add_name_option(p: argparse.ArgumentParser) -> None:
    """``--name``: which allocator in the Ray cluster (``run`` and ``stop`` alike)."""
    from psdsf_dist.runtime.names import DEFAULT_RUN_ID

    p.add_argument("--name", type=_run_name, default=DEFAULT_RUN_ID, metavar="NAME",
                   help=f"the allocator's name in the Ray cluster (default {DEFAULT_RUN_ID!r}): "
                        "its actors are named after it, and tenants connect to it by it")


def _run_name(text: str) -> str:
    from psdsf_dist.runtime.names import RunNameError, check_run_name

    try:
        return check_run_name(text)
    except RunNameError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
