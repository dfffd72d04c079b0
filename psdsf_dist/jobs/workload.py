"""Job traces and the workloads the job simulator runs.

A :class:`Trace` is what a file says: jobs (name, user, submit time) and their task groups (a
number of tasks, optionally the sites that hold their input and a fixed duration).  A
:class:`Workload` is what the simulator runs: sites with slots, task groups with their sets of
available sites, and one duration per task, all as numpy arrays.  :func:`build_workload` turns
the first into the second the way section 3.3 of Guan's thesis does for the Facebook trace:
tasks without sites are placed by a Zipf law over a random permutation of the sites (each task's
associated site and the next ``available - 1`` sites in ring order may run it), durations are
drawn from a Pareto law (shape 1.259, mean 2 s), and submit times are stretched or compressed
by one factor so that the offered load is a chosen fraction of the slots.

Two file formats are read (``docs/jobs.md``): the SWIM tsv of the Facebook 2010 trace (one task
per 10^9 bytes of input, rounded up; jobs without input dropped) and a CSV with a header
``job,submit_s,tasks[,user][,sites][,duration_s]``.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from psdsf_dist.errors import ScenarioError, one_line
from psdsf_dist.model.defaults import DEFAULT_SEED
from psdsf_dist.model.document import read_text
from psdsf_dist.model.fields import printable_name, show
from psdsf_dist.model.limits import current_limits

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

BYTES_PER_TASK = 10**9
"""The thesis's one task per GB of input (section 3.3)."""
PARETO_SHAPE = 1.259
PARETO_MEAN_S = 2.0
"""Task durations of the Facebook trace (section 3.3): Pareto, beta = 1.259, mean 2 s."""
PARETO_PER = ("task", "job")
"""Drawn durations: one per task, or one per job shared by its tasks.  Guan's thesis says "task
durations" drawn from the Pareto law (ch. 3) and "the task lengths of different jobs" (ch. 4);
one per task gives 1.1 M draws of infinite variance, whose few longest tasks (days) dominate
every scheduler's mean response alike; one per job gives 24,024."""
DEFAULT_SITES = 10
DEFAULT_SLOTS = 20
DEFAULT_AVAILABLE = 2
DEFAULT_ZIPF = 1.0
"""Section 3.3's defaults: 10 sites of 20 slots, 2 available sites per task, Zipf skew 1."""
DEFAULT_USER = "default"
CSV_REQUIRED = ("job", "submit_s", "tasks")
MAX_TRACE_S = 1e9
"""Largest submit time or duration of a trace, seconds (~32 years): within it a float keeps
times to a microsecond, so the simulation clock always advances."""
CSV_OPTIONAL = ("user", "sites", "duration_s")


@dataclass(frozen=True)
class Trace:
    """Jobs as a file gives them; one row per task group (``row_*`` arrays)."""

    source: str
    job_names: tuple[str, ...]
    job_users: tuple[str, ...]
    submit: FloatArray
    row_job: IntArray
    row_tasks: IntArray
    row_sites: tuple[tuple[str, ...], ...]
    """Site names per row; empty when the workload builder places the row's tasks."""
    row_duration: FloatArray
    """Seconds per task of the row; NaN when drawn from the duration law."""

    @property
    def num_jobs(self) -> int:
        return len(self.job_names)

    @property
    def num_tasks(self) -> int:
        return int(self.row_tasks.sum())

    @property
    def placed(self) -> bool:
        return all(self.row_sites)


@dataclass(frozen=True)
class Workload:
    """What the simulator runs.  Jobs are indexed in submit order (ties by file order)."""

    site_names: tuple[str, ...]
    slots: IntArray
    """(m,) slots per site."""
    group_sites: BoolArray
    """(G, m): which sites may run a task of each group."""
    group_home: IntArray
    """(G,) the group's associated site: where the SWAG baseline runs it."""
    job_names: tuple[str, ...]
    user_names: tuple[str, ...]
    job_user: IntArray
    submit: FloatArray
    """(J,) seconds, non-decreasing."""
    row_job: IntArray
    row_group: IntArray
    row_tasks: IntArray
    row_offset: IntArray
    """(R,) where the row's task durations start in ``durations``; rows sorted by job."""
    durations: FloatArray
    """(T,) seconds, one per task."""

    @property
    def num_jobs(self) -> int:
        return len(self.job_names)

    @property
    def num_sites(self) -> int:
        return len(self.site_names)

    @property
    def num_tasks(self) -> int:
        return int(self.row_tasks.sum())

    def utilisation(self) -> float:
        """Offered load: total task time over slot time from the first to the last submit."""
        span = float(self.submit[-1] - self.submit[0]) if self.num_jobs else 0.0
        cap = float(self.slots.sum()) * span
        return float(self.durations.sum()) / cap if cap > 0 else math.inf

    def least_present_seconds(self) -> float:
        """A lower bound on how long some job is present, under any schedule: all the work
        spread over all the slots (a slot runs one task at a time)."""
        return float(self.durations.sum()) / float(self.slots.sum())

    def least_waiting(self) -> tuple[int, float]:
        """A lower bound, under every scheduler, on the most jobs with unstarted tasks at once
        (what a plan weighs), and a submit time at which it holds; (0, first submit) if none.

        By time t (from the first submit t0) a slot has started at most one task more than it
        has completed, and the completed tasks' durations fit in the slots' time: at most
        ``S + N`` tasks have started, N the most tasks whose durations (the shortest of the
        whole trace) sum to at most ``S (t - t0)``.  A job has started all its tasks only if
        they are among those, so at most K jobs have, K the most jobs whose task counts (the
        smallest of the trace) sum to at most ``S + N``.  The jobs submitted by t less K still
        have unstarted tasks.  Checked at every submit instant in O(J log J), before any
        simulation: a trace that submits faster than its slots can start is known at once."""
        if not self.num_jobs:
            return 0, 0.0
        slots = int(self.slots.sum())
        durations = np.cumsum(np.sort(self.durations))
        sizes = np.cumsum(np.sort(np.bincount(self.row_job, weights=self.row_tasks,
                                              minlength=self.num_jobs)))
        last = np.flatnonzero(np.r_[self.submit[1:] != self.submit[:-1], True])
        t = self.submit[last]
        submitted = last + 1
        started = slots + np.searchsorted(durations, slots * (t - self.submit[0]), side="right")
        done = np.minimum(submitted, np.searchsorted(sizes, started, side="right"))
        waiting = submitted - done
        k = int(np.argmax(waiting))
        return int(waiting[k]), float(t[k])


def _error(source: str, field: str, message: str) -> ScenarioError:
    return ScenarioError(field, message, source)


def _name(src: str, field: str, value: str) -> str:
    """A job, user or site name checked as a scenario's names are (printable, NFC: two names
    that print alike are one name, and every name prints on one line)."""
    try:
        return printable_name(value, field)
    except ScenarioError as err:
        raise _error(src, field, err.message) from None


def _text_of(path: str | Path, text: str | None) -> io.StringIO:
    """The trace's text as a file: ``text`` if given, else the file read within the limits."""
    return io.StringIO(read_text(path) if text is None else text, newline=None)


def load_trace(path: str | Path) -> Trace:
    """A trace from a SWIM ``.tsv`` or a ``.csv`` (``docs/jobs.md``); ScenarioError if bad."""
    p = Path(path)
    if p.suffix not in (".tsv", ".csv"):
        raise _error(str(p), "", f"unknown trace format {p.suffix!r} (expected .tsv or .csv)")
    text = read_text(p)  # a regular file within the size limit, or one line
    trace = load_swim(p, text) if p.suffix == ".tsv" else load_csv(p, text)
    try:
        current_limits().check("tasks", trace.num_tasks, "tasks")
    except ScenarioError as err:
        raise _error(str(p), err.field, err.message) from None
    return trace


def _within_tasks_limit(src: str, field: str, tasks: float, max_tasks: int) -> None:
    """One row's tasks within the limit, checked before any sum or array (1e308 tasks, or
    10^36 bytes of input, is no int64)."""
    if tasks > max_tasks:
        raise _error(src, field, f"{tasks:g} tasks is more than the limit of {max_tasks:,} "
                                 f"(raise it with PSDSF_LIMITS=\"tasks=N\")")


def load_swim(path: str | Path, text: str | None = None) -> Trace:
    """The SWIM tsv: name, submit s, gap s, input/shuffle/output bytes; one task per GB of
    input (rounded up), jobs without input dropped (they have no task)."""
    src = str(path)
    max_tasks = current_limits().tasks
    names: list[str] = []
    submit: list[float] = []
    tasks: list[int] = []
    with _text_of(path, text) as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            cols = line.rstrip("\n").split("\t")
            if len(cols) < 4:
                raise _error(src, f"line {n}", f"expected 6 tab-separated columns, got {len(cols)}")
            try:
                t = float(cols[1])
                size = int(cols[3])
            except ValueError:
                raise _error(src, f"line {n}", "submit time and input bytes must be numbers")\
                    from None
            if not (math.isfinite(t) and 0 <= t <= MAX_TRACE_S) or size < 0:
                raise _error(src, f"line {n}", "submit time must be in [0, "
                             f"{MAX_TRACE_S:g}] s and input bytes >= 0")
            if size == 0:
                continue
            k = -(-size // BYTES_PER_TASK)
            _within_tasks_limit(src, f"line {n} input bytes", k, max_tasks)
            names.append(_name(src, f"line {n} name", cols[0]))
            submit.append(t)
            tasks.append(k)
    if not names:
        raise _error(src, "", "no job with input")
    J = len(names)
    return Trace(src, tuple(names), (DEFAULT_USER,) * J, np.array(submit, dtype=float),
                 np.arange(J, dtype=np.int64), np.array(tasks, dtype=np.int64),
                 ((),) * J, np.full(J, np.nan))


def load_csv(path: str | Path, text: str | None = None) -> Trace:
    """The project's CSV: one row per task group; rows of one job share its submit time."""
    src = str(path)
    max_tasks = current_limits().tasks
    with _text_of(path, text) as fh:
        reader = csv.DictReader(fh)
        try:
            return _read_csv(src, reader, max_tasks)
        except csv.Error as err:  # e.g. a field longer than the csv module's field limit
            # raised while reading the line after the last one the reader counted
            raise _error(src, f"line {reader.line_num + 1}",
                         f"malformed CSV: {one_line(str(err))}") from None


def _read_csv(src: str, reader: csv.DictReader[str], max_tasks: int) -> Trace:
    """The rows of :func:`load_csv`'s reader as a trace.  A column named twice, or a row with
    more fields than the header, is refused: a value would otherwise be dropped unread."""
    head = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in CSV_REQUIRED if c not in head]
    if missing:
        raise _error(src, "header", f"missing column(s) {', '.join(missing)}")
    unknown = [show(c) for c in head if c not in CSV_REQUIRED + CSV_OPTIONAL]
    if unknown:
        raise _error(src, "header", f"unknown column(s) {', '.join(unknown[:5])}")
    twice = sorted({c for c in head if head.count(c) > 1})
    if twice:
        raise _error(src, "header", f"column(s) {', '.join(twice)} given twice")
    index: dict[str, int] = {}
    names: list[str] = []
    users: list[str] = []
    submit: list[float] = []
    row_job: list[int] = []
    row_tasks: list[int] = []
    row_sites: list[tuple[str, ...]] = []
    row_dur: list[float] = []
    for raw in reader:
        n = reader.line_num
        if None in raw:
            raise _error(src, f"line {n}", f"{len(head) + len(raw[None])} fields, more than "
                                           f"the header's {len(head)} (quote a value that "
                                           "holds a comma)")
        row = {k.strip(): (v or "").strip() for k, v in raw.items()}
        name = row["job"]
        if not name:
            raise _error(src, f"line {n} job", "must not be empty")
        _name(src, f"line {n} job", name)
        t = _number(src, n, "submit_s", row["submit_s"], minimum=0.0, maximum=MAX_TRACE_S)
        k = _number(src, n, "tasks", row["tasks"], minimum=1.0)
        if k != int(k):
            raise _error(src, f"line {n} tasks", f"must be an integer, got {show(row['tasks'])}")
        _within_tasks_limit(src, f"line {n} tasks", k, max_tasks)
        user = _name(src, f"line {n} user", row.get("user") or DEFAULT_USER)
        if name in index:
            j = index[name]
            if submit[j] != t or users[j] != user:
                raise _error(src, f"line {n} job",
                             f"{show(name)} appears again with another submit_s or user")
        else:
            j = index[name] = len(names)
            names.append(name)
            users.append(user)
            submit.append(t)
        sites = tuple(_name(src, f"line {n} sites", s)
                      for s in row.get("sites", "").replace("|", " ").split() if s)
        if len(set(sites)) != len(sites):
            raise _error(src, f"line {n} sites", "a site is listed twice")
        dur = row.get("duration_s", "")
        row_job.append(j)
        row_tasks.append(int(k))
        row_sites.append(sites)
        row_dur.append(_number(src, n, "duration_s", dur, minimum=0.0, strict=True,
                               maximum=MAX_TRACE_S)
                       if dur else math.nan)
    if not names:
        raise _error(src, "", "no job")
    if any(row_sites) and not all(row_sites):
        raise _error(src, "sites", "give sites on every row or on none")
    return Trace(src, tuple(names), tuple(users), np.array(submit, dtype=float),
                 np.array(row_job, dtype=np.int64), np.array(row_tasks, dtype=np.int64),
                 tuple(row_sites), np.array(row_dur, dtype=float))


def _number(src: str, line: int, field: str, text: str, *, minimum: float,
            strict: bool = False, maximum: float = math.inf) -> float:
    try:
        v = float(text)
    except ValueError:
        raise _error(src, f"line {line} {field}", f"must be a number, got {show(text)}") from None
    if not math.isfinite(v) or v < minimum or (strict and v <= minimum) or v > maximum:
        bound = ">" if strict else ">="
        most = f" and <= {maximum:g}" if math.isfinite(maximum) else ""
        raise _error(src, f"line {line} {field}", f"must be a finite number {bound} {minimum:g}"
                     f"{most}, got {show(text)}")
    return v


def pareto_durations(rng: np.random.Generator, size: int, *, shape: float = PARETO_SHAPE,
                     mean: float = PARETO_MEAN_S) -> FloatArray:
    """Pareto (type I) durations of the given shape and mean: scale = mean (shape - 1) / shape."""
    if not shape > 1:
        raise ValueError(f"Pareto shape must be > 1 for a finite mean, got {shape}")
    scale = mean * (shape - 1.0) / shape
    return np.asarray((rng.pareto(shape, size) + 1.0) * scale, dtype=float)


def ring_groups(m: int, available: int) -> BoolArray:
    """(m, m): group c may run at sites c, c+1, ..., c+available-1 (mod m), as section 3.3."""
    out = np.zeros((m, m), dtype=bool)
    for c in range(m):
        out[c, [(c + d) % m for d in range(available)]] = True
    return out


def zipf_counts(rng: np.random.Generator, tasks: IntArray, m: int, zipf: float) -> IntArray:
    """(J, m) tasks of each job per associated site: each job draws a random permutation of
    the sites and each task takes the permutation's i-th site with probability ~ 1/i^zipf."""
    weights = 1.0 / np.arange(1, m + 1, dtype=float) ** zipf
    weights /= weights.sum()
    by_rank = rng.multinomial(tasks, weights)  # (J, m): per rank in the permutation
    perms = np.argsort(rng.random((len(tasks), m)), axis=1)
    out = np.zeros_like(by_rank)
    np.put_along_axis(out, perms, by_rank, axis=1)
    return np.asarray(out, dtype=np.int64)


def build_workload(trace: Trace, *, sites: int = DEFAULT_SITES, slots: int = DEFAULT_SLOTS,
                   zipf: float = DEFAULT_ZIPF, available: int = DEFAULT_AVAILABLE,
                   utilisation: float | None = None, shape: float = PARETO_SHAPE,
                   mean: float = PARETO_MEAN_S, seed: int = DEFAULT_SEED,
                   pareto_per: str = "task") -> Workload:
    """The simulator's workload of a trace (see the module docstring).  A trace whose rows
    name their sites keeps them (``sites``, ``zipf`` and ``available`` are then unused);
    ``slots`` is every site's number of slots.  ``pareto_per``: one Pareto duration per task,
    or one per job that all its tasks take (:data:`PARETO_PER`).  Deterministic in ``seed``."""
    if pareto_per not in PARETO_PER:
        raise ValueError(f"pareto_per must be one of {PARETO_PER}, got {pareto_per!r}")
    if slots < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")
    if utilisation is not None and not 0 < utilisation < math.inf:
        raise ValueError(f"utilisation must be > 0, got {utilisation}")
    rng = np.random.default_rng(seed)
    order = np.argsort(trace.submit, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    submit = trace.submit[order].astype(float)
    if trace.placed:
        names: list[str] = []
        for row in trace.row_sites:
            names += [s for s in row if s not in names]
        pos = {s: i for i, s in enumerate(names)}
        m = len(names)
        sets: dict[tuple[int, ...], int] = {}
        row_group = []
        for row in trace.row_sites:
            key = tuple(sorted(pos[s] for s in row))
            row_group.append(sets.setdefault(key, len(sets)))
        group_sites = np.zeros((len(sets), m), dtype=bool)
        group_home = np.zeros(len(sets), dtype=np.int64)
        for key, g in sets.items():
            group_sites[g, list(key)] = True
        for row, g in zip(trace.row_sites, row_group, strict=True):
            group_home[g] = pos[row[0]]
        r_job = rank[trace.row_job]
        r_group = np.array(row_group, dtype=np.int64)
        r_tasks = trace.row_tasks
        r_dur = trace.row_duration
    else:
        if sites < 1 or not 1 <= available <= sites:
            raise ValueError(f"need 1 <= available <= sites, got {available} and {sites}")
        if zipf < 0:
            raise ValueError(f"zipf must be >= 0, got {zipf}")
        m = sites
        names = [f"S{j + 1}" for j in range(m)]
        per_job = np.bincount(trace.row_job, weights=trace.row_tasks,
                              minlength=trace.num_jobs).astype(np.int64)[order]
        counts = zipf_counts(rng, per_job, m, zipf)  # (J, m) by associated site
        jj, gg = np.nonzero(counts)
        r_job, r_group, r_tasks = jj.astype(np.int64), gg.astype(np.int64), counts[jj, gg]
        group_sites = ring_groups(m, available)
        group_home = np.arange(m, dtype=np.int64)
        # a job's fixed duration (CSV duration_s without sites) applies to all its tasks
        job_dur = np.full(trace.num_jobs, np.nan)
        job_dur[rank[trace.row_job]] = trace.row_duration
        r_dur = job_dur[r_job]
    by_job = np.argsort(r_job, kind="stable")
    r_job, r_group, r_tasks = r_job[by_job], r_group[by_job], r_tasks[by_job]
    r_dur = r_dur[by_job]
    total = int(r_tasks.sum())
    if pareto_per == "job":
        job_draws = pareto_durations(rng, len(order), shape=shape, mean=mean)
        durations = job_draws[np.repeat(r_job, r_tasks)]
    else:
        durations = pareto_durations(rng, total, shape=shape, mean=mean)
    offsets = np.concatenate(([0], np.cumsum(r_tasks)[:-1])).astype(np.int64)
    fixed = np.repeat(r_dur, r_tasks)
    durations = np.where(np.isnan(fixed), durations, fixed)
    users = sorted(set(trace.job_users))
    uidx = {u: i for i, u in enumerate(users)}
    job_user = np.array([uidx[trace.job_users[j]] for j in order], dtype=np.int64)
    w = Workload(tuple(names), np.full(m, slots, dtype=np.int64), group_sites, group_home,
                 tuple(trace.job_names[j] for j in order), tuple(users), job_user, submit,
                 np.asarray(r_job, dtype=np.int64), np.asarray(r_group, dtype=np.int64),
                 np.asarray(r_tasks, dtype=np.int64), offsets, durations)
    if utilisation is not None:
        w = scale_to_utilisation(w, utilisation)
    return w


def scale_to_utilisation(w: Workload, utilisation: float) -> Workload:
    """Stretch or compress the submit times (about the first) by one factor so that the
    offered load :meth:`Workload.utilisation` equals ``utilisation``."""
    current = w.utilisation()
    if not math.isfinite(current):
        raise ValueError("cannot scale a trace whose jobs all arrive at once")
    factor = current / utilisation
    first, span = float(w.submit[0]), float(w.submit[-1] - w.submit[0])
    if not first + span * factor <= MAX_TRACE_S:  # Python floats: inf, never a warning
        # e.g. 5e-324 made the factor inf, the submit times NaN and inf, and the simulation
        # never ended; within MAX_TRACE_S the clock advances as in a trace read as is
        raise ValueError(f"utilisation {utilisation:g} stretches the last submit time past "
                         f"{MAX_TRACE_S:g} s (the trace's offered load is {current:.3g})")
    submit = first + (w.submit - first) * factor
    return Workload(w.site_names, w.slots, w.group_sites, w.group_home, w.job_names,
                    w.user_names, w.job_user, submit, w.row_job, w.row_group, w.row_tasks,
                    w.row_offset, w.durations)
