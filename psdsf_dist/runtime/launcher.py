"""The Python API of the distributed allocator: start or join Ray, launch a run, steer it.

::

    from psdsf_dist.protocol.config import ProtocolConfig
    from psdsf_dist.runtime.launcher import launch, RunConfig
    run = launch("psdsf_dist/examples/paper_cluster.yaml", RunConfig(ProtocolConfig(period=0.5)))
    run.wait(duration=60, until_converged=True)
    run.apply({"set_weight": {"user": "u1", "weight": 3}})
    result = run.result()
    run.stop()

With no address a local Ray of its own is started (``address="local"``: never another
instance running on the machine, whatever ``RAY_ADDRESS`` or Ray's current-cluster file say);
``"auto"`` or a Ray address joins an existing cluster.  A run's actors are named after its
``run_id`` (:mod:`psdsf_dist.runtime.names`): runs with different names share a cluster, and a
new run of the name of a dead one (its driver killed) first ends that one's leftover actors
(:func:`clear_leftovers`); :func:`stop_run` ends a run from any driver.

Scenario servers are spread round-robin over the alive nodes; a scenario with ``servers:
from-ray`` gets one server per node, pinned to it, with the node's resources as capacities
(:mod:`psdsf_dist.runtime.from_ray`).
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ParamSpec, TypeVar

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from psdsf_dist.admission.identity import tenant_token
from psdsf_dist.errors import PsdsfError, ScenarioError, ScenarioWarning
from psdsf_dist.model.document import read_document
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.protocol.convergence import ObservationJson
from psdsf_dist.runtime.coordinator import RemoteCoordinator
from psdsf_dist.runtime.from_ray import (
    RayNode,
    ServerEntry,
    from_ray_document,
    is_from_ray,
    node_entry,
)
from psdsf_dist.runtime.handles import (
    CoordinatorHandle,
    RemoteMethod,
    ServerHandle,
    named_actor,
)
from psdsf_dist.runtime.messages import FloatArray, RunResult
from psdsf_dist.runtime.names import (
    DEFAULT_RUN_ID,
    NAMESPACE,
    check_run_name,
    coordinator_name,
    run_actor_names,
)
from psdsf_dist.runtime.ray_address import check_ray_address
from psdsf_dist.runtime.ray_state import named_actors, nodes
from psdsf_dist.runtime.run_status import RunStatus
from psdsf_dist.runtime.server_care import NodeSpec
from psdsf_dist.runtime.settings import RunConfig

P = ParamSpec("P")
R = TypeVar("R")

COORDINATOR_RESTART_WAIT = 60.0  # seconds a call waits for a restarting coordinator

__all__ = ["ChurnError", "Prepared", "Run", "RunConfig", "RunExistsError", "RunResult", "attach",
           "clear_leftovers", "connect", "launch", "prepare", "stop_run"]

COORDINATOR_RESTARTS = 3
LIVE_CHECK_TIMEOUT = 10.0
"""Seconds a run's coordinator has to answer before a new run of its name counts it alive."""
NAME_RELEASE_TIMEOUT = 30.0
"""Seconds Ray may take to free the names of killed actors."""


class ChurnError(ScenarioError):
    """A change asked of a running allocation was refused (unknown user, user absent, ...)."""

    def __init__(self, message: str) -> None:
        super().__init__("", message)


class RunExistsError(PsdsfError, RuntimeError):
    """A run of that name is alive in the cluster (one line)."""


def connect(address: str | None = None, *, num_cpus: int | None = None) -> bool:
    """Make sure this process is connected to Ray; returns whether it started a local one.
    Without ``address`` the Ray started is this process's own (``"local"``), never one already
    running on the machine."""
    if ray.is_initialized():
        return False
    if address is None:
        _init("local", num_cpus)
        return True
    check_ray_address(_bootstrap_address(address))
    _init(address)
    return False


def _init(address: str, num_cpus: int | None = None) -> None:
    """``ray.init``, quiet: no dashboard, the workers' logs not copied to this driver."""
    ray.init(address=address, num_cpus=num_cpus, namespace=NAMESPACE, include_dashboard=False,
             log_to_driver=False, configure_logging=False)


def _bootstrap_address(address: str) -> str:
    """The ``host:port`` that ``ray.init(address)`` would join (``auto``: ``RAY_ADDRESS`` or the
    cluster most recently started on this machine); :class:`ConnectionError` if none."""
    from ray._private.services import canonicalize_bootstrap_address_or_die

    return canonicalize_bootstrap_address_or_die(address)


@dataclass(frozen=True)
class Prepared:
    scenario: Scenario
    pinned: dict[str, str]
    """server -> Ray node id (``servers: from-ray``)."""
    node_spec: NodeSpec | None


def prepare(source: str | Path | Mapping[str, object] | Scenario) -> Prepared:
    """A scenario ready to launch; ``servers: from-ray`` is resolved against the connected
    cluster's nodes (so Ray must be connected first for such a file)."""
    if isinstance(source, Scenario):
        return Prepared(source, {}, None)
    name = str(source) if not isinstance(source, Mapping) else None
    doc = source if isinstance(source, Mapping) else read_document(source)
    if not is_from_ray(doc):
        return Prepared(Scenario.from_dict(doc, name), {}, None)
    try:
        resolved, pins = from_ray_document(doc, nodes())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ScenarioWarning)
            scenario = Scenario.from_dict(resolved, name)
    except ScenarioError as err:
        raise (err.with_source(name) if name else err) from None
    spec = functools.partial(_node_spec, resources=tuple(scenario.resources))
    return Prepared(scenario, pins, spec)


def _node_spec(node: RayNode, resources: tuple[str, ...]) -> ServerEntry:
    return node_entry(node, resources)


class Run:
    """A handle on a running allocation (its coordinator).  ``secret``: the run's secret, made
    by :func:`launch`; churn and stop need it (another driver on the cluster that finds the
    coordinator by name cannot change the run by accident).  A handle from :func:`attach`
    without it only reads (status, observations, result)."""

    def __init__(self, coordinator: CoordinatorHandle, run_id: str, config: RunConfig,
                 secret: str | None = None) -> None:
        self.coordinator = coordinator
        self.run_id = run_id
        self.config = config
        self.secret = secret

    def _ask(self, method: RemoteMethod[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the coordinator, riding out its restarts (it rebuilds its state from the servers;
        a call made while it restarts fails with ActorUnavailableError and is sent again)."""
        deadline = time.monotonic() + COORDINATOR_RESTART_WAIT
        while True:
            try:
                return ray.get(method.remote(*args, **kwargs))
            except ray.exceptions.ActorUnavailableError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def status(self) -> RunStatus:
        return self._ask(self.coordinator.status)

    def apply(self, change: Mapping[str, object]) -> str:
        """One churn change in the scenario-file event syntax (``at`` is ignored: now).
        Raises :class:`ChurnError` (one line) if it does not fit the run's state."""
        ok, text = self._ask(self.coordinator.apply, dict(change), self.secret)
        if not ok:
            raise ChurnError(text)
        return str(text)

    def user_leaves(self, user: str) -> str:
        return self.apply({"user_leaves": user})

    def user_joins(self, user: str | Mapping[str, object]) -> str:
        return self.apply({"user_joins": user if isinstance(user, str) else dict(user)})

    def set_demand(self, user: str, demand: Mapping[str, float]) -> str:
        return self.apply({"set_demand": {"user": user, "demand": dict(demand)}})

    def set_weight(self, user: str, weight: float) -> str:
        return self.apply({"set_weight": {"user": user, "weight": weight}})

    def tenant_token(self, user: str) -> str:
        """``user``'s token for this run (a run with a tenant policy checks it on every
        call the tenant makes): give it to the tenant, e.g. as ``$PSDSF_TENANT_TOKEN``."""
        if self.secret is None:
            raise ChurnError(f"run {self.run_id!r}: issuing a tenant token needs the run's "
                             "secret (the launching Run's .secret)")
        return tenant_token(self.secret, user)

    def advance(self, periods: int = 1) -> list[ObservationJson]:
        """Manual clock only: move the run on by whole periods (observing after each)."""
        return self._ask(self.coordinator.advance, periods)

    def observations(self, since: int = 0) -> list[ObservationJson]:
        return self._ask(self.coordinator.observations_json, since)

    def result(self) -> RunResult:
        return self._ask(self.coordinator.result)

    def allocation(self) -> FloatArray | None:
        """The latest observation's allocation (users x servers; None before the first)."""
        return self._ask(self.coordinator.allocation)

    def user_totals(self) -> dict[str, float]:
        """Each present user's tasks in the latest observation, summed over the servers."""
        return self._ask(self.coordinator.user_totals)

    def user_allocation(self) -> dict[str, dict[str, float]]:
        """Each present user's tasks on each server in the latest observation."""
        return self._ask(self.coordinator.user_allocation)

    def handles(self) -> dict[str, ServerHandle]:
        """Server name -> the actor hosting it."""
        return self._ask(self.coordinator.handles)

    def wait(self, *, duration: float | None = None, until_converged: bool = False,
             hold: int | None = None, progress: Callable[[RunStatus], None] | None = None,
             poll: float | None = None) -> RunStatus:
        """Let the run go on for ``duration`` seconds, or — with ``until_converged`` — until
        every scenario event has happened and the certificate has held ``hold`` observations in
        a row (default: the run's ``RunConfig.hold``; whichever first).  ``progress`` gets each
        new status.

        Real clock: waits in wall-clock time.  Manual clock (paced): moves the run on one
        period at a time as fast as the servers finish, ``duration`` in run time."""
        paced = self.config.clock == "manual"
        step = poll if poll is not None else max(self.config.period, 0.2)
        start = self.status()["time"] if paced else time.monotonic()
        while True:
            st = self.status()
            if progress is not None:
                progress(st)
            if until_converged and st["events_applied"] >= st["events_total"] \
                    and _held(self, st, self.config.protocol.hold if hold is None else hold):
                return st
            elapsed = st["time"] - start if paced else time.monotonic() - start
            if duration is not None and elapsed >= duration - 1e-9:
                return st
            if paced:
                self.advance(1)
            else:
                time.sleep(step)

    def stop(self) -> None:
        """End every actor of the run (servers and coordinator)."""
        try:
            stopped = ray.get(self.coordinator.stop.remote(self.secret), timeout=60)
        except BaseException:
            ray.kill(self.coordinator, no_restart=True)  # it could not stop itself
            raise
        if not stopped:
            raise ChurnError(f"run {self.run_id!r} refused to stop: wrong or missing run secret "
                             "(the launching Run's .secret)")
        ray.kill(self.coordinator, no_restart=True)


def _held(run: Run, st: RunStatus, hold: int) -> bool:
    """The certificate held in the last ``hold`` observations, all made after the last event
    was applied (as :func:`~psdsf_dist.protocol.convergence.event_convergence` judges it: an
    event applied late, after observations stamped past its due time, must not be taken as
    converged on the observations of the table before it)."""
    rounds = st["round"]
    if rounds is None or rounds + 1 < hold:
        return False
    tail = run.observations(rounds + 1 - hold)
    return len(tail) >= hold and all(o["holds"] for o in tail) \
        and tail[0]["time"] >= st["last_event_at"]


def launch(source: str | Path | Mapping[str, object] | Scenario, config: RunConfig | None = None,
           *, address: str | None = None, run_id: str = DEFAULT_RUN_ID,
           detached: bool = False, num_cpus: int | None = None) -> Run:
    """Connect to Ray (see :func:`connect`), start the coordinator and the server actors.  The
    run gets a fresh secret (``Run.secret``): keep it to steer a detached run from another
    driver (:func:`attach`)."""
    cfg = config or RunConfig()
    cfg.check()
    check_run_name(run_id)
    connect(address, num_cpus=num_cpus)
    clear_leftovers(run_id)
    prepared = prepare(source)
    prepared.scenario.check_mode(cfg.protocol.mode)
    options: dict[str, object] = {"name": coordinator_name(run_id), "namespace": NAMESPACE,
                               "num_cpus": 0, "max_restarts": COORDINATOR_RESTARTS,
                               "max_concurrency": 1000}
    if detached:
        options["lifetime"] = "detached"
    # The coordinator lives beside the driver (the head node under `ray job submit`): removing a
    # worker node must not take the coordinator, and its metrics endpoint, with it.  Hard:
    # Ray does not honour a soft affinity for a zero-CPU actor (see runtime/placement.py).
    options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
        node_id=ray.get_runtime_context().get_node_id(), soft=False
    )
    secret = secrets.token_urlsafe(24)
    coordinator = RemoteCoordinator.options(**options).remote(
        run_id, prepared.scenario, cfg, prepared.pinned, True, prepared.node_spec, secret)
    ray.get(coordinator.start.remote())
    return Run(coordinator, run_id, cfg, secret)


def attach(run_id: str = DEFAULT_RUN_ID, config: RunConfig | None = None,
           secret: str | None = None) -> Run:
    """A handle on a run started elsewhere (e.g. a detached coordinator); ``secret`` (the
    launching handle's ``Run.secret``) to steer it, none to only read it.  Without ``config``
    the handle takes the run's own from its coordinator, so ``Run.wait`` paces and judges
    convergence by the run's period and hold, not by defaults."""
    handle = named_actor(coordinator_name(run_id), CoordinatorHandle)
    if config is None:
        config = ray.get(handle.run_config.remote(), timeout=LIVE_CHECK_TIMEOUT)
    return Run(handle, run_id, config, secret)


def clear_leftovers(run_id: str) -> int:
    """Before a run named ``run_id`` starts: refuse if one of that name is alive
    (:class:`RunExistsError`), else end what a dead one left (its server actors are detached:
    they outlive a driver killed with ``kill -9``) and wait until their names are free.
    Returns how many actors were ended."""
    coordinator: CoordinatorHandle | None
    try:
        coordinator = named_actor(coordinator_name(run_id), CoordinatorHandle)
    except ValueError:
        coordinator = None
    if coordinator is not None:
        try:
            ray.get(coordinator.status.remote(), timeout=LIVE_CHECK_TIMEOUT)
        except ray.exceptions.RayActorError:
            pass  # dead, its name not yet released: a leftover like the others
        except ray.exceptions.GetTimeoutError:
            raise RunExistsError(f"run {run_id!r}: its coordinator exists but did not answer "
                                 f"within {LIVE_CHECK_TIMEOUT:g} s (stop it with `psdsf-dist "
                                 f"stop --name {run_id}`)") from None
        else:
            raise RunExistsError(f"run {run_id!r} is already running in this Ray cluster (stop "
                                 f"it with `psdsf-dist stop --name {run_id}`, or pick another "
                                 "--name)")
    return stop_run(run_id)


def stop_run(run_id: str) -> int:
    """End every actor of run ``run_id`` in the connected cluster — its coordinator and its
    servers, alive or left over — and wait until their names are free (at most
    :data:`NAME_RELEASE_TIMEOUT`).  Returns how many actors were ended."""
    names = run_actor_names(run_id, named_actors())
    for name in names:
        with contextlib.suppress(ValueError):  # gone meanwhile
            ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
    deadline = time.monotonic() + NAME_RELEASE_TIMEOUT
    while time.monotonic() < deadline:
        left = set(run_actor_names(run_id, named_actors()))
        if not left & set(names):
            break
        time.sleep(0.1)
    return len(names)
