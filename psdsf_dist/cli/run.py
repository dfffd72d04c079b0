"""``psdsf-dist run``: the distributed allocator on Ray — one actor per server, gossip between
them, a coordinator for churn and convergence.

Without ``--address`` a local Ray of its own is started (and shut down at the end), never one
already running on the machine; ``--address auto`` or a Ray address joins a running cluster.
``--name`` names the allocator (its actors are named after it, so allocators of different names
share a cluster); a run of the name of a dead one first ends that one's leftover actors.
``--detach`` (with ``--address``) starts the allocator and returns: ``psdsf-dist stop`` ends it.

Progress (round, certificate residual,
utilisation, time since the last event) goes to stderr; the result — the allocation in the
``solve`` JSON format, or its table, plus per-event re-convergence times — to stdout.

Time compression: ``--period`` sets the servers' update period and ``--time-scale`` the
wall-clock seconds per second of the scenario's event times, so ``--period 0.2 --time-scale
0.2`` replays a scenario written for T = 1 s five times faster, round for round.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from typing import Any

from psdsf_dist.cli.common import (
    EXIT_FAILURE,
    MAX_SECONDS,
    MAX_TIME_SCALE,
    CommandError,
    add_name_option,
    add_protocol_options,
    emit,
    float_in,
    int_in,
    load,
    protocol_config,
    read,
    render_outcome,
    results_only_on_stdout,
    show_arg,
)
from psdsf_dist.errors import PsdsfError, ScenarioError
from psdsf_dist.model.document import parse_document
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.observability.metrics_server import DEFAULT_BIND
from psdsf_dist.runtime.messages import RunResult
from psdsf_dist.runtime.settings import RunConfig

PROGRESS_SECONDS = 1.0  # at most one progress line per this many seconds (plus each event)
SETTLE_PERIODS = 200  # without --duration: give up this many periods after the last event


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("run", help="run the distributed allocator on Ray (one actor per server)")
    p.add_argument("scenario", help="scenario file (YAML or JSON); `servers: from-ray` takes the "
                                    "servers from the Ray cluster's nodes")
    p.add_argument("--address", metavar="ADDR",
                   help="Ray cluster to join (`auto` or host:port); default: start a local Ray "
                        "of its own (never another instance running on the machine)")
    add_name_option(p)
    p.add_argument("--detach", action="store_true",
                   help="with --address: start the allocator, print its name and return; it "
                        "serves until `psdsf-dist stop --name NAME`")
    p.add_argument("--tenant-tokens", metavar="FILE",
                   help="a tenants scenario with a tenant_policy: write each declared tenant's "
                        "token to FILE (lines `name token`, mode 0600) once the run is up; "
                        "give each tenant its own (Tenant.connect(..., token=) or "
                        "$PSDSF_TENANT_TOKEN)")
    d = RunConfig()
    p.add_argument("--time-scale", type=float_in(0.0, MAX_TIME_SCALE, low_open=True),
                   default=d.time_scale, metavar="F",
                   help="wall-clock seconds per second of the scenario's event times "
                        f"(default {d.time_scale:g}: event times are seconds, as in simulate; "
                        "set it to the period to count them in rounds)")
    p.add_argument("--duration", type=float_in(0.0, MAX_SECONDS, low_open=True),
                   metavar="S",
                   help="stop after S seconds (default: once converged after the last event, "
                        f"or {SETTLE_PERIODS} periods after it)")
    p.add_argument("--until-converged", action="store_true",
                   help="stop as soon as the last event has passed and the certificate has held "
                        "--hold rounds in a row (at most --duration)")
    p.add_argument("--event", action="append", default=[], metavar="YAML",
                   help="an extra churn event in the scenario syntax, e.g. "
                        "'{at: 30, set_weight: {user: u1, weight: 3}}' (repeatable)")
    add_protocol_options(p)
    p.add_argument("--paced", action="store_true",
                   help="time moves one period on as soon as every server has done its part "
                        "(a compressed replay whose rounds do not depend on the machine's "
                        "speed; --duration then counts run time)")
    p.add_argument("--servers-per-actor", type=int_in(1, 1_000_000), default=d.servers_per_actor,
                   metavar="P",
                   help="servers hosted by one actor process (default "
                        f"{d.servers_per_actor}: one actor per server; more saves memory and "
                        "start-up on a small machine)")
    p.add_argument("--num-cpus", type=int_in(1, 4096), metavar="C",
                   help="CPUs of the embedded local Ray (default: all)")
    p.add_argument("--metrics-port", type=int_in(0, 65535), metavar="P",
                   help="serve Prometheus metrics from the coordinator on port P (0 picks a free "
                        "port; the URL is printed); default: no endpoint")
    p.add_argument("--metrics-bind", default=DEFAULT_BIND, metavar="A",
                   help=f"address of the metrics endpoint (default {DEFAULT_BIND}; 0.0.0.0 for "
                        "all)")
    p.add_argument("--no-per-pair-metrics", dest="per_pair_metrics", action="store_false",
                   help="no per-(user, server) task series (large clusters); per-user and "
                        "per-server aggregates stay")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--json", action="store_true",
                   help="print a JSON object: the allocation (solve format), events, trace")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.set_defaults(run=run)


def config_from(args: argparse.Namespace) -> RunConfig:
    protocol = protocol_config(args)
    cfg = RunConfig(protocol=protocol, servers_per_actor=args.servers_per_actor,
                    clock="manual" if args.paced else "real",
                    time_scale=args.time_scale)
    try:
        cfg.check()
    except ValueError as err:
        raise CommandError(str(err)) from None
    return cfg


def extra_events(texts: list[str]) -> list[Any]:
    out: list[Any] = []
    for j, text in enumerate(texts):
        try:
            ev = parse_document(text, f"--event[{j}]")
        except ScenarioError as err:
            raise CommandError(str(err)) from None
        if not isinstance(ev, dict):
            raise CommandError(f"--event[{j}]: not a YAML mapping: {show_arg(text)}")
        out.append(ev)
    return out


def source_of(path: str, events: list[Any]) -> Any:
    """What to launch: the scenario (checked now, before Ray starts) or, for ``servers:
    from-ray``, its document (resolved once Ray is up)."""
    from psdsf_dist.runtime.from_ray import is_from_ray

    doc = read(path)
    if is_from_ray(doc):
        if events:
            doc = {**doc, "events": [*(doc.get("events") or []), *events]}
        return doc
    scenario = load(path, doc)
    if not events:
        return scenario
    try:
        return Scenario.from_dict({**doc, "events": [*(doc.get("events") or []), *events]},
                                  path)
    except ScenarioError as err:
        raise CommandError(str(err)) from None


def run(args: argparse.Namespace) -> int:
    cfg = config_from(args)
    if args.detach and args.address is None:
        raise CommandError("--detach: needs --address (a local Ray started here ends with the "
                           "command)")
    source = source_of(args.scenario, extra_events(args.event))
    if isinstance(source, Scenario):
        try:
            source.check_mode(cfg.protocol.mode)
        except ScenarioError as err:
            raise CommandError(f"{args.scenario}: {err}") from None
        last = max((e.at for e in source.events), default=0.0)
        if args.duration is None and last * cfg.time_scale > MAX_SECONDS:
            raise CommandError(f"{args.scenario}: the last event, at {last:g} s, comes "
                               f"{last * cfg.time_scale:g} s of wall-clock time into the run, "
                               f"more than {MAX_SECONDS:g} s (give --duration, or a smaller "
                               "--time-scale)")
    if args.tenant_tokens is not None and _policy_tenants(source) is None:
        raise CommandError(f"--tenant-tokens: {args.scenario} has no tenant_policy (tokens are "
                           "checked only in a run with one)")
    began = time.monotonic()
    if args.detach:
        with results_only_on_stdout():
            return _detach(args, cfg, source)
    with results_only_on_stdout():  # Ray's lines go to stderr: stdout is the result alone
        result, final, converge = _run_on_ray(args, cfg, source, began)
    emit(render(result, json_output=args.json, seconds=time.monotonic() - began),
         args.output)
    if final.get("failure"):
        print(f"psdsf-dist: run: {final['failure']}", file=sys.stderr)
        return EXIT_FAILURE
    if not all(o.feasible for o in result.trace):
        print("psdsf-dist: run: a column exceeded its server's capacity", file=sys.stderr)
        return EXIT_FAILURE
    if converge and not (result.trace and result.trace[-1].holds):
        print("psdsf-dist: run: the certificate did not hold at the end", file=sys.stderr)
        return EXIT_FAILURE
    return 0


def _connect(args: argparse.Namespace) -> bool:
    from psdsf_dist.runtime.launcher import connect

    try:
        return connect(args.address, num_cpus=args.num_cpus)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise CommandError(f"--address {args.address}: cannot connect to Ray: {err}",
                           EXIT_FAILURE) from None


def _launch(args: argparse.Namespace, cfg: RunConfig, source: Any, *, detached: bool) -> Any:
    from psdsf_dist.runtime.launcher import RunExistsError, launch

    try:
        return launch(source, cfg, run_id=args.name, detached=detached)
    except ScenarioError as err:
        raise CommandError(str(err) if err.source else f"{args.scenario}: {err}") from None
    except RunExistsError as err:
        raise CommandError(f"--name: {err}", EXIT_FAILURE) from None


def _detach(args: argparse.Namespace, cfg: RunConfig, source: Any) -> int:
    """Start a detached allocator and return (it serves until ``psdsf-dist stop``)."""
    _connect(args)
    the_run = _launch(args, cfg, source, detached=True)
    _write_tokens(args, source, the_run)
    if args.metrics_port is not None:
        url = serve_metrics(the_run, args.metrics_port, args.metrics_bind, args.per_pair_metrics)
        print(f"psdsf-dist: run: serving metrics on {url}", file=sys.stderr, flush=True)
    print(f"psdsf-dist: run: allocator {args.name!r} started, detached "
          f"({the_run.status()['servers']} servers); stop it with `psdsf-dist stop --name "
          f"{args.name} --address {args.address}`", file=sys.stderr, flush=True)
    return 0


def _run_on_ray(args: argparse.Namespace, cfg: RunConfig, source: Any,
                began: float) -> tuple[RunResult, dict[str, Any], bool]:
    """Connect, launch, wait, collect the result, stop (and shut Ray down if started here)."""
    import ray

    started_ray = _connect(args)
    the_run = None
    try:
        the_run = _launch(args, cfg, source, detached=False)
        _write_tokens(args, source, the_run)
        say = _progress(args.quiet, cfg)
        say(None, f"{the_run.status()['servers']} servers started in "
                  f"{time.monotonic() - began:.1f} s")
        if args.metrics_port is not None:
            url = serve_metrics(the_run, args.metrics_port, args.metrics_bind,
                                args.per_pair_metrics)
            print(f"psdsf-dist: run: serving metrics on {url}", file=sys.stderr, flush=True)
        if _takes_tenants(source) and args.duration is None and not args.until_converged:
            # tenants come and go: serve them until interrupted
            say(None, f"serving tenants (run {args.name!r}); Ctrl-C stops")
            limit, converge = None, False
        else:
            limit = args.duration if args.duration is not None else _default_limit(the_run)
            converge = args.until_converged or args.duration is None
        try:
            final = the_run.wait(duration=limit, until_converged=converge,
                                 progress=lambda st: say(st, None))
        except KeyboardInterrupt:
            final = the_run.status()
        result = the_run.result()
    except PsdsfError as err:
        raise CommandError(f"{args.scenario}: {err}") from None
    except ray.exceptions.RayError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CommandError(f"ray: {type(err).__name__}: {first}", EXIT_FAILURE) from None
    finally:
        if the_run is not None:
            the_run.stop()
        if started_ray:
            ray.shutdown()
    return result, final, converge


def _policy_tenants(source: Any) -> list[str] | None:
    """The tenants the scenario's tenant_policy declares (None: no policy)."""
    if isinstance(source, Scenario):
        policy = source.tenant_policy
        return None if policy is None else list(policy.tenants)
    raw = source.get("tenant_policy", None) if isinstance(source, Mapping) else None
    if raw is None or not isinstance(raw, Mapping):
        return None
    entries = raw.get("tenants") or []
    return [str(t["name"]) for t in (entries if isinstance(entries, list) else [])
            if isinstance(t, Mapping) and "name" in t]


def _write_tokens(args: argparse.Namespace, source: Any, the_run: Any) -> None:
    """``--tenant-tokens``: each declared tenant's token, for the operator to hand out."""
    if args.tenant_tokens is None:
        return
    names = _policy_tenants(source) or []
    emit("".join(f"{n}\t{the_run.tenant_token(n)}\n" for n in names), args.tenant_tokens,
         private=True)


def _takes_tenants(source: Any) -> bool:
    if isinstance(source, Scenario):
        return source.tenants
    return isinstance(source, Mapping) and source.get("tenants") is True


def serve_metrics(the_run: Any, port: int, bind: str, per_pair: bool) -> str:
    """Start the run's Prometheus endpoint in the coordinator's process; its URL."""
    import ray

    try:
        url: str = ray.get(the_run.coordinator.serve_metrics.remote(port, bind, per_pair))
    except ray.exceptions.RayTaskError as err:  # e.g. the port is in use on that node
        cause = getattr(err, "cause", None)
        raise CommandError(f"--metrics-port/--metrics-bind: {cause or err}") from None
    return url


def _default_limit(the_run: Any) -> float:
    cfg: RunConfig = the_run.config
    events = the_run.result().scenario.events
    last = max((e.at for e in events), default=0.0)
    return last * cfg.time_scale + SETTLE_PERIODS * cfg.period


def _progress(quiet: bool, cfg: RunConfig) -> Any:
    last = {"shown": -1e9, "epoch": -1, "holds": None}

    def show(st: dict[str, Any] | None, note: str | None) -> None:
        if quiet:
            return
        if note is not None:
            print(f"psdsf-dist: run: {note}", file=sys.stderr, flush=True)
            return
        assert st is not None
        now = time.monotonic()
        changed = st["epoch"] != last["epoch"] or st["holds"] != last["holds"]
        if not changed and now - float(last["shown"] or 0.0) < PROGRESS_SECONDS:
            return
        last.update(shown=now, epoch=st["epoch"], holds=st["holds"])
        if st["round"] is None:
            return
        verdict = "holds" if st["holds"] else "fails"
        print(f"psdsf-dist: run: round {st['round']} t={st['time']:.1f}s certificate {verdict} "
              f"residual {st['residual']:.2e} util {100 * st['utilization']:.1f}% "
              f"{st['servers']} servers, {st['users']} users, "
              f"{st['since_last_event']:.1f}s since last event{_unmanaged_note(st)}",
              file=sys.stderr, flush=True)

    return show


def _unmanaged_note(st: dict[str, Any]) -> str:
    """Tenant runs: the nodes' usage by work the allocator did not admit, if any."""
    unmanaged = st.get("unmanaged") or {}
    parts = [f"{server} " + " ".join(f"{r} {v:g}" for r, v in usage.items() if v > 0)
             for server, usage in sorted(unmanaged.items())]
    return f", unmanaged: {'; '.join(parts)}" if parts else ""


def render(result: RunResult, *, json_output: bool, seconds: float) -> str:
    processes = len(set(result.pids))
    return render_outcome(
        result, policy=f"psdsf-ray/{result.protocol.rule}", json_output=json_output,
        section="run",
        fields={"time_scale": result.config.time_scale, "servers": result.servers,
                "servers_per_actor": result.config.servers_per_actor,
                "restarts": result.restarts,
                "coordinator_restarts": result.coordinator_restarts, "seconds": seconds,
                "rounds": len(result.trace)},
        summary=(f"{len(result.trace)} rounds of {result.servers} servers "
                 f"({processes} actor process{'' if processes == 1 else 'es'}) in "
                 f"{seconds:.1f} s; restarts: {result.restarts} server, "
                 f"{result.coordinator_restarts} coordinator"))
