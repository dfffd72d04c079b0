"""``psdsf-dist observe``: run the deterministic simulator and export its live state to Prometheus.

The simulated allocator is exported exactly as a running one is
(:mod:`psdsf_dist.observability.metrics` on one endpoint,
:mod:`psdsf_dist.observability.metrics_server`), so a simulated run can be watched in Prometheus
and Grafana.  Each simulated round takes ``--pace`` seconds of wall-clock time (default: the
period, i.e. real time), so scrapes see the run unfold; ``--keep-serving`` keeps serving the final
state.

Times in the metrics are the simulation's own (a round is ``--period`` seconds), except the
server-procedure latency, which is the wall-clock time each server's update took.  Every server
computes its own update (the snapshot model's sharing of one computation between identical
servers is off), so each round counts and times every live server.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import numpy as np
import numpy.typing as npt

from psdsf_dist.cli.common import (
    EXIT_FAILURE,
    MAX_ROUNDS,
    SECONDS,
    CommandError,
    add_gossip_option,
    add_protocol_options,
    emit,
    int_in,
    load_within_work,
    protocol_config,
)
from psdsf_dist.cli.simulate import render
from psdsf_dist.errors import FeasibilityError, PsdsfError
from psdsf_dist.model.events import Event, ServerJoins
from psdsf_dist.observability.metrics import AllocatorMetrics, RunMetrics, allocation_state
from psdsf_dist.observability.metrics_server import DEFAULT_BIND, DEFAULT_PORT, MetricsServer
from psdsf_dist.protocol.convergence import Observation
from psdsf_dist.simulator.simulation import SimConfig, SimulationResult, Simulator

FloatArray = npt.NDArray[np.float64]

PROGRESS_EVERY = 10  # rounds between progress lines
EXIT_TERMINATED = 128 + signal.SIGTERM


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "observe",
        help="simulate asynchronous PS-DSF and export its live state as Prometheus metrics",
    )
    p.add_argument("scenario", help="scenario file (YAML or JSON); its `events` are applied")
    p.add_argument("--port", type=int_in(0, 65535), default=DEFAULT_PORT, metavar="P",
                   help=f"metrics port (default {DEFAULT_PORT}; 0 picks a free one, printed)")
    p.add_argument("--bind", default=DEFAULT_BIND, metavar="A",
                   help=f"address to serve metrics on (default {DEFAULT_BIND}; 0.0.0.0 for all)")
    p.add_argument("--rounds", type=int_in(1, MAX_ROUNDS), default=SimConfig.rounds, metavar="R",
                   help=f"rounds (periods) to simulate (default {SimConfig.rounds})")
    p.add_argument("--pace", type=SECONDS, metavar="S",
                   help="wall-clock seconds per simulated round (default: the period, i.e. "
                        "real time; 0 = as fast as possible)")
    p.add_argument("--keep-serving", type=SECONDS, default=0.0, metavar="S",
                   help="keep serving the final state for S seconds after the run (default 0)")
    add_protocol_options(p)
    add_gossip_option(p)
    p.add_argument("--no-per-pair", dest="per_pair", action="store_false",
                   help="no per-(user, server) task series (large clusters); per-user and "
                        "per-server aggregates stay")
    p.add_argument("--quiet", action="store_true", help="only the endpoint line on stderr")
    p.add_argument("--json", action="store_true",
                   help="print the final state as JSON (the `simulate --json` format)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the final state to FILE (before holding) instead of stdout")
    p.set_defaults(run=run)


class SimulationExporter:
    """Translates the simulator's state after each round into :class:`AllocatorMetrics`, the
    way a coordinator feeds them (:class:`RunMetrics`), plus what only the simulator knows per
    server: each update's duration and its view's staleness."""

    def __init__(self, sim: Simulator, metrics: AllocatorMetrics) -> None:
        self.sim = sim
        self.metrics = metrics
        self.run = RunMetrics(metrics)
        self.events: tuple[Event, ...] = tuple(sorted(sim.events, key=lambda e: (e.at, e.index)))
        self._next_event = 0
        self._ever_up = set(sim.churn.present_servers())
        self._timed: dict[str, int] = {}
        """Per server incarnation (origin): updates already exported."""

    def start(self) -> None:
        """Membership and the (empty) allocation before the first round."""
        sim = self.sim
        churn = sim.churn
        self.metrics.set_state(allocation_state(churn.current(), sim.allocation(),
                                                users=churn.users_present,
                                                servers=churn.servers_present))
        self.metrics.set_membership(int(churn.servers_present.sum()),
                                    int(churn.users_present.sum()))

    def round(self, rec: Observation) -> None:
        sim, m = self.sim, self.metrics
        churn = sim.churn
        # events due by the observation's instant are applied before it
        while (self._next_event < len(self.events)
               and self.events[self._next_event].at <= rec.time):
            self._event(self.events[self._next_event])
            self._next_event += 1
        names = churn.full.server_names
        for name, node in sim.nodes.items():
            done = self._timed.get(node.origin, 0)
            fresh = min(node.rounds - done, len(node.round_seconds))
            for seconds in list(node.round_seconds)[len(node.round_seconds) - fresh:]:
                m.observe_server_round(name, seconds)
            self._timed[node.origin] = node.rounds
        for i in np.flatnonzero(churn.servers_present):
            name = names[int(i)]
            m.observe_gossip(name, float(sim.traffic.messages[i]), float(sim.traffic.bytes[i]),
                             self._staleness(name))
        self.run.observe(churn.current(), sim.allocation(), users=churn.users_present,
                         servers=churn.servers_present, residual=rec.residual,
                         holds=rec.holds, now=rec.time, distance=rec.distance)

    def _event(self, event: Event) -> None:
        self.run.event(event, event.at)
        if isinstance(event, ServerJoins):
            if event.server in self._ever_up:
                self.run.restart(event.server)
            self._ever_up.add(event.server)

    def _staleness(self, name: str) -> float:
        """Median age of the other servers' columns at the server's latest update (the
        protocol), or the snapshot model's fixed lag."""
        cfg = self.sim.config.protocol
        if self.sim.model == "snapshot":
            return (1 + round(cfg.delay / cfg.period)) * cfg.period
        node = self.sim.nodes.get(name)
        age = None if node is None else node.staleness_seconds
        return 0.0 if age is None else age


class _TerminatedError(Exception):
    pass


@contextmanager
def _terminate_on_sigterm(stop: threading.Event) -> Iterator[None]:
    """SIGTERM (e.g. from a service manager) sets ``stop`` instead of killing the process, so
    the endpoint is closed and the port released."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def config_from(args: argparse.Namespace) -> SimConfig:
    # every server computes its own update, so each is timed and counted
    cfg = SimConfig(protocol=protocol_config(args), rounds=args.rounds, gossip=args.gossip,
                    memoize=False)
    try:
        cfg.check()
    except ValueError as err:
        raise CommandError(str(err)) from None
    return cfg


def run(args: argparse.Namespace) -> int:
    cfg = config_from(args)
    scenario = load_within_work(args.scenario, cfg.rounds, "--rounds", "rounds", instants=True)
    pace = cfg.protocol.period if args.pace is None else args.pace
    metrics = AllocatorMetrics(per_pair=args.per_pair)
    try:
        sim = Simulator(scenario, cfg)
    except PsdsfError as err:
        raise CommandError(f"{args.scenario}: {err}") from None
    server = MetricsServer(metrics.registry, args.port, args.bind)
    try:
        server.start()
    except PsdsfError as err:
        raise CommandError(f"--port/--bind: {err}") from None
    stop = threading.Event()
    try:
        # the handler goes in before the endpoint is announced: whoever read the line may
        # send SIGTERM at once
        with _terminate_on_sigterm(stop):
            print(f"psdsf-dist: observe: serving metrics on {server.url}", file=sys.stderr,
                  flush=True)
            try:
                result = _simulate(sim, metrics, pace, stop, quiet=args.quiet,
                                   source=args.scenario)
            except _TerminatedError:
                print("psdsf-dist: observe: terminated", file=sys.stderr)
                return EXIT_TERMINATED
            emit(render(result, json_output=args.json), args.output)
            if args.keep_serving > 0:
                if not args.quiet:
                    print(f"psdsf-dist: observe: run finished; serving for {args.keep_serving:g} s",
                          file=sys.stderr, flush=True)
                stop.wait(args.keep_serving)
    finally:
        server.stop()
    return 0


def _simulate(sim: Simulator, metrics: AllocatorMetrics, pace: float,
              stop: threading.Event, *, quiet: bool, source: str) -> SimulationResult:
    exporter = SimulationExporter(sim, metrics)
    exporter.start()
    deadline = time.monotonic()

    def progress(rec: Observation) -> None:
        nonlocal deadline
        exporter.round(rec)
        if not quiet and rec.round % PROGRESS_EVERY == 0:
            verdict = "holds" if rec.holds else "fails"
            print(f"psdsf-dist: observe: round {rec.round} t={rec.time:g}s certificate "
                  f"{verdict} residual {rec.residual:.2e}", file=sys.stderr, flush=True)
        # pace the run in wall-clock time, without drifting when a round is slow
        deadline = max(deadline + pace, time.monotonic())
        if stop.wait(max(deadline - time.monotonic(), 0.0)):
            raise _TerminatedError

    sim.progress = progress
    try:
        return sim.run()
    except FeasibilityError as err:
        raise CommandError(f"{source}: {err}", EXIT_FAILURE) from None
    except PsdsfError as err:
        raise CommandError(f"{source}: {err}") from None
