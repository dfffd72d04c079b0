"""``psdsf-dist simulate``: run the asynchronous protocol on a simulated clock (deterministic)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from psdsf_dist.cli.common import (
    EXIT_FAILURE,
    MAX_ROUNDS,
    CommandError,
    add_gossip_option,
    add_protocol_options,
    emit,
    int_in,
    load_within_work,
    protocol_config,
    render_outcome,
)
from psdsf_dist.errors import FeasibilityError, PsdsfError
from psdsf_dist.protocol.convergence import Observation
from psdsf_dist.simulator.simulation import SimConfig, SimulationResult, simulate

PROGRESS_EVERY = 10  # rounds between progress lines (plus every change of the verdict)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "simulate",
        help="simulate asynchronous PS-DSF with gossip on a simulated clock (deterministic)",
    )
    p.add_argument("scenario", help="scenario file (YAML or JSON); its `events` are applied")
    p.add_argument("--rounds", type=int_in(1, MAX_ROUNDS), default=SimConfig.rounds, metavar="R",
                   help=f"rounds (periods) to simulate (default {SimConfig.rounds})")
    add_protocol_options(p)
    add_gossip_option(p)
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--json", action="store_true",
                   help="print a JSON object: trace, events, final allocation (solve format)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.set_defaults(run=run)


def config_from(args: argparse.Namespace) -> SimConfig:
    cfg = SimConfig(protocol=protocol_config(args), rounds=args.rounds, gossip=args.gossip)
    try:
        cfg.check()
    except ValueError as err:
        raise CommandError(str(err)) from None
    return cfg


def _progress(quiet: bool) -> Callable[[Observation], None]:
    last: list[bool] = []

    def show(rec: Observation) -> None:
        changed = bool(last) and last[-1] != rec.holds
        last.append(rec.holds)
        if quiet or not (changed or rec.round % PROGRESS_EVERY == 0):
            return
        verdict = "holds" if rec.holds else "fails"
        print(f"psdsf-dist: simulate: round {rec.round} t={rec.time:g}s certificate {verdict} "
              f"residual {rec.residual:.2e} change {rec.max_relative_change:.1e} "
              f"distance {'?' if rec.distance is None else f'{rec.distance:.1e}'} "
              f"util {100 * rec.utilization:.1f}% {rec.bytes:.0f} B/server "
              f"({rec.seconds:.3f} s)", file=sys.stderr, flush=True)

    return show


def run(args: argparse.Namespace) -> int:
    cfg = config_from(args)
    scenario = load_within_work(args.scenario, cfg.rounds, "--rounds", "rounds", instants=True)
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
    return render_outcome(
        result, policy=f"psdsf-async/{result.protocol.rule}", json_output=json_output,
        section="simulation",
        fields={"rounds": result.config.rounds, "gossip": result.gossip,
                "seconds": result.seconds, "seconds_per_round": result.seconds_per_round},
        summary=(f"{len(result.trace)} rounds, {result.gossip} gossip, "
                 f"{result.seconds_per_round:.4f} s per simulated round"))
