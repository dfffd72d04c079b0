"""A run's summary: on Table 3.1 under ATA, the thesis's responses and the slots in use."""

from __future__ import annotations

from psdsf_dist.jobs.metrics import summary, user_shares
from psdsf_dist.jobs.simulator import simulate_jobs
from psdsf_dist.jobs.workload import build_workload, load_trace
from tests.conftest import EXAMPLES


def test_summary_of_table_3_1() -> None:
    w = build_workload(load_trace(EXAMPLES / "guan_table31.csv"), slots=1)
    run = simulate_jobs(w, "ata")
    s = summary(run, w)
    assert abs(s["mean_response_s"] - 17 / 3) < 1e-12
    assert s["makespan_s"] == 10.0
    assert abs(s["utilisation"] - 29 / 30) < 1e-12  # 29 task-seconds on 3 slots for 10 s
    assert s["events"] == 3 + 29
    times, shares = user_shares(run, w)
    assert shares.shape == (len(times), 1) and shares.max() <= 1.0
