"""``psdsf-dist simulate``: run the asynchronous protocol on a simulated clock (deterministic)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from psdsf_dist.cli.common import (
    EXIT_FAILURE,
    CommandError,
    add_protocol_options,
    dumps,
    emit,
    load,
)
from psdsf_dist.core.certificate import certificate
from psdsf_dist.core.report import allocation_json, allocation_table
from psdsf_dist.errors import PsdsfError
from psdsf_dist.protocol.update_rule import make_rule
from psdsf_dist.simulator.simulation import (
    CONVERGENCE_RTOL,
    FeasibilityError,
    RoundRecord,
    SimConfig,
    SimulationResult,
    simulate,
)

PROGRESS_EVERY = 10  # rounds between progress lines (plus every change of the verdict)
DEFAULT_HOLD = 20  # a certificate that holds for one round may flicker off again


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "simulate",
        help="simulate asynchronous PS-DSF with gossip on a simulated clock (deterministic)",
    )
    p.add_argument("scenario", help="scenario file (YAML or JSON); its `events` are applied")
    p.add_argument("--rounds", type=int, default=300, metavar="R",
                   help="rounds (periods) to simulate (default 300)")
    p.add_argument("--period", type=float, default=1.0, metavar="T",
                   help="seconds between two updates of a server (default 1)")
    timing = p.add_mutually_exclusive_group()
    timing.add_argument("--lockstep", action="store_true",
                        help="all servers update at the same instants (the default)")
    timing.add_argument("--jitter", type=float, metavar="J",
                        help="random phases, and each update within +-J/2 seconds of its phase")
    p.add_argument("--delay", default="1r", metavar="D",
                   help="message delay in seconds, or in rounds with a trailing r (default 1r)")
    p.add_argument("--loss", type=float, default=0.0, metavar="P",
                   help="probability that a message is lost (default 0)")
    p.add_argument("--fanout", type=int, default=1, metavar="F",
                   help="peers each server gossips with per round (default 1)")
    p.add_argument("--gossip-rate", type=int, default=1, metavar="G",
                   help="gossip exchange rounds per period (default 1: at each update)")
    add_protocol_options(p)
    p.add_argument("--gossip", choices=["auto", "scuttlebutt", "snapshot"], default="auto",
                   help="scuttlebutt: the real protocol per server; snapshot: every server on "
                        "the same stale totals (cluster scale); auto: snapshot above 2000 servers")
    p.add_argument("--no-signed-moves", dest="signed_moves", action="store_false",
                   help="gossip does not tell the rule how many servers raised / lowered each user "
                        "(holder counts only; an ablation: slower to converge)")
    p.add_argument("--rtol", type=float, default=CONVERGENCE_RTOL,
                   help=f"certificate tolerance for convergence (default {CONVERGENCE_RTOL:g})")
    p.add_argument("--hold", type=int, default=DEFAULT_HOLD, metavar="H",
                   help="rounds in a row the certificate must hold for an event's convergence to "
                        f"count, unless the next event comes first (default {DEFAULT_HOLD})")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--json", action="store_true",
                   help="print a JSON object: trace, events, final allocation (solve format)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.set_defaults(run=run)


def parse_delay(text: str, period: float) -> float:
    """Seconds from ``"0.5"`` (seconds) or ``"2r"`` (rounds of ``period``)."""
    raw = text.strip().lower()
    rounds = raw.endswith("r")
    try:
        value = float(raw[:-1] if rounds else raw)
    except ValueError:
        raise CommandError(
            f"--delay: expected seconds or rounds (e.g. 0.5 or 1r), got {text!r}"
        ) from None
    if not value >= 0 or value == float("inf"):
        raise CommandError(f"--delay: must be a finite number >= 0, got {text!r}")
    return value * period if rounds else value


def config_from(args: argparse.Namespace) -> SimConfig:
    if not args.period > 0 or args.period == float("inf"):
        raise CommandError(f"--period: must be a positive number of seconds, got {args.period}")
    cfg = SimConfig(
        rounds=args.rounds,
        period=args.period,
        lockstep=args.jitter is None,
        jitter=0.0 if args.jitter is None else args.jitter,
        delay=parse_delay(args.delay, args.period),
        loss=args.loss,
        fanout=args.fanout,
        gossip_rate=args.gossip_rate,
        seed=args.seed,
        rule=args.rule,
        mode=args.mode,
        rtol=args.rtol,
        gossip=args.gossip,
        signed_moves=args.signed_moves,
        hold=args.hold,
    )
    try:
        cfg.check()
        make_rule(cfg.rule)
    except ValueError as err:
        raise CommandError(str(err)) from None
    return cfg


def _progress(quiet: bool) -> Callable[[RoundRecord], None]:
    last: list[bool] = []

    def show(rec: RoundRecord) -> None:
        changed = bool(last) and last[-1] != rec.holds
        last.append(rec.holds)
        if quiet or not (changed or rec.round % PROGRESS_EVERY == 0):
            return
        verdict = "holds" if rec.holds else "fails"
        print(f"psdsf-dist: simulate: round {rec.round} t={rec.time:g}s certificate {verdict} "
              f"residual {rec.residual:.2e} change {rec.max_relative_change:.1e} "
              f"util {100 * rec.utilization:.1f}% {rec.bytes:.0f} B/server "
              f"({rec.seconds:.3f} s)", file=sys.stderr, flush=True)

    return show


def run(args: argparse.Namespace) -> int:
    scenario = load(args.scenario)
    cfg = config_from(args)
    try:
        result = simulate(scenario, cfg, progress=_progress(args.quiet))
    except FeasibilityError as err:
        raise CommandError(f"{args.scenario}: {err}", EXIT_FAILURE) from None
    except PsdsfError as err:
        raise CommandError(str(err)) from None
    if not args.quiet:
        print(f"psdsf-dist: simulate: {len(result.trace)} rounds of {result.scenario.num_servers}"
              f" servers ({result.gossip} gossip) in {result.seconds:.2f} s, "
              f"{result.seconds_per_round:.4f} s per round", file=sys.stderr)
    emit(render(result, json_output=args.json), args.output)
    return 0


def render(result: SimulationResult, *, json_output: bool) -> str:
    cfg = result.config
    final = certificate(result.scenario, result.allocation, mode=cfg.mode, rtol=cfg.rtol,
                        explain=not json_output)
    policy = f"psdsf-async/{cfg.rule}"
    if json_output:
        extra = {
            "simulation": {
                "rounds": cfg.rounds, "period": cfg.period, "lockstep": cfg.lockstep,
                "jitter": cfg.jitter, "delay": cfg.delay, "loss": cfg.loss,
                "fanout": cfg.fanout, "gossip_rate": cfg.gossip_rate, "seed": cfg.seed,
                "rule": cfg.rule, "rtol": cfg.rtol, "hold": cfg.hold,
                "signed_moves": cfg.signed_moves,
                "gossip": result.gossip, "seconds": result.seconds,
                "seconds_per_round": result.seconds_per_round,
            },
            "events": [e.to_json() for e in result.events],
            "trace": [rec.to_json() for rec in result.trace],
        }
        return dumps(allocation_json(result.scenario, result.allocation, policy=policy,
                                     mode=cfg.mode, certificate=final, extra=extra))
    lines = [allocation_table(result.scenario, result.allocation, policy=policy, mode=cfg.mode,
                              certificate=final), "",
             f"convergence (certificate held {cfg.hold} rounds in a row, or until the next event)"]
    for e in result.events:
        when = ("never" if e.converged_round is None
                else f"round {e.converged_round} ({e.rounds_to_converge} rounds after)")
        lines.append(f"  t={e.at:g}s {e.description}: {when}")
    lines.append(f"{len(result.trace)} rounds, {result.gossip} gossip, "
                 f"{result.seconds_per_round:.4f} s per simulated round")
    return "\n".join(lines)
