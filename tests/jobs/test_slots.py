"""The Slots and DRFH job schedulers on multi-resource tasks (psdsf_dist.jobs.slots)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.jobs.slots import (
    NEVER,
    SCHEDULERS,
    TASK_SLOTS,
    MultiWorkload,
    best_fit,
    google_servers,
    simulate_multi,
    slot_count,
    slots_needed,
    synthetic_jobs,
)


def workload(capacity: list[list[float]], jobs: list[tuple[float, int, int, float, float]],
             duration: float = 10.0) -> MultiWorkload:
    """Jobs as (submit, user, tasks, cpu, mem); every task lasts ``duration``."""
    tasks = np.array([j[2] for j in jobs], dtype=np.int64)
    return MultiWorkload(np.array(capacity, dtype=float),
                         np.array([j[0] for j in jobs], dtype=float),
                         np.array([j[1] for j in jobs], dtype=np.int64), tasks,
                         np.array([[j[3], j[4]] for j in jobs], dtype=float),
                         np.full(int(tasks.sum()), duration))


def test_slot_arithmetic() -> None:
    cap = np.array([[1.0, 1.0], [0.5, 0.25], [0.5, 0.03]])
    assert slot_count(cap, 14).tolist() == [14, 3, 0]
    d = np.array([[0.05, 0.01], [1 / 14, 0.0], [0.08, 0.2]])
    assert slots_needed(d, 14).tolist() == [1, 1, 3]
    assert slots_needed(d, 14, "one").tolist() == [1, 1, NEVER]
    with pytest.raises(ValueError, match="task_slots"):
        slots_needed(d, 14, "two")


def test_one_slot_per_task_blocks_a_user_behind_a_task_bigger_than_a_slot() -> None:
    """Slots of 0.25: under "cover" user 0's (0.4, 0.1) job takes two slots a task and its
    next job follows; under "one" the big job never starts and holds the small one back,
    while user 1 runs in every slot it can get."""
    w = workload([[1.0, 1.0]], [(0.0, 0, 1, 0.4, 0.1), (0.0, 0, 1, 0.1, 0.1),
                                (0.0, 1, 8, 0.1, 0.1)])
    cover = simulate_multi(w, "slots", 100.0, slots_per_max=4)
    one = simulate_multi(w, "slots", 100.0, slots_per_max=4, task_slots="one")
    assert np.isfinite(cover.finish).all()
    assert np.isnan(one.finish[:2]).all() and one.finish[2] == pytest.approx(20.0)
    assert one.sample_used[:, 0].max() == pytest.approx(0.4)  # four slots of user 1

def test_best_fit_picks_the_server_shaped_like_the_task() -> None:
    avail = np.array([[0.5, 0.1], [0.1, 0.5], [0.3, 0.3]])
    assert best_fit(np.array([0.2, 0.04]), avail) == 0  # CPU-heavy -> CPU-rich server
    assert best_fit(np.array([0.04, 0.2]), avail) == 1
    assert best_fit(np.array([0.6, 0.1]), avail) == -1


def test_slots_waste_what_drfh_packs() -> None:
    """One (1, 1) server, 4 slots; tasks of (0.1, 0.1): Slots runs 4 at once (40 %), DRFH 10."""
    w = workload([[1.0, 1.0]], [(0.0, 0, 20, 0.1, 0.1)])
    s = simulate_multi(w, "slots", 100.0, slots_per_max=4)
    d = simulate_multi(w, "drfh-bf", 100.0)
    assert s.finish[0] == pytest.approx(50.0) and d.finish[0] == pytest.approx(20.0)
    assert s.sample_used[:, 0].max() == pytest.approx(0.4)
    assert d.sample_used[:, 0].max() == pytest.approx(1.0)
    assert s.utilisation()[0] == pytest.approx(d.utilisation()[0])  # the same work in all


def test_drfh_equalises_global_dominant_shares() -> None:
    """A CPU-heavy (0.2, 0.05) and a memory-heavy (0.05, 0.2) user on one (1, 1) server: served
    by lowest global dominant share they alternate and reach 4 tasks (0.8) each, when CPU and
    memory are both full."""
    w = workload([[1.0, 1.0]], [(0.0, 0, 50, 0.2, 0.05), (0.0, 1, 50, 0.05, 0.2)], 1000.0)
    r = simulate_multi(w, "drfh-bf", 10.0)
    running = np.isfinite(r.task_start)
    assert [int(running[:50].sum()), int(running[50:].sum())] == [4, 4]
    assert r.sample_used[-1].tolist() == pytest.approx([1.0, 1.0])


def test_a_big_task_does_not_block_smaller_users() -> None:
    w = workload([[0.5, 0.5]], [(0.0, 0, 1, 0.9, 0.1), (0.0, 1, 2, 0.1, 0.1)])
    for s in SCHEDULERS:
        r = simulate_multi(w, s, 100.0, slots_per_max=10)
        assert np.isnan(r.finish[0]) and np.isfinite(r.finish[1]), s


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(SCHEDULERS), st.sampled_from(TASK_SLOTS))
def test_never_over_committed_and_every_started_task_is_recorded(seed: int, scheduler: str,
                                                                 task_slots: str) -> None:
    rng = np.random.default_rng(seed)
    cap = google_servers(rng, 6)
    w = synthetic_jobs(rng, cap, users=3, horizon=200.0, load=2.0,
                       class_weights=(1, 0, 0, 0, 0), cpu_median=0.05, mem_median=0.05,
                       sigma=0.8, mean_duration=30.0)
    r = simulate_multi(w, scheduler, 200.0, slots_per_max=10, task_slots=task_slots,
                       samples=20)
    assert np.all(r.sample_used <= 1 + 1e-9)
    started = np.isfinite(r.task_start)
    assert np.all(r.task_server[started] >= 0) and np.all(r.task_server[~started] == -1)
    ended = np.isfinite(r.task_end)
    assert np.all(started[ended])
    job_of = np.repeat(np.arange(len(w.submit)), w.tasks)
    for s in range(len(cap)):  # at every task start, the server's running demand fits
        on = np.flatnonzero(started & (r.task_server == s))
        for k in on:
            t = r.task_start[k]
            live = on[(r.task_start[on] <= t) & ~(r.task_end[on] <= t)]
            assert np.all(w.demand[job_of[live]].sum(axis=0) <= cap[s] + 1e-9)


def test_bad_workload_is_refused() -> None:
    with pytest.raises(ValueError, match="submit order"):
        workload([[1.0, 1.0]], [(5.0, 0, 1, 0.1, 0.1), (1.0, 0, 1, 0.1, 0.1)])
    with pytest.raises(ValueError, match="unknown scheduler"):
        simulate_multi(workload([[1.0, 1.0]], [(0.0, 0, 1, 0.1, 0.1)]), "fifo", 10.0)
