"""The job traces of the Guan thesis's evaluations (chapters 3-5), as the reproductions use them.

- The Facebook 2010 trace the thesis uses, from ``../shared/data/swim`` (one task per GB).
- A **synthetic** stand-in for the thesis's Google segment, which is not available here: 2,944
  jobs with 48,504 tasks over 60 minutes, as section 3.3 states, task counts drawn from a
  lognormal law rescaled to that total, durations lognormal with the stated mean of 1,374.7 s,
  one draw per job (:data:`GOOGLE_SIGMA`).  Every figure made from it says so.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from experiments.common.paths import SWIM_FB2010
from psdsf_dist.jobs.workload import Trace, load_trace

GOOGLE_SEED = 1
GOOGLE_JOBS, GOOGLE_TASKS, GOOGLE_WINDOW_S, GOOGLE_MEAN_S = 2944, 48504, 3600.0, 1374.7
GOOGLE_SIGMA = 1.5
"""The lognormal sigma of the synthetic Google task counts and durations (heavy-tailed, as
Figs. 4.2a-b, with every moment finite: a Pareto law of shape 1.259 at a mean of 1,374.7 s
gives a few tasks lasting days, whose one job then alone is active most of the run)."""
FACEBOOK, GOOGLE = "facebook", "google (synthetic)"


def head(trace: Trace, n: int) -> Trace:
    """The first n jobs of a trace with one row per job (the SWIM loader's)."""
    return Trace(trace.source, trace.job_names[:n], trace.job_users[:n], trace.submit[:n],
                 trace.row_job[:n], trace.row_tasks[:n], trace.row_sites[:n],
                 trace.row_duration[:n])


def google_trace(seed: int = GOOGLE_SEED) -> Trace:
    """The synthetic Google segment (module docstring): one row per job; a job's tasks last
    alike, a lognormal draw of mean 1,374.7 s."""
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(0.0, GOOGLE_SIGMA, GOOGLE_JOBS)
    counts = np.maximum(1, np.round(raw * (GOOGLE_TASKS / raw.sum()))).astype(np.int64)
    counts[np.argmax(counts)] += GOOGLE_TASKS - int(counts.sum())  # exactly the stated total
    mu = np.log(GOOGLE_MEAN_S) - GOOGLE_SIGMA**2 / 2  # the lognormal of that mean
    durations = rng.lognormal(mu, GOOGLE_SIGMA, GOOGLE_JOBS)
    submit = np.sort(rng.uniform(0.0, GOOGLE_WINDOW_S, GOOGLE_JOBS))
    names = tuple(f"g{k}" for k in range(GOOGLE_JOBS))
    return Trace("synthetic Google segment", names, names, submit,
                 np.arange(GOOGLE_JOBS, dtype=np.int64), counts,
                 tuple(() for _ in range(GOOGLE_JOBS)), durations)


@lru_cache(maxsize=4)
def trace_named(name: str, jobs: int | None = None) -> Trace:
    """:data:`FACEBOOK` or :data:`GOOGLE`, whole or its first ``jobs`` jobs (cached: worker
    processes build each once)."""
    if name not in (FACEBOOK, GOOGLE):
        raise ValueError(f"unknown trace {name!r} (expected {FACEBOOK!r} or {GOOGLE!r})")
    trace = load_trace(SWIM_FB2010) if name == FACEBOOK else google_trace()
    return trace if jobs is None else head(trace, jobs)


__all__ = ["FACEBOOK", "GOOGLE", "GOOGLE_SIGMA", "google_trace", "head", "trace_named"]
