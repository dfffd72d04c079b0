"""What the reproduction scripts share: where they write, the figure style, per-round traces of
a distributed run (simulator or Ray), utilisation per server class, phase means.

Every ``repro_*.py`` module exposes ``run(quick: bool) -> Section``: a markdown section of
``experiments/results/REPORT.md`` (tables and figure links) and the seconds it took;
``python -m experiments report`` runs them all.  Figures are 8 x 4.5 inches at 100 dpi (800
px wide, the README's width), every axis labelled with its unit.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from experiments.common.paths import REPORT_DIR
from experiments.common.sim_common import write_csv
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.simulator.simulation import SimConfig, Simulator

FloatArray = npt.NDArray[np.float64]

FIG_WIDTH, FIG_HEIGHT, DPI = 8.0, 4.5, 100


@dataclass
class Section:
    title: str
    markdown: str
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def section_main(doc: str | None, run: Callable[..., Section], argv: list[str] | None, *,
                 quick: bool = True, ray: bool = False) -> None:
    """The command line of one ``repro_*.py`` (``--quick``, ``--ray`` where it has them): its
    section printed, with the seconds it took."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    if quick:
        ap.add_argument("--quick", action="store_true")
    if ray:
        ap.add_argument("--ray", action=argparse.BooleanOptionalAction, default=None)
    args = ap.parse_args(argv)
    sec = run(bool(getattr(args, "quick", False)), *([args.ray] if ray else []))
    print(sec.markdown)
    print(f"({sec.seconds:.0f} s)")


@dataclass(frozen=True)
class Trace:
    """A distributed run observed once per period: the allocation at each observation time."""

    label: str
    times: FloatArray
    allocations: tuple[FloatArray, ...]
    events: tuple[tuple[str, int | None], ...] = ()
    """(event, rounds until the certificate held for good)."""
    seconds: float = 0.0
    faults: str = ""
    """What went wrong in a Ray run (restarts, the run's failure), empty if nothing."""


def run_faults(status: Mapping[str, object]) -> str:
    """A Ray run's faults from its status, for the report: restarts and the run's failure."""
    parts = []
    if status.get("restarts"):
        parts.append(f"{status['restarts']} server restart(s)")
    if status.get("failure"):
        parts.append(f"failure: {status['failure']}")
    return "; ".join(parts)


def paced_ray_trace(scenario: Scenario, periods: int, servers_per_actor: int, run_id: str,
                    label: str) -> Trace:
    """The scenario on a fresh local Ray (2 CPUs) with the default protocol, paced (the manual
    clock, advanced one period at a time): the allocation after every period, the events'
    re-convergence and the run's faults."""
    import ray

    from psdsf_dist.protocol.config import ProtocolConfig
    from psdsf_dist.runtime.launcher import launch
    from psdsf_dist.runtime.names import NAMESPACE
    from psdsf_dist.runtime.settings import RunConfig

    # address="local": always a Ray of our own, never another cluster running on this machine
    ray.init(address="local", num_cpus=2, namespace=NAMESPACE, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    t0 = time.perf_counter()
    try:
        run = launch(scenario, RunConfig(ProtocolConfig(), clock="manual",
                                         servers_per_actor=servers_per_actor), run_id=run_id)
        try:
            times, allocations = [], []
            for _ in range(periods):
                obs = run.advance(1)[-1]
                times.append(float(obs["time"]))
                allocations.append(np.array(run.allocation()))
            events = tuple((e.description, e.rounds) for e in run.result().events)
            faults = run_faults(run.status())
        finally:
            run.stop()
    finally:
        ray.shutdown()
    return Trace(label, np.array(times), tuple(allocations), events,
                 time.perf_counter() - t0, faults)


def simulate_trace(scenario: Scenario, config: SimConfig, label: str) -> Trace:
    """Run the simulator and keep every observed allocation (N x K per period)."""
    allocations: list[FloatArray] = []
    times: list[float] = []
    sim = Simulator(scenario, config)

    def keep(obs: Any) -> None:
        allocations.append(sim.allocation())
        times.append(float(obs.time))

    sim.progress = keep
    t0 = time.perf_counter()
    res = sim.run()
    return Trace(label, np.array(times), tuple(allocations),
                 tuple((e.description, e.rounds) for e in res.events),
                 time.perf_counter() - t0)


def class_mask(scenario: Scenario, cls: str) -> npt.NDArray[np.bool_]:
    out: npt.NDArray[np.bool_] = np.array(scenario.server_class) == cls
    return out


def class_use(scenario: Scenario, X: FloatArray, cls: str, resource: str) -> float:
    """Fraction of a class's total capacity of one resource in use (RDM consumption)."""
    m = class_mask(scenario, cls)
    r = scenario.resources.index(resource)
    cons = scenario.consumption_tensor("rdm")[m][:, :, r]  # K_c x N
    used = float(np.einsum("nk,kn->", X[:, m], cons))
    return used / float(scenario.capacity[m, r].sum())


def resource_share(scenario: Scenario, X: FloatArray) -> FloatArray:
    """N x M: each user's share of the cluster's total of each resource."""
    cons = scenario.consumption_tensor("rdm")  # K x N x M
    used = np.einsum("nk,knm->nm", X, cons)
    return np.asarray(used / scenario.capacity.sum(axis=0)[None, :])


def phase_mean(times: FloatArray, values: Sequence[float], start: float, end: float) -> float:
    """Mean of the values observed at times in [start, end)."""
    v = np.asarray(values)
    m = (times >= start) & (times < end)
    return float(v[m].mean()) if m.any() else float("nan")


def pct(v: float | None, digits: int = 1) -> str:
    return "-" if v is None or not np.isfinite(v) else f"{100 * v:.{digits}f}%"


def figure(nrows: int = 1, ncols: int = 1, height: float = FIG_HEIGHT) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "legend.fontsize": 8})
    return plt.subplots(nrows, ncols, figsize=(FIG_WIDTH, height), squeeze=False)


def save(fig: Any, name: str) -> str:
    """Write the figure under experiments/results/report/; returns its path relative to
    REPORT.md."""
    import matplotlib.pyplot as plt

    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(REPORT_DIR / name, dpi=DPI)
    plt.close(fig)
    return f"report/{name}"


def save_csv(name: str, rows: Sequence[dict[str, Any]]) -> str:
    write_csv(REPORT_DIR / name, rows)
    return f"report/{name}"


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def seconds_text(s: float) -> str:
    if s < 1:
        return f"{1000 * s:.0f} ms"
    if s < 120:
        return f"{s:.1f} s"
    return f"{s / 60:.1f} min"
