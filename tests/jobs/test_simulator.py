"""The job simulator: the worked example of Guan's thesis Table 3.1 exactly, and on random
workloads, no site above its slots, every task run once at one of its sites after its job's
submit, and the same run from the same seed."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.jobs.schedulers import FIXED, SCHEDULERS
from psdsf_dist.jobs.simulator import JobRun, simulate_jobs
from psdsf_dist.jobs.workload import Trace, Workload, build_workload, load_trace
from tests.conftest import EXAMPLES

TABLE_31 = EXAMPLES / "guan_table31.csv"


@pytest.mark.parametrize(("scheduler", "order", "finish", "mean"), [
    ("btawj", "fifo", [4, 9, 12], Fraction(22, 3)),
    ("btaaj", "fifo", [4, 8, 11], Fraction(20, 3)),
    ("scta", "swag", [4, 12, 6], Fraction(19, 3)),
    ("ata", "swag", [4, 10, 6], Fraction(17, 3)),
    ("ata-greedy", "swag", [4, 10, 6], Fraction(17, 3)),
])
def test_table_3_1(scheduler: str, order: str, finish: list[int], mean: Fraction) -> None:
    """Section 3.2's example: J1..J3 complete at the times the text gives; the average
    response is 22/3 (BTAWJ), 20/3 (BTAAJ), 19/3 (SCTA) and 17/3 s (ATA; ATA-Greedy too)."""
    w = build_workload(load_trace(TABLE_31), slots=1)
    run = simulate_jobs(w, scheduler, order=order)
    assert run.finish.tolist() == finish
    assert Fraction(float(run.response.sum())).limit_denominator(100) / 3 == mean


def random_workload(seed: int, jobs: int, sites: int, available: int, zipf: float,
                    slots: int, spread: float = 20.0) -> Workload:
    rng = np.random.default_rng(seed)
    tasks = rng.integers(1, 12, jobs).astype(np.int64)
    submit = np.sort(rng.uniform(0, spread, jobs))
    trace = Trace("random", tuple(f"j{i}" for i in range(jobs)),
                  tuple(f"u{i % 3}" for i in range(jobs)), submit, np.arange(jobs),
                  tasks, ((),) * jobs, np.full(jobs, np.nan))
    return build_workload(trace, sites=sites, slots=slots, zipf=zipf, available=available,
                          seed=seed)


def check_run(w: Workload, run: JobRun) -> None:
    dur = w.durations
    assert not np.isnan(run.task_start).any()
    task_job = np.repeat(w.row_job, w.row_tasks)
    task_group = np.repeat(w.row_group, w.row_tasks)
    assert (run.task_start >= w.submit[task_job] - 1e-12).all()
    assert w.group_sites[task_group, run.task_site].all()  # only at one of its sites
    ends = run.task_start + dur
    np.testing.assert_allclose(run.finish, [ends[task_job == j].max() for j in range(w.num_jobs)])
    for j in range(w.num_sites):  # never more tasks at a site than its slots
        on = run.task_site == j
        times = np.concatenate([run.task_start[on], ends[on]])
        steps = np.concatenate([np.ones(on.sum()), -np.ones(on.sum())])
        o = np.lexsort((steps, times))  # an end before a start at the same instant
        assert np.cumsum(steps[o]).max(initial=0) <= w.slots[j]
    np.testing.assert_allclose(run.busy_seconds.sum(), dur.sum())


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 12), st.integers(2, 4), st.integers(1, 2),
       st.sampled_from([0.0, 1.0, 2.0]), st.integers(1, 3))
def test_every_scheduler_respects_slots_and_sites(seed: int, jobs: int, sites: int,
                                                   available: int, zipf: float,
                                                   slots: int) -> None:
    w = random_workload(seed, jobs, sites, available, zipf, slots)
    for s in SCHEDULERS:
        check_run(w, simulate_jobs(w, s))
    for s in FIXED:
        check_run(w, simulate_jobs(w, s, order="fifo"))


def test_same_seed_same_run_and_one_site_is_a_queue() -> None:
    w = random_workload(7, 30, 3, 2, 1.0, 2)
    a, b = simulate_jobs(w, "ata"), simulate_jobs(w, "ata")
    assert a.finish.tolist() == b.finish.tolist()
    assert a.task_site.tolist() == b.task_site.tolist()
    # with one available site per task there is no placement to choose: every scheduler runs
    # the same placement in SWAG's order (section 3.4, Figs. 3.15-3.16 at one site)
    w1 = random_workload(3, 20, 3, 1, 1.0, 2)
    base = simulate_jobs(w1, "swag").finish
    for s in SCHEDULERS:
        np.testing.assert_allclose(simulate_jobs(w1, s).finish, base)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 25), st.integers(1, 4), st.integers(1, 2),
       st.sampled_from([0.0, 1.0, 2.0]), st.integers(1, 3), st.sampled_from([0.0, 2.0, 20.0]))
def test_the_least_waiting_bound_holds_under_every_scheduler(seed: int, jobs: int, sites: int,
                                                             available: int, zipf: float,
                                                             slots: int, spread: float) -> None:
    """``Workload.least_waiting`` (checked before a replay) never exceeds the most waiting
    jobs a plan of any scheduler finds, and is not vacuous on a burst."""
    w = random_workload(seed, jobs, sites, min(available, sites), zipf, slots, spread)
    least, at = w.least_waiting()
    assert at in w.submit
    for s in SCHEDULERS:
        assert simulate_jobs(w, s).most_waiting >= least
    if spread == 0.0:  # every job at once: all but those the slots can start are waiting
        assert least >= jobs - sites * slots
