"""How busy can an admission layer on Ray keep a node's slots?  Ray's dispatch floor, measured.

Regenerate (writes ``experiments/results/dispatch.md``, ``dispatch.csv``; ~8 minutes)::

    .venv/bin/python -m experiments run bench_dispatch

A tenant's queue (:mod:`psdsf_dist.runtime.tenant_queue`) keeps ``slots`` of its tasks
running on a node: it launches one as another ends.  Between the end and the next start the
slot idles.  This benchmark measures that idle time on one 8-CPU node, 8 slots of 1 CPU,
tasks of 50-200 ms (the tenants benchmark's ``batch`` user), launched from an async actor the
way the queue launches them, in five ways, alternating in the same run:

* ``all at once`` — every task submitted at the start with hard node affinity: Ray's own
  dispatch with nothing between tasks but Ray (the floor any admission layer can reach);
* ``affinity, depth d`` — hard node affinity, at most ``8 + d`` launched: ``d`` tasks wait at
  the node and start as soon as one ends (``d = 0``: each slot waits for the queue to notice
  the end and launch the next; the queue pipelines with ``d = 1``);
* ``slot groups, depth d`` — each slot a one-bundle placement group pinned to the node, at most
  ``1 + d`` tasks per group: a reservation per slot, so that waiting tasks could never take
  another user's slot (the per-(user, node) reservation the tenants' 5 % gap was thought to
  need).

Each runs quiet and with one core busy (a spinning process at normal priority, as the
allocator's actors and the other tenants' queues load the tenants benchmark's two cores).
Measured: the time-average of tasks inside their function body over the launching window (the
tenants benchmark's measure of running tasks), median of ``--repeats`` rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import random
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import ray
from ray.util import placement_group, remove_placement_group
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

from experiments.common.paths import RESULTS
from experiments.common.ray_cluster import local_cluster
from experiments.common.sim_common import write_csv

SLOTS = 8
SECONDS = (0.05, 0.2)
MODES: list[tuple[str, int]] = [("all at once", 0), ("affinity", 0), ("affinity", 1),
                                ("affinity", 4), ("slot groups", 0), ("slot groups", 1)]


def task(seconds: float) -> tuple[float, float]:
    t0 = time.time()
    time.sleep(seconds)
    return t0, time.time()


@ray.remote(num_cpus=0)
class Launcher:
    """Launches tasks like a tenant's queue: a new one as one ends, up to a cap."""

    async def run(self, mode: str, depth: int, node: str, window: float,
                  seed: int) -> list[tuple[float, float]]:
        rng = random.Random(seed)
        remote = ray.remote(task)
        groups: list[Any] = []
        if mode == "slot groups":
            pinned = [{"ray.io/node-id": node}]
            groups = [placement_group([{"CPU": 1}], bundle_label_selector=pinned)
                      for _ in range(SLOTS)]
            await asyncio.gather(*(g.ready() for g in groups))
            functions = [remote.options(num_cpus=1, max_retries=0,
                                        scheduling_strategy=PlacementGroupSchedulingStrategy(g, 0))
                         for g in groups]
            caps = [1 + depth] * SLOTS
        else:
            functions = [remote.options(num_cpus=1, max_retries=0,
                                        scheduling_strategy=NodeAffinitySchedulingStrategy(
                                            node, soft=False))]
            caps = [SLOTS + depth]
        out: list[tuple[float, float]] = []
        launched = [0] * len(functions)
        end = time.time() + window
        done = asyncio.Event()
        pending = 0
        loop = asyncio.get_running_loop()
        watchers: set[asyncio.Task[None]] = set()

        async def watch(i: int, ref: Any) -> None:
            nonlocal pending
            out.append(await ref)
            launched[i] -= 1
            pending -= 1
            pump()
            if pending == 0:
                done.set()

        def pump() -> None:
            nonlocal pending
            if time.time() >= end:
                return
            for i, f in enumerate(functions):
                while launched[i] < caps[i]:
                    launched[i] += 1
                    pending += 1
                    w = loop.create_task(watch(i, f.remote(rng.uniform(*SECONDS))))
                    watchers.add(w)
                    w.add_done_callback(watchers.discard)

        if mode == "all at once":  # as many as the window could hold, all submitted now
            many = int(window * SLOTS / (sum(SECONDS) / 2)) + SLOTS
            refs = [functions[0].remote(rng.uniform(*SECONDS)) for _ in range(many)]
            out = list(await asyncio.gather(*refs))
        else:
            pump()
            await done.wait()
        for g in groups:
            remove_placement_group(g)
        return out


def busy_slots(intervals: list[tuple[float, float]], window_end: float) -> float:
    """Time-average of tasks inside their body from 1 s after the first start (warm) to the
    end of the launching window."""
    a = min(s for s, _ in intervals) + 1.0
    b = window_end
    return sum(max(0.0, min(e, b) - max(s, a)) for s, e in intervals) / (b - a)


def _spin() -> None:
    while True:
        pass


@contextmanager
def one_core_busy(on: bool) -> Iterator[None]:
    if not on:
        yield
        return
    p = multiprocessing.get_context("spawn").Process(target=_spin, daemon=True)
    p.start()
    try:
        yield
    finally:
        p.terminate()
        p.join()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--window", type=float, default=12.0, help="seconds of launches per run")
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with local_cluster({"num_cpus": SLOTS}, namespace=None):
        node = ray.get_runtime_context().get_node_id()
        warm = ray.remote(task).options(num_cpus=1)
        ray.get([warm.remote(0.5) for _ in range(SLOTS)])  # start the workers once
        launcher = Launcher.remote()  # type: ignore[attr-defined]
        for rep in range(args.repeats):
            for loaded in (False, True):
                with one_core_busy(loaded):
                    for mode, depth in MODES:
                        t0 = time.time()
                        intervals = ray.get(launcher.run.remote(mode, depth, node, args.window,
                                                                rep))
                        busy = busy_slots(intervals, t0 + args.window - 0.3)
                        rows.append({"mode": mode, "depth": depth, "loaded": loaded,
                                     "repeat": rep, "busy": busy})
                        print(f"{rep} {'loaded' if loaded else 'quiet '} {mode:12s} {depth}: "
                              f"{busy:.2f} of {SLOTS}", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_csv(RESULTS / "dispatch.csv", rows)
    lines = ["| launch (8 slots, 50-200 ms tasks) | quiet: busy slots (idle) | one core busy: "
             "busy slots (idle) |", "|---|---|---|"]
    for mode, depth in MODES:
        cells = []
        for loaded in (False, True):
            med = statistics.median(r["busy"] for r in rows if r["mode"] == mode
                                    and r["depth"] == depth and r["loaded"] == loaded)
            cells.append(f"{med:.2f} ({1 - med / SLOTS:.1%})")
        label = mode if mode == "all at once" else f"{mode}, depth {depth}"
        lines.append(f"| {label} | {cells[0]} | {cells[1]} |")
    lines += ["", f"Median of {args.repeats} rounds, modes alternating within each round."]
    table = "\n".join(lines)
    (RESULTS / "dispatch.md").write_text(table + "\n")
    print(table)
