"""Traces and workloads: the Facebook trace gives the thesis's 24,024 jobs and 1,102,281
tasks, bad files fail on one line naming the file and field, placement and durations follow
section 3.3, and utilisation scaling hits its target."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from psdsf_dist.errors import ScenarioError
from psdsf_dist.jobs.workload import (
    build_workload,
    load_trace,
    pareto_durations,
    ring_groups,
    zipf_counts,
)
from tests.conftest import EXAMPLES

SWIM = Path("/work/shared/data/swim/FB-2010_samples_24_times_1hr_0.tsv")


@pytest.mark.skipif(not SWIM.is_file(), reason="the SWIM trace is not on this machine")
def test_facebook_trace_has_the_thesis_counts() -> None:
    t = load_trace(SWIM)
    assert (t.num_jobs, t.num_tasks) == (24024, 1102281)


def test_table_3_1_file_keeps_its_sites_and_durations() -> None:
    w = build_workload(load_trace(EXAMPLES / "guan_table31.csv"), slots=1)
    assert w.site_names == ("S1", "S2", "S3")
    assert w.num_tasks == 29 and (w.durations == 1.0).all()
    assert w.group_sites.astype(int).tolist() == [[1, 1, 0], [1, 1, 1], [0, 1, 1]]


@pytest.mark.parametrize(("text", "message"), [
    ("job,tasks\nj,1\n", "header: missing column(s) submit_s"),
    ("job,submit_s,tasks,colour\nj,0,1,red\n", "header: unknown column(s) 'colour'"),
    ("job,submit_s,tasks\nj,0,x\n", "line 2 tasks: must be a number, got 'x'"),
    ("job,submit_s,tasks\nj,0,1.5\n", "line 2 tasks: must be an integer"),
    ("job,submit_s,tasks\nj,-1,1\n", "line 2 submit_s: must be a finite number >= 0"),
    ("job,submit_s,tasks\nj,1e308,1\n", "line 2 submit_s: must be a finite number >= 0 and <= "),
    ("job,submit_s,tasks\nj,0,1e308\n", "line 2 tasks: 1e+308 tasks is more than the limit"),
    ("job,submit_s,tasks,sites\na,0,1,S1\nb,0,1,\n", "sites: give sites on every row or on none"),
    ("job,submit_s,tasks\na,0,1\na,3,1\n", "line 3 job: 'a' appears again"),
    ("job,submit_s,tasks,duration_s\na,0,1,0\n", "line 2 duration_s: must be a finite number > 0"),
    # a value that would be dropped unread: a field beyond the header, a column named twice
    ("job,submit_s,tasks\nj,0,1,S1\n", "line 2: 4 fields, more than the header's 3"),
    ("job,submit_s,tasks,job\nj,0,1,k\n", "header: column(s) job given twice"),
    # a field longer than the csv module takes (it was a _csv.Error traceback)
    ("job,submit_s,tasks\n" + "j" * 200_000 + ",0,1\n", "line 2: malformed CSV: field larger"),
    # names print as the scenario's do: one line, no invisible or bidi character, NFC
    ("job,submit_s,tasks,user\nj,0,1,a\u200b\n", "line 2 user: name 'a\\\\u200b' has a character"),
    ("job,submit_s,tasks\n\u202ej,0,1\n", "line 2 job: name '\\\\u202ej' has a character"),
    ("job,submit_s,tasks,sites\nj,0,1,S1 S\u20662\n", "line 2 sites: name 'S\\\\u20662' has"),
    ("job,submit_s,tasks,user\nj,0,1,e\u0301\n", "line 2 user: name 'e\u0301' is not in Unicode"),
    ("job,submit_s,tasks,user\n\"j\x00\",0,1,a\n", "line 2 job: name 'j\\\\x00' has a character"),
])
def test_bad_csv_fails_on_one_line(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "t.csv"
    p.write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_trace(p)
    assert str(err.value).startswith(f"{p}: ") and message in str(err.value)
    assert "\n" not in str(err.value) and len(str(err.value)) < 300


def test_a_trace_error_quotes_a_value_cut_short(tmp_path: Path) -> None:
    """A bad value is quoted escaped and cut to a few dozen characters, never the whole line."""
    p = tmp_path / "t.csv"
    p.write_text("job,submit_s,tasks\nj,0," + "x" * 5000 + "\n")
    with pytest.raises(ScenarioError, match=r"tasks: must be a number, got 'x+\.\.\.'$"):
        load_trace(p)


def test_a_swim_job_name_prints_on_one_line(tmp_path: Path) -> None:
    p = tmp_path / "t.tsv"
    p.write_text("job0\t0\t0\t3000000000\t0\t0\n\u202ejob1\t1\t1\t100\t0\t0\n")
    with pytest.raises(ScenarioError, match=r"t.tsv: line 2 name: name '.*' has a character"):
        load_trace(p)


def test_a_trace_is_read_within_the_limits(tmp_path: Path) -> None:
    """Only a regular file is read (a FIFO or device is refused unread, never a hang), and a
    trace of more tasks than the ``tasks`` limit is refused before any task is built."""
    import os

    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    with pytest.raises(ScenarioError, match=r"pipe.csv: not a regular file"):
        load_trace(fifo)
    big = tmp_path / "big.csv"
    big.write_text("job,submit_s,tasks\nj,0,3000000\nk,1,3000000\n")  # each row within
    with pytest.raises(ScenarioError,
                       match=r"big.csv: tasks: 6,000,000 tasks is more than the limit"):
        load_trace(big)


def test_a_swim_job_of_more_input_than_the_tasks_limit_is_refused_by_its_line(
        tmp_path: Path) -> None:
    """10^36 bytes of input is 10^27 tasks: no int64 (it was an OverflowError traceback)."""
    p = tmp_path / "t.tsv"
    p.write_text("job0\t0\t0\t3000000000\t0\t0\njob1\t1\t1\t" + "1" * 37 + "\t0\t0\n")
    with pytest.raises(ScenarioError, match=r"t.tsv: line 2 input bytes: 1.1+e\+27 tasks is more"):
        load_trace(p)


def test_bad_swim_line_names_it(tmp_path: Path) -> None:
    p = tmp_path / "t.tsv"
    p.write_text("job0\t9\t9\t1762\t0\t1\njob1\tx\t9\t970\t0\t1\n")
    with pytest.raises(ScenarioError, match=r"t.tsv: line 2: submit time"):
        load_trace(p)


def test_zipf_placement_and_ring_groups() -> None:
    rng = np.random.default_rng(0)
    counts = zipf_counts(rng, np.full(4000, 10, dtype=np.int64), 4, 0.0)
    assert (counts.sum(axis=1) == 10).all()
    np.testing.assert_allclose(counts.sum(axis=0) / 40000, 0.25, atol=0.01)  # uniform at 0
    skewed = np.sort(zipf_counts(rng, np.full(1, 10**6, dtype=np.int64), 4, 2.0)[0])[::-1]
    w = 1 / np.arange(1, 5) ** 2.0
    np.testing.assert_allclose(skewed / 10**6, w / w.sum(), atol=0.01)
    assert ring_groups(3, 2).astype(int).tolist() == [[1, 1, 0], [0, 1, 1], [1, 0, 1]]


def test_pareto_mean_and_utilisation_scaling(tmp_path: Path) -> None:
    d = pareto_durations(np.random.default_rng(1), 400_000, shape=2.5, mean=2.0)
    assert d.min() >= 2.0 * 1.5 / 2.5 and abs(d.mean() - 2.0) < 0.02
    p = tmp_path / "t.csv"
    p.write_text("job,submit_s,tasks\n" + "".join(f"j{i},{i},5\n" for i in range(50)))
    w = build_workload(load_trace(p), sites=4, slots=2, utilisation=0.5, seed=3)
    assert abs(w.utilisation() - 0.5) < 1e-12
    again = build_workload(load_trace(p), sites=4, slots=2, utilisation=0.5, seed=3)
    assert (again.durations == w.durations).all() and (again.row_group == w.row_group).all()


@pytest.mark.parametrize("utilisation", [5e-324, 1e-300])
def test_a_utilisation_that_stretches_submits_past_the_trace_bound_is_refused(
        tmp_path: Path, utilisation: float) -> None:
    """5e-324 made the stretch factor inf and the submit times NaN: the replay never ended."""
    p = tmp_path / "t.csv"
    p.write_text("job,submit_s,tasks\na,0,8\nb,1,15\n")
    with pytest.raises(ValueError, match=r"stretches the last submit time past 1e\+09 s"):
        build_workload(load_trace(p), utilisation=utilisation)


def test_one_pareto_duration_per_job_is_shared_by_its_tasks(tmp_path: Path) -> None:
    """``pareto_per="job"``: every task of a job takes its job's one draw (jobs differ); a
    duration the trace gives is kept either way."""
    p = tmp_path / "t.csv"
    p.write_text("job,submit_s,tasks,duration_s\n"
                 + "".join(f"j{i},{i},7,\n" for i in range(40)) + "k,50,3,9\n")
    w = build_workload(load_trace(p), sites=4, slots=2, pareto_per="job", seed=5)
    task_job = np.repeat(w.row_job, w.row_tasks)
    per_job = [np.unique(w.durations[task_job == j]) for j in range(w.num_jobs)]
    assert all(len(d) == 1 for d in per_job)
    assert len({float(d[0]) for d in per_job[:40]}) == 40 and float(per_job[40][0]) == 9.0
    per_task = build_workload(load_trace(p), sites=4, slots=2, seed=5)
    assert len(np.unique(per_task.durations[task_job == 0])) == 7
    with pytest.raises(ValueError, match="pareto_per must be one of"):
        build_workload(load_trace(p), pareto_per="site")
