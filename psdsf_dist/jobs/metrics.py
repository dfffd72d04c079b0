"""What a job run measured, as numbers: response times, task waits, utilisation, each user's
share of the slots over time, and the simulator's own speed."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from psdsf_dist.jobs.simulator import JobRun
from psdsf_dist.jobs.workload import Workload

FloatArray = npt.NDArray[np.float64]
PERCENTILES = (50, 90, 99)


def summary(run: JobRun, w: Workload) -> dict[str, Any]:
    """The run's figures: job response times (mean and percentiles, seconds), task waits from
    the job's submit to the task's start, utilisation (slot-seconds of work over slot-seconds
    from the first submit to the last finish), events handled per wall-clock second.  A figure
    with no finite value is None: the offered load of jobs all submitted at one instant, the
    event rate of a run too short for the clock."""
    resp = run.response
    span = float(np.max(run.finish) - run.submit[0]) if len(resp) else 0.0
    cap = float(w.slots.sum()) * span
    out: dict[str, Any] = {
        "scheduler": run.scheduler,
        "order": run.order,
        "jobs": w.num_jobs,
        "tasks": w.num_tasks,
        "sites": w.num_sites,
        "slots": int(w.slots.sum()),
        "offered_utilisation": _finite_or_none(w.utilisation()),
        "mean_response_s": float(resp.mean()),
    }
    for p in PERCENTILES:
        out[f"p{p}_response_s"] = float(np.percentile(resp, p))
    out["mean_wait_s"] = float(run.task_wait.mean())
    out["p99_wait_s"] = float(np.percentile(run.task_wait, 99))
    out["makespan_s"] = span
    out["utilisation"] = float(run.busy_seconds.sum()) / cap if cap > 0 else 0.0
    out["site_utilisation"] = [float(b) / (float(u) * span) if span > 0 else 0.0
                               for b, u in zip(run.busy_seconds, w.slots, strict=True)]
    out["events"] = run.events
    out["wall_seconds"] = run.wall_seconds
    out["events_per_second"] = _finite_or_none(run.events_per_second)
    out["plans"] = run.plans
    out["plan_seconds"] = run.plan_seconds
    out["estimates"] = run.estimates
    out["most_waiting"] = run.most_waiting
    return out


def user_shares(run: JobRun, w: Workload) -> tuple[FloatArray, FloatArray]:
    """(sample times, (S, U) each user's fraction of all slots at those times)."""
    return run.sample_times, run.sample_user_busy / float(w.slots.sum())


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None
